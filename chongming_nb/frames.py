"""pandas exports: one row per task, per attempt, per transition.

Built column by column (one list per column, then typed), not from a list of dicts.
Status columns are categorical over every TaskStatus value; times are tz-aware UTC;
durations are timedelta64.

Columns (``SCHEMA`` states them, with the type of each)
-------------------------------------------------------
snapshots: task_id, name, status, attempt, max_attempts, created_at, queued_at,
    started_at, ended_at, duration, progress_done, progress_total, progress_unit,
    message, failure_kind, failure_message, executor, pipeline_run_id, tags, priority,
    overridden, status_version
attempts: task_id, name, attempt, started_at, ended_at, duration, outcome,
    failure_kind, failure_message, traceback, executor, abandoned, exit_code
transitions: task_id, name, version, from_status, to_status, trigger, actor, reason,
    at, override

``frame_from_columns(kind, columns)`` types the columns a SQL store read in one query
(``SqlStore.frame_columns``: times as epoch microseconds, JSON fields read by the
database) into the same frames, without an object per row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from chongming_nb.core._fast import column_reader
from chongming_nb.core.models import AttemptRecord, FailureKind, TaskSnapshot, Transition
from chongming_nb.core.states import TaskStatus

STATUS_DTYPE = pd.CategoricalDtype([s.value for s in TaskStatus if s.name != "FINISHED"])
FAILURE_DTYPE = pd.CategoricalDtype([k.value for k in FailureKind])


_NAT = np.iinfo("int64").min


def _times(values: Sequence[Any]) -> pd.Series:
    """Aware datetimes (None allowed) -> datetime64[us, UTC], via epoch microseconds
    (about 1.6x faster than pd.to_datetime over an object column)."""
    try:  # all present: a C-level map, no Python frame per value
        ts = np.fromiter(map(datetime.timestamp, values), dtype="float64", count=len(values))
    except TypeError:  # some are None
        ts = np.fromiter(
            (np.nan if v is None else v.timestamp() for v in values),
            dtype="float64",
            count=len(values),
        )
    us = np.round(ts * 1e6)
    ints = np.where(np.isnan(us), _NAT, us).astype("int64")
    return pd.Series(pd.to_datetime(ints, unit="us", utc=True))


def _cat(values: Sequence[Any], dtype: pd.CategoricalDtype) -> pd.Categorical:
    # straight to integer codes (StrEnum members hash and compare like their values):
    # several times faster than letting pandas factorize a list of strings
    index = _CODES.get(id(dtype))
    if index is None:
        index = {c: i for i, c in enumerate(dtype.categories)}
        index[None] = -1  # type: ignore[index]
        _CODES[id(dtype)] = index
    try:  # a C-level map over the dict; unknown values fall back below
        codes = np.fromiter(map(index.__getitem__, values), dtype=np.int16, count=len(values))
    except KeyError:
        get = index.get
        codes = np.fromiter((get(v, -1) for v in values), dtype=np.int16, count=len(values))
    return pd.Categorical.from_codes(codes, dtype=dtype)


_CODES: dict[int, dict[str, int]] = {}

#: pandas' "string" columns are Arrow arrays when pyarrow is installed: built from the
#: list by pyarrow in one C call (large_string is what pandas uses), twenty times
#: faster than pandas checking each value first.
_ARROW = type(pd.array([], dtype="string")).__name__ == "ArrowStringArray"


def _strings(values: Sequence[Any]) -> pd.Series:
    """str values (None allowed) -> a "string" column."""
    if _ARROW:
        import pyarrow as pa

        try:
            return pd.Series(pd.arrays.ArrowStringArray(pa.array(values, type=pa.large_string())))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            pass  # not all str: pandas converts them (or names the bad one)
    return pd.Series(values, dtype="string")


# ------------------------------------------------------------------ the frames

#: The columns of each frame and the type of each: "str", "status", "failure" (the
#: categoricals), "int", "bool", "float?" / "int?" (nullable ``Float64`` / ``Int64``),
#: "time" (datetime64[us, UTC]), "tags" (sorted lists) and "duration" (``ended_at -
#: started_at``, the only column not read).
SCHEMA: dict[str, dict[str, str]] = {
    "tasks": {
        "task_id": "str",
        "name": "str",
        "status": "status",
        "attempt": "int",
        "max_attempts": "int",
        "created_at": "time",
        "queued_at": "time",
        "started_at": "time",
        "ended_at": "time",
        "duration": "duration",
        "progress_done": "float?",
        "progress_total": "float?",
        "progress_unit": "str",
        "message": "str",
        "failure_kind": "failure",
        "failure_message": "str",
        "executor": "str",
        "pipeline_run_id": "str",
        "tags": "tags",
        "priority": "int",
        "overridden": "bool",
        "status_version": "int",
    },
    "attempts": {
        "task_id": "str",
        "name": "str",
        "attempt": "int",
        "started_at": "time",
        "ended_at": "time",
        "duration": "duration",
        "outcome": "status",
        "failure_kind": "failure",
        "failure_message": "str",
        "traceback": "str",
        "executor": "str",
        "abandoned": "bool",
        "exit_code": "int?",
    },
    "transitions": {
        "task_id": "str",
        "name": "str",
        "version": "int",
        "from_status": "status",
        "to_status": "status",
        "trigger": "str",
        "actor": "str",
        "reason": "str",
        "at": "time",
        "override": "bool",
    },
}

Typer = Callable[[Sequence[Any]], Any]

#: How a column of each type is built from its values...
_TYPERS: dict[str, Typer] = {
    "str": _strings,
    "status": lambda v: _cat(v, STATUS_DTYPE),
    "failure": lambda v: _cat(v, FAILURE_DTYPE),
    "int": lambda v: pd.Series(np.array(v, dtype="int64")),
    "bool": lambda v: pd.Series(np.array(v, dtype="bool")),
    "float?": lambda v: _nullable(v, "Float64"),
    "int?": lambda v: _nullable(v, "Int64"),
}
#: ... read from records (times are datetimes, tags sets) ...
_FROM_RECORDS = {**_TYPERS, "time": _times, "tags": lambda v: _objects(map(sorted, v))}


def _frame(
    kind: str, values: Mapping[str, Sequence[Any]], typers: Mapping[str, Typer]
) -> pd.DataFrame:
    """The frame of ``kind`` from the values of each of its columns."""
    cols: dict[str, Any] = {}
    for name, typ in SCHEMA[kind].items():
        if typ == "duration":
            cols[name] = cols["ended_at"] - cols["started_at"]
        else:
            cols[name] = typers[typ](values[name])
    return pd.DataFrame(cols)


#: The columns read from a record's attribute of the same name.
_SNAPSHOT_FIELDS = [
    c
    for c, t in SCHEMA["tasks"].items()
    if t != "duration" and not c.startswith(("progress_", "failure_")) and c != "message"
]
_NAMED_FIELDS = {
    kind: [c for c, t in SCHEMA[kind].items() if t != "duration" and c != "name"]
    for kind in ("attempts", "transitions")
}
#: The fields of a controller history row (``control.book.history_row``): those of a
#: Transition but its task_id, in order.
HISTORY_ROW = tuple(f.name for f in fields(Transition))[1:]
#: The columns read from records' attributes, by kind (``_fast.column_reader``).
_READ_COLUMNS = {
    "tasks": column_reader(TaskSnapshot, _SNAPSHOT_FIELDS),
    "attempts": column_reader(AttemptRecord, _NAMED_FIELDS["attempts"]),
    "transitions": column_reader(Transition, _NAMED_FIELDS["transitions"]),
}


def snapshots_frame(snaps: Iterable[TaskSnapshot]) -> pd.DataFrame:
    snaps = list(snaps)
    prog = [s.progress for s in snaps]
    fail = [s.failure for s in snaps]
    values = _READ_COLUMNS["tasks"](snaps)
    values["progress_done"] = [p.done if p else None for p in prog]
    values["progress_total"] = [p.total if p else None for p in prog]
    values["progress_unit"] = [p.unit if p else None for p in prog]
    values["message"] = [p.message if p else None for p in prog]
    values["failure_kind"] = [f.kind if f else None for f in fail]
    values["failure_message"] = [f.message if f else None for f in fail]
    return _frame("tasks", values, _FROM_RECORDS)


def attempts_frame(
    records: Iterable[AttemptRecord], names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    return _named_frame("attempts", list(records), names)


def transitions_frame(
    transitions: Iterable[Transition], names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    return _named_frame("transitions", list(transitions), names)


def _named_frame(
    kind: str, records: Sequence[Any], names: Mapping[str, str] | None
) -> pd.DataFrame:
    """The frame of ``kind`` of records of tasks (a ``task_id`` each), its "name"
    column the task's name in ``names``."""
    values = _READ_COLUMNS[kind](records)
    name_of = (names or {}).get
    values["name"] = [name_of(t) for t in values["task_id"]]
    return _frame(kind, values, _FROM_RECORDS)


def history_rows_frame(
    tasks: Sequence[tuple[str, Sequence[tuple[Any, ...]]]], names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """What ``transitions_frame`` makes, from the controller's own history rows: per task
    ``(task_id, rows)``, each row ``(from, to, trigger, actor, reason, at, version,
    override)`` with statuses as their values. No Transition object is built per row."""
    ids = [tid for tid, rows in tasks for _ in rows]
    flat = [r for _, rows in tasks for r in rows]
    values = {name: [r[k] for r in flat] for k, name in enumerate(HISTORY_ROW)}
    values["task_id"] = ids
    name_of = (names or {}).get
    values["name"] = [name_of(t) for t in ids]
    return _frame("transitions", values, _FROM_RECORDS)


# ------------------------------------------------------------ from store columns


def between(df: pd.DataFrame, column: str, since: Any, until: Any) -> pd.DataFrame:
    """The rows of ``df`` with ``since <= df[column] < until`` (either may be None)."""
    keep = np.ones(len(df), dtype=bool)
    if since is not None:
        keep &= (df[column] >= pd.Timestamp(since)).to_numpy(dtype=bool, na_value=False)
    if until is not None:
        keep &= (df[column] < pd.Timestamp(until)).to_numpy(dtype=bool, na_value=False)
    return df if keep.all() else df[keep].reset_index(drop=True)


def _micros(values: Sequence[Any]) -> pd.Series:
    """Epoch microseconds (None allowed) -> datetime64[us, UTC]."""
    try:
        ints = np.array(values, dtype="int64")
    except TypeError:  # some are None
        ints = np.fromiter(
            (_NAT if v is None else v for v in values), dtype="int64", count=len(values)
        )
    return pd.Series(pd.to_datetime(ints, unit="us", utc=True))


def _nullable(values: Sequence[Any], dtype: str) -> pd.Series:
    """Ints or floats with None -> a nullable ``Int64`` / ``Float64`` column."""
    kind = "int64" if dtype == "Int64" else "float64"
    try:
        return pd.Series(np.array(values, dtype=kind), dtype=dtype)
    except TypeError:  # some are None
        obj = np.array(values, dtype=object)
        mask = np.equal(obj, None)
        data = np.where(mask, 0, obj).astype(kind)
        if dtype == "Int64":
            return pd.Series(pd.arrays.IntegerArray(data, mask))
        return pd.Series(pd.arrays.FloatingArray(data, mask))


def _tags(values: Sequence[str]) -> pd.Series:
    # stored sorted; most tasks have none
    return _objects([] if t == "[]" else json.loads(t) for t in values)


def _objects(values: Iterable[Any]) -> pd.Series:
    return pd.Series(list(values), dtype="object")


def _decoded(cols: dict[str, Any], raw: str, fields: Mapping[str, str]) -> None:
    """Fill ``fields`` (column -> JSON key) of the rows whose JSON the database left
    in ``raw`` (text it does not read as strict JSON, e.g. a NaN in a progress)."""
    texts = cols.pop(raw)
    odd = [i for i, t in enumerate(texts) if t is not None]
    if not odd:
        return
    for col in fields:
        cols[col] = list(cols[col])
    for i in odd:
        d = json.loads(texts[i])
        for col, key in fields.items():
            cols[col][i] = d.get(key)


def frame_from_columns(kind: str, columns: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """The frame of ``kind`` ("tasks", "attempts", "transitions") from a SQL store's
    ``frame_columns``: the same columns and dtypes as ``snapshots_frame``,
    ``attempts_frame`` and ``transitions_frame``."""
    c = dict(columns)
    if kind == "tasks":
        _decoded(
            c,
            "progress_raw",
            {
                "progress_done": "done",
                "progress_total": "total",
                "progress_unit": "unit",
                "message": "message",
            },
        )
        _decoded(c, "failure_raw", {"failure_kind": "kind", "failure_message": "message"})
    return _frame(kind, c, _FROM_COLUMNS)


#: ... and from the columns a SQL store read (times are epoch microseconds, tags JSON).
_FROM_COLUMNS = {**_TYPERS, "time": _micros, "tags": _tags}

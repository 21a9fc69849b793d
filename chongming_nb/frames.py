"""pandas exports: one row per task, per attempt, per transition.

Built column by column (one list per column, then typed), not from a list of dicts.
Status columns are categorical over every TaskStatus value; times are tz-aware UTC;
durations are timedelta64.

Columns
-------
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
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

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


def snapshots_frame(snaps: Iterable[TaskSnapshot]) -> pd.DataFrame:
    snaps = list(snaps)
    started = _times([s.started_at for s in snaps])
    ended = _times([s.ended_at for s in snaps])
    prog = [s.progress for s in snaps]
    fail = [s.failure for s in snaps]
    df = pd.DataFrame(
        {
            "task_id": _strings([s.task_id for s in snaps]),
            "name": _strings([s.name for s in snaps]),
            "status": _cat([s.status for s in snaps], STATUS_DTYPE),
            "attempt": pd.Series([s.attempt for s in snaps], dtype="int64"),
            "max_attempts": pd.Series([s.max_attempts for s in snaps], dtype="int64"),
            "created_at": _times([s.created_at for s in snaps]),
            "queued_at": _times([s.queued_at for s in snaps]),
            "started_at": started,
            "ended_at": ended,
            "duration": ended - started,
            "progress_done": pd.Series([p.done if p else None for p in prog], dtype="Float64"),
            "progress_total": pd.Series([p.total if p else None for p in prog], dtype="Float64"),
            "progress_unit": _strings([p.unit if p else None for p in prog]),
            "message": _strings([p.message if p else None for p in prog]),
            "failure_kind": _cat([f.kind if f else None for f in fail], FAILURE_DTYPE),
            "failure_message": _strings([f.message if f else None for f in fail]),
            "executor": _strings([s.executor for s in snaps]),
            "pipeline_run_id": _strings([s.pipeline_run_id for s in snaps]),
            "tags": pd.Series([sorted(s.tags) for s in snaps], dtype="object"),
            "priority": pd.Series([s.priority for s in snaps], dtype="int64"),
            "overridden": pd.Series([s.overridden for s in snaps], dtype="bool"),
            "status_version": pd.Series([s.status_version for s in snaps], dtype="int64"),
        }
    )
    return df


def attempts_frame(
    records: Iterable[AttemptRecord], names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    recs = list(records)
    names = names or {}
    started = _times([r.started_at for r in recs])
    ended = _times([r.ended_at for r in recs])
    return pd.DataFrame(
        {
            "task_id": _strings([r.task_id for r in recs]),
            "name": _strings([names.get(r.task_id) for r in recs]),
            "attempt": pd.Series([r.attempt for r in recs], dtype="int64"),
            "started_at": started,
            "ended_at": ended,
            "duration": ended - started,
            "outcome": _cat([r.outcome for r in recs], STATUS_DTYPE),
            "failure_kind": _cat([r.failure_kind for r in recs], FAILURE_DTYPE),
            "failure_message": _strings([r.failure_message for r in recs]),
            "traceback": _strings([r.traceback for r in recs]),
            "executor": _strings([r.executor for r in recs]),
            "abandoned": pd.Series([r.abandoned for r in recs], dtype="bool"),
            "exit_code": pd.Series([r.exit_code for r in recs], dtype="Int64"),
        }
    )


def transitions_frame(
    transitions: Iterable[Transition], names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    trs = list(transitions)
    return _transitions_columns(
        [t.task_id for t in trs],
        [t.from_status for t in trs],
        [t.to_status for t in trs],
        [t.trigger for t in trs],
        [t.actor for t in trs],
        [t.reason for t in trs],
        [t.at for t in trs],
        [t.version for t in trs],
        [t.override for t in trs],
        names,
    )


def history_rows_frame(
    tasks: Sequence[tuple[str, Sequence[tuple[Any, ...]]]], names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """What ``transitions_frame`` makes, from the controller's own history rows: per task
    ``(task_id, rows)``, each row ``(from, to, trigger, actor, reason, at, version,
    override)`` with statuses as their values. No Transition object is built per row."""
    ids = [tid for tid, rows in tasks for _ in rows]
    flat = [r for _, rows in tasks for r in rows]
    f, to, trigger, actor, reason, at, version, override = ([r[k] for r in flat] for k in range(8))
    return _transitions_columns(ids, f, to, trigger, actor, reason, at, version, override, names)


def _transitions_columns(
    task_ids: Sequence[str],
    from_status: Sequence[Any],
    to_status: Sequence[Any],
    trigger: Sequence[str],
    actor: Sequence[str],
    reason: Sequence[str | None],
    at: Sequence[Any],
    version: Sequence[int],
    override: Sequence[bool],
    names: Mapping[str, str] | None,
) -> pd.DataFrame:
    names = names or {}
    return pd.DataFrame(
        {
            "task_id": _strings(task_ids),
            "name": _strings([names.get(t) for t in task_ids]),
            "version": pd.Series(version, dtype="int64"),
            "from_status": _cat(from_status, STATUS_DTYPE),
            "to_status": _cat(to_status, STATUS_DTYPE),
            "trigger": _strings(trigger),
            "actor": _strings(actor),
            "reason": _strings(reason),
            "at": _times(at),
            "override": pd.Series(override, dtype="bool"),
        }
    )


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
    return pd.Series([[] if t == "[]" else json.loads(t) for t in values], dtype="object")


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
        started, ended = _micros(c["started_at"]), _micros(c["ended_at"])
        return pd.DataFrame(
            {
                "task_id": _strings(c["task_id"]),
                "name": _strings(c["name"]),
                "status": _cat(c["status"], STATUS_DTYPE),
                "attempt": pd.Series(np.array(c["attempt"], dtype="int64")),
                "max_attempts": pd.Series(np.array(c["max_attempts"], dtype="int64")),
                "created_at": _micros(c["created_at"]),
                "queued_at": _micros(c["queued_at"]),
                "started_at": started,
                "ended_at": ended,
                "duration": ended - started,
                "progress_done": _nullable(c["progress_done"], "Float64"),
                "progress_total": _nullable(c["progress_total"], "Float64"),
                "progress_unit": _strings(c["progress_unit"]),
                "message": _strings(c["message"]),
                "failure_kind": _cat(c["failure_kind"], FAILURE_DTYPE),
                "failure_message": _strings(c["failure_message"]),
                "executor": _strings(c["executor"]),
                "pipeline_run_id": _strings(c["pipeline_run_id"]),
                "tags": _tags(c["tags"]),
                "priority": pd.Series(np.array(c["priority"], dtype="int64")),
                "overridden": pd.Series(np.array(c["overridden"], dtype="bool")),
                "status_version": pd.Series(np.array(c["status_version"], dtype="int64")),
            }
        )
    if kind == "attempts":
        started, ended = _micros(c["started_at"]), _micros(c["ended_at"])
        return pd.DataFrame(
            {
                "task_id": _strings(c["task_id"]),
                "name": _strings(c["name"]),
                "attempt": pd.Series(np.array(c["attempt"], dtype="int64")),
                "started_at": started,
                "ended_at": ended,
                "duration": ended - started,
                "outcome": _cat(c["outcome"], STATUS_DTYPE),
                "failure_kind": _cat(c["failure_kind"], FAILURE_DTYPE),
                "failure_message": _strings(c["failure_message"]),
                "traceback": _strings(c["traceback"]),
                "executor": _strings(c["executor"]),
                "abandoned": pd.Series(np.array(c["abandoned"], dtype="bool")),
                "exit_code": _nullable(c["exit_code"], "Int64"),
            }
        )
    if kind == "transitions":
        return pd.DataFrame(
            {
                "task_id": _strings(c["task_id"]),
                "name": _strings(c["name"]),
                "version": pd.Series(np.array(c["version"], dtype="int64")),
                "from_status": _cat(c["from_status"], STATUS_DTYPE),
                "to_status": _cat(c["to_status"], STATUS_DTYPE),
                "trigger": _strings(c["trigger"]),
                "actor": _strings(c["actor"]),
                "reason": _strings(c["reason"]),
                "at": _micros(c["at"]),
                "override": pd.Series(np.array(c["override"], dtype="bool")),
            }
        )
    raise ValueError(f"unknown frame kind {kind!r}; use tasks, attempts or transitions")

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
"""

from __future__ import annotations

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


def snapshots_frame(snaps: Iterable[TaskSnapshot]) -> pd.DataFrame:
    snaps = list(snaps)
    started = _times([s.started_at for s in snaps])
    ended = _times([s.ended_at for s in snaps])
    prog = [s.progress for s in snaps]
    fail = [s.failure for s in snaps]
    df = pd.DataFrame(
        {
            "task_id": pd.Series([s.task_id for s in snaps], dtype="string"),
            "name": pd.Series([s.name for s in snaps], dtype="string"),
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
            "progress_unit": pd.Series([p.unit if p else None for p in prog], dtype="string"),
            "message": pd.Series([p.message if p else None for p in prog], dtype="string"),
            "failure_kind": _cat([f.kind if f else None for f in fail], FAILURE_DTYPE),
            "failure_message": pd.Series([f.message if f else None for f in fail], dtype="string"),
            "executor": pd.Series([s.executor for s in snaps], dtype="string"),
            "pipeline_run_id": pd.Series([s.pipeline_run_id for s in snaps], dtype="string"),
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
            "task_id": pd.Series([r.task_id for r in recs], dtype="string"),
            "name": pd.Series([names.get(r.task_id) for r in recs], dtype="string"),
            "attempt": pd.Series([r.attempt for r in recs], dtype="int64"),
            "started_at": started,
            "ended_at": ended,
            "duration": ended - started,
            "outcome": _cat([r.outcome for r in recs], STATUS_DTYPE),
            "failure_kind": _cat([r.failure_kind for r in recs], FAILURE_DTYPE),
            "failure_message": pd.Series([r.failure_message for r in recs], dtype="string"),
            "traceback": pd.Series([r.traceback for r in recs], dtype="string"),
            "executor": pd.Series([r.executor for r in recs], dtype="string"),
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
            "task_id": pd.Series(task_ids, dtype="string"),
            "name": pd.Series([names.get(t) for t in task_ids], dtype="string"),
            "version": pd.Series(version, dtype="int64"),
            "from_status": _cat(from_status, STATUS_DTYPE),
            "to_status": _cat(to_status, STATUS_DTYPE),
            "trigger": pd.Series(trigger, dtype="string"),
            "actor": pd.Series(actor, dtype="string"),
            "reason": pd.Series(reason, dtype="string"),
            "at": _times(at),
            "override": pd.Series(override, dtype="bool"),
        }
    )

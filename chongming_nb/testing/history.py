"""Fill a store with a long history, fast: tests and benchmarks of stores at scale.

``generate_history(store, 100_000)`` writes finished tasks shaped like the ones a
controller records -- a snapshot, the transitions pending -> queued -> starting ->
running -> (retry_wait -> queued -> starting -> running ...) -> succeeded | failed, one
attempt record per attempt and the ``TaskCall`` event -- straight through the store's
write path, in batches, without running anything (100,000 tasks take seconds, not the
minutes a controller needs). The content is a pure function of the arguments: task
``i`` is named, tagged, timed and failed by its index, so a test can compute what any
query must return.

Task ``i`` (0-based):

* id ``f"{prefix}{i:08x}"``, name ``names[i % len(names)]``, created at ``start + i *
  step``; runs for ``step / 2`` per attempt;
* tags ``{"io"}`` when ``i % 5 == 0``; pipeline run ``f"run-{i // 100}"`` when ``i %
  3 == 0``; progress ``done=i % 100, total=100, unit="rows"`` when ``i % 4 == 0``;
* failed (with ``attempts`` attempts, the last one failing) when ``i % fail_every ==
  fail_every - 1``, else succeeded at its first attempt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from chongming_nb.core import models
from chongming_nb.core.states import STATUS, TaskStatus
from chongming_nb.stores.protocol import EventRecord, SaveItem, TaskStore

if TYPE_CHECKING:
    from chongming_nb.stores.sqlite import SqliteStore

__all__ = ["HISTORY_START", "generate_history", "generated_status"]

#: Where generated histories start by default.
HISTORY_START = datetime(2026, 1, 1, tzinfo=UTC)

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)


def generated_status(i: int, fail_every: int = 10) -> TaskStatus:
    """The final status ``generate_history`` gives task ``i``."""
    return S.FAILED if fail_every and i % fail_every == fail_every - 1 else S.SUCCEEDED


def _task(
    i: int, shape: _Shape
) -> tuple[models.TaskSnapshot, list[models.Transition], list[models.AttemptRecord], EventRecord]:
    tid = f"{shape.prefix}{i:08x}"
    created = shape.start + i * shape.step
    final = generated_status(i, shape.fail_every)
    attempts = shape.attempts
    tries = attempts if final is S.FAILED else 1
    run = shape.step / (2 * tries)
    trs: list[models.Transition] = []
    recs: list[models.AttemptRecord] = []
    t = created

    def move(a: TaskStatus, b: TaskStatus, trigger: str, actor: str) -> None:
        trs.append(models.Transition(tid, a, b, trigger, actor, None, t, len(trs) + 1))

    move(S.PENDING, S.QUEUED, "scheduler:ready", "scheduler")
    failure = None
    for k in range(1, tries + 1):
        if k > 1:
            move(S.RETRY_WAIT, S.QUEUED, "timer:retry", "scheduler")
        move(S.QUEUED, S.STARTING, "scheduler:dispatch", "scheduler")
        began = t
        move(S.STARTING, S.RUNNING, "executor:started", "executor")
        t = t + run
        failed = final is S.FAILED
        failure = (
            models.Failure(models.FailureKind.EXCEPTION, f"attempt {k} of task {i} failed")
            if failed
            else None
        )
        recs.append(
            models.AttemptRecord(
                tid,
                k,
                began,
                t,
                S.FAILED if failed else S.SUCCEEDED,
                None if failure is None else failure.kind,
                None if failure is None else failure.message,
                executor="thread",
            )
        )
        if k < tries:
            move(S.RUNNING, S.RETRY_WAIT, "executor:raised", "executor")
    move(S.RUNNING, final, "executor:raised" if failure else "executor:returned", "executor")
    snap = models.TaskSnapshot(
        task_id=tid,
        name=shape.names[i % len(shape.names)],
        pipeline_run_id=f"run-{i // 100}" if i % 3 == 0 else None,
        tags=frozenset({"io"}) if i % 5 == 0 else frozenset(),
        status=final,
        status_version=len(trs),
        attempt=tries,
        max_attempts=max(1, attempts),
        created_at=created,
        queued_at=created,
        started_at=recs[-1].started_at,
        ended_at=t,
        last_heartbeat_at=recs[-1].started_at,
        progress=models.Progress(done=i % 100, total=100, unit="rows", updated_at=t)
        if i % 4 == 0
        else None,
        failure=failure,
        executor="thread",
    )
    call = EventRecord(f"call-{tid}", tid, created, "TaskCall", {})
    return snap, trs, recs, call


def generate_history(
    store: TaskStore,
    tasks: int,
    *,
    attempts: int = 3,
    fail_every: int = 10,
    names: Sequence[str] = ("extract", "transform", "load"),
    start: datetime = HISTORY_START,
    step: timedelta = timedelta(milliseconds=10),
    prefix: str = "g",
    first: int = 0,
    batch: int | None = None,
    sql: bool = False,
) -> int:
    """Write tasks ``first`` .. ``first + tasks - 1`` (see the module docstring) into
    ``store``, ``batch`` tasks per transaction (default 2,000); returns how many
    attempts it wrote. ``sql=True`` (a ``SqliteStore`` only): the same rows written by
    a few SQL statements per batch (default 100,000 tasks) instead of through Python
    objects -- a million tasks in minutes on a busy machine rather than half an hour."""
    if tasks < 0 or attempts < 1 or (batch is not None and batch < 1) or not names:
        raise ValueError("tasks must be >= 0, attempts and batch >= 1, names not empty")
    shape = _Shape(attempts, fail_every, names, start, step, prefix)
    if sql:
        if getattr(getattr(store, "dialect", None), "name", None) != "sqlite":
            raise ValueError(f"generate_history(sql=True) writes to a SqliteStore, not {store!r}")
        return _generate_sql(cast("SqliteStore", store), tasks, first, batch or 100_000, shape)
    batch = batch or 2000
    write: Any = getattr(store, "record_batch", None) or store.save_many
    written = 0
    for lo in range(first, first + tasks, batch):
        items: list[SaveItem] = []
        trs: list[models.Transition] = []
        recs: list[models.AttemptRecord] = []
        calls: list[EventRecord] = []
        for i in range(lo, min(lo + batch, first + tasks)):
            snap, t, r, call = _task(i, shape)
            items.append((snap, None))
            trs += t
            recs += r
            calls.append(call)
        write(items, trs, attempts=recs, events=calls)
        written += len(recs)
    return written


#: ``generate_history`` in SQL, for a SQLite store (``sql=True``). Over
#: the tasks ``i`` of one batch (``h``): their id, creation time, whether they fail,
#: their attempts and the time each attempt runs (microseconds, as SQLite stores times).
_TASKS_SQL = """
WITH RECURSIVE n(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :hi),
g AS (
    SELECT i, :prefix || printf('%08x', i) AS tid, :start + i * :step AS c,
        COALESCE(:fail_every > 0 AND i % :fail_every = :fail_every - 1, 0) AS failed
    FROM n
),
h AS (
    SELECT *, CASE WHEN failed THEN :attempts ELSE 1 END AS tries,
        CASE WHEN failed THEN :run_many ELSE :run_one END AS r
    FROM g
),
ks(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM ks WHERE k < :attempts),
hk AS (SELECT h.*, k FROM h JOIN ks ON k <= tries)
"""
#: ISO text of a time in microseconds (``datetime.isoformat(timespec="microseconds")``).
_ISO = (
    "strftime('%Y-%m-%dT%H:%M:%S', ({0}) / 1000000, 'unixepoch') || '.' "
    "|| printf('%06d', ({0}) % 1000000) || '+00:00'"
)
_FINAL = "CASE WHEN failed THEN 'failed' ELSE 'succeeded' END"
_GENERATE = [
    f"""INSERT INTO tasks (task_id, name, pipeline_run_id, tags, status, status_version,
        attempt, max_attempts, created_at, queued_at, started_at, ended_at,
        last_heartbeat_at, progress, failure, executor, priority, deps, overridden)
    {_TASKS_SQL}
    SELECT tid, json_extract(:names, '$[' || (i % :n_names) || ']'),
        CASE WHEN i % 3 = 0 THEN 'run-' || (i / 100) END,
        CASE WHEN i % 5 = 0 THEN '["io"]' ELSE '[]' END,
        {_FINAL}, 4 * tries, tries, :max_attempts, c, c, c + (tries - 1) * r,
        c + tries * r, c + (tries - 1) * r,
        CASE WHEN i % 4 = 0 THEN '{{"done":' || (i % 100)
            || ',"total":100,"unit":"rows","message":null,"updated_at":"'
            || {_ISO.format("c + tries * r")} || '"}}' END,
        CASE WHEN failed THEN '{{"kind":"exception","message":"attempt ' || tries
            || ' of task ' || i || ' failed","traceback":null,"retryable":false,'
            || '"exit_code":null,"exception_type":null}}' END,
        'thread', 0, '[]', 0
    FROM h ORDER BY i""",
    f"""INSERT INTO transitions (task_id, version, from_status, to_status, trigger, actor,
        at, override)
    {_TASKS_SQL}
    SELECT tid, 1, 'pending', 'queued', 'scheduler:ready', 'scheduler', c, 0 FROM h
    UNION ALL SELECT tid, 4 * k - 3, 'retry_wait', 'queued', 'timer:retry', 'scheduler',
        c + (k - 1) * r, 0 FROM hk WHERE k > 1
    UNION ALL SELECT tid, 4 * k - 2, 'queued', 'starting', 'scheduler:dispatch',
        'scheduler', c + (k - 1) * r, 0 FROM hk
    UNION ALL SELECT tid, 4 * k - 1, 'starting', 'running', 'executor:started', 'executor',
        c + (k - 1) * r, 0 FROM hk
    UNION ALL SELECT tid, 4 * k, 'running', 'retry_wait', 'executor:raised', 'executor',
        c + k * r, 0 FROM hk WHERE k < tries
    UNION ALL SELECT tid, 4 * tries, 'running', {_FINAL},
        CASE WHEN failed THEN 'executor:raised' ELSE 'executor:returned' END, 'executor',
        c + tries * r, 0 FROM h""",
    f"""INSERT INTO attempts (task_id, attempt, started_at, ended_at, outcome, failure_kind,
        failure_message, executor, abandoned)
    {_TASKS_SQL}
    SELECT tid, k, c + (k - 1) * r, c + k * r, {_FINAL},
        CASE WHEN failed THEN 'exception' END,
        CASE WHEN failed THEN 'attempt ' || k || ' of task ' || i || ' failed' END,
        'thread', 0
    FROM hk""",
    f"""INSERT INTO events (event_id, task_id, at, type, payload)
    {_TASKS_SQL}
    SELECT 'call-' || tid, tid, c, 'TaskCall', '{{}}' FROM h ORDER BY i""",
]


@dataclass(frozen=True)
class _Shape:
    attempts: int
    fail_every: int
    names: Sequence[str]
    start: datetime
    step: timedelta
    prefix: str


def _generate_sql(store: SqliteStore, tasks: int, first: int, batch: int, shape: _Shape) -> int:
    """``generate_history(..., sql=True)``: the statements of ``_GENERATE`` per batch."""
    us = timedelta(microseconds=1)
    step, attempts = shape.step, shape.attempts
    params: dict[str, Any] = {
        "prefix": shape.prefix,
        "start": (shape.start - datetime(1970, 1, 1, tzinfo=UTC)) // us,
        "step": step // us,
        "fail_every": shape.fail_every,
        "attempts": attempts,
        "max_attempts": max(1, attempts),
        "run_one": (step / 2) // us,
        "run_many": (step / (2 * attempts)) // us,
        "names": json.dumps(list(shape.names)),
        "n_names": len(shape.names),
    }
    written = 0
    for lo in range(first, first + tasks, batch):
        hi = min(lo + batch, first + tasks)
        with store._write() as conn:
            for statement in _GENERATE:
                cur = conn.execute(statement, {**params, "lo": lo, "hi": hi})
                if statement is _GENERATE[2]:
                    written += cur.rowcount
    return written

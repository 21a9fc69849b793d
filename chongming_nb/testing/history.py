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

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from chongming_nb.core.models import (
    AttemptRecord,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores.protocol import EventRecord, SaveItem, TaskStore

__all__ = ["HISTORY_START", "generate_history", "generated_status"]

#: Where generated histories start by default.
HISTORY_START = datetime(2026, 1, 1, tzinfo=UTC)

S = TaskStatus


def generated_status(i: int, fail_every: int = 10) -> TaskStatus:
    """The final status ``generate_history`` gives task ``i``."""
    return S.FAILED if fail_every and i % fail_every == fail_every - 1 else S.SUCCEEDED


def _task(
    i: int,
    *,
    prefix: str,
    names: Sequence[str],
    start: datetime,
    step: timedelta,
    attempts: int,
    fail_every: int,
) -> tuple[TaskSnapshot, list[Transition], list[AttemptRecord], EventRecord]:
    tid = f"{prefix}{i:08x}"
    created = start + i * step
    final = generated_status(i, fail_every)
    tries = attempts if final is S.FAILED else 1
    run = step / (2 * tries)
    trs: list[Transition] = []
    recs: list[AttemptRecord] = []
    t = created

    def move(a: TaskStatus, b: TaskStatus, trigger: str, actor: str) -> None:
        trs.append(Transition(tid, a, b, trigger, actor, None, t, len(trs) + 1))

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
            Failure(FailureKind.EXCEPTION, f"attempt {k} of task {i} failed") if failed else None
        )
        recs.append(
            AttemptRecord(
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
    snap = TaskSnapshot(
        task_id=tid,
        name=names[i % len(names)],
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
        progress=Progress(done=i % 100, total=100, unit="rows", updated_at=t)
        if i % 4 == 0
        else None,
        failure=failure,
        executor="thread",
    )
    call = EventRecord(f"call-{tid}", tid, created, "TaskCall", {"args": [], "kwargs": {}})
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
    batch: int = 2000,
) -> int:
    """Write tasks ``first`` .. ``first + tasks - 1`` (see the module docstring) into
    ``store``, ``batch`` tasks per transaction; returns how many attempts it wrote."""
    if tasks < 0 or attempts < 1 or batch < 1:
        raise ValueError("tasks must be >= 0, attempts and batch >= 1")
    write: Any = getattr(store, "record_batch", None) or store.save_many
    written = 0
    for lo in range(first, first + tasks, batch):
        items: list[SaveItem] = []
        trs: list[Transition] = []
        recs: list[AttemptRecord] = []
        calls: list[EventRecord] = []
        for i in range(lo, min(lo + batch, first + tasks)):
            snap, t, r, call = _task(
                i,
                prefix=prefix,
                names=names,
                start=start,
                step=step,
                attempts=attempts,
                fail_every=fail_every,
            )
            items.append((snap, None))
            trs += t
            recs += r
            calls.append(call)
        write(items, trs, attempts=recs, events=calls)
        written += len(recs)
    return written

"""Recovery: settling the tasks of owners that are provably gone, and fencing.

``reconcile_store`` is what ``Controller.reconcile()`` (and ``get_controller()`` at
start) runs. For each non-terminal task in the store that is not this controller's,
``ownership.judge`` decides whether its owner is provably gone; only then is the task
settled — LOST (it may have been running: its result is unknown) or CANCELLED (it
never started) — with ``lease lost at <time>: <why>`` as the reason and the failure
message. The write expects the version it read: if the owner wrote in between, the
owner is alive after all and the task is left to it.

Fencing: the fencing token of a task is its ``status_version``. Every write of an
owner expects the version it last wrote, so once a reconciler has settled a task
(version + 1), each later write of the old owner for that task is refused by the store
(``ConcurrencyConflict``) — atomically, in the same transaction that checks it. The
owner then *converges*: it reads the settled row and adopts it (``converge_plan``), so
memory and store agree again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import datetime

from chongming_nb.control.ownership import DEFAULT_GRACE_SECONDS, DEFAULT_LEASE_SECONDS, judge
from chongming_nb.core.clock import Clock
from chongming_nb.core.errors import ConcurrencyConflict, ConfigurationError
from chongming_nb.core.models import AttemptRecord, FailureKind, TaskSnapshot, Transition
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.core.states import NON_TERMINAL, TERMINAL, TaskStatus
from chongming_nb.stores.protocol import TaskQuery, TaskStore

__all__ = ["ConvergePlan", "converge_plan", "reconcile_store", "settle"]

log = logging.getLogger("chongming_nb.recovery")

S = TaskStatus

#: States in which a task may hold an execution: settled as LOST (result unknown).
_MAYBE_RUNNING = frozenset({S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING})

ON_ORPHAN = ("fail", "requeue", "manual")


def settle(sm: StateMachine, snap: TaskSnapshot, reason: str) -> tuple[TaskSnapshot, Transition]:
    """The terminal step for a task whose owner is gone: LOST when it may have been
    running (or paused mid-run), else CANCELLED."""
    if snap.status in _MAYBE_RUNNING:
        return sm.mark_lost(snap, reason=reason, actor="reconcile")
    if snap.status is S.PAUSED and snap.started_at is not None:
        return sm.force_transition(snap, S.LOST, actor="reconcile", reason=reason)
    return sm.cancel(snap, reason=reason, actor="reconcile")


def reconcile_store(
    store: TaskStore,
    clock: Clock,
    *,
    me: str | None,
    local_ids: Collection[str] = (),
    on_orphan: str = "fail",
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    grace: float = DEFAULT_GRACE_SECONDS,
    requeue: Callable[[TaskSnapshot], str | None] | None = None,
) -> dict[str, list[str]]:
    """Settle the store's tasks whose owner is provably gone (see the module docstring).

    Returns ``{"lost": [...], "requeued": [...], "manual": [...], "unowned": [...],
    "scheduled": [...]}``: settled (LOST or CANCELLED); run again here by ``requeue``
    (it returns the new id, or None when it cannot); left alone because
    ``on_orphan="manual"``; tasks with no owner and no lease, which cannot be proven
    orphaned and are left alone; and, also in lost or manual, the orphans that were
    waiting for a delayed start (never started silently by someone else: their reason
    says when they were due and asks to resubmit)."""
    if on_orphan not in ON_ORPHAN:
        raise ConfigurationError(f"on_orphan must be fail, requeue or manual, got {on_orphan!r}")
    now = clock.now()
    owners = {o.owner_id: o for o in store.owners()}
    out: dict[str, list[str]] = {
        "lost": [],
        "requeued": [],
        "manual": [],
        "unowned": [],
        "scheduled": [],
    }
    sm = StateMachine(clock)
    for snap in store.query(TaskQuery(status=frozenset(NON_TERMINAL))):
        if snap.task_id in local_ids or (me is not None and snap.lease_owner == me):
            continue
        verdict = judge(
            snap.lease_owner,
            lease_until=snap.lease_until,
            now=now,
            owners=owners,
            lease_seconds=lease_seconds,
            grace=grace,
        )
        if not verdict.gone:
            if snap.lease_owner is None and snap.lease_until is None:
                out["unowned"].append(snap.task_id)
            continue
        scheduled = snap.retry_at is not None and snap.status in (S.PENDING, S.BLOCKED)
        if scheduled:
            out["scheduled"].append(snap.task_id)
        if on_orphan == "manual":
            out["manual"].append(snap.task_id)
            continue
        reason = f"lease lost at {now.isoformat(timespec='seconds')}: {verdict.reason}"
        if scheduled:  # never started silently by someone else: said, and left to you
            reason += f"; was scheduled for {snap.retry_at:%Y-%m-%d %H:%M:%S %Z} — resubmit?"
        new, tr = settle(sm, snap, reason)
        try:
            store.save_many(
                [(new, snap.status_version)], [tr], attempts=_closed_attempt(store, new, now)
            )
        except ConcurrencyConflict:
            # its owner wrote meanwhile: alive after all, the task stays its own
            log.info("task %s moved on while being reconciled; left to its owner", snap.task_id)
            continue
        # settled first, then run again: a task is never run twice by two live owners
        new_id = requeue(snap) if on_orphan == "requeue" and requeue is not None else None
        if new_id is not None:
            log.info("requeued orphan %s as %s", snap.task_id, new_id)
        out["requeued" if new_id is not None else "lost"].append(snap.task_id)
    return out


def _closed_attempt(store: TaskStore, new: TaskSnapshot, now: datetime) -> list[AttemptRecord]:
    """A task settled LOST may have an attempt its owner never closed (it died in the
    middle): that attempt ends with the task, result unknown, in the same write — the
    store holds no attempt that runs forever."""
    if new.status is not S.LOST:
        return []
    try:
        recs = store.attempts(new.task_id)
    except Exception as exc:  # settled all the same; the attempt stays open
        log.warning("reading the attempts of %s failed: %s", new.task_id, exc)
        return []
    if not recs or recs[-1].ended_at is not None:
        return []
    fail = new.failure
    return [
        replace(
            recs[-1],
            ended_at=now,
            outcome=S.LOST,
            failure_kind=fail.kind if fail is not None else FailureKind.LOST,
            failure_message=fail.message if fail is not None else None,
        )
    ]


@dataclass(frozen=True)
class ConvergePlan:
    """What an owner adopts for a task the store settled without it."""

    snapshot: TaskSnapshot
    #: the store's transitions after the last version both sides agree on
    transitions: list[Transition]
    #: the last version memory and store agree on
    common_version: int


def converge_plan(
    store: TaskStore, task_id: str, memory_history: list[Transition]
) -> ConvergePlan | None:
    """For a task whose write the store refused (or that the store holds settled while
    memory does not): the store's row and the transitions to adopt, when the store
    holds a terminal state that extends the history both sides share. A plan with no
    transitions means memory already agrees. None: nothing to adopt (the store has no
    such task, or an unsettled one — the conflict is something else and stays an
    error)."""
    snap = store.get(task_id)
    if snap is None or snap.status not in TERMINAL:
        return None
    theirs = store.history(task_id)
    mine = {t.version: t for t in memory_history}
    common = 0
    for t in theirs:
        m = mine.get(t.version)
        if m is None or (m.from_status, m.to_status, m.trigger, m.actor) != (
            t.from_status,
            t.to_status,
            t.trigger,
            t.actor,
        ):
            break
        common = t.version
    adopted = [t for t in theirs if t.version > common]
    if not adopted:
        agree = common == snap.status_version and len(mine) == common
        return ConvergePlan(snap, [], common) if agree else None
    if adopted[-1].version != snap.status_version:
        return None
    return ConvergePlan(snapshot=snap, transitions=adopted, common_version=common)

"""Recovery: settling the tasks of owners that are provably gone, and fencing.

``reconcile_store`` is what ``Controller.reconcile()`` (and ``get_controller()`` at
start) runs. For each non-terminal task in the store that is not this controller's,
``ownership.judge`` decides whether its owner is provably gone; only then is the task
settled — LOST (it may have been running: its result is unknown) or CANCELLED (it
never started) — with ``lease lost at <time>: <why>`` as the reason and the failure
message. The write expects the version it read: if the owner wrote in between, the
owner is alive after all and the task is left to it.

A pipeline run's record (``RunRecord``) is settled the same way once its tasks are:
a run still open in the store (running, paused, stopping) whose owner (the ``owner`` of
its record, else of its tasks) is provably gone and whose tasks are all settled becomes
``lost`` — its record then says why (``spec["recovery"]``: the reason, its tasks'
counts, when and by whom) and its nodes carry their tasks' statuses;
``submit(resume_from=run_id)`` runs it again from the steps that succeeded.

Fencing: the fencing token of a task is its ``status_version``. Every write of an
owner expects the version it last wrote, so once a reconciler has settled a task
(version + 1), each later write of the old owner for that task is refused by the store
(``ConcurrencyConflict``) — atomically, in the same transaction that checks it. The
owner then *converges*: it reads the settled row and adopts it (``converge_plan``), so
memory and store agree again.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from chongming_nb.control.ownership import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_LEASE_SECONDS,
    Verdict,
    judge,
)
from chongming_nb.control.writes import event_record
from chongming_nb.core.clock import Clock
from chongming_nb.core.errors import ConcurrencyConflict, ConfigurationError
from chongming_nb.core.events import PipelineRunStatusChanged
from chongming_nb.core.models import (
    AttemptRecord,
    Failure,
    FailureKind,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.core.states import NON_TERMINAL, STATUS, TERMINAL
from chongming_nb.stores.protocol import OwnerRecord, RunRecord, TaskQuery, TaskStore

__all__ = [
    "RUN_LOST",
    "RUN_OPEN",
    "ConvergePlan",
    "converge_plan",
    "reconcile_store",
    "settle",
    "settle_runs",
]

log = logging.getLogger("chongming_nb.recovery")

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: States in which a task may hold an execution: settled as LOST (result unknown).
_MAYBE_RUNNING = frozenset({S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING})

ON_ORPHAN = ("fail", "requeue", "manual")

#: The statuses of a pipeline run that is not over (``PipelineRunStatus``; the pipeline
#: package sits above this module, so they are spelled here and a test holds them equal).
RUN_OPEN = frozenset({"running", "paused", "stopping"})
#: A run whose owner went away before it ended, settled here (``PipelineRunStatus.LOST``).
RUN_LOST = "lost"


def settle(sm: StateMachine, snap: TaskSnapshot, reason: str) -> tuple[TaskSnapshot, Transition]:
    """The terminal step for a task whose owner is gone: LOST when it may have been
    running (or paused mid-run), else CANCELLED."""
    if snap.status in _MAYBE_RUNNING:
        return sm.mark_lost(snap, reason=reason, actor="reconcile")
    if snap.status is S.PAUSED and snap.started_at is not None:
        # (the table has no PAUSED -> LOST: the one sanctioned way there is a forced
        # step) with the failure mark_lost gives, so it says why as a running one does
        new, tr = sm.force_transition(snap, S.LOST, actor="reconcile", reason=reason)
        return new.evolve(failure=Failure(FailureKind.LOST, reason)), tr
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
    "scheduled": [...], "runs": [...]}``: settled (LOST or CANCELLED); run again here
    by ``requeue`` (it returns the new id, or None when it cannot); left alone because
    ``on_orphan="manual"``; tasks with no owner and no lease, which cannot be proven
    orphaned and are left alone; also in lost or manual, the orphans that were
    waiting for a delayed start (never started silently by someone else: their reason
    says when they were due and asks to resubmit); and the pipeline runs settled
    ``lost`` (``settle_runs``; not with ``manual``)."""
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
        "runs": [],
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
            closed = _closed_attempt(store, new, now, _last_seen(snap, owners))
            store.save_many([(new, snap.status_version)], [tr], attempts=closed)
        except ConcurrencyConflict:
            # its owner wrote meanwhile: alive after all, the task stays its own
            log.info("task %s moved on while being reconciled; left to its owner", snap.task_id)
            continue
        # settled first, then run again: a task is never run twice by two live owners
        new_id = requeue(snap) if on_orphan == "requeue" and requeue is not None else None
        if new_id is not None:
            log.info("requeued orphan %s as %s", snap.task_id, new_id)
        out["requeued" if new_id is not None else "lost"].append(snap.task_id)
    if on_orphan != "manual":
        out["runs"] = settle_runs(
            store, clock, me=me, owners=owners, lease_seconds=lease_seconds, grace=grace
        )
    return out


def settle_runs(
    store: TaskStore,
    clock: Clock,
    *,
    me: str | None,
    owners: Mapping[str, Any] | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    grace: float = DEFAULT_GRACE_SECONDS,
) -> list[str]:
    """Settle the store's pipeline runs that can never end: open (``RUN_OPEN``), their
    owner provably gone (``judge``), every task of theirs settled. Each becomes
    ``RUN_LOST``, its record saying why (the module docstring); a
    ``PipelineRunStatusChanged`` event records the change. A run with a task not
    settled yet (left alone: alive after all, unowned, ``manual``) is left as it is.
    Returns the ids of the runs settled."""
    now = clock.now()
    if owners is None:
        owners = {o.owner_id: o for o in store.owners()}
    settled: list[str] = []
    # the open runs only: a store of many finished runs is not read (nor decoded) whole
    for rec in store.list_runs(status=RUN_OPEN):
        snaps = store.query(TaskQuery(pipeline_run_id=rec.run_id))
        if any(s.status not in TERMINAL for s in snaps):
            continue  # its tasks are not all settled: its owner's, or left alone
        owner = rec.spec.get("owner") or next((s.lease_owner for s in snaps if s.lease_owner), None)
        if owner is None or owner == me:
            continue  # no owner to judge (it cannot be proven gone), or ours
        verdict = judge(
            str(owner),
            lease_until=None,
            now=now,
            owners=owners,
            lease_seconds=lease_seconds,
            grace=grace,
        )
        if not verdict.gone:
            continue
        lost = _lost_run(rec, snaps, verdict, now, me)
        try:
            store.save_run(lost)
            store.append_events(
                [
                    event_record(
                        PipelineRunStatusChanged(
                            event_id=f"reconcile-{secrets.token_hex(6)}",
                            at=now,
                            run_id=rec.run_id,
                            from_status=rec.status,
                            to_status=RUN_LOST,
                            counts=lost.spec["counts"],
                        )
                    )
                ]
            )
        except Exception as exc:  # the tasks are settled all the same; tried next time
            log.warning("settling pipeline run %s failed: %s", rec.run_id, exc)
            continue
        log.info("pipeline run %s settled lost: %s", rec.run_id, verdict.reason)
        settled.append(rec.run_id)
    return settled


def _lost_run(
    rec: RunRecord, snaps: list[TaskSnapshot], verdict: Verdict, now: datetime, me: str | None
) -> RunRecord:
    """``rec`` settled lost: its nodes and counts as its tasks ended, and why."""
    by_id = {s.task_id: s for s in snaps}
    counts = dict(sorted(Counter(s.status.value for s in snaps).items()))
    nodes = []
    for node in rec.spec.get("nodes", ()):
        snap = by_id.get(str(node.get("task_id"))) if isinstance(node, Mapping) else None
        nodes.append({**node, "status": snap.status.value} if snap is not None else node)
    told = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no tasks"
    reason = (
        f"the run's owner went away before the run ended ({verdict.reason}); "
        f"its tasks: {told}; submit(resume_from={rec.run_id!r}) runs it again "
        "from the steps that succeeded"
    )
    recovery = {
        "reason": reason,
        "at": now.isoformat(),
        "by": me,
        "from_status": rec.status,
        "counts": counts,
    }
    spec = {**rec.spec, "nodes": nodes, "counts": counts, "recovery": recovery}
    return replace(rec, status=RUN_LOST, updated_at=now, spec=spec)


def _last_seen(snap: TaskSnapshot, owners: Mapping[str, OwnerRecord]) -> datetime | None:
    """The last time the store saw ``snap``'s owner alive: the task's heartbeat, its
    last progress report or its owner's heartbeat, the latest (None when none was
    recorded)."""
    owner = owners.get(snap.lease_owner) if snap.lease_owner is not None else None
    progress = snap.progress.updated_at if snap.progress is not None else None
    signs = (snap.last_heartbeat_at, progress, owner.heartbeat_at if owner else None)
    seen = [d for d in signs if d is not None]
    return max(seen, default=None)


def _closed_attempt(
    store: TaskStore, new: TaskSnapshot, now: datetime, last_seen: datetime | None = None
) -> list[AttemptRecord]:
    """A task settled LOST may have an attempt its owner never closed (it died in the
    middle): that attempt is closed, result unknown, in the same write — the store holds
    no attempt that runs forever. It ends at ``last_seen`` (the last time its owner was
    seen alive; never before the attempt started, never after ``now``), not at ``now``:
    the reconciler may come by hours after the owner died, and the attempt did not run
    all that time."""
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
            ended_at=_between(recs[-1].started_at, last_seen, now),
            outcome=S.LOST,
            failure_kind=fail.kind if fail is not None else FailureKind.LOST,
            failure_message=fail.message if fail is not None else None,
        )
    ]


def _between(start: datetime | None, at: datetime | None, now: datetime) -> datetime:
    """``at`` kept within ``start`` .. ``now``; ``now`` when ``at`` is not known."""
    if at is None or at > now:
        return now
    return max(at, start) if start is not None else at


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

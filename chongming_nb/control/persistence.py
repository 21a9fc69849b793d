"""The controller's link to a durable store: group-committed write-through, the command
dispatcher, owner heartbeats and leases, start-up reconciliation and verification.

Write-ahead order: the recorder thread commits a batch (snapshots, transitions,
attempts, events) in one transaction *before* any of its events is published, so a
subscriber never sees a change the store does not have.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from chongming_nb.control.messages import (
    STORE_WRITES,
    AppendLog,
    ClearAttempts,
    CreateTask,
    KeepRecord,
    Outgoing,
    SaveAttempt,
    SaveSnapshot,
    TouchHeartbeat,
    TouchLease,
    TouchProgress,
)
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.events import (
    AdminOverride,
    AttemptFailed,
    CompensationRan,
    Event,
    PipelineRunStatusChanged,
    TaskOutput,
    TaskWarning,
)
from chongming_nb.core.models import (
    AttemptRecord,
    CommandState,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.state_machine import StateMachine, replay
from chongming_nb.core.states import NON_TERMINAL, TaskStatus
from chongming_nb.stores.protocol import EventRecord, OwnerRecord, TaskQuery, Touch

if TYPE_CHECKING:
    from chongming_nb.control.book import TaskBook
    from chongming_nb.control.controller import Controller
    from chongming_nb.stores.protocol import TaskStore

log = logging.getLogger("chongming_nb.persistence")

#: Events worth keeping in the store's event table (progress, heartbeats and log lines
#: have their own channels).
DURABLE_EVENTS: tuple[type[Event], ...] = (
    AttemptFailed,
    TaskWarning,
    TaskOutput,
    AdminOverride,
    CompensationRan,
    PipelineRunStatusChanged,
)

#: How long a lease lasts, and how often the owner renews it.
LEASE_SECONDS = 60.0
RENEW_EVERY = 10.0
OWNER_BEAT_EVERY = 2.0
#: An owner whose heartbeat is older than this is considered gone.
OWNER_GONE_AFTER = 30.0
COMMAND_LEASE_SECONDS = 10.0


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    return repr(value)


def event_record(ev: Event) -> EventRecord:
    payload = {
        k: _jsonable(getattr(ev, k))
        for k in getattr(ev, "__dataclass_fields__", {})
        if k not in ("event_id", "at", "task_id")
    }
    return EventRecord(
        event_id=ev.event_id, task_id=ev.task_id, at=ev.at, type=ev.type, payload=payload
    )


#: Event classes -> whether they are kept in the store (filled on first sight).
_DURABLE: dict[type, bool] = {}


def write_batch(store: Any, batch: Sequence[Outgoing]) -> int:
    """Write one recorder batch; returns how many writes failed (0 when all landed).

    A store with ``record_batch`` (the SQL backends) gets the whole batch as one
    transaction; any other gets ``clear_attempts``, ``save_many``, ``append_logs`` and
    ``touch_many`` in that order. Either way a snapshot lands with (never before) the
    transitions that lead to it, and a ``clear_attempts`` deletes the attempts recorded
    before it, never one recorded after it in the same batch."""
    items: list[tuple[TaskSnapshot, int | None]] = []
    transitions: list[Transition] = []
    attempts: dict[tuple[str, int], AttemptRecord] = {}
    events: list[EventRecord] = []
    touches: list[Touch] = []
    logs: dict[str, list[Any]] = {}
    clears: list[str] = []
    add_item = items.append
    add_transition = transitions.append
    durable = _DURABLE
    writes = STORE_WRITES
    for item in batch:
        # most items are events (published; some kept in the event table)
        cls = item.__class__
        if cls not in writes:
            keep = durable.get(cls)
            if keep is None:
                keep = durable[cls] = issubclass(cls, DURABLE_EVENTS)
            if keep:
                events.append(event_record(item))
            continue
        if cls is SaveSnapshot:  # per task: ~4 saves, 2 attempts, a create, a record
            add_item((item.snap, item.expect))
            add_transition(item.transition)
        elif cls is SaveAttempt:
            rec: AttemptRecord = item.record
            attempts[(rec.task_id, rec.attempt)] = rec
        elif cls is CreateTask:
            add_item((item.snap, None))
        elif cls is KeepRecord:
            events.append(item.record)
        elif cls is TouchProgress:
            touches.append(Touch(task_id=item.task_id, progress=item.progress))
        elif cls is TouchHeartbeat:
            touches.append(Touch(task_id=item.task_id, heartbeat_at=item.at))
        elif cls is TouchLease:
            touches.append(
                Touch(task_id=item.task_id, lease_owner=item.owner, lease_until=item.until)
            )
        elif cls is AppendLog:
            logs.setdefault(item.task_id, []).append(item.line)
        elif cls is ClearAttempts:
            tid = item.task_id
            clears.append(tid)
            # what the clear deletes: attempts recorded before it, not those after it
            for key in [k for k in attempts if k[0] == tid]:
                del attempts[key]
    if not (items or transitions or attempts or events or touches or logs or clears):
        return 0
    record = getattr(store, "record_batch", None)
    if record is not None:
        try:
            record(
                items,
                transitions,
                attempts=list(attempts.values()),
                events=events,
                clears=clears,
                logs=list(logs.items()),
                touches=touches,
            )
            return 0
        except Exception:
            log.exception("group commit of %d items failed; writing one by one", len(batch))
            failures = _side_writes(store, clears, {}, [])
            failures += _one_by_one(store, items, transitions, list(attempts.values()), events)
            return failures + _side_writes(store, [], logs, touches)
    failures = _side_writes(store, clears, {}, [])
    if items or transitions or attempts or events:
        try:
            store.save_many(items, transitions, attempts=list(attempts.values()), events=events)
        except Exception:
            log.exception("group commit of %d snapshots failed; writing one by one", len(items))
            failures += _one_by_one(store, items, transitions, list(attempts.values()), events)
    return failures + _side_writes(store, [], logs, touches)


def _side_writes(
    store: Any, clears: list[str], logs: dict[str, list[Any]], touches: list[Touch]
) -> int:
    failures = 0
    for tid in clears:
        try:
            store.clear_attempts(tid)
        except Exception:
            failures += 1
    for tid, lines in logs.items():
        try:
            store.append_logs(tid, lines)
        except Exception:
            failures += 1
    if touches:
        try:
            store.touch_many(touches)
        except Exception:
            failures += 1
    return failures


def _one_by_one(
    store: Any,
    items: list[tuple[TaskSnapshot, int | None]],
    transitions: list[Transition],
    attempts: list[AttemptRecord],
    events: list[EventRecord],
) -> int:
    failures = 0
    for snap, expect in items:
        try:
            if expect is None:
                store.create(snap)
            else:
                store.save(snap, expect_version=expect)
        except Exception:
            failures += 1
    for tr in transitions:
        try:
            store.append(tr)
        except Exception:
            failures += 1
    for rec in attempts:
        try:
            store.save_attempt(rec)
        except Exception:
            failures += 1
    if events:
        try:
            store.append_events(events)
        except Exception:
            failures += 1
    return failures


def parse_owner(owner: str | None) -> tuple[str | None, int | None, str | None]:
    """``host:pid:kernel`` -> (host, pid, kernel id or None)."""
    if not owner:
        return None, None, None
    parts = owner.split(":")
    if len(parts) < 2:
        return owner, None, None
    host, pid_s = parts[0], parts[1]
    kernel = ":".join(parts[2:]) or None
    try:
        pid = int(pid_s)
    except ValueError:
        pid = None
    return host, pid, (None if kernel in (None, "-") else kernel)


def owner_alive(owner: str | None, owners: dict[str, OwnerRecord], now: datetime) -> bool:
    """Is the process that owns a task still there? Same host: ask the OS. Other host:
    trust its heartbeat in the owners table."""
    host, pid, _ = parse_owner(owner)
    if host is None or pid is None:
        return False
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    rec = owners.get(owner or "")
    return rec is not None and (now - rec.heartbeat_at).total_seconds() < OWNER_GONE_AFTER


class StoreLink:
    """Everything the controller does with its store besides recording batches."""

    def __init__(self, ctl: Controller, book: TaskBook, store: TaskStore) -> None:
        self.ctl = ctl
        self.book = book
        self.store = store
        self._next_owner_beat = 0.0
        self._next_renew = 0.0
        self._started_at = book.clock.now()

    def persist(self, batch: list[Outgoing]) -> None:
        """Recorder thread: write a batch to the store, in order, grouped."""
        try:
            self.ctl.persist_failures += write_batch(self.store, batch)
        except Exception:
            self.ctl.persist_failures += 1
            log.exception("store write failed; the task goes on")

    def safe_tick(self, mono: float) -> None:
        """Dispatcher thread: ``tick``, a failure counted and logged."""
        try:
            self.tick(mono)
        except Exception:
            self.ctl.persist_failures += 1
            log.exception("store tick failed")

    # ------------------------------------------------------------ periodic
    def tick(self, mono: float) -> None:
        """Dispatcher thread, every tick: claim and apply commands; beat and renew."""
        self.poll_commands()
        if mono >= self._next_owner_beat:
            self._next_owner_beat = mono + OWNER_BEAT_EVERY
            self.beat_owner()
        if mono >= self._next_renew:
            self._next_renew = mono + RENEW_EVERY
            self.renew_leases()

    def beat_owner(self) -> None:
        ctl = self.ctl
        if not ctl.owner:
            return
        host, pid, kernel = parse_owner(ctl.owner)
        try:
            self.store.upsert_owner(
                OwnerRecord(
                    owner_id=ctl.owner,
                    host=host or socket.gethostname(),
                    pid=pid if pid is not None else os.getpid(),
                    kernel_id=kernel,
                    started_at=self._started_at,
                    heartbeat_at=self.book.clock.now(),
                )
            )
        except Exception:
            ctl.persist_failures += 1
            log.exception("owner heartbeat failed")

    def renew_leases(self) -> None:
        ctl = self.ctl
        if not ctl.owner:
            return
        until = self.book.clock.now() + timedelta(seconds=LEASE_SECONDS)
        book = self.book
        with book.lock:
            ids = [tid for tid, t in book.tasks.items() if t.snap.status in NON_TERMINAL]
            for tid in ids:
                t = book.tasks[tid]
                t.snap = t.snap.evolve(lease_owner=ctl.owner, lease_until=until)
                book.outbox.append(TouchLease(tid, ctl.owner, until))
        book.flush_outbox()

    def poll_commands(self) -> int:
        """Claim the commands addressed to this controller's tasks and apply them as if
        called locally. Returns how many were applied."""
        ctl = self.ctl
        store = self.store
        try:
            pending = store.commands(state=CommandState.PENDING)
        except Exception:
            ctl.persist_failures += 1
            log.exception("reading the command queue failed")
            return 0
        with self.book.lock:
            mine = frozenset(c.task_id for c in pending if c.task_id in self.book.tasks)
        if not mine:
            return 0
        now = self.book.clock.now()
        try:
            claimed = store.claim_commands(
                owner=ctl.owner or "controller",
                now=now,
                lease_seconds=COMMAND_LEASE_SECONDS,
                task_ids=mine,
            )
        except Exception:
            ctl.persist_failures += 1
            log.exception("claiming commands failed")
            return 0
        for cmd in claimed:
            ok, why = ctl.apply(cmd.task_id, cmd.verb, actor=cmd.actor or "store", args=cmd.args)
            try:
                snap = ctl.get(cmd.task_id)
                status = snap.status.value
            except Exception:
                status = None
            message = f"applied: {cmd.verb} (now {status})" if ok else f"refused: {why}"
            outcome = {"ok": ok, "reason": why, "status": status, "message": message}
            try:
                store.complete_command(
                    cmd.command_id,
                    now=self.book.clock.now(),
                    outcome=outcome,
                    state=CommandState.DONE if ok else CommandState.REJECTED,
                )
            except Exception:
                ctl.persist_failures += 1
                log.exception("completing command %s failed", cmd.command_id)
        return len(claimed)

    # ------------------------------------------------------------ recovery
    def reconcile(self, on_orphan: str = "fail") -> dict[str, list[str]]:
        """Find tasks in the store whose owner is gone or whose lease expired and settle
        them: ``fail`` -> LOST (Failure.kind lost), ``requeue`` -> run again in this
        controller when the task is registered here by name and its call was
        recorded, else LOST, ``manual`` -> leave them and report."""
        if on_orphan not in ("fail", "requeue", "manual"):
            raise ConfigurationError(
                f"on_orphan must be fail, requeue or manual, got {on_orphan!r}"
            )
        ctl = self.ctl
        now = self.book.clock.now()
        owners = {o.owner_id: o for o in self.store.owners()}
        # "scheduled": also in lost/manual, the ones that waited for a delayed start
        out: dict[str, list[str]] = {"lost": [], "requeued": [], "manual": [], "scheduled": []}
        sm = StateMachine(self.book.clock)
        for snap in self.store.query(TaskQuery(status=frozenset(NON_TERMINAL))):
            if snap.task_id in self.book.tasks or snap.lease_owner == ctl.owner:
                continue
            expired = snap.lease_until is not None and snap.lease_until < now
            if owner_alive(snap.lease_owner, owners, now) and not expired:
                continue
            scheduled = snap.retry_at is not None and snap.status in (
                TaskStatus.PENDING,
                TaskStatus.BLOCKED,
            )
            if scheduled:
                out["scheduled"].append(snap.task_id)
            if on_orphan == "manual":
                out["manual"].append(snap.task_id)
                continue
            if on_orphan == "requeue" and self._requeue(snap):
                out["requeued"].append(snap.task_id)
                continue
            why = f"owner {snap.lease_owner or '?'} is gone" + (
                " (lease expired)" if expired else ""
            )
            if scheduled:  # never started silently by someone else: said, and left to you
                why += f"; was scheduled for {snap.retry_at:%Y-%m-%d %H:%M:%S %Z} — resubmit?"
            cur = snap
            trs: list[tuple[TaskSnapshot, int]] = []
            transitions: list[Transition] = []
            try:
                if cur.status in (
                    TaskStatus.STARTING,
                    TaskStatus.RUNNING,
                    TaskStatus.PAUSING,
                    TaskStatus.STOPPING,
                ):
                    new, tr = sm.mark_lost(cur, reason=why, actor="reconcile")
                elif cur.status is TaskStatus.PAUSED and cur.started_at is not None:
                    new, tr = sm.force_transition(
                        cur, TaskStatus.LOST, actor="reconcile", reason=why
                    )
                else:
                    new, tr = sm.cancel(cur, reason=why, actor="reconcile")
                trs.append((new, cur.status_version))
                transitions.append(tr)
                self.store.save_many(trs, transitions)
                out["lost"].append(snap.task_id)
            except Exception:
                ctl.persist_failures += 1
                log.exception("reconciling task %s failed", snap.task_id)
        return out

    def _requeue(self, snap: TaskSnapshot) -> bool:
        ctl = self.ctl
        if snap.name not in ctl.registry:
            return False
        calls = self.store.events(snap.task_id, types=frozenset({"TaskCall"}))
        if not calls:
            return False
        payload = calls[-1].payload
        fn = ctl.registry.get(snap.name)
        h = ctl.submit(fn, *payload.get("args", []), name=snap.name, **payload.get("kwargs", {}))
        log.info("requeued orphan %s as %s", snap.task_id, h.id)
        sm = StateMachine(self.book.clock)
        try:
            if snap.status in (
                TaskStatus.STARTING,
                TaskStatus.RUNNING,
                TaskStatus.PAUSING,
                TaskStatus.STOPPING,
            ):
                new, tr = sm.mark_lost(
                    snap, reason=f"owner gone; requeued as {h.id}", actor="reconcile"
                )
            else:
                new, tr = sm.cancel(
                    snap, reason=f"owner gone; requeued as {h.id}", actor="reconcile"
                )
            self.store.save_many([(new, snap.status_version)], [tr])
        except Exception:
            ctl.persist_failures += 1
        return True


def verify(history: Sequence[Transition], snap: TaskSnapshot) -> tuple[bool, str]:
    """Replay a task's transitions from its creation and compare with the snapshot."""
    initial = TaskSnapshot(task_id=snap.task_id, name=snap.name)
    try:
        status, version = replay(initial, list(history))
    except Exception as exc:
        return False, f"history does not replay: {exc}"
    if status is not snap.status or version != snap.status_version:
        return False, (
            f"history leads to {status.value} v{version}, snapshot says "
            f"{snap.status.value} v{snap.status_version}"
        )
    return True, f"{len(history)} transitions rebuild {status.value} v{version}"

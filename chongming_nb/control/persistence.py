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
import threading
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from chongming_nb.control.book import transitions
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
    TrimLogs,
)
from chongming_nb.control.ownership import DEFAULT_GRACE_SECONDS, DEFAULT_LEASE_SECONDS, OwnerId
from chongming_nb.control.recovery import converge_plan, reconcile_store
from chongming_nb.core.errors import ConcurrencyConflict, ConfigurationError, StoreError
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
from chongming_nb.core.state_machine import replay
from chongming_nb.core.states import NON_TERMINAL
from chongming_nb.stores.protocol import EventRecord, OwnerRecord, TaskQuery, Touch, log_size

if TYPE_CHECKING:
    from chongming_nb.control.book import TaskBook, TaskEntry
    from chongming_nb.control.handle import HasId, TaskRef
    from chongming_nb.control.recovery import ConvergePlan
    from chongming_nb.control.spec import TaskRegistry
    from chongming_nb.core.states import TaskStatus
    from chongming_nb.stores.protocol import TaskStore


class StoreControlled(Protocol):
    """What the store link asks of its controller (``control.controller.Controller``;
    a Protocol so that this module does not import the controller, which imports it)."""

    owner: str | None
    persist_failures: int
    registry: TaskRegistry

    def apply(
        self, task_id: object, verb: object, *, actor: str = ..., args: object = ...
    ) -> tuple[bool, str | None]: ...
    def get(self, task_id: TaskRef) -> TaskSnapshot: ...
    def submit(
        self, fn: Callable[..., Any], *args: Any, name: str | None = ..., **kwargs: Any
    ) -> HasId: ...
    def health(self) -> dict[str, Any]: ...
    def _poke(self) -> None: ...
    def _note(self, task_id: str, message: str) -> None: ...
    def _adopt(self, t: TaskEntry, plan: ConvergePlan) -> None: ...


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

#: How often an owner records its heartbeat in the owners table.
OWNER_BEAT_EVERY = 2.0
#: How often writes held while the store refused them are tried again.
HELD_RETRY_EVERY = 1.0
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


class StoreOutage(Exception):
    """The store refused a whole group commit for a reason that is not about the data
    (read-only, unreachable, disk full): the batch is kept and written again later."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def write_batch(
    store: Any,
    batch: Sequence[Outgoing],
    *,
    conflicts: set[str] | None = None,
    raise_outage: bool = False,
) -> int:
    """Write one recorder batch; returns how many writes failed (0 when all landed).

    ``conflicts`` collects the ids of tasks whose snapshot write was refused because
    the store holds another version (a reconciler settled the task: fencing); nothing
    more of those tasks is written from the batch (their transitions, attempts and
    events would contradict the store's history). With ``raise_outage`` a group commit
    refused by a ``StoreError`` that is not a conflict raises ``StoreOutage`` (the
    caller keeps the batch), instead of being retried write by write.

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
    trims: dict[str, int] = {}  # task -> log budget, applied after this batch's lines
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
        elif cls is TrimLogs:
            trims[item.task_id] = item.keep
        elif cls is ClearAttempts:
            tid = item.task_id
            clears.append(tid)
            # what the clear deletes: attempts recorded before it, not those after it
            for key in [k for k in attempts if k[0] == tid]:
                del attempts[key]
    if not (items or transitions or attempts or events or touches or logs or clears):
        return _trim(store, trims)
    failures = _write(
        store, items, transitions, attempts, events, touches, logs, clears, conflicts, raise_outage
    )
    return failures + _trim(store, trims)


def _trim(store: Any, trims: dict[str, int]) -> int:
    failures = 0
    for tid, keep in trims.items():
        try:
            store.trim_logs(tid, keep)
        except Exception:
            failures += 1
            log.exception("trimming the log of %s failed", tid)
    return failures


def _write(
    store: Any,
    items: list[tuple[TaskSnapshot, int | None]],
    transitions: list[Transition],
    attempts: dict[tuple[str, int], AttemptRecord],
    events: list[EventRecord],
    touches: list[Touch],
    logs: dict[str, list[Any]],
    clears: list[str],
    conflicts: set[str] | None,
    raise_outage: bool,
) -> int:
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
        except Exception as exc:
            if raise_outage and isinstance(exc, StoreError) and not _is_conflict(exc):
                raise StoreOutage(exc) from exc
            if not _is_conflict(exc):
                log.exception("group commit of %d items failed; writing one by one", len(items))
            failures = _side_writes(store, clears, {}, [])
            failures += _one_by_one(
                store, items, transitions, list(attempts.values()), events, conflicts
            )
            return failures + _side_writes(store, [], logs, touches)
    failures = _side_writes(store, clears, {}, [])
    if items or transitions or attempts or events:
        try:
            store.save_many(items, transitions, attempts=list(attempts.values()), events=events)
        except Exception as exc:
            if not _is_conflict(exc):
                log.exception("group commit of %d snapshots failed; writing one by one", len(items))
            failures += _one_by_one(
                store, items, transitions, list(attempts.values()), events, conflicts
            )
    return failures + _side_writes(store, [], logs, touches)


def _task_of(item: Any) -> str | None:
    """The task an outgoing item is about (None for run-level items)."""
    for holder in (item, getattr(item, "snap", None), getattr(item, "record", None)):
        tid = getattr(holder, "task_id", None)
        if isinstance(tid, str):
            return tid
    return None


def _is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ConcurrencyConflict)


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
    conflicts: set[str] | None = None,
) -> int:
    """After a failed group commit: each task's snapshots and transitions as one
    transaction of their own (so a snapshot still never lands without the transitions
    that lead to it), then attempts and events. A task the store refuses (it holds
    another version: fencing) gets nothing more written from this batch."""
    failures = 0
    fenced: set[str] = set()
    per_task: dict[str, tuple[list[tuple[TaskSnapshot, int | None]], list[Transition]]] = {}
    for item in items:
        per_task.setdefault(item[0].task_id, ([], []))[0].append(item)
    loose: list[Transition] = []
    for tr in transitions:
        part = per_task.get(tr.task_id)
        if part is None:
            loose.append(tr)
        else:
            part[1].append(tr)
    for tid, (task_items, task_transitions) in per_task.items():
        try:
            store.save_many(task_items, task_transitions)
        except ConcurrencyConflict:
            fenced.add(tid)  # refused: the store holds another version (reconciled)
        except Exception:
            failures += 1
    if conflicts is not None:
        conflicts |= fenced
    for tr in loose:
        try:
            store.append(tr)
        except Exception:
            failures += 1
    for rec in attempts:
        if rec.task_id in fenced:
            continue
        try:
            store.save_attempt(rec)
        except Exception:
            failures += 1
    kept = [e for e in events if e.task_id not in fenced] if fenced else events
    if kept:
        try:
            store.append_events(kept)
        except Exception:
            failures += 1
    return failures


@dataclass(frozen=True, slots=True)
class Unfence:
    """Outbox marker: memory adopted the store's state of ``task_id``; its writes
    queued after this marker are new and go to the store again."""

    task_id: str


@dataclass(frozen=True, slots=True)
class RetryHeld:
    """Outbox marker: try the writes held since the store refused them again (the
    dispatcher queues one a second while writes are held; ``flush`` queues one)."""


class StoreHealth:
    """Whether the controller's writes reach its store (recorder thread writes, any
    thread reads). While the store refuses writes (read-only, unreachable, full), the
    batches are kept in memory — at most ``limit`` writes, the oldest dropped beyond
    that — and written, in order, with the next batch once the store takes them."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self.held: deque[Outgoing] = deque()
        self.failing_since: datetime | None = None
        self.reason: str | None = None
        self.first_failure: tuple[datetime, str] | None = None
        self.dropped = 0
        self.outages = 0
        # tasks whose rows say "not saved" in this outage; to mark / to unmark
        self._marked: set[str] = set()
        self._to_mark: list[str] = []
        self._to_unmark: list[str] = []

    def peek(self) -> list[Outgoing]:
        """The held writes, still held (the recorder drops them once written)."""
        with self._lock:
            return list(self.held)

    def written(self, n: int) -> None:
        """The first ``n`` held writes reached the store (recorder thread)."""
        with self._lock:
            for _ in range(min(n, len(self.held))):
                self.held.popleft()

    def hold(self, batch: list[Outgoing], reason: str, now: datetime) -> bool:
        """Keep a refused batch; True the first time the store fails (warn then)."""
        ids = {tid for tid in map(_task_of, batch) if tid is not None}
        with self._lock:
            new = ids - self._marked
            self._marked |= new
            self._to_mark.extend(sorted(new))
            self.held.extend(batch)
            over = len(self.held) - self.limit
            for _ in range(max(0, over)):
                self.held.popleft()
            self.dropped += max(0, over)
            self.reason = reason
            if self.failing_since is None:
                self.failing_since = now
                self.outages += 1
            first = self.first_failure is None
            if first:
                self.first_failure = (now, reason)
            return first

    def recovered(self) -> None:
        with self._lock:
            self.failing_since = None
            self.reason = None
            self._to_unmark.extend(sorted(self._marked))
            self._marked.clear()

    def take_marks(self) -> tuple[list[str], list[str], str | None]:
        """(tasks to mark "not saved", tasks saved again, the reason)."""
        with self._lock:
            mark, self._to_mark = self._to_mark, []
            unmark, self._to_unmark = self._to_unmark, []
            return mark, unmark, self.reason

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {
                "saved": self.failing_since is None,
                "not_saved": None if self.reason is None else f"not saved: {self.reason}",
                "failing_since": self.failing_since,
                "held_writes": len(self.held),
                "dropped_writes": self.dropped,
                "outages": self.outages,
                "first_failure": self.first_failure,
            }


class StoreLink:
    """Everything the controller does with its store besides recording batches: the
    command poller, the owner's heartbeat and leases, reconciliation, fencing."""

    def __init__(
        self,
        ctl: StoreControlled,
        book: TaskBook,
        store: TaskStore,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.ctl = ctl
        self.book = book
        self.store = store
        self.lease_seconds = float(lease_seconds)
        #: leases are renewed six times per lease (a missed renewal or two is harmless)
        self.renew_every = self.lease_seconds / 6
        self.health = StoreHealth()
        self._next_owner_beat = 0.0
        self._next_renew = 0.0
        self._next_retry = 0.0
        self._started_at = book.clock.now()
        # task ids whose writes the store refused (recorder thread adds, dispatcher takes)
        self._fenced: deque[str] = deque()
        # ... and, until they are converged, nothing more of theirs is written
        self._refused: set[str] = set()
        self._converging = threading.Lock()

    # ------------------------------------------------------------ retention

    def cutoff(self, older_than: timedelta | datetime) -> datetime:
        """``prune``'s age (a positive timedelta) or aware cutoff time, as a cutoff."""
        if isinstance(older_than, timedelta):
            if older_than <= timedelta(0):
                raise ConfigurationError(f"older_than must be a positive age, got {older_than}")
            return self.book.clock.now() - older_than
        if isinstance(older_than, datetime) and older_than.tzinfo is not None:
            return older_than
        raise ConfigurationError(
            f"older_than must be a timedelta or an aware datetime, got {older_than!r}"
        )

    def prune(
        self, cutoff: datetime, statuses: frozenset[TaskStatus] | None, dry_run: bool
    ) -> dict[str, int]:
        """Delete the finished tasks that ended before ``cutoff``, except the ones this
        controller holds (live, or this session's)."""
        with self.book.lock:
            keep = frozenset(self.book.tasks)
        return dict(
            self.store.purge(older_than=cutoff, status=statuses, keep=keep, dry_run=dry_run)
        )

    # ------------------------------------------------------------ recording
    def persist(self, batch: list[Outgoing]) -> None:
        """Recorder thread: write a batch (after any held ones), in order, grouped;
        then the log text it carried no longer counts as queued (written, or held
        within the outage's own limit), and a task waiting to print goes on."""
        try:
            self._persist(batch)
        finally:
            queued = sum(log_size(i.line.line) for i in batch if i.__class__ is AppendLog)
            if queued:
                self.book.log_written(queued)

    def _persist(self, batch: list[Outgoing]) -> None:
        ctl = self.ctl
        health = self.health
        held: list[Outgoing] = health.peek() if health.held else []
        conflicts: set[str] = set()
        refused = self._refused  # the recorder's own (no other thread touches it)
        if refused:
            # in order: a refused task's writes are dropped up to its Unfence marker
            # (queued when memory adopted the store's state); the ones after it are new.
            # (A stale write could otherwise expect, by coincidence, exactly the
            # version the reconciler wrote, and pass.)
            kept: list[Outgoing] = []
            for item in batch:
                if item.__class__ is Unfence:
                    refused.discard(item.task_id)
                elif not refused or _task_of(item) not in refused:
                    kept.append(item)
            batch = kept
        try:
            ctl.persist_failures += write_batch(
                self.store, [*held, *batch] if held else batch, conflicts=conflicts,
                raise_outage=True,
            )  # fmt: skip
        except StoreOutage as exc:
            ctl.persist_failures += 1
            now = self.book.clock.now()
            if health.hold(batch, str(exc.cause), now):
                log.warning("the store refuses writes; kept in memory: %s", exc.cause)
                warnings.warn(
                    f"chongming: task state is not being saved to {self.store.url}: "
                    f"{exc.cause}. It is kept in memory (up to {health.limit} writes) and "
                    "written when the store takes writes again; ctl.health() tells.",
                    PersistenceWarning,
                    stacklevel=2,
                )
            self.ctl._poke()
            return
        except Exception:
            ctl.persist_failures += 1
            log.exception("store write failed; the task goes on")
            return
        if held:
            health.written(len(held))
        if health.failing_since is not None:
            log.warning("the store takes writes again; %d held writes written", len(held))
            health.recovered()
            self.ctl._poke()
        if conflicts:
            refused |= conflicts
            self._fenced.extend(conflicts)
            self.ctl._poke()

    def safe_tick(self, mono: float) -> None:
        """Dispatcher thread: ``tick``, a failure counted and logged."""
        try:
            self.tick(mono)
        except Exception:
            self.ctl.persist_failures += 1
            log.exception("store tick failed")

    # ------------------------------------------------------------ periodic
    def tick(self, mono: float) -> None:
        """Dispatcher thread, every tick: claim and apply commands; beat and renew;
        converge tasks the store settled without us."""
        self.poll_commands()
        if mono >= self._next_owner_beat:
            self._next_owner_beat = mono + OWNER_BEAT_EVERY
            self.beat_owner()
        if mono >= self._next_renew:
            self._next_renew = mono + self.renew_every
            self.renew_leases()
        self.converge_refused()
        if self.health._to_mark or self.health._to_unmark:
            self.mark_rows()
        if self.health.held and mono >= self._next_retry:
            self._next_retry = mono + HELD_RETRY_EVERY
            self.retry_held()

    def retry_held(self) -> None:
        """Have the recorder try the held writes again, in order (no new batch needed)."""
        self.book.bus.put_many([RetryHeld()])  # type: ignore[list-item]

    def mark_rows(self) -> None:
        """A line in each affected task's log (the row shows it): "not saved: <reason>"
        while the store refuses its writes, "saved again" once they are written."""
        mark, unmark, reason = self.health.take_marks()
        if not (mark or unmark):
            return
        note = self.ctl._note
        with self.book.lock:
            for tid in mark:
                note(tid, f"not saved: {reason}")
            for tid in unmark:
                note(tid, "saved again: the writes held in memory reached the store")
        self.book.flush_outbox()

    def converge_refused(self) -> None:
        """Converge the tasks whose writes the store refused so far (any thread that
        does not hold the book's lock: the dispatcher's tick, ``flush``)."""
        # one at a time: a flush() returns only after a convergence the dispatcher began
        with self._converging:
            ids: set[str] = set()
            while self._fenced:
                ids.add(self._fenced.popleft())
            if ids:
                self.converge(ids, refused=True)

    def beat_owner(self) -> None:
        ctl = self.ctl
        if not ctl.owner:
            return
        oid = OwnerId.parse(ctl.owner)
        try:
            self.store.upsert_owner(
                OwnerRecord(
                    owner_id=ctl.owner,
                    host=oid.host if oid is not None else socket.gethostname(),
                    pid=oid.pid if oid is not None and oid.pid is not None else os.getpid(),
                    kernel_id=oid.kernel if oid is not None else None,
                    started_at=self._started_at,
                    heartbeat_at=self.book.clock.now(),
                )
            )
        except Exception:
            ctl.persist_failures += 1
            log.exception("owner heartbeat failed")

    def renew_leases(self) -> None:
        """Renew the lease of every unfinished task, then look for ones the store
        settled meanwhile (a reconciler took them while we were frozen)."""
        ctl = self.ctl
        if not ctl.owner:
            return
        until = self.book.clock.now() + timedelta(seconds=self.lease_seconds)
        book = self.book
        with book.lock:
            ids = [tid for tid, t in book.tasks.items() if t.snap.status in NON_TERMINAL]
            for tid in ids:
                t = book.tasks[tid]
                t.snap = t.snap.evolve(lease_owner=ctl.owner, lease_until=until)
                book.outbox.append(TouchLease(tid, ctl.owner, until))
        book.flush_outbox()
        if not ids:
            return
        try:
            open_there = {
                s.task_id
                for s in self.store.query(
                    TaskQuery(owner=ctl.owner, status=frozenset(NON_TERMINAL))
                )
            }
        except Exception:
            log.exception("reading this owner's tasks back failed")
            return
        self.converge({tid for tid in ids if tid not in open_there}, refused=False)

    def converge(self, ids: set[str], *, refused: bool) -> None:
        """Adopt the store's settled state for tasks it settled without us (fencing):
        their execution is asked to stop and abandoned, memory takes the store's
        snapshot and history. ``refused``: the store refused our writes of these."""
        book = self.book
        for tid in sorted(ids):
            with book.lock:
                t = book.tasks.get(tid)
                if t is None:
                    continue
                mine = transitions(tid, list(t.history))
            try:
                plan = converge_plan(self.store, tid, mine)
            except Exception:
                log.exception("reading task %s back failed", tid)
                continue
            if plan is None:
                if refused:
                    self.ctl.persist_failures += 1
                    log.error(
                        "the store refused a write of task %s and holds no settled state "
                        "for it (store: %s; memory: v%d)",
                        tid, self._describe(tid), len(mine),
                    )  # fmt: skip
                continue
            with book.lock:
                if plan.transitions:
                    self.ctl._adopt(t, plan)
                # adopted (or in agreement): what this task writes after it is new
                book.outbox.append(Unfence(tid))  # type: ignore[arg-type]
            book.flush_outbox()

    def _describe(self, tid: str) -> str:
        try:
            snap = self.store.get(tid)
            hist = self.store.history(tid)
        except Exception as exc:
            return f"unreadable: {exc}"
        if snap is None:
            return "no such task"
        versions = [t.version for t in hist]
        return f"{snap.status.value} v{snap.status_version}, transitions {versions}"

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
    def reconcile(
        self, on_orphan: str = "fail", *, grace: float = DEFAULT_GRACE_SECONDS
    ) -> dict[str, list[str]]:
        """Settle the store's tasks whose owner is provably gone (``ownership.judge``):
        ``fail`` -> LOST / CANCELLED, ``requeue`` -> also run again here when the task
        is registered by name and its call was recorded, ``manual`` -> only report."""
        with self.book.lock:
            local = set(self.book.tasks)
        return reconcile_store(
            self.store,
            self.book.clock,
            me=self.ctl.owner,
            local_ids=local,
            on_orphan=on_orphan,
            lease_seconds=self.lease_seconds,
            grace=grace,
            requeue=self._requeue,
        )

    def _requeue(self, snap: TaskSnapshot) -> str | None:
        """Run a settled orphan again here; its new id, or None when it cannot be."""
        ctl = self.ctl
        if snap.name not in ctl.registry:
            return None
        calls = self.store.events(snap.task_id, types=frozenset({"TaskCall"}))
        if not calls:
            return None
        payload = calls[-1].payload
        fn = ctl.registry.get(snap.name)
        h = ctl.submit(fn, *payload.get("args", []), name=snap.name, **payload.get("kwargs", {}))
        return h.id


class PersistenceWarning(UserWarning):
    """The controller's store refuses writes (task state is kept in memory meanwhile)."""


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

"""Writing one recorder batch to the store, and holding batches the store refuses.

* ``write_batch`` — a batch of the outbox (``messages.Outgoing``) as one group commit
  (``record_batch`` on the SQL stores), or, after a failed one, task by task; a task
  whose snapshot the store refuses (it holds another version: fencing) gets nothing
  more written from the batch;
* ``StoreHealth`` — the batches held in memory while the store refuses writes
  (read-only, unreachable, full), and what ``health()`` reports of it.

Write-ahead order: the recorder thread commits a batch (snapshots, transitions,
attempts, events) in one transaction *before* any of its events is published, so a
subscriber never sees a change the store does not have.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
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
    TrimLogs,
)
from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.events import (
    AdminOverride,
    AttemptFailed,
    CompensationRan,
    Event,
    PipelineRunStatusChanged,
    TaskOutput,
    TaskWarning,
)
from chongming_nb.core.models import AttemptRecord, TaskSnapshot, Transition
from chongming_nb.stores.protocol import EventRecord, LogRecord, Touch

if TYPE_CHECKING:
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
    """The store refused writes for a reason that is not about the data (read-only,
    unreachable, disk full): what was not written is kept and written again later.
    ``remainder`` None: nothing of the batch was written (keep it whole); else the
    items of the batch still to write (the rest landed)."""

    def __init__(self, cause: BaseException, remainder: list[Outgoing] | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.remainder = remainder


def write_batch(
    store: TaskStore,
    batch: Sequence[Outgoing],
    *,
    conflicts: set[str] | None = None,
    raise_outage: bool = False,
) -> int:
    """Write one recorder batch; returns how many writes failed (0 when all landed).

    ``conflicts`` collects the ids of tasks whose snapshot write was refused because
    the store holds another version (a reconciler settled the task: fencing); nothing
    more of those tasks is written from the batch (their transitions, attempts and
    events would contradict the store's history). With ``raise_outage`` a write
    refused for a reason that is not about the data (``is_outage``) raises
    ``StoreOutage`` naming what was not written (the caller keeps it), instead of
    being dropped or retried write by write.

    A store with ``record_batch`` (the SQL backends) gets the whole batch as one
    transaction; any other gets ``clear_attempts``, ``save_many``, ``append_logs`` and
    ``touch_many`` in that order (an outage in the first two keeps the whole batch,
    writing them again is harmless; one in the others keeps the log lines and touches
    not written). Either way a snapshot lands with (never before) the transitions that
    lead to it, and a ``clear_attempts`` deletes the attempts recorded before it,
    never one recorded after it in the same batch; log trims come last."""
    items: list[tuple[TaskSnapshot, int | None]] = []
    transitions: list[Transition] = []
    attempts: dict[tuple[str, int], AttemptRecord] = {}
    events: list[EventRecord] = []
    touches: list[Touch] = []
    logs: dict[str, list[LogRecord]] = {}
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
    unwritten = _Unwritten(raise_outage)
    failures = 0
    if items or transitions or attempts or events or touches or logs or clears:
        failures = _write(
            store,
            items,
            transitions,
            attempts,
            events,
            touches,
            logs,
            clears,
            conflicts,
            unwritten,
        )
    failures += _trim(store, trims, unwritten)
    if unwritten.cause is not None:
        raise StoreOutage(unwritten.cause, unwritten.of(batch))
    return failures


def is_outage(exc: BaseException) -> bool:
    """Is a refused write about the store (read-only, unreachable, full: ``StoreError``
    or ``OSError``, what a store raises for those) rather than the data (a conflict:
    fencing) or a bug? Such a write is kept and written again later."""
    return isinstance(exc, StoreError | OSError) and not isinstance(exc, ConcurrencyConflict)


class _Unwritten:
    """With ``raise_outage``: the side writes (log lines, touches, trims) an outage
    refused after the batch's snapshots landed, to keep for later."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.cause: BaseException | None = None
        self.logs: set[str] = set()
        self.trims: set[str] = set()
        self.touches = False

    def refused(self, exc: BaseException) -> bool:
        """True (and remembered) when ``exc`` is an outage whose writes are kept."""
        if not (self.keep and is_outage(exc)):
            return False
        if self.cause is None:
            self.cause = exc
        return True

    def of(self, batch: Sequence[Outgoing]) -> list[Outgoing]:
        """The items of ``batch`` not written, in order."""
        out: list[Outgoing] = []
        for item in batch:
            cls = item.__class__
            if cls is AppendLog:
                keep = item.task_id in self.logs
            elif cls is TrimLogs:
                keep = item.task_id in self.trims
            else:
                keep = self.touches and cls in _TOUCHES
            if keep:
                out.append(item)
        return out


_TOUCHES = frozenset({TouchProgress, TouchHeartbeat, TouchLease})


def _trim(store: TaskStore, trims: dict[str, int], unwritten: _Unwritten) -> int:
    failures = 0
    for tid, keep in trims.items():
        try:
            store.trim_logs(tid, keep)
        except Exception as exc:
            if unwritten.refused(exc):
                unwritten.trims.add(tid)
                continue
            failures += 1
            log.exception("trimming the log of %s failed", tid)
    return failures


def _write(
    store: TaskStore,
    items: list[tuple[TaskSnapshot, int | None]],
    transitions: list[Transition],
    attempts: dict[tuple[str, int], AttemptRecord],
    events: list[EventRecord],
    touches: list[Touch],
    logs: dict[str, list[LogRecord]],
    clears: list[str],
    conflicts: set[str] | None,
    unwritten: _Unwritten,
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
            if unwritten.keep and is_outage(exc):
                raise StoreOutage(exc) from exc
            if not _is_conflict(exc):
                log.exception("group commit of %d items failed; writing one by one", len(items))
            # (a clear refused here is counted, not kept: the rest of its batch lands)
            failures = _side_writes(store, clears, {}, [], _Unwritten(False))
            failures += _one_by_one(
                store, items, transitions, list(attempts.values()), events, conflicts
            )
            return failures + _side_writes(store, [], logs, touches, unwritten)
    # nothing of the batch is kept until the group commit lands: a clear that is
    # written again deletes nothing the batch saved, a refused save_many wrote nothing
    failures = _side_writes(store, clears, {}, [], unwritten)
    if unwritten.cause is not None:
        raise StoreOutage(unwritten.cause)
    if items or transitions or attempts or events:
        try:
            store.save_many(items, transitions, attempts=list(attempts.values()), events=events)
        except Exception as exc:
            if unwritten.keep and is_outage(exc):
                raise StoreOutage(exc) from exc
            if not _is_conflict(exc):
                log.exception("group commit of %d snapshots failed; writing one by one", len(items))
            failures += _one_by_one(
                store, items, transitions, list(attempts.values()), events, conflicts
            )
    return failures + _side_writes(store, [], logs, touches, unwritten)


def task_of(item: object) -> str | None:
    """The task an outgoing item is about (None for run-level items)."""
    for holder in (item, getattr(item, "snap", None), getattr(item, "record", None)):
        tid = getattr(holder, "task_id", None)
        if isinstance(tid, str):
            return tid
    return None


def _is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ConcurrencyConflict)


def _side_writes(
    store: TaskStore,
    clears: list[str],
    logs: dict[str, list[LogRecord]],
    touches: list[Touch],
    unwritten: _Unwritten,
) -> int:
    """Clears, log lines, touches; an outage's refusals go to ``unwritten`` (kept),
    any other failure is counted."""
    failures = 0
    for tid in clears:
        try:
            store.clear_attempts(tid)
        except Exception as exc:
            if not unwritten.refused(exc):
                failures += 1
    for tid, lines in logs.items():
        try:
            store.append_logs(tid, lines)
        except Exception as exc:
            if unwritten.refused(exc):
                unwritten.logs.add(tid)
            else:
                failures += 1
    if touches:
        try:
            store.touch_many(touches)
        except Exception as exc:
            if unwritten.refused(exc):
                unwritten.touches = True
            else:
                failures += 1
    return failures


def _one_by_one(
    store: TaskStore,
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
        ids = {tid for tid in map(task_of, batch) if tid is not None}
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

"""The read side: snapshots, histories, attempts, logs, waiting, DataFrames.

Owns nothing: every read takes ``TaskBook.lock`` for as long as it copies, and first
settles the reports queued while the lock was busy (``Attempts.catch_up``) so a read
shows every report made before it.

A finished task that left memory (``TaskBook.evict``) is read from the store, after
what was recorded so far is written (``_stored``); without a store only its status is
kept: ``stats()`` counts it, a read of anything else raises TaskEvicted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from chongming_nb.control.attempts import Attempts
from chongming_nb.control.book import TaskBook, TaskEntry, history_row, status_event, transitions
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.events import Event, TaskStatusChanged
from chongming_nb.core.models import AttemptRecord, TaskSnapshot, Transition
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.core.validation import check_int64, check_seconds
from chongming_nb.stores.memory import matches
from chongming_nb.stores.protocol import DROPPED_STREAM, LogRecord, TaskQuery, dropped_marker

if TYPE_CHECKING:
    import pandas as pd

    from chongming_nb.stores.protocol import TaskStore

log = logging.getLogger("chongming_nb.controller")

#: How long ``logs()`` of an ended task waits for its queued lines to reach the store.
LOG_READ_WAIT = 10.0

#: Snapshots read per store page when looking for evicted tasks.
_PAGE = 1_000

#: The records of one task a DataFrame reads (attempts, history rows).
R = TypeVar("R")

#: A status filter: one status, a status value, or several.
StatusFilter = TaskStatus | str | Iterable[TaskStatus | str] | None


class TaskLister:
    """``list_tasks``, the task filters of the Controller (which asks its ``Queries``),
    the ``StoreReader`` and the widgets' ``FakeController``, stated once: each gives the
    snapshots of its own tasks that match (``_matching``)."""

    __slots__ = ()

    def list_tasks(
        self,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        tag: str | None = None,
        name_prefix: str | None = None,
        pipeline_run_id: str | None = None,
        limit: int | None = None,
        ids: Iterable[str] | None = None,
    ) -> list[TaskSnapshot]:
        """Snapshots, newest first, filtered."""
        statuses = status_set(status)
        if limit is not None and (check_int64("limit", limit) < 0):
            raise ConfigurationError(f"limit must be an int >= 0, got {limit!r}")
        query = TaskQuery(statuses, tag, name_prefix, pipeline_run_id, limit=limit)
        return self._matching(query, None if ids is None else list(ids))

    def _matching(self, query: TaskQuery, ids: list[str] | None) -> list[TaskSnapshot]:
        """The snapshots that match ``query`` (at most ``query.limit``), newest first;
        only those of ``ids`` when they are given."""
        raise NotImplementedError  # pragma: no cover - abstract


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Queries(TaskLister):
    book: TaskBook
    attempts: Attempts

    def get(self, task_id: object) -> TaskSnapshot:
        self.attempts.catch_up()
        book = self.book
        with book.lock:
            t = book.entry(task_id)
            if t is not None:
                snap = t.snap
                if t.live is not None and t.exec_attempt:
                    snap = snap.evolve(progress=book.live_progress(t))
                return snap
        store, tid = self._stored(task_id, "its snapshot")
        snap = store.get(tid)
        if snap is None:
            raise book.missing(tid, "its snapshot is no longer in the store (pruned)")
        return snap

    def _stored(self, task_id: object, what: str) -> tuple[TaskStore, str]:
        """The store and id of a task that left memory, once everything recorded so far
        is written; TaskEvicted without a store, TaskNotFound for an unknown id."""
        book = self.book
        tid = getattr(task_id, "id", task_id)
        store = book.store
        if not isinstance(tid, str) or tid not in book.departed:
            raise book.missing(tid, "")
        if store is None:
            raise book.missing(tid, f"{what} is not kept: {_NO_STORE}")
        book.flush_outbox()
        book.bus.flush()
        return store, tid

    def _matching(self, query: TaskQuery, ids: list[str] | None) -> list[TaskSnapshot]:
        self.attempts.catch_up()
        book = self.book
        limit = query.limit
        with book.lock:
            tasks = book.tasks
            if ids is not None:
                pool = [tasks[i] for i in ids if i in tasks]
            else:
                pool = list(tasks.values())
            # (the tasks that left memory are all finished: a query of live statuses
            # never reads the store)
            gone = (
                len(book.departed) > 0
                and book.store is not None
                and (query.status is None or not query.status.isdisjoint(TERMINAL))
            )
            out: list[TaskSnapshot] = []
            for t in reversed(pool):
                s = t.snap
                if not matches(query, s):
                    continue
                if t.live is not None and t.exec_attempt:
                    s = s.evolve(progress=book.live_progress(t))
                out.append(s)
                if limit is not None and len(out) >= limit:
                    break
        if not gone or limit == 0:
            return out
        more = self._departed_snapshots(query, limit, ids)
        if not more:
            return out
        # newest first by creation, as the memory's order
        out = sorted([*out, *more], key=_created, reverse=True)
        return out if limit is None else out[:limit]

    def _departed_snapshots(
        self, query: TaskQuery, limit: int | None, ids: list[str] | None
    ) -> list[TaskSnapshot]:
        """The snapshots in the store of this controller's tasks that left memory and
        match ``query``, newest first (at most ``limit``)."""
        book = self.book
        store = book.store
        assert store is not None
        departed = book.departed
        wanted = None if ids is None else frozenset(i for i in ids if i in departed)
        if wanted is not None and not wanted:
            return []  # (the common case of a widget's refresh: no store read)
        book.flush_outbox()
        book.bus.flush()
        if wanted is not None:
            return store.query(_with(query, ids=wanted, limit=limit))
        out: list[TaskSnapshot] = []
        after: str | None = None
        page = _with(query, limit=_PAGE if limit is None else max(limit, _PAGE))
        while True:
            rows, after = store.page(page, after=after)
            out.extend(s for s in rows if s.task_id in departed)
            if after is None or (limit is not None and len(out) >= limit):
                return out if limit is None else out[:limit]

    def stats(self, **filters: Any) -> dict[str, int]:
        given = {k: v for k, v in filters.items() if v is not None}
        if set(given) - {"status"}:
            counts = dict.fromkeys((s.value for s in TaskStatus), 0)
            for s in self.list_tasks(**filters):
                counts[s.status.value] += 1
            return counts
        # every task (of these statuses): the ones in memory and the counts of those
        # that left it, store or not, without reading the store
        statuses = status_set(given.get("status"))
        self.attempts.catch_up()
        book = self.book
        with book.lock:
            counts = {s.value: n for s, n in book.departed.counts.items()}
            for t in book.tasks.values():
                counts[t.snap.status.value] += 1
        if statuses is not None:
            counts = {k: n if TaskStatus(k) in statuses else 0 for k, n in counts.items()}
        return counts

    def history(self, task_id: object) -> list[Transition]:
        with self.book.lock:
            t = self.book.entry(task_id)
            if t is not None:
                return transitions(t.snap.task_id, t.history)
        store, tid = self._stored(task_id, "its history")
        return store.history(tid)

    def events(
        self, task_id: object, since: datetime | None, types: Iterable[type[Event]] | None
    ) -> list[Event]:
        """``Controller.events`` (which states the defaults)."""
        with self.book.lock:
            t = self.book.task(task_id, _EVENTS if self.book.store else _NO_STORE)
            evs: list[Event] = [
                status_event(tr, f"{tr.task_id}:v{tr.version}")
                for tr in transitions(t.snap.task_id, t.history)
            ]
            evs.extend(t.extra_events or ())
        evs.sort(key=lambda e: e.at)
        if since is not None:
            evs = [e for e in evs if e.at >= since]
        if types is not None:
            tt = tuple(types)
            evs = [e for e in evs if isinstance(e, tt)]
        return evs

    def attempts_of(self, task_id: object) -> list[AttemptRecord]:
        with self.book.lock:
            t = self.book.entry(task_id)
            if t is not None:
                return list(t.attempts)
        store, tid = self._stored(task_id, "its attempts")
        return store.attempts(tid)

    def logs(self, task_id: object, limit: int | None = None) -> list[LogRecord]:
        book = self.book
        with book.lock:
            t = book.entry(task_id)
            if t is not None:
                in_store = t.logs_in_store
                lines = list(t.logs or ())
                dropped = t.log_dropped
        if t is None:
            store, tid = self._stored(task_id, "its log")
            return store.logs(tid, limit=limit)
        if in_store and book.store is not None:
            # an ended task: the kernel let go of its log, the store has it (once what is
            # queued is written); its short tail below answers when the store cannot
            book.flush_outbox()
            book.bus.flush(LOG_READ_WAIT)
            try:
                return list(book.store.logs(t.snap.task_id, limit=limit or None))
            except Exception as exc:
                log.warning("reading the log of %s from the store failed: %s", t.snap.task_id, exc)
        kept = len(lines)
        if limit:
            lines = lines[-limit:]
        if dropped and (not limit or limit > kept):
            # said out loud: a marker line first, as the store and the CLI show it
            at = lines[0].at if lines else self.book.clock.now()
            lines.insert(0, LogRecord(at, DROPPED_STREAM, dropped_marker(dropped)))
        return lines

    def result(self, task_id: object) -> Any:
        with self.book.lock:
            return self.book.task(task_id, _RESULT).result

    def exception(self, task_id: object) -> BaseException | None:
        with self.book.lock:
            return self.book.task(task_id, _RESULT).exception

    def running(self, task_id: object) -> bool:
        with self.book.lock:
            t = self.book.entry(task_id)
            if t is None:
                if getattr(task_id, "id", task_id) in self.book.departed:
                    return False  # an evicted task's execution is over
                raise self.book.missing(task_id, "")
            h = t.handle or t.abandoned
            return bool(h is not None and h.running)

    def graph(self) -> dict[str, Any]:
        with self.book.lock:
            tasks = self.book.tasks.values()
            nodes = [
                {
                    "id": t.snap.task_id,
                    "name": t.snap.name,
                    "status": t.snap.status.value,
                    "pipeline_run_id": t.snap.pipeline_run_id,
                }
                for t in tasks
            ]
            edges = [(d, t.snap.task_id) for t in tasks for d in t.deps]
        return {"nodes": nodes, "edges": edges}

    # ------------------------------------------------------------- waiting

    def wait(self, task_id: object, timeout: float | None = None) -> TaskSnapshot:
        check_seconds("timeout", timeout)
        book = self.book
        attempts = self.attempts
        # (lock-free: what the lookup finds is looked at under the lock below)
        t_or_none = book.entry(task_id)
        if t_or_none is None:
            return self.get(task_id)  # finished and left memory (or TaskNotFound)
        t = t_or_none
        # real time, like the Condition underneath (a FakeClock does not move by itself)
        deadline = None if timeout is None else time.monotonic() + timeout
        pending_starts, pending_finishes = attempts.pending_starts, attempts.pending_finishes

        def woken() -> bool:
            # also wake for reports a worker queued because this thread held the lock:
            # they are settled below, not left to the dispatcher's tick
            return t.snap.status in TERMINAL or bool(pending_finishes or pending_starts)

        while True:
            # Reports queued while this thread held the lock (a worker never waits for
            # it) are settled here, and what they free is launched, before looking.
            attempts.catch_up()
            with book.lock:
                done = t.snap.status in TERMINAL
                if done:
                    if t.live is None or not t.exec_attempt:
                        snap = t.snap  # what get() returns, without taking the lock again
                        break
                    snap = None
                    break
                if pending_finishes or pending_starts:
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    snap = None
                    break
                awaited = book.awaited
                awaited[t] = awaited.get(t, 0) + 1
                try:
                    book.terminal.wait_for(woken, left)
                finally:
                    if awaited[t] == 1:
                        del awaited[t]
                    else:
                        awaited[t] -= 1
        if pending_finishes or pending_starts:
            attempts.catch_up()  # queued while this thread held the lock above
        if done and snap is not None:
            return snap
        if not done:
            raise TimeoutError(
                f"task {t.snap.task_id} ({t.snap.name}) still {t.snap.status} after {timeout}s"
            )
        return self.get(task_id)

    def wait_settled(
        self, task_id: object, transient: set[TaskStatus], timeout: float
    ) -> TaskSnapshot:
        """Wait (really: on a condition, woken by status changes) until the task leaves
        ``transient`` states."""
        book = self.book
        t = book.task(task_id)  # a verb's task: in memory
        ev = threading.Event()

        def on(e: Event) -> None:
            if e.task_id == t.snap.task_id:
                ev.set()

        unsub = book.bus.subscribe(on, (TaskStatusChanged,))
        try:
            deadline = book.clock.monotonic() + timeout
            while t.snap.status in transient:
                left = deadline - book.clock.monotonic()
                if left <= 0:
                    break
                ev.wait(min(left, 0.5))
                ev.clear()
        finally:
            unsub()
        return self.get(task_id)

    # ---------------------------------------------------------- DataFrames

    def snapshots_df(self, **filters: Any) -> pd.DataFrame:
        from chongming_nb.frames import between, snapshots_frame

        since, until = filters.pop("since", None), filters.pop("until", None)
        return between(snapshots_frame(self.list_tasks(**filters)), "created_at", since, until)

    def attempts_df(self, **filters: Any) -> pd.DataFrame:
        from chongming_nb.frames import attempts_frame, between

        since, until = filters.pop("since", None), filters.pop("until", None)
        snaps = self.list_tasks(**filters)
        per_task = self._per_task(snaps, lambda t: list(t.attempts), self.attempts_of)
        recs = [rec for _, recs in per_task for rec in recs]
        return between(attempts_frame(recs, _names(snaps)), "started_at", since, until)

    def transitions_df(self, **filters: Any) -> pd.DataFrame:
        from chongming_nb.frames import between, history_rows_frame

        since, until = filters.pop("since", None), filters.pop("until", None)
        snaps = self.list_tasks(**filters)
        # the history rows themselves (immutable tuples; a list copy per task)
        per_task = self._per_task(snaps, lambda t: list(t.history), self._history_rows)
        tasks = [(s.task_id, rows) for s, rows in per_task]
        return between(history_rows_frame(tasks, _names(snaps)), "at", since, until)

    def _per_task(
        self,
        snaps: list[TaskSnapshot],
        kept: Callable[[TaskEntry], list[R]],
        stored: Callable[[str], list[R]],
    ) -> list[tuple[TaskSnapshot, list[R]]]:
        """Each of ``snaps`` (newest first), oldest first, with its records: ``kept(entry)``
        copied under the lock for a task in memory, ``stored(task_id)`` for one that left."""
        with self.book.lock:
            tasks = self.book.tasks
            held = {s.task_id: kept(t) for s in snaps if (t := tasks.get(s.task_id)) is not None}
        return [
            (s, held[s.task_id] if s.task_id in held else stored(s.task_id))
            for s in reversed(snaps)
        ]

    def _history_rows(self, task_id: str) -> list[tuple[Any, ...]]:
        """An evicted task's transitions from the store, as a history keeps them."""
        return [history_row(tr) for tr in self.history(task_id)]


def _names(snaps: list[TaskSnapshot]) -> dict[str, str]:
    return {s.task_id: s.name for s in snaps}


#: What is not kept of an evicted task (TaskEvicted says it).
_RESULT = "its result is not kept"
_EVENTS = "its events are in the store: ctl.store.events(task_id)"
_NO_STORE = "only its status is kept without a store"


def _created(s: TaskSnapshot) -> tuple[datetime, str]:
    # (this controller's ids sort in creation order: they break a tie of times)
    return s.created_at or _EPOCH, s.task_id


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _with(query: TaskQuery, **changes: Any) -> TaskQuery:
    return dataclasses.replace(query, **changes)


def status_set(status: StatusFilter) -> frozenset[TaskStatus] | None:
    """A status filter as a set of statuses (None: no filter); ConfigurationError
    naming the known statuses for an unknown one."""
    if status is None:
        return None
    if isinstance(status, str):
        status = [status]
    try:
        return frozenset(TaskStatus(s) for s in status)
    except ValueError as exc:
        raise ConfigurationError(
            f"{exc}; statuses are {', '.join(s.value for s in TaskStatus)}"
        ) from None

"""The live feed behind ``GET /chongming/api/feed``: long-poll over a store poller.

Kernels write the store from other processes, so the server cannot be told about
changes; it looks. One poller per server (not per client) runs while someone listens:

* every ``interval`` it reads ``counts()`` (sub-millisecond) and the non-terminal tasks
  (the ones whose progress moves between status changes);
* when the counts changed, or every ``full_every`` polls, it reads the newest ``window``
  tasks, which also finds tasks that finished between polls and ones pruned away.

Each poll that finds a difference (status version, progress, attempt, owner) raises a
sequence number ``seq``; every known task remembers the ``seq`` of its last change.
``wait(since, timeout)`` answers at once with the tasks changed after ``since``, or holds
the request until the next change or the timeout. A client whose ``since`` is 0, newer
than ``seq`` (the server restarted) or older than what is remembered gets ``reset`` and
the full list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from chongming_nb.core.models import TaskSnapshot
from chongming_nb.core.states import NON_TERMINAL, TaskStatus
from chongming_nb.stores.protocol import TaskQuery

log = logging.getLogger("chongming_nb.server.feed")

Fingerprint = tuple[Any, ...]

#: Removed ids remembered for clients that are behind; older ones force a reset.
MAX_REMOVED = 10_000


def fingerprint(s: TaskSnapshot) -> Fingerprint:
    p = s.progress
    prog = None if p is None else (p.done, p.total, p.unit, p.message)
    return (s.status_version, s.status, prog, s.attempt, s.lease_owner, s.requested_action)


@dataclass
class FeedAnswer:
    cursor: int
    reset: bool
    tasks: list[TaskSnapshot] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: tasks per status in the whole store at the last poll (the sidebar's counts)
    counts: dict[TaskStatus, int] = field(default_factory=dict)


Reader = Callable[[Callable[[], Any]], Awaitable[Any]]


@dataclass(eq=False)
class Feed:
    """Change tracking for one server. ``read(fn)`` runs a blocking store call off the
    event loop (the server passes its store executor)."""

    store: Callable[[], Any]
    read: Reader
    _: KW_ONLY
    window: int = 2000
    interval: float = 0.25
    full_every: int = 20
    idle_after: float = 60.0
    monotonic: Callable[[], float] = time.monotonic
    #: which of the polled tasks lost their kernel (server.liveness): part of a task's
    #: fingerprint, so a kernel restart reaches the sidebar within a poll
    gone: Callable[[list[TaskSnapshot]], set[str]] | None = None

    def __post_init__(self) -> None:
        self.seq = 0
        self.polls = 0
        self._floor = 0
        self._rows: dict[str, tuple[int, Fingerprint, TaskSnapshot]] = {}
        self._removed: dict[str, int] = {}
        self._counts: dict[TaskStatus, int] | None = None
        self._since_full = 0
        self._waiters: set[asyncio.Future[None]] = set()
        self._nudge: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_request = 0.0
        self._lock: asyncio.Lock | None = None

    # ------------------------------------------------------------ polling

    def _scan(self, full: bool) -> tuple[dict[TaskStatus, int], list[TaskSnapshot], bool, set[str]]:
        store = self.store()
        counts = store.counts()
        if not full and self._counts is not None and counts != self._counts:
            full = True
        if full:
            snaps = list(store.query(TaskQuery(limit=self.window)))
            seen = {s.task_id for s in snaps}
            active = store.query(TaskQuery(status=frozenset(NON_TERMINAL)))
            snaps.extend(s for s in active if s.task_id not in seen)
        else:
            snaps = store.query(TaskQuery(status=frozenset(NON_TERMINAL)))
            # tasks that were active and are no longer: fetch their final state
            known_active = {
                tid for tid, (_, _, s) in self._rows.items() if s.status in NON_TERMINAL
            }
            gone = known_active - {s.task_id for s in snaps}
            if gone:
                snaps.extend(store.query(TaskQuery(ids=frozenset(gone))))
        lost_kernel: set[str] = set()
        if self.gone is not None:
            try:
                lost_kernel = self.gone([s for s in snaps if s.status in NON_TERMINAL])
            except Exception:
                log.exception("chongming feed: checking the owning kernels failed")
        return counts, snaps, full, lost_kernel

    async def poll_once(self, *, full: bool = False) -> bool:
        """One look at the store; True if something changed (``seq`` then grew)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            want_full = full or self._counts is None or self._since_full >= self.full_every
            counts, snaps, was_full, lost_kernel = await self.read(lambda: self._scan(want_full))
            self.polls += 1
            self._since_full = 0 if was_full else self._since_full + 1
            self._counts = counts
            seq = self.seq + 1
            changed = False
            for s in snaps:
                fp = (*fingerprint(s), s.task_id in lost_kernel)
                old = self._rows.get(s.task_id)
                if old is None or old[1] != fp:
                    self._rows[s.task_id] = (seq, fp, s)
                    self._removed.pop(s.task_id, None)
                    changed = True
            if was_full:
                present = {s.task_id for s in snaps}
                for tid in [t for t in self._rows if t not in present]:
                    del self._rows[tid]
                    self._removed[tid] = seq
                    changed = True
                if len(self._removed) > MAX_REMOVED:
                    ordered = sorted(self._removed.items(), key=lambda kv: kv[1])
                    drop = ordered[: len(ordered) - MAX_REMOVED]
                    for tid, _ in drop:
                        del self._removed[tid]
                    self._floor = max(self._floor, drop[-1][1])
            if changed:
                self.seq = seq
                self._wake()
            return changed

    def _wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def _loop(self) -> None:
        assert self._nudge is not None
        while self._waiters or self.monotonic() - self._last_request < self.idle_after:
            try:
                await self.poll_once()
            except Exception:
                log.exception("chongming feed: reading the store failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), self.interval)
            self._nudge.clear()
        self._task = None

    def _ensure_running(self) -> None:
        self._last_request = self.monotonic()
        if self._nudge is None:
            self._nudge = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    def nudge(self) -> None:
        """Look again soon (after a command was queued: its effect follows quickly)."""
        if self._nudge is not None:
            self._nudge.set()

    async def close(self) -> None:
        task, self._task = self._task, None
        self._wake()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------ clients

    async def primed(self) -> int:
        """The current cursor, after at least one poll."""
        if self.seq == 0 and self.polls == 0:
            await self.poll_once(full=True)
        self._ensure_running()
        return self.seq

    def changes(self, since: int) -> FeedAnswer:
        counts = dict(self._counts or {})
        if since <= 0 or since > self.seq or since < self._floor:
            rows = sorted(self._rows.values(), key=lambda r: r[0])
            return FeedAnswer(self.seq, True, [s for _, _, s in rows], counts=counts)
        tasks = [s for seq, _, s in self._rows.values() if seq > since]
        removed = [tid for tid, seq in self._removed.items() if seq > since]
        return FeedAnswer(self.seq, False, tasks, removed, counts)

    async def wait(self, since: int, timeout: float) -> FeedAnswer:
        """Changes after ``since``; holds up to ``timeout`` seconds while there are none."""
        await self.primed()
        answer = self.changes(since)
        if answer.reset or answer.tasks or answer.removed or timeout <= 0:
            return answer
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, timeout)
        finally:
            self._waiters.discard(fut)
            self._last_request = self.monotonic()
        return self.changes(since)

"""Admission: which queued task may take a slot next.

Owns (under ``TaskBook.lock``): the ready heap (priority, then submission order), the
slot counts (all, per tag, per bucket) and the pipeline runs' scheduling state (extra
tag limits, held runs and their parked entries, statuses that hold a run at once).
A task holds a slot from STARTING until its execution ends or is abandoned, pause
included (pause does not free a slot).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.policies import BucketPolicy, ConcurrencyPolicy
from chongming_nb.core.states import TaskStatus

L = TypeVar("L")

#: A ready-heap entry: (-priority, submission sequence, task id).
ReadyItem = tuple[int, int, str]


def concurrency_policy(
    concurrency: ConcurrencyPolicy | None, max_parallel: int | None
) -> ConcurrencyPolicy:
    """The Controller's ``concurrency=`` / ``max_parallel=`` as one policy (default: a
    ConcurrencyPolicy()); ConfigurationError for both, or for something else."""
    if max_parallel is not None:
        if concurrency is not None:
            raise ConfigurationError(
                "give max_parallel or concurrency, not both (max_parallel is "
                "concurrency=ConcurrencyPolicy(max_parallel=...))"
            )
        return ConcurrencyPolicy(max_parallel=max_parallel)
    if concurrency is not None and not isinstance(concurrency, ConcurrencyPolicy):
        raise ConfigurationError(f"concurrency must be a ConcurrencyPolicy, got {concurrency!r}")
    return concurrency or ConcurrencyPolicy()


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Admission:
    book: TaskBook
    concurrency: ConcurrencyPolicy
    buckets: BucketPolicy | None
    ready: list[ReadyItem] = dataclasses.field(init=False, default_factory=list)
    _seq: Iterator[int] = dataclasses.field(init=False, default_factory=itertools.count)
    running: int = dataclasses.field(init=False, default=0)
    # ctx.sleep: woken sleepers waiting for a slot (they go before queued tasks),
    # and the condition they wait on (a condition of the book's lock)
    waking: int = dataclasses.field(init=False, default=0)
    slot_freed: threading.Condition = dataclasses.field(init=False)
    tag_use: Counter[str] = dataclasses.field(init=False, default_factory=Counter)
    bucket_use: Counter[int] = dataclasses.field(init=False, default_factory=Counter)
    # pipeline runs (control/pipeline/): extra tag limits, held runs whose queued
    # tasks are parked instead of dispatched, and statuses that hold a run at once
    run_limits: dict[str, int] = dataclasses.field(init=False, default_factory=dict)
    held_runs: set[str] = dataclasses.field(init=False, default_factory=set)
    parked: dict[str, list[ReadyItem]] = dataclasses.field(init=False, default_factory=dict)
    hold_on: dict[str, frozenset[TaskStatus]] = dataclasses.field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.slot_freed = threading.Condition(self.book.lock)

    def enqueue(self, t: TaskEntry) -> None:
        """Under the lock, for a task just made QUEUED."""
        heapq.heappush(self.ready, (-t.snap.priority, next(self._seq), t.snap.task_id))

    def bucket_for(self, bucket_key: str | None) -> int | None:
        if bucket_key is None or self.buckets is None:
            return None
        return self.buckets.bucket_for(bucket_key)

    def fits(self, t: TaskEntry) -> bool:
        pol = self.concurrency
        for tag in t.snap.tags:
            lim = pol.limits.get(tag) or self.run_limits.get(tag)
            if lim is not None and self.tag_use[tag] >= lim:
                return False
        b = t.snap.bucket
        return not (
            pol.per_bucket is not None and b is not None and self.bucket_use[b] >= pol.per_bucket
        )

    def take_slot(self, t: TaskEntry) -> None:
        if t.executor is not None and getattr(t.executor, "takes_slot", True) is False:
            return  # a loop in a cell (control/loops.py): it runs in its caller's thread
        t.holds_slot = True
        self.running += 1
        for tag in t.snap.tags:
            if tag in self.concurrency.limits or tag in self.run_limits:
                self.tag_use[tag] += 1
        if t.snap.bucket is not None:
            self.bucket_use[t.snap.bucket] += 1

    def free_slot(self, t: TaskEntry) -> None:
        if not t.holds_slot:
            return
        t.holds_slot = False
        self.running -= 1
        if self.waking:
            self.slot_freed.notify_all()
        for tag in t.snap.tags:
            if tag in self.concurrency.limits or tag in self.run_limits:
                self.tag_use[tag] -= 1
        if t.snap.bucket is not None:
            self.bucket_use[t.snap.bucket] -= 1

    def admit(self, start: Callable[[TaskEntry], L]) -> list[L]:
        """Under the lock: ``start(t)`` for each queued task that may start now, best
        first, and what each call returned. ``start`` takes the task's slot
        (``take_slot``) before the next task is looked at."""
        ready = self.ready
        tasks = self.book.tasks
        limit = self.concurrency.max_parallel
        started: list[L] = []
        skipped: list[ReadyItem] = []
        try:
            while ready and self.running + self.waking < limit:
                item = heapq.heappop(ready)
                t = tasks.get(item[2])
                if t is None or t.snap.status is not TaskStatus.QUEUED:
                    continue  # stale entry (paused, stopped, skipped meanwhile)
                run = t.snap.pipeline_run_id
                if run is not None and run in self.held_runs:
                    self.parked.setdefault(run, []).append(item)
                    continue
                if not self.fits(t):
                    skipped.append(item)  # no head-of-line blocking: look further
                    continue
                started.append(start(t))
        finally:
            for item in skipped:
                heapq.heappush(ready, item)
        return started

    def note_status(self, t: TaskEntry) -> None:
        """After a status change: hold the task's run if its status says so (e.g.
        fail-fast: nothing of the run starts any more)."""
        run = t.snap.pipeline_run_id
        if run is not None and t.snap.status in self.hold_on.get(run, ()):
            self.held_runs.add(run)

    # ------------------------------------------------------------ pipeline runs
    # (callers do not hold the lock: these take it)

    def hold_run(self, run_id: str, held: bool) -> None:
        with self.book.lock:
            if held:
                self.held_runs.add(run_id)
                return
            self.held_runs.discard(run_id)
            self._unpark(run_id)

    def hold_run_on(self, run_id: str, statuses: Iterable[TaskStatus | str]) -> None:
        hold_on = frozenset(TaskStatus(s) for s in statuses)
        with self.book.lock:
            self.hold_on[run_id] = hold_on

    def set_run_limit(self, tag: str, limit: int | None) -> None:
        with self.book.lock:
            if limit is None:
                self.run_limits.pop(tag, None)
            else:
                self.run_limits[tag] = int(limit)

    def forget_run(self, run_id: str) -> None:
        with self.book.lock:
            self.held_runs.discard(run_id)
            self.hold_on.pop(run_id, None)
            self._unpark(run_id)

    def _unpark(self, run_id: str) -> None:
        for item in self.parked.pop(run_id, ()):
            heapq.heappush(self.ready, item)

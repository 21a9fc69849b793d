"""Timers: the deadlines the dispatcher thread fires (``dispatcher.Dispatcher``).

Owns (under ``TaskBook.lock``) one heap of ``(deadline, sequence, kind, task id,
marker)``. The marker says which incarnation of the task the timer was armed for (a
status version or an attempt number): a timer whose marker no longer matches is stale
and does nothing when it fires.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import itertools
from collections.abc import Iterator
from typing import Protocol, overload

from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.validation import check_seconds
from chongming_nb.runtime import timeouts


class TimerKind(enum.Enum):
    RETRY = "retry"  # RETRY_WAIT's backoff elapsed (marker: status version)
    PAUSE = "pause"  # the pause window ran out (marker: status version)
    STOP = "stop"  # the stop window ran out (marker: attempt)
    TIMEOUT = "timeout"  # look at the task's timeouts again (marker: attempt)
    WAKE = "wake"  # a ctx.sleep ends (marker: attempt)
    START = "start"  # a delayed start's time came (marker: status version)


#: How often the dispatcher wakes at the latest (heartbeats, store commands); also how
#: often a woken sleeper waiting for a slot looks again.
TICK_SECONDS = 0.05


#: (monotonic deadline, sequence, kind, task id, marker)
Timer = tuple[float, int, TimerKind, str, int]


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class TimerQueue:
    """The timer heap, and the default windows: ``stop_grace`` (a stop's, and a fired
    timeout's, stop window) and ``pause_grace`` (how long a pause may take to reach a
    checkpoint before it rolls back)."""

    book: TaskBook
    stop_grace: float
    pause_grace: float
    heap: list[Timer] = dataclasses.field(init=False, default_factory=list)
    _seq: Iterator[int] = dataclasses.field(init=False, default_factory=itertools.count)

    def push(self, deadline: float, kind: TimerKind, task_id: str, marker: int) -> None:
        """Under the lock: arm a timer and wake the dispatcher."""
        heapq.heappush(self.heap, (deadline, next(self._seq), kind, task_id, marker))
        self.book.wake.notify()

    def arm_timeouts(self, t: TaskEntry) -> None:
        """Under the lock: a timer at the task's next timeout deadline, if it has any."""
        tmo = t.spec.timeout
        if tmo.start is None and tmo.per_attempt is None and tmo.idle is None:
            return  # no limits: nothing to arm (most tasks)
        hb = t.hb
        d = timeouts.next_deadline(
            tmo,
            starting_since=t.starting_since,
            started=t.started_mono,
            last_beat=hb.last_beat if hb else None,
        )
        if d is not None:
            self.push(d, TimerKind.TIMEOUT, t.snap.task_id, t.exec_attempt)

    def next_deadline(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def pop_due(self, now: float) -> list[Timer]:
        heap = self.heap
        due = []
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap))
        return due


class _HoldsTimers(Protocol):
    _timers: TimerQueue


class TimerSeconds:
    """A Controller setting in seconds that its timer queue holds under the same name
    (``stop_grace``, ``pause_grace``); a new value is checked as the constructor's
    argument is."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, ctl: None, owner: type | None = None) -> TimerSeconds: ...
    @overload
    def __get__(self, ctl: _HoldsTimers, owner: type | None = None) -> float: ...
    def __get__(self, ctl: _HoldsTimers | None, owner: type | None = None) -> float | TimerSeconds:
        return self if ctl is None else float(getattr(ctl._timers, self.name))

    def __set__(self, ctl: _HoldsTimers, seconds: float) -> None:
        checked = check_seconds(self.name, seconds)
        if checked is None:
            raise ConfigurationError(f"{self.name} is a number of seconds, not None")
        setattr(ctl._timers, self.name, checked)

"""A fake clock for tests: time moves only when you say so, and sleepers wake when it
passes their deadline (no real sleeping in tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


class FakeClock:
    """Implements the Clock protocol plus ``sleep``/``wait_until`` for the runtime.

    ``advance(seconds)`` moves both ``now()`` and ``monotonic()`` forward, wakes every
    thread blocked in ``sleep`` whose deadline has passed and calls every callback given
    to ``subscribe`` (the Controller subscribes its dispatcher, so timers such as retry
    backoff, grace windows and timeouts fire right after an ``advance``).
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._offset = 0.0
        self._cond = threading.Condition()
        self.sleepers = 0
        self._subscribers: list[Callable[[], None]] = []

    def now(self) -> datetime:
        with self._cond:
            return self._start + timedelta(seconds=self._offset)

    def monotonic(self) -> float:
        with self._cond:
            return self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._cond:
            self._offset += seconds
            self._cond.notify_all()
            subscribers = list(self._subscribers)
        # outside our lock: a callback may take its own locks and read the time
        for callback in subscribers:
            callback()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` after every ``advance``; returns an unsubscribe function."""
        if not callable(callback):
            raise TypeError(f"subscribe() needs a callable, got {callback!r}")
        with self._cond:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._cond:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def sleep(self, seconds: float) -> None:
        """Block until the fake time has moved ``seconds`` forward."""
        with self._cond:
            deadline = self._offset + seconds
            self.sleepers += 1
            self._cond.notify_all()
            try:
                while self._offset < deadline:
                    self._cond.wait()
            finally:
                self.sleepers -= 1

    def wait_for_sleepers(self, n: int = 1, timeout: float = 5.0) -> bool:
        """Real-time wait until at least ``n`` threads are blocked in ``sleep``."""
        with self._cond:
            return self._cond.wait_for(lambda: self.sleepers >= n, timeout)

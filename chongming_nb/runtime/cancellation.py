"""Cooperative cancellation: stop and pause are *requested* here and *delivered* only at
checkpoints inside the task (``CancellationToken.checkpoint``).

Invariant: ``flag`` is True exactly when a stop or a pause is pending, so the fast path
of ``checkpoint()`` is one attribute check.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from chongming_nb.core.errors import TaskCancelled


def _always() -> bool:
    return True


_COND_INIT = threading.Lock()


class CancellationToken:
    """Stop and pause signals for one attempt.

    ``on_pause_reached`` is asked when a checkpoint sees a pause request; it returns True
    to actually block (the controller confirmed PAUSED) or False when the pause was
    withdrawn meanwhile. ``on_resumed`` is told when a blocked checkpoint wakes up.
    """

    __slots__ = (
        "_cond",
        "_pause",
        "_stop",
        "beats",
        "flag",
        "on_pause_reached",
        "on_resumed",
        "paused",
        "reason",
    )

    def __init__(self) -> None:
        self.flag = False
        self.beats = 0
        self.reason: str | None = None
        self.paused = False
        self._stop = False
        self._pause = False
        # built on first use: most attempts never see a stop or a pause, and a
        # Condition costs more to build than the rest of the token
        self._cond: threading.Condition | None = None
        self.on_pause_reached: Callable[[], bool] = _always
        self.on_resumed: Callable[[], None] = lambda: None

    # --------------------------------------------------------- requests (any thread)

    @property
    def stop_requested(self) -> bool:
        return self._stop

    @property
    def pause_requested(self) -> bool:
        return self._pause

    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _COND_INIT:  # two first users at once must share one condition
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition(threading.Lock())
        return cond

    def request_stop(self, reason: str | None = None) -> None:
        cond = self._condition()
        with cond:
            if not self._stop:
                self._stop = True
                self.reason = reason
            self.flag = True
            cond.notify_all()

    def request_pause(self) -> None:
        with self._condition():
            self._pause = True
            self.flag = True

    def resume(self) -> None:
        """Withdraw a pause request and wake a checkpoint blocked in a pause."""
        cond = self._condition()
        with cond:
            self._pause = False
            self.flag = self._stop
            cond.notify_all()

    # ------------------------------------------------------ delivery (task thread)

    def checkpoint(self) -> None:
        """Return at once unless a stop (raise TaskCancelled) or pause (block) is pending."""
        self.beats += 1
        if self.flag:
            self._deliver()

    def _deliver(self) -> None:
        if self._stop:
            raise TaskCancelled(self.reason or "stop requested")
        if self._pause and self.on_pause_reached():
            cond = self._condition()
            with cond:
                self.paused = True
                try:
                    while self._pause and not self._stop:
                        cond.wait()
                finally:
                    self.paused = False
            if self._stop:
                raise TaskCancelled(self.reason or "stop requested")
            self.on_resumed()

    async def acheckpoint(self) -> None:
        """The async form: a pause suspends the coroutine without blocking its loop."""
        self.beats += 1
        if not self.flag:
            return
        if self._stop:
            raise TaskCancelled(self.reason or "stop requested")
        if self._pause and self.on_pause_reached():
            self.paused = True
            try:
                while self._pause and not self._stop:
                    await asyncio.sleep(0.005)
            finally:
                self.paused = False
            if self._stop:
                raise TaskCancelled(self.reason or "stop requested")
            self.on_resumed()

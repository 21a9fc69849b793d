"""Cooperative cancellation: stop, pause and liveness probes are *requested* here and
*delivered* only at checkpoints inside the task (``CancellationToken.checkpoint``).

Invariants:

* ``flag`` is True whenever a stop, a pause or a liveness probe is pending, so the fast
  path of ``checkpoint()`` is one attribute check and touches nothing else.
* Every write of ``flag``, ``_stop``, ``_pause`` and ``_probe`` happens under ``_lock``
  (the lock under the pause condition too), and every write of ``flag`` that may clear
  it recomputes it from the pending requests under that lock: a stop, a pause or a
  probe requested concurrently is never lost.
* ``beats`` changes only by being incremented: a consumer that sees it differ from its
  last sample has seen a sign of life. A checkpoint increments it only to answer a
  probe (``arm_probe``), so a sampler must arm a probe after each sample (see
  ``runtime/heartbeat.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from chongming_nb.core.errors import TaskCancelled


def _nothing() -> None:
    pass


def _always() -> bool:
    return True


class CancellationToken:
    """Stop and pause signals and liveness probes for one attempt.

    ``on_pause_reached`` is asked when a checkpoint sees a pause request; it returns True
    to actually block (the controller confirmed PAUSED) or False when the pause was
    withdrawn meanwhile. ``on_resumed`` is told when a blocked checkpoint wakes up.
    """

    __slots__ = (
        "_cond",
        "_lock",
        "_pause",
        "_probe",
        "_stop",
        "_wake",
        "beats",
        "flag",
        "on_pause_reached",
        "on_resumed",
        "paused",
        "reason",
        "sleeping",
    )

    def __init__(self, *, armed: bool = False) -> None:
        """``armed``: born with a liveness probe pending (what ``arm_probe`` does, without
        its lock round trip while nobody else can see the token yet)."""
        self.flag = armed
        self.beats = 0
        self.reason: str | None = None
        self.paused = False
        self.sleeping = False  # in ``sleep``: alive, though it answers no probe
        self._stop = False
        self._pause = False
        self._probe = armed
        self._wake = False
        self._lock = threading.Lock()
        # built on first use, over ``_lock``: most attempts never see a stop or a pause,
        # and a Condition costs more to build than the rest of the token
        self._cond: threading.Condition | None = None
        self.on_pause_reached: Callable[[], bool] = _always
        self.on_resumed: Callable[[], None] = _nothing

    # --------------------------------------------------------- requests (any thread)

    @property
    def stop_requested(self) -> bool:
        return self._stop

    @property
    def pause_requested(self) -> bool:
        return self._pause

    @property
    def probe_pending(self) -> bool:
        """A liveness probe is armed and no checkpoint has answered it yet."""
        return self._probe

    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with self._lock:  # two first users at once must share one condition
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition(self._lock)
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
        with self._lock:
            self._pause = True
            self.flag = True
            if self._cond is not None:  # a task in ``sleep`` returns at once
                self._cond.notify_all()

    def wake(self) -> None:
        """End the current (or the next) ``sleep`` early: the controller's timer for a
        sleeping task calls this at its wake time."""
        cond = self._condition()
        with cond:
            self._wake = True
            cond.notify_all()

    def resume(self) -> None:
        """Withdraw a pause request and wake a checkpoint blocked in a pause."""
        cond = self._condition()
        with cond:
            self._pause = False
            self.flag = self._stop or self._probe
            cond.notify_all()

    def arm_probe(self) -> None:
        """Ask for a sign of life: the next checkpoint increments ``beats`` once.

        Samplers call this after reading ``beats``; arming an armed probe is a no-op.
        """
        with self._lock:
            self._probe = True
            self.flag = True

    # ------------------------------------------------------ delivery (task thread)

    def sleep(self, timeout: float | None) -> bool:
        """Block until ``wake()``, a stop or a pause request, or ``timeout`` seconds of
        real time (None: no limit). True when a stop or a pause ended it. A ``wake()``
        that came before the call ends it at once (the waker cannot lose the race)."""
        cond = self._condition()
        with cond:
            self.sleeping = True
            try:
                cond.wait_for(lambda: self._wake or self._stop or self._pause, timeout)
                return self._stop or self._pause
            finally:
                self.sleeping = False
                self._wake = False

    def checkpoint(self) -> None:
        """Return at once unless a stop (raise TaskCancelled), a pause (block) or a
        liveness probe (answer it, then return) is pending."""
        if self.flag:
            self._deliver()

    def _answer_probe(self) -> None:
        with self._lock:
            if self._probe:
                self._probe = False
                self.beats += 1
            # recomputed under the lock request_stop/request_pause take: never loses one
            self.flag = self._stop or self._pause

    def _deliver(self) -> None:
        if self._probe:
            self._answer_probe()
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
        if not self.flag:
            return
        if self._probe:
            self._answer_probe()
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

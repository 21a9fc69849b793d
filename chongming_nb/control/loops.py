"""A loop that runs in its caller's own thread, on the controller's record.

``cn.track(...)`` in a plain cell is a task like any other: it goes through the state
machine, shows in boards, the sidebar and ``chongming ps``, and can be paused and stopped
from all of them. What differs is who runs it: nobody. The controller "launches" it
through :class:`LoopExecutor`, which runs nothing; it hands the attempt's token and
reporter to the loop, and the loop (the cell's code, in the cell's thread) reads the
token's flags at each item boundary and reports its progress and its end.

Invariants:

* A loop's task takes no concurrency slot (``LoopExecutor.takes_slot``) and is launched
  at once, in the caller's thread, even when every slot is busy: the loop is already
  running, a queue cannot hold it back.
* Requests only set flags (``CancellationToken``); they are delivered at an item
  boundary by the loop's own thread, never in the middle of an item.
* A loop runs again only when its cell runs again: retry and reset are refused
  (``LoopExecutor.refuse``), and a stop window that runs out abandons nothing — the
  loop's thread is the caller's, and it reports at its next boundary.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.states import TaskStatus
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors._local import TokenHandle
from chongming_nb.runtime.executors.base import (
    ExecutionRequest,
    Outcome,
    Reporter,
    StopVerdict,
    failed_outcome,
)

if TYPE_CHECKING:
    from chongming_nb.control.controller import Controller

__all__ = ["LOOP_EXECUTOR", "LoopExecutor", "LoopRecord"]

_NO_REPLAY = "a loop in a cell runs again only when its cell runs again"


class _LoopBody:
    """The task's target. Never called: the loop's own code is the body."""

    __slots__ = ("handle", "ready", "reporter", "used")

    def __init__(self) -> None:
        self.handle: LoopHandle | None = None
        self.reporter: Reporter | None = None
        self.ready = threading.Event()
        self.used = False

    def __call__(self) -> None:
        raise ConfigurationError(_NO_REPLAY)


def _nothing() -> None:
    pass


class LoopHandle(TokenHandle):
    """The execution handle of a loop: requests become token flags, then ``wake`` (set
    by the loop) ends the loop's current batch so the flags are read before the next
    item."""

    __slots__ = ("_running", "wake")

    def __init__(self, token: CancellationToken) -> None:
        super().__init__(token)
        self._running = True
        self.wake: Callable[[], None] = _nothing

    @property
    def running(self) -> bool:
        return self._running

    def request_stop(self, reason: str | None = None) -> None:
        self.token.request_stop(reason)
        self.wake()  # after the flag: see notebook/track.py

    def request_pause(self) -> None:
        self.token.request_pause()
        self.wake()

    def on_stop_timeout(self) -> StopVerdict:
        # the loop's thread is its caller's: nothing to abandon; it reports its end at
        # the next item boundary (an item may take longer than the stop window)
        return "gone"


class LoopExecutor:
    """Runs nothing: hands each attempt to the loop that asked for it."""

    name = "loop"
    #: read by the controller's slot accounting: a loop holds no concurrency slot
    takes_slot = False
    #: read by the launcher: a loop's launch is never held for the store (its work is
    #: the cell's own code, which runs whatever the store says)
    fenced_start = False

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> LoopHandle:
        body = request.target
        if not isinstance(body, _LoopBody) or body.used:
            raise ConfigurationError(_NO_REPLAY)
        body.used = True
        token = CancellationToken()
        token.on_pause_reached = reporter.pause_reached
        token.on_resumed = reporter.resumed
        handle = LoopHandle(token)
        body.handle = handle
        body.reporter = reporter
        reporter.started()
        body.ready.set()
        return handle

    @staticmethod
    def refuse(verb: str) -> str | None:
        """Why the controller must refuse ``verb`` for a loop's task (None: allowed)."""
        return _NO_REPLAY if verb in ("retry", "reset") else None

    def shutdown(self) -> None:
        pass


LOOP_EXECUTOR = LoopExecutor()


class LoopRecord:
    """One tracked loop's task: started on construction, ended by one ``finish_*``."""

    __slots__ = ("_ended", "ctl", "handle", "reporter", "task_id", "token")

    def __init__(
        self,
        ctl: Controller,
        name: str,
        total: float | None,
        unit: str | None,
        tags: Any = None,
    ) -> None:
        body = _LoopBody()
        h = ctl.submit(body, name=name, tags=tags, executor=LOOP_EXECUTOR)
        self.ctl = ctl
        self.task_id: str = h.id
        _launch_now(ctl, h.id)
        # launched here (or, raced, by a pump on another thread a moment ago)
        if not body.ready.wait(10.0):
            raise ConfigurationError(f"the loop's task {h.id} did not start")
        assert body.handle is not None and body.reporter is not None
        self.handle: LoopHandle = body.handle
        self.reporter: Reporter = body.reporter
        self.token: CancellationToken = body.handle.token
        self._ended = False
        self.reporter.progress(0, total, unit, None)

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def status(self) -> TaskStatus:
        return self.ctl.get(self.task_id).status

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        self.reporter.progress(done, total, None, message)

    def _finish(self, outcome: Outcome) -> None:
        if self._ended:
            return
        self._ended = True
        self.handle._running = False
        self.reporter.finished(outcome)

    def finish_succeeded(self, done: float) -> None:
        if not self._ended:
            self.reporter.progress(done, None, None, None)
        self._finish(Outcome("succeeded"))

    def finish_stopped(self, done: float, reason: str, *, actor: str = "loop") -> None:
        """The loop honoured a stop at a boundary (or a KeyboardInterrupt ended it:
        ``actor="interrupt"``). If nobody asked this task to stop (an interrupt, or its
        outer loop was stopped), the stop is requested here first, so the record says
        who stopped it (an interrupt names itself: no reason repeats it)."""
        if self._ended:
            return
        self.reporter.progress(done, None, None, None)
        if not self.token.stop_requested:
            with contextlib.suppress(Exception):  # ending another way: its end stands
                self.ctl.stop(
                    self.task_id, actor=actor, reason=None if actor == "interrupt" else reason
                )
        self._finish(Outcome("cancelled", message=reason, exception_type="TaskCancelled"))

    def finish_failed(self, done: float, exc: BaseException) -> None:
        if self._ended:
            return
        self.reporter.progress(done, None, None, None)
        self._finish(failed_outcome(exc))


def _launch_now(ctl: Controller, task_id: str) -> None:
    """Launch a loop's task now, in this thread, if the scheduler left it queued (every
    slot busy)."""
    ctl._launch_now(task_id)

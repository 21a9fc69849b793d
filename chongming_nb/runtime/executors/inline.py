"""InlineExecutor: runs the attempt synchronously in the launching thread.

Deterministic and cheap, for tests and micro-steps. It cannot be paused (a pause would
block the very thread that would have to resume it), and says so: ``supports_pause`` is
False and the controller rolls a pause request back with a warning.
"""

from __future__ import annotations

from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors._local import TokenHandle
from chongming_nb.runtime.executors.base import (
    ExecutionRequest,
    Reporter,
    StopVerdict,
    run_attempt,
)


class InlineHandle(TokenHandle):
    __slots__ = ("_running",)

    def __init__(self, token: CancellationToken) -> None:
        super().__init__(token)
        self._running = True

    @property
    def running(self) -> bool:
        return self._running

    @property
    def supports_pause(self) -> bool:
        return False

    def request_pause(self) -> None:
        pass  # see the module docstring

    def on_stop_timeout(self) -> StopVerdict:
        return "abandoned" if self._running else "gone"


class InlineExecutor:
    name = "inline"

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> InlineHandle:
        handle = InlineHandle(CancellationToken())
        self.run(handle, request, reporter)
        return handle

    @staticmethod
    def run(handle: InlineHandle, request: ExecutionRequest, reporter: Reporter) -> None:
        outcome = run_attempt(request, handle.token, reporter)
        handle._running = False
        reporter.finished(outcome)

    def shutdown(self) -> None:
        pass

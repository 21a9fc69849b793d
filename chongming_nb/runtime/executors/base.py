"""The executor protocol: how the controller hands one attempt to something that runs it.

A request carries ``(target, args, kwargs)`` plus identity; the executor builds the
TaskContext and injects it as the first argument. It reports back through a Reporter
(from any thread) and returns an ExecutionHandle the controller uses to signal stop and
pause and to settle a stop that was not honoured in time.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import traceback as tb
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol

from chongming_nb.core.errors import TaskCancelled
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.context import TaskContext
from chongming_nb.runtime.output import capture
from chongming_nb.runtime.reporting import Outcome, Reporter


@dataclass(slots=True)
class ExecutionRequest:
    task_id: str
    name: str
    attempt: int
    target: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    inject_context: bool = True
    pipeline_run_id: str | None = None
    deadline: datetime | None = None
    artifacts_root: Path | None = None
    #: Upstream results for executors that run the task away from the controller
    #: (process, dask): ``{task_id: value, "__names__": {name: task_id}}``. In-process
    #: executors ask the reporter instead.
    upstream: dict[str, Any] | None = None


StopVerdict = Literal["abandoned", "killed", "gone"]


class ExecutionHandle(Protocol):
    """Control over one running attempt."""

    token: CancellationToken

    @property
    def running(self) -> bool:
        """True while the carrier still executes the attempt (even if abandoned)."""
        ...

    @property
    def pid(self) -> int | None: ...

    @property
    def supports_pause(self) -> bool: ...

    def request_stop(self, reason: str | None = None) -> None: ...

    def request_pause(self) -> None: ...

    def resume(self) -> None: ...

    def on_stop_timeout(self) -> StopVerdict:
        """The grace window ran out: abandon (threads) or kill (processes), honestly."""
        ...


class Executor(Protocol):
    name: str

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> ExecutionHandle: ...

    def shutdown(self) -> None: ...


def run_coroutine(coro: Any) -> Any:
    """Run a task's coroutine to completion on this thread's own loop — or, when this
    thread already runs a loop (a notebook cell calling the inline executor), on a
    short-lived helper thread, since a loop cannot be re-entered."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import threading

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, name="chongming-async-inline", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _safe_str(obj: object) -> str | None:
    try:
        return str(obj)
    except BaseException:  # user code: anything may come out of __str__
        return None


def type_names(exc: BaseException) -> tuple[str, str]:
    """``(name, module.qualname)`` of an exception's type; never raises."""
    cls = type(exc)
    name = getattr(cls, "__name__", None)
    if not isinstance(name, str):
        name = "<unknown exception type>"
    module = getattr(cls, "__module__", None)
    qual = getattr(cls, "__qualname__", None)
    if isinstance(module, str) and isinstance(qual, str):
        return name, f"{module}.{qual}"
    return name, name


def describe_failure(exc: BaseException) -> tuple[str, str, str]:
    """``(message, traceback, exception_type)`` for what a task raised; never raises.

    A part that cannot be had (``str`` that raises, a traceback that cannot be walked)
    is replaced by what could be recorded: the type name and "unprintable exception".
    """
    name, qualified = type_names(exc)
    text = _safe_str(exc)
    message = f"{name}: unprintable exception" if text is None else f"{name}: {text}"
    try:
        trace = "".join(tb.format_exception(exc))
    except BaseException as why:  # a traceback walk that fails
        trace = "Traceback unavailable (" + (type_names(why)[0]) + " while reading it)\n"
        trace += message + "\n"
    return message, trace, qualified


#: Where this package's code lives: its frames at the head of a task's traceback are the
#: executor's (see ``from_the_task``); those of ``chongming_nb.testing`` are tasks.
_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "")
_TESTING_DIR = os.path.join(_PACKAGE_DIR, "testing", "")


def _ours(frame: FrameType) -> bool:
    name = frame.f_code.co_filename
    return name.startswith(_PACKAGE_DIR) and not name.startswith(_TESTING_DIR)


def from_the_task(exc: BaseException) -> BaseException:
    """``exc`` with its traceback starting at the task's own code.

    The frames above it are ours (the executor that called the task, a pipeline's node
    wrapper): noise in the traceback a person reads in a row, ``chongming attempts`` or
    ``%debug`` after ``h.result()``. A traceback that is ours all the way down (the task
    never ran) is kept whole; so is one that cannot be read. Never raises.

    (It does not free the controller from the exception it keeps: each frame of the task
    still refers to its caller's, ``f_back``, up the worker thread's stack, so a closed
    controller with a failed task waits for the cyclic garbage collector, as a
    ``concurrent.futures`` executor with a failed future does.)"""
    try:
        head = exc.__traceback__
        while head is not None and _ours(head.tb_frame):
            head = head.tb_next
        return exc if head is None else exc.with_traceback(head)
    except BaseException:  # user code: a traceback that cannot be read stays as it is
        return exc


def failed_outcome(exc: BaseException, prefix: str = "") -> Outcome:
    """The ``failed`` outcome of an exception, however badly it behaves."""
    message, trace, qualified = describe_failure(exc)
    return Outcome(
        "failed",
        exception=exc,
        traceback=trace,
        message=prefix + message,
        exception_type=qualified,
    )


def run_attempt(request: ExecutionRequest, token: CancellationToken, reporter: Reporter) -> Outcome:
    """Run one attempt in the current thread and describe how it ended. Never raises:
    whatever the task raises or returns, the result is an Outcome (the worker that
    called this lives on and runs the next attempt).

    ``async def`` targets run to completion on this thread's own event loop. Output and
    log lines written by this thread go to the task's log while it runs.
    """
    try:
        return _run_attempt(request, token, reporter)
    except BaseException as exc:  # e.g. a reporter call that failed
        return failed_outcome(exc, "the attempt could not be run to its end: ")


def _run_attempt(
    request: ExecutionRequest, token: CancellationToken, reporter: Reporter
) -> Outcome:
    token.on_pause_reached = reporter.pause_reached
    token.on_resumed = reporter.resumed
    unwanted = reporter.started()
    if unwanted:
        token.request_stop(unwanted)
    try:
        with capture(reporter.log):
            token.checkpoint()  # a stop that arrived while starting lands here
            if request.inject_context:
                ctx = TaskContext(
                    task_id=request.task_id,
                    name=request.name,
                    attempt=request.attempt,
                    token=token,
                    reporter=reporter,
                    pipeline_run_id=request.pipeline_run_id,
                    deadline=request.deadline,
                    artifacts_root=request.artifacts_root,
                )
                value = request.target(ctx, *request.args, **request.kwargs)
            else:
                value = request.target(*request.args, **request.kwargs)
            if inspect.iscoroutine(value):
                value = run_coroutine(value)
        return Outcome("succeeded", value=value)
    except TaskCancelled as exc:
        return Outcome(
            "cancelled", message=_safe_str(exc) or "stopped", exception_type="TaskCancelled"
        )
    except BaseException as exc:  # user code: keep everything, including the traceback
        return failed_outcome(from_the_task(exc))

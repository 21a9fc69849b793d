"""The executor contract: what every Executor must do, as plain check functions.

One suite, run against every implementation (inline, thread, process, dask; see
``tests/executors/test_contract.py``). Each check takes an :class:`ExecutorProfile`
(how to make the executor and what it claims to support), launches attempts with a
:class:`RecordingReporter` standing in for the controller, and asserts what the
controller relies on:

* a returned value comes back as ``Outcome("succeeded", value)``, after ``started``;
* an exception comes back as ``failed`` with its type, message and full traceback;
* whatever a task raises or returns (an exception whose ``str`` or traceback walk fails,
  a ``BaseException`` of its own, a result whose ``repr`` fails) ends the attempt with
  an outcome, and the executor runs the next attempt;
* a cooperative stop ends the attempt as ``cancelled``;
* pause is a handshake (``pause_reached`` asked, the task blocks, ``resume`` wakes it and
  ``resumed`` is told) where ``supports_pause``, and a paused task reports no progress;
* progress, print/logging lines and ``ctx.emit`` reach the reporter; liveness shows as a
  ``Heartbeat`` over ``handle.token`` seeing signs of life while the task only
  checkpoints (the sampler arms probes, checkpoints answer them; idle timeouts rely on it);
* the context is injected (right task id, name, attempt); ``ctx.upstream`` works;
* an ``async def`` target runs to completion;
* when the stop window runs out, ``on_stop_timeout`` answers honestly ("abandoned" and
  still running for threads, "killed" and not running for processes).

Targets live at module level so that process and dask executors can import them.
Synchronisation uses conditions with deadlines, never bare sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chongming_nb.runtime.context import TaskContext
from chongming_nb.runtime.executors.base import (
    ExecutionHandle,
    ExecutionRequest,
    Executor,
    Outcome,
)
from chongming_nb.runtime.heartbeat import Heartbeat

# ------------------------------------------------------------------ the recorder


class RecordingReporter:
    """A Reporter that records everything, thread-safely, and lets a test wait for a
    condition on what it recorded."""

    def __init__(
        self, pause_answer: bool = True, upstream_values: dict[str, Any] | None = None
    ) -> None:
        self._cond = threading.Condition()
        self.pause_answer = pause_answer
        self.upstream_values = dict(upstream_values or {})
        self.started_calls: list[int | None] = []
        self.progress_calls = 0
        self.last_progress: tuple[Any, Any, Any, Any] | None = None
        self.logs: list[tuple[str, str, str | None]] = []
        self.emits: list[tuple[str, Any]] = []
        self.pause_calls = 0
        self.resumed_calls = 0
        self.heartbeats = 0
        self.outcomes: list[Outcome] = []
        self.order: list[str] = []

    def _note(self, what: str) -> None:
        self.order.append(what)
        self._cond.notify_all()

    # Reporter protocol
    def started(self, pid: int | None = None) -> None:
        with self._cond:
            self.started_calls.append(pid)
            self._note("started")

    def progress(
        self, done: float | None, total: float | None, unit: str | None, message: str | None
    ) -> None:
        with self._cond:
            prev = self.last_progress or (None, None, None, None)
            new = (done, total, unit, message)
            self.last_progress = tuple(  # type: ignore[assignment]
                p if n is None else n for p, n in zip(prev, new, strict=True)
            )
            self.progress_calls += 1
            self._cond.notify_all()

    def emit(self, kind: str, payload: Any) -> None:
        with self._cond:
            self.emits.append((kind, payload))
            self._note("emit")

    def log(self, stream: str, line: str, level: str | None) -> None:
        with self._cond:
            self.logs.append((stream, line, level))
            self._cond.notify_all()

    def pause_reached(self) -> bool:
        with self._cond:
            self.pause_calls += 1
            self._note("pause_reached")
            return self.pause_answer

    def resumed(self) -> None:
        with self._cond:
            self.resumed_calls += 1
            self._note("resumed")

    def heartbeat(self) -> None:
        with self._cond:
            self.heartbeats += 1
            self._cond.notify_all()

    def upstream(self, key: Any) -> Any:
        names = self.upstream_values.get("__names__", {})
        tid = names.get(key, key)
        return self.upstream_values[tid]

    def finished(self, outcome: Outcome) -> None:
        with self._cond:
            self.outcomes.append(outcome)
            self._note("finished")

    # helpers
    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` (evaluated under the lock) is true; False on timeout."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def outcome(self, timeout: float) -> Outcome:
        assert self.wait_for(lambda: bool(self.outcomes), timeout), (
            f"no outcome within {timeout}s (seen: {self.order})"
        )
        assert len(self.outcomes) == 1, f"finished() called {len(self.outcomes)} times"
        return self.outcomes[0]


def poll_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.005) -> bool:
    """Poll a condition that nothing signals (a handle attribute), with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# ------------------------------------------------------------------- profiles


@dataclass
class ExecutorProfile:
    """How to make an executor and what it claims.

    ``background``: launch returns while the attempt runs (False for inline).
    ``stop_verdict``: what ``on_stop_timeout`` answers for a task that ignores the stop
    ("abandoned" for threads, "killed" for processes); None to leave it to other tests.
    """

    name: str
    make: Callable[[], Executor]
    background: bool = True
    supports_pause: bool = True
    stop_verdict: str | None = None
    timeout: float = 60.0


_ids = iter(range(1, 1 << 62))
_ids_lock = threading.Lock()


def make_request(
    target: Callable[..., Any],
    *args: Any,
    name: str | None = None,
    attempt: int = 1,
    upstream: dict[str, Any] | None = None,
    **kwargs: Any,
) -> ExecutionRequest:
    with _ids_lock:
        n = next(_ids)
    return ExecutionRequest(
        task_id=f"contract-{n}",
        name=name or str(getattr(target, "__name__", "task")),
        attempt=attempt,
        target=target,
        args=args,
        kwargs=kwargs,
        upstream=upstream,
    )


# -------------------------------------------------------------------- targets


def add(ctx: TaskContext, a: Any, b: Any) -> Any:
    return a + b


class ContractError(Exception):
    pass


def boom(ctx: TaskContext, message: str) -> None:
    ctx.checkpoint()
    raise ContractError(message)


def spin_with_progress(ctx: TaskContext) -> None:
    """Checkpoints forever, reporting progress about every 10 ms, until stopped."""
    i = 0
    next_report = time.monotonic()
    while True:
        ctx.checkpoint()
        i += 1
        if i % 256 == 0 and time.monotonic() >= next_report:
            ctx.progress(done=i, unit="iterations")
            next_report = time.monotonic() + 0.01


def spin_quietly(ctx: TaskContext) -> None:
    """Checkpoints forever without any progress report, until stopped."""
    while True:
        ctx.checkpoint()


def stubborn(ctx: TaskContext, seconds: float) -> str:
    """Ignores stop requests: burns CPU for ``seconds`` without a checkpoint (after
    reporting progress 1, which says it is past its first checkpoint)."""
    ctx.progress(done=1)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "finished anyway"


def count_with_progress(ctx: TaskContext, n: int) -> int:
    seen = 0
    for _ in ctx.track(range(n), unit="items"):
        seen += 1
    ctx.progress(message="counted")
    return seen


def describe_context(ctx: TaskContext) -> dict[str, Any]:
    return {
        "is_context": isinstance(ctx, TaskContext),
        "task_id": ctx.task_id,
        "name": ctx.name,
        "attempt": ctx.attempt,
    }


async def async_double(ctx: TaskContext, x: int) -> int:
    await ctx.acheckpoint()
    await asyncio.sleep(0)
    await ctx.acheckpoint()
    return 2 * x


def talk(ctx: TaskContext) -> str:
    print("printed line")
    logging.getLogger("chongming_nb.contract").warning("logged warning")
    ctx.log.info("context log line")
    ctx.emit("contract-event", {"answer": 42})
    return "talked"


def read_upstream(ctx: TaskContext, key: str) -> Any:
    return ctx.upstream(key)


class UnprintableError(Exception):
    """An exception whose ``str`` and ``repr`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of UnprintableError fails")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ of UnprintableError fails")


class UntraceableError(Exception):
    """An exception whose traceback cannot be walked from Python."""

    @property  # type: ignore[override]
    def __traceback__(self) -> Any:
        raise RuntimeError("the traceback of UntraceableError cannot be read")


class OddBaseException(BaseException):
    """A BaseException that is not an Exception and not the runtime's own."""


class BadReturn:
    """A result whose ``repr``, ``len`` and ``shape`` raise (it still pickles)."""

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ of BadReturn fails")

    def __len__(self) -> int:
        raise RuntimeError("__len__ of BadReturn fails")

    @property
    def shape(self) -> Any:
        raise ValueError("shape of BadReturn fails")


def raise_unprintable(ctx: TaskContext) -> None:
    raise UnprintableError("never shown")


def raise_untraceable(ctx: TaskContext) -> None:
    raise UntraceableError("no traceback walk")


def raise_odd_base(ctx: TaskContext) -> None:
    raise OddBaseException("not an Exception")


def return_bad_object(ctx: TaskContext) -> BadReturn:
    return BadReturn()


# --------------------------------------------------------------------- checks


def _launch(
    profile: ExecutorProfile, request: ExecutionRequest, reporter: RecordingReporter
) -> tuple[Executor, ExecutionHandle]:
    ex = profile.make()
    return ex, ex.launch(request, reporter)


def check_returns_value(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _, handle = _launch(profile, make_request(add, 20, 22), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded", out
    assert out.value == 42
    assert rep.order[0] == "started" and rep.order[-1] == "finished", rep.order
    assert poll_until(lambda: not handle.running, profile.timeout), "still running after finishing"


def check_exception_is_failure_with_traceback(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _launch(profile, make_request(boom, "it broke"), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "failed", out
    assert out.message is not None and "it broke" in out.message
    assert out.exception_type is not None and out.exception_type.endswith("ContractError")
    assert out.traceback is not None
    assert "raise ContractError(message)" in out.traceback, out.traceback
    assert isinstance(out.exception, ContractError)


def check_bad_exceptions_and_results_never_kill_the_executor(profile: ExecutorProfile) -> None:
    """Whatever a task raises or returns, the attempt ends with an outcome (the type name
    and what could be recorded) and the same executor runs the next attempt."""
    ex = profile.make()
    for target, type_name, unprintable in (
        (raise_unprintable, "UnprintableError", True),
        (raise_untraceable, "UntraceableError", False),
        (raise_odd_base, "OddBaseException", False),
    ):
        rep = RecordingReporter()
        ex.launch(make_request(target), rep)
        out = rep.outcome(profile.timeout)
        assert out.kind == "failed", out
        assert out.message is not None and out.message.startswith(type_name), out.message
        assert not unprintable or "unprintable exception" in out.message, out.message
        assert out.exception_type is not None and out.exception_type.endswith(type_name)
        assert out.traceback, out
    rep = RecordingReporter()
    ex.launch(make_request(return_bad_object), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded" and isinstance(out.value, BadReturn), out
    rep = RecordingReporter()
    ex.launch(make_request(add, 40, 2), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded" and out.value == 42, out


def check_cooperative_stop_is_cancelled(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _, handle = _launch(profile, make_request(spin_with_progress), rep)
    assert rep.wait_for(lambda: rep.progress_calls > 0, profile.timeout), "no progress"
    assert handle.running
    handle.request_stop("contract stop")
    out = rep.outcome(profile.timeout)
    assert out.kind == "cancelled", out
    assert poll_until(lambda: not handle.running, profile.timeout)
    assert handle.on_stop_timeout() == "gone"


def check_pause_resume_handshake(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _, handle = _launch(profile, make_request(spin_with_progress), rep)
    assert handle.supports_pause
    assert rep.wait_for(lambda: rep.progress_calls > 0, profile.timeout), "no progress"
    handle.request_pause()
    assert rep.wait_for(lambda: rep.pause_calls == 1, profile.timeout), "pause never reached"
    assert poll_until(lambda: handle.token.paused, profile.timeout), "handle does not say paused"
    frozen = rep.progress_calls
    # paused: no progress may arrive (a bounded wait for something that must not happen)
    assert not rep.wait_for(lambda: rep.progress_calls != frozen, 0.3), "progress while paused"
    assert handle.running
    handle.resume()
    assert rep.wait_for(lambda: rep.resumed_calls == 1, profile.timeout), "resumed not reported"
    assert rep.wait_for(lambda: rep.progress_calls > frozen, profile.timeout), "no progress after"
    handle.request_stop("done")
    assert rep.outcome(profile.timeout).kind == "cancelled"


def check_pause_refused_keeps_running(profile: ExecutorProfile) -> None:
    """The controller may answer 'no' (the pause was withdrawn): the task carries on."""
    rep = RecordingReporter(pause_answer=False)
    _, handle = _launch(profile, make_request(spin_with_progress), rep)
    assert rep.wait_for(lambda: rep.progress_calls > 0, profile.timeout)
    handle.request_pause()
    assert rep.wait_for(lambda: rep.pause_calls >= 1, profile.timeout)
    handle.resume()  # what the controller does after refusing
    seen = rep.progress_calls
    assert rep.wait_for(lambda: rep.progress_calls > seen, profile.timeout), "task blocked"
    handle.request_stop("done")
    assert rep.outcome(profile.timeout).kind == "cancelled"


def check_stop_while_paused(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _, handle = _launch(profile, make_request(spin_with_progress), rep)
    assert rep.wait_for(lambda: rep.progress_calls > 0, profile.timeout)
    handle.request_pause()
    assert rep.wait_for(lambda: rep.pause_calls == 1, profile.timeout)
    handle.request_stop("stop while paused")
    out = rep.outcome(profile.timeout)
    assert out.kind == "cancelled", out
    assert rep.resumed_calls == 0


def check_progress_reaches_reporter(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _launch(profile, make_request(count_with_progress, 5000), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded" and out.value == 5000, out
    assert rep.last_progress == (5000, 5000, "items", "counted"), rep.last_progress


def check_liveness_while_checkpointing(profile: ExecutorProfile) -> None:
    """A task that only checkpoints must look alive to the controller's heartbeat: a
    Heartbeat sampling ``handle.token`` (and so arming probes, as the controller's does)
    sees signs of life again and again."""
    rep = RecordingReporter()
    _, handle = _launch(profile, make_request(spin_quietly), rep)
    assert rep.wait_for(lambda: bool(rep.started_calls), profile.timeout)
    hb = Heartbeat(handle.token, time.monotonic())
    lives: list[bool] = []

    def three_signs_of_life() -> bool:
        lives.append(hb.sample(time.monotonic()))
        return lives.count(True) >= 3

    assert poll_until(three_signs_of_life, profile.timeout), f"no heartbeat: {lives}"
    handle.request_stop("done")
    assert rep.outcome(profile.timeout).kind == "cancelled"


def check_output_and_emit_reach_reporter(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _launch(profile, make_request(talk), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded" and out.value == "talked", out
    assert ("stdout", "printed line", None) in rep.logs, rep.logs
    assert any(
        s == "log" and "logged warning" in line and lvl == "WARNING" for s, line, lvl in rep.logs
    ), rep.logs
    assert any("context log line" in line and lvl == "INFO" for _, line, lvl in rep.logs), rep.logs
    assert rep.emits == [("contract-event", {"answer": 42})]


def check_context_injected(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    req = make_request(describe_context, name="described", attempt=3)
    _launch(profile, req, rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded", out
    assert out.value == {
        "is_context": True,
        "task_id": req.task_id,
        "name": "described",
        "attempt": 3,
    }


def check_upstream_values(profile: ExecutorProfile) -> None:
    ups = {"__names__": {"extract": "up-1"}, "up-1": {"rows": 3}}
    rep = RecordingReporter(upstream_values=ups)
    _launch(profile, make_request(read_upstream, "extract", upstream=ups), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded", out
    assert out.value == {"rows": 3}


def check_async_target_runs_to_completion(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _launch(profile, make_request(async_double, 21), rep)
    out = rep.outcome(profile.timeout)
    assert out.kind == "succeeded", out
    assert out.value == 42


def check_stop_timeout_verdict(profile: ExecutorProfile) -> None:
    """Honesty when the window runs out: abandon (still running) or kill (gone)."""
    rep = RecordingReporter()
    seconds = 1.0 if profile.stop_verdict == "abandoned" else 120.0
    _, handle = _launch(profile, make_request(stubborn, seconds), rep)
    assert rep.wait_for(lambda: rep.progress_calls > 0, profile.timeout)
    handle.request_stop("contract stop")
    verdict = handle.on_stop_timeout()
    assert verdict == profile.stop_verdict, verdict
    if verdict == "abandoned":
        assert handle.running, "an abandoned carrier that still runs must say so"
        # it keeps running and finishes on its own, later
        out = rep.outcome(profile.timeout)
        assert out.kind == "succeeded" and out.value == "finished anyway"
        assert poll_until(lambda: not handle.running, profile.timeout)
    else:
        assert not handle.running, "a killed carrier must not say it runs"
        pid = handle.pid
        if pid is not None:
            import os

            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                pass
            else:
                raise AssertionError(f"process {pid} still exists after a kill")


def check_inline_runs_before_launch_returns(profile: ExecutorProfile) -> None:
    rep = RecordingReporter()
    _, handle = _launch(profile, make_request(add, 1, 2), rep)
    assert rep.outcomes and rep.outcomes[0].value == 3
    assert not handle.running
    assert handle.on_stop_timeout() == "gone"


# ------------------------------------------------------------------ selection

ALWAYS: tuple[Callable[[ExecutorProfile], None], ...] = (
    check_returns_value,
    check_exception_is_failure_with_traceback,
    check_bad_exceptions_and_results_never_kill_the_executor,
    check_progress_reaches_reporter,
    check_output_and_emit_reach_reporter,
    check_context_injected,
    check_upstream_values,
    check_async_target_runs_to_completion,
)
BACKGROUND = (check_cooperative_stop_is_cancelled, check_liveness_while_checkpointing)
PAUSE = (
    check_pause_resume_handshake,
    check_pause_refused_keeps_running,
    check_stop_while_paused,
)


def checks_for(
    background: bool, supports_pause: bool, stop_verdict: str | None
) -> list[Callable[[ExecutorProfile], None]]:
    """The checks that apply to an executor with these claims."""
    out = list(ALWAYS)
    if background:
        out += BACKGROUND
    else:
        out.append(check_inline_runs_before_launch_returns)
    if supports_pause:
        out += PAUSE
    if stop_verdict is not None:
        out.append(check_stop_timeout_verdict)
    return out

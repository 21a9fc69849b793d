"""Shared helpers for the Controller tests: gated task bodies, a gated executor that holds
a task in STARTING, and condition-based waiting (woken by the controller's own events,
never a bare sleep)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from chongming_nb import Controller, TaskContext, TaskStatus
from chongming_nb.core.events import Event
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors import ExecutionRequest, Reporter, run_attempt
from chongming_nb.runtime.executors.thread import ThreadHandle
from chongming_nb.testing import FakeClock

S = TaskStatus
DEADLINE = 10.0  # real seconds: generous, only hit when something is broken


def wait_until(
    ctl: Controller, predicate: Callable[[], bool], timeout: float = DEADLINE, what: str = ""
) -> None:
    """Block until ``predicate()`` holds, re-checking on every controller event (plus a
    coarse real-time recheck for state that changes without an event, e.g. a thread
    exiting). Fails the test with ``what`` after ``timeout`` real seconds."""
    cond = threading.Condition()

    def on(_: Event) -> None:
        with cond:
            cond.notify_all()

    unsub = ctl.watch(on)
    deadline = time.monotonic() + timeout
    ok = False
    try:
        with cond:
            while not (ok := predicate()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                cond.wait(min(left, 0.05))
    finally:
        unsub()
    if not ok:
        raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def wait_status(
    ctl: Controller,
    task: Any,
    statuses: TaskStatus | Iterable[TaskStatus],
    timeout: float = DEADLINE,
) -> TaskStatus:
    wanted = {statuses} if isinstance(statuses, TaskStatus) else set(statuses)
    tid = getattr(task, "id", task)
    wait_until(
        ctl,
        lambda: ctl.get(tid).status in wanted,
        timeout,
        f"{tid} to reach {sorted(wanted)} (now {ctl.get(tid).status})",
    )
    return ctl.get(tid).status


class Gate:
    """Task bodies that run until ``release()``: ``cooperative`` checkpoints every
    millisecond, ``stubborn`` never checkpoints until released (a thread that ignores
    stop and pause)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.entered = threading.Event()

    def release(self) -> None:
        self.event.set()

    def cooperative(self, ctx: TaskContext, value: Any = None) -> Any:
        self.entered.set()
        while not self.event.is_set():
            ctx.checkpoint()
            self.event.wait(0.001)
        ctx.checkpoint()
        return value

    def stubborn(self, ctx: TaskContext, value: Any = None) -> Any:
        self.entered.set()
        self.event.wait()
        return value


class GatedExecutor:
    """A thread executor whose attempts do not begin (the task stays STARTING) until
    ``go`` is set."""

    name = "gated"

    def __init__(self) -> None:
        self.go = threading.Event()
        self.launched = threading.Event()

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> ThreadHandle:
        handle = ThreadHandle(CancellationToken())

        def body() -> None:
            self.go.wait()
            outcome = run_attempt(request, handle.token, reporter)
            handle._done.set()
            reporter.finished(outcome)

        threading.Thread(target=body, daemon=True, name="gated-task").start()
        self.launched.set()
        return handle

    def shutdown(self) -> None:
        self.go.set()


def ok_task(ctx: TaskContext, value: Any = None) -> Any:
    return value


def failing_task(ctx: TaskContext, message: str = "boom") -> None:
    raise ValueError(message)


class Rig:
    """Makes controllers and gates and cleans them all up."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.controllers: list[Controller] = []
        self.gates: list[Gate] = []
        self.executors: list[GatedExecutor] = []

    def controller(self, **kw: Any) -> Controller:
        kw.setdefault("clock", self.clock)
        ctl = Controller(**kw)
        self.controllers.append(ctl)
        return ctl

    def gate(self) -> Gate:
        g = Gate()
        self.gates.append(g)
        return g

    def gated_executor(self) -> GatedExecutor:
        ex = GatedExecutor()
        self.executors.append(ex)
        return ex

    def close(self) -> None:
        for g in self.gates:
            g.release()
        for ex in self.executors:
            ex.go.set()
        for ctl in self.controllers:
            ctl.close()

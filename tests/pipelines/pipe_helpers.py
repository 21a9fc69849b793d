"""Helpers for the pipeline tests: gates a task can wait on (checkpointing, so stop and
pause reach it) and waiting on controller events instead of sleeping."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from chongming_nb import Controller, TaskStatus
from chongming_nb.core.events import Event

DEADLINE = 20.0  # real seconds: generous, only reached when something is broken


def wait_until(
    ctl: Controller, predicate: Callable[[], bool], timeout: float = DEADLINE, what: str = ""
) -> None:
    """Block until ``predicate()`` holds, re-checked on every controller event."""
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


def wait_status(ctl: Controller, task_id: str, *statuses: TaskStatus) -> None:
    wait_until(
        ctl,
        lambda: ctl.get(task_id).status in statuses,
        what=f"{task_id} to reach {[s.value for s in statuses]}",
    )


class Gate:
    """A task body that runs until released, reaching a checkpoint all the while."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def release(self) -> None:
        self.event.set()

    def __call__(self, ctx: Any, value: Any = None) -> Any:
        self.calls += 1
        self.entered.set()
        while not self.event.wait(0.005):
            ctx.checkpoint()
        ctx.checkpoint()
        return value


class Calls:
    """Counts calls per node name, thread-safely."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.order: list[str] = []

    def hit(self, name: str) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + 1
            self.order.append(name)

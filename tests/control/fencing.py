"""Helpers for the recovery tests: pairs of stores on one backing (the controller's
connection and a reconciler's) and the reconciler of
another host whose clock says the owner's lease ended long ago."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from chongming_nb import Controller
from chongming_nb.control.persistence import verify
from chongming_nb.control.recovery import reconcile_store
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors import ExecutionRequest, Reporter, run_attempt
from chongming_nb.runtime.executors.thread import ThreadHandle
from chongming_nb.stores import TaskStore
from chongming_nb.testing import FakeClock

#: An owner id naming another host: only its lease speaks for it, so a reconciler can
#: settle its tasks while it is alive (frozen, partitioned, or just slow).
FAR = "far-away:1:-:1-0000cafe"

StorePair = tuple[TaskStore, TaskStore]


def agree(ctl: Controller, store: TaskStore, tid: str) -> None:
    """Memory and store say the same about ``tid``, and the store replays."""
    mem, disk = ctl.get(tid), store.get(tid)
    assert disk is not None
    assert (mem.status, mem.status_version, mem.failure) == (
        disk.status,
        disk.status_version,
        disk.failure,
    )
    assert ctl.history(tid) == store.history(tid)
    assert ctl.attempts(tid) == store.attempts(tid)
    ok, why = verify(store.history(tid), disk)
    assert ok, why


def settle_from_elsewhere(other: TaskStore, clock: FakeClock) -> Callable[[], dict[str, list[str]]]:
    """A reconciler on another host, an hour after ``clock``'s time: every task of FAR
    is past its lease."""
    later = FakeClock(clock.now() + timedelta(hours=1))
    return lambda: reconcile_store(other, later, me="reconciler", lease_seconds=1, grace=1)


class WatchedExecutor:
    """A thread executor that says what it launched (task names, in order), can hold a
    launch inside ``launch()`` (``hold()``: the work has not begun, the controller is
    still launching it) and sets ``ended[name]`` once an attempt's end was reported."""

    name = "watched"

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.ended: dict[str, threading.Event] = {}
        self.in_launch = threading.Event()
        self._go: threading.Event | None = None

    def hold(self) -> threading.Event:
        """The next launches wait inside ``launch()`` until the event returned is set."""
        self._go = threading.Event()
        return self._go

    def end_of(self, name: str) -> threading.Event:
        return self.ended.setdefault(name, threading.Event())

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> ThreadHandle:
        self.launched.append(request.name)
        self.in_launch.set()
        if self._go is not None:
            self._go.wait()
        handle = ThreadHandle(CancellationToken())
        ended = self.end_of(request.name)

        def body() -> None:
            outcome = run_attempt(request, handle.token, reporter)
            handle._done.set()
            reporter.finished(outcome)
            ended.set()

        threading.Thread(target=body, daemon=True, name="watched-task").start()
        return handle

    def shutdown(self) -> None:
        if self._go is not None:
            self._go.set()

"""ctx.sleep under a Controller: the sleeping task gives its concurrency slot away, is
woken by the controller's timer (the fake clock here), ends at once on stop, pauses on
pause, is never judged idle, and takes a slot again before queued tasks when it wakes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ctl_helpers import DEADLINE, S, wait_status, wait_until

from chongming_nb import ConcurrencyPolicy, Controller, TaskContext, Timeout
from chongming_nb.core.models import FailureKind
from chongming_nb.testing import FakeClock


def sleeper(seconds: float, log: list[str] | None = None) -> Callable[[TaskContext], str]:
    def body(ctx: TaskContext) -> str:
        ctx.sleep(seconds)
        if log is not None:
            log.append("slept")
        return "rested"

    return body


def test_a_second_task_runs_while_the_first_sleeps_with_max_parallel_1(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    first = ctl.submit(sleeper(60))
    wait_until(ctl, lambda: ctl._book.tasks[first.id].sleeper is not None, what="first asleep")
    second = ctl.submit(lambda: "ran")
    assert second.result(timeout=DEADLINE) == "ran"  # the only slot was free
    assert first.status is S.RUNNING
    clock.advance(59)
    assert first.status is S.RUNNING
    clock.advance(1)
    assert first.result(timeout=DEADLINE) == "rested"


def test_a_woken_sleeper_waits_for_a_slot_and_goes_before_queued_tasks(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    order: list[str] = []
    release = threading.Event()

    def busy() -> None:
        release.wait(DEADLINE)
        order.append("busy done")

    first = ctl.submit(sleeper(60, order))
    wait_until(ctl, lambda: ctl._book.tasks[first.id].sleeper is not None, what="first asleep")
    b = ctl.submit(busy)
    wait_status(ctl, b, S.RUNNING)
    clock.advance(60)  # the sleeper wakes while busy holds the only slot
    wait_until(ctl, lambda: ctl._admission.waking == 1, what="the sleeper waiting for its slot")
    queued = ctl.submit(lambda: order.append("queued ran"))
    assert ctl.get(queued.id).status is S.QUEUED
    release.set()
    assert first.result(timeout=DEADLINE) == "rested"
    queued.wait(DEADLINE)
    assert order == ["busy done", "slept", "queued ran"]


def test_stop_during_a_sleep_stops_the_task_at_once(make_ctl: Callable[..., Controller]) -> None:
    ctl = make_ctl()
    h = ctl.submit(sleeper(3600))
    wait_until(ctl, lambda: ctl._book.tasks[h.id].sleeper is not None, what="asleep")
    h.stop(timeout=DEADLINE)
    assert wait_status(ctl, h, S.STOPPED) is S.STOPPED  # no fake-clock advance needed
    assert ctl.stats().get("running", 0) == 0


def test_pause_during_a_sleep_pauses_then_sleeps_the_rest(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl()
    h = ctl.submit(sleeper(60))
    wait_until(ctl, lambda: ctl._book.tasks[h.id].sleeper is not None, what="asleep")
    clock.advance(20)
    h.pause(timeout=DEADLINE)
    wait_status(ctl, h, S.PAUSED)
    h.resume()
    wait_until(ctl, lambda: ctl._book.tasks[h.id].sleeper is not None, what="asleep again")
    clock.advance(39)
    assert h.status is S.RUNNING  # 20 + 39 < 60: still the rest to sleep
    clock.advance(1)
    assert h.result(timeout=DEADLINE) == "rested"


def test_a_sleep_is_not_an_idle_timeout(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl()
    h = ctl.submit(sleeper(300), timeout=Timeout(idle=10))
    t = ctl._book.tasks[h.id]
    wait_until(ctl, lambda: t.sleeper is not None and t.hb is not None, what="asleep")
    t.hb.sample(clock.monotonic())  # type: ignore[union-attr]
    for _ in range(30):  # 300 s in 11 s steps: every idle window passes
        clock.advance(11)
        assert t.handle is None or not t.handle.token.stop_requested  # type: ignore[union-attr]
    assert h.result(timeout=DEADLINE) == "rested"
    assert ctl.get(h.id).failure is None


def test_an_idle_task_that_does_not_sleep_still_times_out(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    """The control for the test above: the same idle limit on a task that just blocks."""
    ctl = make_ctl()
    gate = threading.Event()

    def blocks(ctx: TaskContext) -> None:
        gate.wait(DEADLINE)  # no sign of life...
        ctx.checkpoint()  # ...until here, where the timeout's stop lands

    h = ctl.submit(blocks, timeout=Timeout(idle=10))
    wait_status(ctl, h, S.RUNNING)
    t = ctl._book.tasks[h.id]
    wait_until(ctl, lambda: t.hb is not None, what="heartbeat attached")
    t.hb.sample(clock.monotonic())  # type: ignore[union-attr]
    clock.advance(11)
    wait_until(ctl, lambda: t.handle.token.stop_requested, what="idle timeout fired")  # type: ignore[union-attr]
    gate.set()
    wait_status(ctl, h, S.FAILED)
    f: Any = ctl.get(h.id).failure
    assert f.kind is FailureKind.TIMEOUT_IDLE

"""Flat combining: a worker whose attempt ends while another thread holds the
controller's lock does not wait for it; it queues its report, and the holder settles
it. These tests pin the holders that do not schedule (a ``wait()``, a progress report)
to settling such reports themselves: with the dispatcher's backstop tick pushed out
to a minute, a report left queued would stall the next task until the test times out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from chongming_nb import ConcurrencyPolicy, Controller, TaskContext, TaskStatus
from chongming_nb.control import dispatcher as dispatcher_module

S = TaskStatus
DEADLINE = 10.0


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch) -> Iterator[Controller]:
    monkeypatch.setattr(dispatcher_module, "TICK_SECONDS", 60.0)  # no backstop here
    c = Controller(concurrency=ConcurrencyPolicy(max_parallel=2))
    yield c
    c.close(timeout=1)


def _queued_report(ctl: Controller) -> bool:
    return bool(ctl._attempts.pending_finishes)


def _end_while_locked(ctl: Controller, release: threading.Event) -> None:
    """Let a task end while this thread holds the lock, and return once its worker
    has queued the report (it never waits for the lock)."""
    with ctl._book.lock:
        release.set()
        deadline = time.monotonic() + DEADLINE
        while not _queued_report(ctl):  # a condition with a deadline, not a fixed sleep
            assert time.monotonic() < deadline, "the worker never queued its report"
            time.sleep(0.001)


def test_wait_settles_a_report_queued_while_a_reader_held_the_lock(ctl: Controller) -> None:
    go = threading.Event()
    started = threading.Event()

    def held(ctx: TaskContext) -> str:
        started.set()
        go.wait(DEADLINE)
        return "first"

    def second(ctx: TaskContext) -> str:
        return "second"

    other = threading.Event()
    busy = ctl.submit(lambda ctx: other.wait(DEADLINE))  # keeps the second slot
    first = ctl.submit(held)
    assert started.wait(DEADLINE)
    queued = ctl.submit(second)  # waits for a slot
    assert ctl._book.tasks[queued.id].snap.status is S.QUEUED

    _end_while_locked(ctl, go)
    # Nothing else holds the lock from now on. wait() must settle the queued report
    # (freeing the slot and launching the queued task) instead of sleeping on it.
    assert ctl.wait(queued, timeout=5).status is S.SUCCEEDED
    assert first.result(timeout=1) == "first"
    assert queued.result(timeout=1) == "second"
    other.set()
    busy.wait(DEADLINE)


def test_a_progress_report_settles_what_was_queued_meanwhile(ctl: Controller) -> None:
    go = threading.Event()
    report = threading.Event()
    reported = threading.Event()
    started = threading.Event()

    def held(ctx: TaskContext) -> str:
        started.set()
        go.wait(DEADLINE)
        return "done"

    def reporter(ctx: TaskContext) -> None:
        report.wait(DEADLINE)
        ctx.progress(done=1, total=1)  # completes the total: an event at once
        reported.set()
        report.clear()
        report.wait(DEADLINE)

    r = ctl.submit(reporter)
    first = ctl.submit(held)
    assert started.wait(DEADLINE)
    queued = ctl.submit(lambda ctx: "next")
    _end_while_locked(ctl, go)
    report.set()
    assert reported.wait(DEADLINE)
    # settled by the reporting worker itself, without a reader's help
    assert not _queued_report(ctl)
    assert ctl._book.tasks[first.id].snap.status is S.SUCCEEDED
    assert ctl._book.tasks[queued.id].snap.status is not S.QUEUED
    assert queued.result(timeout=5) == "next"
    report.set()
    r.wait(DEADLINE)


class _CountingCondition(threading.Condition):
    notified = 0

    def notify_all(self) -> None:
        type(self).notified += 1
        super().notify_all()


def test_a_waiter_is_woken_by_its_own_task_not_by_every_other_end(ctl: Controller) -> None:
    """A thread in wait(a) is not woken (a GIL and lock hand-over each) when other
    tasks end: in a drain of many short tasks that made the waiter and the workers
    take turns, several context switches per task."""
    ctl._book.terminal = _CountingCondition(ctl._book.lock)
    _CountingCondition.notified = 0
    go = threading.Event()
    a = ctl.submit(lambda ctx: go.wait(DEADLINE))
    waiter = threading.Thread(target=ctl.wait, args=(a, DEADLINE))
    waiter.start()
    deadline = time.monotonic() + DEADLINE
    while not ctl._book.awaited:  # the waiter is registered (a condition, with a deadline)
        assert time.monotonic() < deadline
        time.sleep(0.001)
    ended = threading.Semaphore(0)

    def on(e: object) -> None:
        if getattr(e, "to_status", None) is S.SUCCEEDED:
            ended.release()

    unsub = ctl.watch(on)
    others = [ctl.submit(lambda ctx, i: i, i) for i in range(50)]
    for _ in others:  # every other task ended, learnt without wait()
        assert ended.acquire(timeout=DEADLINE)
    unsub()
    assert all(ctl._book.tasks[h.id].snap.status is S.SUCCEEDED for h in others)
    assert _CountingCondition.notified == 0  # the waiter for `a` slept through them
    before = _CountingCondition.notified
    go.set()
    waiter.join(DEADLINE)
    assert not waiter.is_alive()
    assert _CountingCondition.notified == before + 1
    assert not ctl._book.awaited

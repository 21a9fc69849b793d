"""ctx.sleep on the process executor: the child says it sleeps, the controller frees the
task's slot (another task runs, in another child, with ``max_parallel=1``), wakes it by
its timer, and a stop or a pause during the sleep acts at once."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import chongming_nb as cn
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.testing.executor_contract import poll_until

WAIT = 30.0


def nap(ctx: cn.TaskContext, seconds: float) -> int:
    ctx.sleep(seconds)
    return os.getpid()


def pid_of_me() -> int:
    return os.getpid()


@pytest.fixture
def ctl() -> Iterator[cn.Controller]:
    c = cn.Controller(
        executor="process",
        concurrency=cn.ConcurrencyPolicy(max_parallel=1),
        stop_grace=5,
        pause_grace=30,
    )
    try:
        yield c
    finally:
        c.close()


def _asleep(ctl: cn.Controller, h: cn.TaskHandle) -> bool:
    """The controller waits out the child's sleep: the slot is free."""
    t = ctl._book.tasks[h.id]
    return t.sleeper is not None and not t.holds_slot


def test_a_second_task_runs_in_another_child_while_the_first_sleeps(ctl: cn.Controller) -> None:
    first = ctl.submit(nap, 3600)
    assert poll_until(lambda: _asleep(ctl, first), WAIT), "the first task never slept"
    sleeper_pid = ctl.get(first).pid
    second = ctl.submit(pid_of_me)
    assert second.result(timeout=WAIT) != sleeper_pid  # the only slot was free
    assert first.status is S.RUNNING
    first.stop()  # a stop during the sleep acts at once (the sleep is an hour)
    assert first.wait(WAIT).status is S.STOPPED
    assert ctl._admission.running == 0


def test_a_short_sleep_wakes_and_returns(ctl: cn.Controller) -> None:
    h = ctl.submit(nap, 0.2)
    assert h.result(timeout=WAIT) == ctl.get(h).pid
    assert ctl._admission.running == 0


def test_a_pause_during_the_sleep_pauses_the_task_and_resume_sleeps_on(
    ctl: cn.Controller,
) -> None:
    h = ctl.submit(nap, 3600)
    assert poll_until(lambda: _asleep(ctl, h), WAIT)
    h.pause()
    assert poll_until(lambda: ctl.get(h).status is S.PAUSED, WAIT)
    h.resume()
    assert poll_until(lambda: ctl.get(h).status is S.RUNNING and _asleep(ctl, h), WAIT)
    h.stop()
    assert h.wait(WAIT).status is S.STOPPED
    assert ctl._admission.running == 0

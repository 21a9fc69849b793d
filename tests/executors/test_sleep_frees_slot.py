"""ctx.sleep away from the kernel's threads: on the process executor the child says it
sleeps, on dask the task secedes from its worker's thread pool; the controller frees the
task's slot (another task runs, in another child or on the freed worker thread), wakes
it by its timer, and a stop or a pause during the sleep acts at once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import chongming_nb as cn
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.testing.executor_contract import poll_until

WAIT = 60.0


def nap(ctx: cn.TaskContext, seconds: float) -> int:
    ctx.sleep(seconds)
    return os.getpid()


def pid_of_me() -> int:
    return os.getpid()


@pytest.fixture(params=["process", "dask"])
def ctl(request: pytest.FixtureRequest) -> Iterator[cn.Controller]:
    if request.param == "process":
        # max_parallel=1: the one slot
        executor: Any = "process"
        slots = 1
    else:
        from chongming_nb.runtime.executors.dask import DaskExecutor

        client = request.getfixturevalue("dask_client")
        client.wait_for_workers(2, timeout=WAIT)
        executor = DaskExecutor(client)
        slots = 2  # the cluster's two worker threads: both taken by sleepers
    c = cn.Controller(
        executor=executor,
        concurrency=cn.ConcurrencyPolicy(max_parallel=slots),
        stop_grace=5,
        pause_grace=30,
    )
    try:
        yield c
    finally:
        c.close()


def _asleep(ctl: cn.Controller, h: cn.TaskHandle) -> bool:
    """The controller waits out the task's sleep: its slot is free."""
    t = ctl._book.tasks[h.id]
    return t.sleeper is not None and not t.holds_slot


def test_another_task_runs_while_every_slot_holder_sleeps(ctl: cn.Controller) -> None:
    slots = ctl._admission.concurrency.max_parallel
    sleepers = [ctl.submit(nap, 3600) for _ in range(slots)]
    for h in sleepers:
        assert poll_until(lambda h=h: _asleep(ctl, h), WAIT), "a task never slept"
    other = ctl.submit(pid_of_me)
    assert isinstance(other.result(timeout=WAIT), int)  # every slot was free
    if ctl.get(sleepers[0]).pid is not None:  # processes: another child ran it
        assert other.result() != ctl.get(sleepers[0]).pid
    for h in sleepers:
        assert h.status is S.RUNNING
        h.stop()  # a stop during the sleep acts at once (the sleep is an hour)
    for h in sleepers:
        assert h.wait(WAIT).status is S.STOPPED
    assert ctl._admission.running == 0


def test_a_short_sleep_wakes_and_returns(ctl: cn.Controller) -> None:
    h = ctl.submit(nap, 0.2)
    assert isinstance(h.result(timeout=WAIT), int)
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

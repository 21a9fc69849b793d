"""The dask executor's channels (see the module docstring of executors/dask.py): control
pushed to the workers with the Variable as the fallback, reports pushed back, results
with the last report unless too large, and no polling of the scheduler while tasks run.
On the session's 2-worker LocalCluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dask_targets as DT
import exec_targets as T
import pytest

import chongming_nb as cn
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.runtime.executors import dask as dask_mod
from chongming_nb.runtime.executors.dask import DaskExecutor
from chongming_nb.testing.executor_contract import poll_until

WAIT = 90.0


def _controller(client: Any) -> cn.Controller:
    client.wait_for_workers(2, timeout=WAIT)
    return cn.Controller(
        executor=DaskExecutor(client),
        concurrency=cn.ConcurrencyPolicy(max_parallel=8),
        stop_grace=30.0,
        pause_grace=30.0,
    )


@pytest.fixture
def ctl(dask_client: Any) -> Iterator[cn.Controller]:
    c = _controller(dask_client)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def gathers(dask_client: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many futures each ``gather`` of the session client fetched."""
    calls: list[int] = []
    real = dask_client.gather

    def counting(futures: Any, *a: Any, **kw: Any) -> Any:
        calls.append(len(futures))
        return real(futures, *a, **kw)

    monkeypatch.setattr(dask_client, "gather", counting)
    return calls


def _pause_resume_stop(ctl: cn.Controller) -> None:
    h = ctl.submit(T.loop_until_stopped)
    assert poll_until(lambda: ctl.get(h).status is S.RUNNING, WAIT), ctl.get(h)
    ctl.pause(h, wait=True)
    assert ctl.get(h).status is S.PAUSED
    ctl.resume(h)
    assert poll_until(lambda: ctl.get(h).status is S.RUNNING, WAIT), ctl.get(h)
    h.stop()
    assert h.wait(WAIT).status is S.STOPPED
    assert ctl.attempts(h)[-1].failure_message != "terminated after the stop window"


def test_small_results_come_with_the_last_report_without_a_gather(
    ctl: cn.Controller, gathers: list[int]
) -> None:
    hs = [ctl.submit(DT.chatty, 20, 100) for _ in range(6)]
    assert [h.result(timeout=WAIT) for h in hs] == [b"x" * 100] * 6
    assert gathers == []
    for h in hs:  # every report sent before the end was delivered before it
        assert [r.line for r in ctl.logs(h)] == [f"line {i}" for i in range(20)]
        p = ctl.get(h).progress
        assert p is not None and (p.done, p.total) == (20, 20)


def test_a_large_result_is_fetched_from_the_future_after_its_reports(
    ctl: cn.Controller, gathers: list[int]
) -> None:
    size = dask_mod.INLINE_RESULT_BYTES * 4
    h = ctl.submit(DT.chatty, 50, size)
    assert h.result(timeout=WAIT) == b"x" * size
    assert gathers == [1]
    assert [r.line for r in ctl.logs(h)] == [f"line {i}" for i in range(50)]
    p = ctl.get(h).progress
    assert p is not None and (p.done, p.total) == (50, 50)


def test_control_reaches_the_workers_by_push_alone(
    ctl: cn.Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Variable never changes (agents read it and find nothing): pause, resume and
    stop arrive through the pushed events only, for this task and the next one."""

    def push_only(self: DaskExecutor, control: dict[str, Any]) -> None:
        self._version += 1
        self.client.log_event(
            dask_mod.CONTROL_TOPIC, [self.exec_id, self._version, dask_mod.pickle.dumps(control)]
        )

    monkeypatch.setattr(DaskExecutor, "_push_control", push_only)
    for _ in range(2):
        _pause_resume_stop(ctl)


def test_control_lost_on_the_way_arrives_through_the_variable(
    ctl: cn.Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No event reaches the workers: the agents' periodic read of the Variable (once per
    CONTROL_REFRESH while they run attempts) still delivers pause, resume and stop."""

    def variable_only(self: DaskExecutor, control: dict[str, Any]) -> None:
        self._version += 1
        self._variable.set((self._version, control))

    monkeypatch.setattr(DaskExecutor, "_push_control", variable_only)
    _pause_resume_stop(ctl)


def test_two_executors_on_one_client_each_get_their_reports(dask_client: Any) -> None:
    """A client has one handler per topic: executors sharing it share the subscription,
    and one shutting down leaves the other's reports flowing."""
    a, b = _controller(dask_client), _controller(dask_client)
    try:
        ha = [a.submit(DT.chatty, 5, 10) for _ in range(4)]
        hb = [b.submit(DT.chatty, 5, 20) for _ in range(4)]
        assert [h.result(timeout=WAIT) for h in ha] == [b"x" * 10] * 4
        assert [h.result(timeout=WAIT) for h in hb] == [b"x" * 20] * 4
        assert all(len(a.logs(h)) == 5 for h in ha) and all(len(b.logs(h)) == 5 for h in hb)
        a.close()
        _pause_resume_stop(b)
        assert b.submit(DT.chatty, 3, 1).result(timeout=WAIT) == b"x"
    finally:
        a.close()
        b.close()


_COUNTED = ("variable_get", "variable_set", "queue_get", "queue_put")


def _count_on(dask_scheduler: Any) -> None:
    """On the scheduler: count the calls of the primitives' handlers."""
    counts: dict[str, int] = {}
    dask_scheduler._chongming_counts = counts
    for op in _COUNTED:
        real = dask_scheduler.handlers.get(op)
        if real is None:
            continue

        def counting(*a: Any, _op: str = op, _real: Any = real, **kw: Any) -> Any:
            counts[_op] = counts.get(_op, 0) + 1
            return _real(*a, **kw)

        counting.__wrapped__ = real  # type: ignore[attr-defined]
        dask_scheduler.handlers[op] = counting


def _count_off(dask_scheduler: Any) -> dict[str, int]:
    for op in _COUNTED:
        h = dask_scheduler.handlers.get(op)
        if h is not None and hasattr(h, "__wrapped__"):
            dask_scheduler.handlers[op] = h.__wrapped__
    counts: dict[str, int] = dask_scheduler.__dict__.pop("_chongming_counts", {})
    return counts


def test_nothing_polls_the_scheduler_while_a_task_runs(
    ctl: cn.Controller, dask_client: Any
) -> None:
    """A cooperative task without reports runs for 2.5 s: the workers read the control
    Variable at most once per CONTROL_REFRESH (it was every 50 ms), and no queue is used;
    a stop is one Variable write."""
    seconds = 2.5
    dask_client.run_on_scheduler(_count_on)
    try:
        h = ctl.submit(DT.checkpoints_for, seconds)
        assert h.result(timeout=WAIT) == "done"
        s = ctl.submit(T.loop_until_stopped)
        assert poll_until(lambda: ctl.get(s).status is S.RUNNING, WAIT)
        s.stop()
        assert s.wait(WAIT).status is S.STOPPED
    finally:
        calls = dask_client.run_on_scheduler(_count_off)
    assert calls.get("queue_get", 0) == 0 and calls.get("queue_put", 0) == 0, calls
    assert 1 <= calls.get("variable_get", 0) <= seconds / dask_mod.CONTROL_REFRESH + 3, calls
    assert calls.get("variable_set", 0) >= 1, calls  # counted: the counting works


def test_a_lost_report_subscription_is_survived_and_renewed(
    ctl: cn.Controller, dask_client: Any, gathers: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler forgets our subscription (as after a restart): an attempt whose last
    report never comes is settled from its future after REPORT_GRACE, with the reports
    it still carried, and the subscription is renewed for the next ones."""
    monkeypatch.setattr(dask_mod, "REPORT_GRACE", 0.5)
    ctl.submit(DT.chatty, 1, 1).result(timeout=WAIT)  # subscribed, workers warm
    client_id = dask_client.id

    def forget(dask_scheduler: Any) -> None:  # the broker is private: test-only access
        dask_scheduler._broker._topics[dask_mod.REPORT_TOPIC].subscribers.discard(client_id)

    dask_client.run_on_scheduler(forget)
    h = ctl.submit(DT.chatty, 3, 10)
    assert h.result(timeout=WAIT) == b"x" * 10
    assert gathers == [1]  # fetched from the future
    assert [r.line for r in ctl.logs(h)] == ["line 0", "line 1", "line 2"]
    assert ctl.submit(DT.chatty, 2, 5).result(timeout=WAIT) == b"x" * 5
    assert gathers == [1]  # came with its last report again

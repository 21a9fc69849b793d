"""The dask executor through the real Controller, on the session's 2-worker LocalCluster:
many tasks, pause/resume, cooperative and forced stop, progress, after= and pipelines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import exec_targets as T
import pytest

import chongming_nb as cn
from chongming_nb.control.pipeline import Pipeline
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.models import FailureKind
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.runtime.executors.dask import REPORT_TOPIC, DaskExecutor
from chongming_nb.testing.executor_contract import poll_until

WAIT = 90.0


@pytest.fixture
def ctl(dask_client: Any) -> Iterator[cn.Controller]:
    dask_client.wait_for_workers(2, timeout=WAIT)
    c = cn.Controller(
        executor=DaskExecutor(dask_client),
        concurrency=cn.ConcurrencyPolicy(max_parallel=8),
        stop_grace=5.0,
    )
    try:
        yield c
    finally:
        c.close()


def test_fifty_tasks_one_paused_one_stopped_progress_visible(ctl: cn.Controller) -> None:
    looping = ctl.submit(T.loop_until_stopped, name="loop")
    pausable = ctl.submit(T.steps, 1500, "resumed-ok", name="pausable")
    squares = [ctl.submit(T.square, i) for i in range(50)]

    # progress from a worker is visible in the controller's snapshot
    assert poll_until(
        lambda: (p := ctl.get(looping).progress) is not None and (p.done or 0) > 0, WAIT
    ), ctl.get(looping)
    assert ctl.get(looping).status is S.RUNNING

    assert poll_until(lambda: ctl.get(pausable).status is S.RUNNING, WAIT)
    ctl.pause(pausable, wait=True)
    assert ctl.get(pausable).status is S.PAUSED
    ctl.resume(pausable)

    looping.stop()
    assert looping.wait(WAIT)
    snap = ctl.get(looping)
    assert snap.status is S.STOPPED
    assert snap.failure is None  # a stop is not a failure
    assert snap.outcome is not None and "detail" not in snap.outcome  # it was cooperative
    rec = ctl.attempts(looping)[-1]
    assert rec.abandoned is False and rec.failure_kind is None

    assert [h.result(timeout=WAIT) for h in squares] == [i * i for i in range(50)]
    assert pausable.result(timeout=WAIT) == "resumed-ok"
    statuses = [e.to_status for e in ctl.events(pausable) if hasattr(e, "to_status")]
    assert S.PAUSED in statuses and statuses[-1] is S.SUCCEEDED
    assert any(r.line == "resumed-ok started" for r in ctl.logs(pausable))
    assert ctl.get(squares[0]).progress is not None


def test_control_keeps_working_for_the_next_task_after_pause_resume_stop(
    ctl: cn.Controller,
) -> None:
    """A task started after another one was paused, resumed and stopped still starts,
    pauses and stops (a regression: the second task once stayed STARTING forever)."""
    for round_ in range(2):
        h = ctl.submit(T.loop_until_stopped, name=f"loop-{round_}")
        assert poll_until(lambda h=h: ctl.get(h).status is S.RUNNING, WAIT), ctl.get(h)
        ctl.pause(h, wait=True)
        assert ctl.get(h).status is S.PAUSED
        ctl.resume(h)
        assert poll_until(lambda h=h: ctl.get(h).status is S.RUNNING, WAIT), ctl.get(h)
        h.stop()
        assert h.wait(WAIT).status is S.STOPPED


def test_after_and_pipelines(ctl: cn.Controller) -> None:
    a = ctl.submit(T.square, 4)
    b = ctl.submit(T.plus_upstream, "square", 1, after=[a])
    assert b.result(timeout=WAIT) == 17

    pipe = Pipeline("dask-pipe")
    first = pipe.add(T.square, args=(3,), name="three")
    second = pipe.add(T.plus_upstream, args=("three", 100), deps=[first], name="more")
    run = pipe.submit(ctl)
    run.wait(WAIT)
    assert run.result(second, timeout=WAIT) == 109
    assert ctl.get(run.handle(second)).executor == "dask"


def test_forced_stop_restarts_the_worker_and_is_recorded_stopped(
    ctl: cn.Controller, dask_client: Any
) -> None:
    ctl.stop_grace = 0.5
    h = ctl.submit(T.stubborn, 600.0)
    assert poll_until(lambda: (p := ctl.get(h).progress) is not None and p.done == 1, WAIT)
    h.stop()
    assert h.wait(WAIT)
    snap = ctl.get(h)
    assert snap.status is S.STOPPED
    rec = ctl.attempts(h)[-1]
    assert rec.abandoned is False and rec.failure_kind is None
    assert snap.outcome is not None
    assert snap.outcome["detail"] == "terminated after the stop window"
    # the nanny brings a fresh worker back, and work goes on (a worker still starting
    # up on a loaded machine can be recycled by its nanny: the probe may retry)
    dask_client.wait_for_workers(2, timeout=WAIT)
    probe = ctl.submit(T.square, 9, retry=cn.RetryPolicy(max_attempts=3))
    assert probe.result(timeout=WAIT) == 81


def test_a_worker_that_cannot_be_killed_is_abandoned_honestly() -> None:
    distributed = pytest.importorskip("distributed")
    # threads inside this very process: killing the worker would kill us
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        ctl = cn.Controller(executor=DaskExecutor(client), stop_grace=0.3)
        try:
            h = ctl.submit(T.stubborn, 6.0)  # long enough to outlast a late progress report + grace
            assert poll_until(lambda: (p := ctl.get(h).progress) is not None and p.done == 1, WAIT)
            h.stop()
            assert h.wait(WAIT)
            snap = ctl.get(h)
            assert snap.status is S.LOST
            assert snap.failure is not None and snap.failure.kind is FailureKind.LOST
            assert ctl.attempts(h)[-1].abandoned is True
            # the abandoned attempt comes back later; its LOST record stands
            assert poll_until(
                lambda: any(
                    "returned later" in str(getattr(e, "message", "")) for e in ctl.events(h)
                ),
                WAIT,
            )
            assert ctl.get(h).status is S.LOST
        finally:
            ctl.close()


def test_default_is_a_lazy_local_cluster_sized_for_two_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import distributed

    made: dict[str, Any] = {}

    class FakeCluster:
        def __init__(self, **kw: Any) -> None:
            made["cluster"] = kw

        def close(self) -> None:
            made["cluster_closed"] = True

    class FakeClient:
        def __init__(self, target: Any, **kw: Any) -> None:
            made["client_target"] = target

        def submit(self) -> None:
            raise AssertionError("not used")

        def subscribe_topic(self, topic: str, handler: Any) -> None:
            made.setdefault("subscribed", []).append(topic)

        def unsubscribe_topic(self, topic: str) -> None:
            made.setdefault("unsubscribed", []).append(topic)

        def close(self) -> None:
            made["client_closed"] = True

    class FakePrimitive:
        def __init__(self, name: str, client: Any = None) -> None:
            self.name = name

        def set(self, value: Any) -> None:
            made.setdefault("set", []).append((self.name, value))

        def delete(self) -> None:
            pass

    monkeypatch.setattr(distributed, "LocalCluster", FakeCluster)
    monkeypatch.setattr(distributed, "Client", FakeClient)
    monkeypatch.setattr(distributed, "Variable", FakePrimitive)
    monkeypatch.setattr(distributed, "Queue", FakePrimitive)
    ex = DaskExecutor()
    assert ex.client is None and "cluster" not in made  # nothing starts until needed
    ex.start()
    assert made["cluster"] == {
        "n_workers": 2,
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": ":0",  # a free port: 8787 may be taken (dask would warn)
    }
    assert isinstance(made["client_target"], FakeCluster)
    assert made["subscribed"] == [REPORT_TOPIC]  # reports are pushed to us
    ex.shutdown()
    assert made["unsubscribed"] == [REPORT_TOPIC]
    assert made.get("client_closed") and made.get("cluster_closed")  # ours: we close it


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"scheduler address or a distributed\.Client"):
        DaskExecutor(42)
    with pytest.raises(ConfigurationError, match="n_workers"):
        DaskExecutor(n_workers=0)
    with pytest.raises(ConfigurationError, match="poll_interval"):
        DaskExecutor(poll_interval=0)

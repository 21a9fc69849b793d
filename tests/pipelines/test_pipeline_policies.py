"""Run-level semantics: FAIL_FAST, ALL_SETTLED, quorum(n); pause / resume / stop of a
whole run; the run's status events and summary."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from pipe_helpers import DEADLINE, Calls, Gate, wait_status, wait_until

from chongming_nb import (
    AggregationPolicy,
    ConcurrencyPolicy,
    Controller,
    FailureKind,
    PipelineRunStatusChanged,
    TaskStatus,
)
from chongming_nb.control.pipeline import Pipeline, PipelineRunStatus

S = TaskStatus
R = PipelineRunStatus


def boom(ctx: Any) -> None:
    raise ValueError("boom")


def test_fail_fast_cancels_downstream_and_stops_dispatching(
    make_ctl: Callable[..., Controller], gates: Callable[[], Gate]
) -> None:
    # one slot: the failing node runs first, everything else is still waiting
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    calls = Calls()
    p = Pipeline("ff", on_failure=AggregationPolicy.FAIL_FAST)

    def ok(ctx: Any, name: str) -> str:
        calls.hit(name)
        return name

    bad = p.add(boom, name="bad")
    down = p.add(ok, args=("down",), deps=[bad], name="down")
    down2 = p.add(ok, args=("down2",), deps=[down], name="down2")
    other = p.add(ok, args=("other",), name="other")
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.FAILED
    assert calls.counts == {}  # nothing started after the failure
    assert run.handle(bad).status is S.FAILED
    for n in (down, down2):
        snap = run.handle(n).snapshot
        assert snap.status is S.CANCELLED
        assert snap.failure is not None and snap.failure.kind is FailureKind.DEPENDENCY_FAILED
    snap = run.handle(other).snapshot
    assert snap.status is S.CANCELLED
    assert snap.failure is not None and snap.failure.kind is FailureKind.CANCELLED
    assert "bad" in (snap.failure.message or "")
    summary = run.summary()
    assert summary["counts"] == {"failed": 1, "cancelled": 3}
    assert summary["first_failure"]["node"] == "bad"
    assert summary["first_failure"]["kind"] == "exception"
    assert "ValueError: boom" in summary["first_failure"]["message"]
    assert [c["node"] for c in summary["failure_chain"]] == ["bad", "down", "down2"]


def test_fail_fast_lets_running_nodes_finish(ctl: Controller, gates: Callable[[], Gate]) -> None:
    slow = gates()
    p = Pipeline("ff2")
    s = p.add(slow, args=("slow",), name="slow")
    after_slow = p.add(lambda ctx: 1, deps=[s], name="after_slow")
    trigger = gates()
    b = p.add(trigger, name="trigger")
    bad = p.add(boom, deps=[b], name="bad")
    run = p.submit(ctl)
    slow.entered.wait(DEADLINE)
    trigger.release()
    wait_status(ctl, run.handle(bad).id, S.FAILED)
    # the run is failing but the running node is not killed
    assert run.handle(s).status is S.RUNNING
    slow.release()
    assert run.wait(DEADLINE) is R.FAILED
    assert run.handle(s).status is S.SUCCEEDED
    # its dependant was never dispatched: the run stopped dispatching
    assert run.handle(after_slow).status is S.CANCELLED
    assert ctl.attempts(run.handle(after_slow).id) == []


def test_fail_fast_does_not_retry_after_the_failure(ctl: Controller) -> None:
    tries = Calls()
    p = Pipeline("ff3")

    def flaky(ctx: Any) -> None:
        tries.hit("flaky")
        raise RuntimeError("again")

    p.add(boom, name="bad")
    p.add(flaky, name="flaky", retry=5)
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.FAILED
    # the flaky node may have started before the failure, but is not retried after it
    assert tries.counts.get("flaky", 0) <= 1
    frame = run.to_frame().set_index("node")
    assert frame.loc["flaky", "status"] in ("cancelled", "failed")


def test_all_settled_runs_every_branch(ctl: Controller) -> None:
    calls = Calls()
    p = Pipeline("as", on_failure=AggregationPolicy.ALL_SETTLED)

    def ok(ctx: Any, name: str) -> str:
        calls.hit(name)
        return name

    bad = p.add(boom, name="bad")
    down = p.add(ok, args=("down",), deps=[bad], name="down")
    for i in range(5):
        p.add(ok, args=(f"o{i}",), name=f"o{i}")
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.FAILED
    assert sorted(calls.counts) == [f"o{i}" for i in range(5)]
    snap = run.handle(down).snapshot
    assert snap.status is S.CANCELLED
    assert snap.failure is not None and snap.failure.kind is FailureKind.DEPENDENCY_FAILED
    assert run.summary()["counts"] == {"failed": 1, "cancelled": 1, "succeeded": 5}


@pytest.mark.parametrize(("n", "expected"), [(2, R.SUCCEEDED), (3, R.FAILED)])
def test_quorum(ctl: Controller, n: int, expected: PipelineRunStatus) -> None:
    p = Pipeline("q", on_failure=AggregationPolicy.quorum(n))
    p.add(lambda ctx: 1, name="m1")
    p.add(boom, name="m2")
    p.add(lambda ctx: 3, name="m3")
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is expected
    assert run.summary()["counts"] == {"succeeded": 2, "failed": 1}


def test_run_status_events_are_published(ctl: Controller) -> None:
    seen: list[PipelineRunStatusChanged] = []
    ctl.watch(seen.append, (PipelineRunStatusChanged,))
    p = Pipeline("events")
    a = p.add(lambda ctx: 1, name="a")
    p.add(lambda ctx: 2, deps=[a], name="b")
    run = p.submit(ctl)
    run.wait(DEADLINE)
    ctl.flush()
    mine = [e for e in seen if e.run_id == run.id]
    assert [(e.from_status, e.to_status) for e in mine] == [
        (None, "running"),
        ("running", "succeeded"),
    ]
    assert mine[-1].counts == {"succeeded": 2}


def test_pause_resume_cascade_and_hold_dispatch(ctl: Controller, gates: Callable[[], Gate]) -> None:
    g = gates()
    calls = Calls()
    p = Pipeline("pause")
    running = p.add(g, name="running")

    def later(ctx: Any, name: str) -> str:
        calls.hit(name)
        return name

    queued = [p.add(later, args=(f"q{i}",), name=f"q{i}") for i in range(8)]
    p.add(later, args=("after",), deps=[running], name="after")
    run = p.submit(ctl)
    g.entered.wait(DEADLINE)
    run.pause()
    rid = run.handle(running).id
    wait_status(ctl, rid, S.PAUSED)  # paused in place at its checkpoint
    wait_until(ctl, lambda: run.status is R.PAUSED, what="run paused")
    # queued ones are paused at once; one that was already running (no checkpoint in
    # its body) just finishes
    wait_until(
        ctl,
        lambda: all(run.handle(n).status in (S.PAUSED, S.SUCCEEDED) for n in queued),
        what="queued nodes paused",
    )
    started_before = dict(calls.counts)
    g.release()  # the paused task stays paused even though its gate is open
    assert ctl.get(rid).status is S.PAUSED
    assert calls.counts == started_before
    run.resume()
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert set(calls.counts) == {f"q{i}" for i in range(8)} | {"after"}
    assert all(v == 1 for v in calls.counts.values())


def test_stop_cascades_to_every_non_terminal_task(
    ctl: Controller, gates: Callable[[], Gate]
) -> None:
    g = gates()
    p = Pipeline("stop")
    a = p.add(g, name="a")
    b = p.add(lambda ctx: 1, deps=[a], name="b")
    m = p.map(lambda ctx, x: x, items=lambda up: [1, 2], deps=[a], name="m")
    c = p.add(lambda ctx: 1, deps=[m], name="c")
    run = p.submit(ctl)
    g.entered.wait(DEADLINE)
    run.stop()
    assert run.wait(DEADLINE) is R.STOPPED
    assert run.handle(a).status is S.STOPPED
    assert run.handle(b).status is S.STOPPED
    # the map never expanded; its dependant exists and did not run
    assert run.handle(c).status in (S.CANCELLED, S.STOPPED)
    assert ctl.attempts(run.handle(b).id) == []
    counts = run.summary()["counts"]
    assert set(counts) <= {"stopped", "cancelled"}


def test_run_repr_and_display(ctl: Controller) -> None:
    p = Pipeline("show")
    p.add(lambda ctx: 1, name="a")
    run = p.submit(ctl)
    run.wait(DEADLINE)
    assert run.id in repr(run) and "succeeded" in repr(run)
    bundle = run._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "text/plain" in data


def test_concurrent_runs_do_not_interfere(ctl: Controller) -> None:
    p = Pipeline("many", on_failure=AggregationPolicy.FAIL_FAST)
    a = p.add(lambda ctx: 1, name="a")
    p.add(lambda ctx: 2, deps=[a], name="b")
    q = Pipeline("failing")
    q.add(boom, name="bad")
    runs = [p.submit(ctl) for _ in range(5)] + [q.submit(ctl) for _ in range(2)]
    results = [r.wait(DEADLINE) for r in runs]
    assert results == [R.SUCCEEDED] * 5 + [R.FAILED] * 2
    assert threading.active_count() < 200


def test_a_finished_run_lets_its_tasks_be_retried_as_ordinary_tasks(ctl: Controller) -> None:
    state = {"fail": True}

    def once(ctx: Any) -> str:
        if state["fail"]:
            raise RuntimeError("first time")
        return "second time"

    p = Pipeline("retry-later")
    a = p.add(once, name="once")
    p.add(lambda ctx: 1, name="other", deps=[a])
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.FAILED
    state["fail"] = False
    tid = run.handle(a).id
    ctl.retry(tid, force=True)
    assert ctl.wait(tid, DEADLINE).status is S.SUCCEEDED  # not held, not cancelled
    assert run.status is R.FAILED  # the run's record stands

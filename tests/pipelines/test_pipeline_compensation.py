"""Compensation (rollback): on failure with rollback=True, the succeeded nodes'
compensations run in reverse order of success, each at most once, recorded as
CompensationRan events; one that raises is recorded and the rest still run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from pipe_helpers import DEADLINE

from chongming_nb import (
    AggregationPolicy,
    CompensationRan,
    ConcurrencyPolicy,
    ConfigurationError,
    Controller,
    task,
)
from chongming_nb.control.pipeline import Pipeline, PipelineRunStatus

R = PipelineRunStatus


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.undone: list[Any] = []

    def undo(self, output: Any) -> None:
        with self.lock:
            self.undone.append(output)


def boom(ctx: Any) -> None:
    raise ValueError("boom")


def chain_with_failure(ledger: Ledger, n: int = 4) -> tuple[Pipeline, list[Any]]:
    """s0 -> s1 -> ... -> s{n-1} -> bad: success order is the chain order."""
    p = Pipeline("rollback")

    def step(ctx: Any, i: int) -> str:
        return f"out{i}"

    nodes: list[Any] = []
    prev = None
    for i in range(n):
        prev = p.add(
            step, args=(i,), name=f"s{i}", deps=[prev] if prev else [], compensate=ledger.undo
        )
        nodes.append(prev)
    p.add(boom, deps=[prev], name="bad", compensate=ledger.undo)
    return p, nodes


def test_compensations_run_in_reverse_order_of_success(ctl: Controller) -> None:
    ledger = Ledger()
    p, nodes = chain_with_failure(ledger)
    run = p.submit(ctl, rollback=True)
    assert run.wait(DEADLINE) is R.FAILED
    assert ledger.undone == ["out3", "out2", "out1", "out0"]  # the failed node is not undone
    comps = run.compensations
    assert [c["node"] for c in comps] == ["s3", "s2", "s1", "s0"]
    assert all(c["ok"] for c in comps)
    # recorded with each task's events
    for n in nodes:
        evs = ctl.events(run.handle(n).id, types=[CompensationRan])
        assert len(evs) == 1 and evs[0].ok
    # each at most once, even when asked again
    run.rollback()
    assert len(ledger.undone) == 4
    assert run.summary()["compensations"] == comps


def test_reverse_order_follows_actual_success_order(make_ctl: Callable[..., Controller]) -> None:
    # independent nodes on one slot: they succeed in submission order
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    ledger = Ledger()
    p = Pipeline("order", on_failure=AggregationPolicy.ALL_SETTLED)
    for name in ("c", "a", "b"):
        p.add(lambda ctx, n=name: n, name=name, compensate=ledger.undo)
    p.add(boom, name="z")
    run = p.submit(ctl, rollback=True)
    assert run.wait(DEADLINE) is R.FAILED
    frame = run.to_frame()
    done = frame[frame["status"] == "succeeded"].sort_values("ended")
    assert ledger.undone == list(reversed(list(done["node"])))


def test_a_raising_compensation_is_recorded_and_the_rest_still_run(ctl: Controller) -> None:
    undone: list[str] = []

    def fragile(output: Any) -> None:
        raise RuntimeError(f"cannot undo {output}")

    @task(compensate=lambda out: undone.append(out))
    def first(ctx: Any) -> str:
        return "first"

    p = Pipeline("fragile")
    a = p.add(first)
    b = p.add(lambda ctx: "second", deps=[a], name="second", compensate=fragile)
    c = p.add(lambda ctx: "third", deps=[b], name="third", compensate=lambda: undone.append("3"))
    p.add(boom, deps=[c], name="bad")
    run = p.submit(ctl, rollback=True)
    assert run.wait(DEADLINE) is R.FAILED
    assert undone == ["3", "first"]  # zero-argument compensations are called without one
    comps = {c["node"]: c for c in run.compensations}
    assert comps["second"]["ok"] is False
    assert "RuntimeError: cannot undo second" in comps["second"]["error"]
    ev = ctl.events(run.handle(b).id, types=[CompensationRan])
    assert len(ev) == 1 and not ev[0].ok and "cannot undo" in (ev[0].error or "")


def test_no_rollback_without_the_flag_and_none_on_success(ctl: Controller) -> None:
    ledger = Ledger()
    p, _ = chain_with_failure(ledger, n=2)
    assert p.submit(ctl).wait(DEADLINE) is R.FAILED
    assert ledger.undone == []
    q = Pipeline("fine")
    q.add(lambda ctx: 1, name="a", compensate=ledger.undo)
    assert q.submit(ctl, rollback=True).wait(DEADLINE) is R.SUCCEEDED
    assert ledger.undone == []


def test_rollback_by_hand_after_stop_and_not_while_busy(ctl: Controller) -> None:
    ledger = Ledger()
    gate = threading.Event()
    p = Pipeline("manual")
    a = p.add(lambda ctx: "a", name="a", compensate=ledger.undo)

    def hold(ctx: Any) -> None:
        while not gate.wait(0.005):
            ctx.checkpoint()

    p.add(hold, deps=[a], name="hold")
    run = p.submit(ctl)
    with pytest.raises(ConfigurationError, match="before rollback"):
        run.rollback()
    run.handle(a).wait(DEADLINE)
    run.stop()
    assert run.wait(DEADLINE) is R.STOPPED
    assert run.rollback(timeout=DEADLINE)[0]["node"] == "a"
    assert ledger.undone == ["a"]
    gate.set()


def test_map_children_are_compensated_per_item(ctl: Controller) -> None:
    ledger = Ledger()
    p = Pipeline("maprb")
    m = p.map(lambda ctx, x: x * 2, items=[1, 2, 3], name="m", compensate=ledger.undo)
    p.add(boom, deps=[m], name="bad")
    run = p.submit(ctl, rollback=True)
    assert run.wait(DEADLINE) is R.FAILED
    assert sorted(ledger.undone) == [2, 4, 6]
    assert {c["node"] for c in run.compensations} == {"m[0]", "m[1]", "m[2]"}

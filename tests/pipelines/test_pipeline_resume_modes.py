"""Named modes select an ordered subset of nodes; resume_from re-runs exactly the nodes
that did not succeed, fed with the persisted outputs of those that did — also from a new
controller on the same store (a kernel crash)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pipe_helpers import DEADLINE, Calls

from chongming_nb import (
    AggregationPolicy,
    ConcurrencyPolicy,
    Controller,
    SqliteStore,
    TaskWarning,
)
from chongming_nb.control.pipeline import Pipeline, PipelineRunStatus
from chongming_nb.control.pipeline._record import run_spec

R = PipelineRunStatus


def etl(calls: Calls, fail: set[str], **kw: Any) -> Pipeline:
    """extract -> transform -> load; extract -> side; (load, side) -> report."""
    p = Pipeline("etl", **kw)

    def extract(ctx: Any) -> list[int]:
        calls.hit("extract")
        return [1, 2, 3]

    def transform(ctx: Any) -> list[int]:
        calls.hit("transform")
        if "transform" in fail:
            raise RuntimeError("transform broke")
        return [x * 10 for x in ctx.upstream("extract")]

    def side(ctx: Any) -> int:
        calls.hit("side")
        return len(ctx.upstream("extract"))

    def load(ctx: Any) -> int:
        calls.hit("load")
        if "load" in fail:
            raise RuntimeError("load broke")
        return sum(ctx.upstream("transform"))

    def report(ctx: Any) -> str:
        calls.hit("report")
        return f"{ctx.upstream('load')}/{ctx.upstream('side')}"

    a = p.add(extract)
    t = p.add(transform, deps=[a])
    s = p.add(side, deps=[a])
    ld = p.add(load, deps=[t])
    p.add(report, deps=[ld, s])
    return p


def test_modes_select_an_ordered_subset(make_ctl: Callable[..., Controller]) -> None:
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    calls = Calls()
    modes = {
        "core": ["extract", "side"],
        "standard": ["extract", "side", "transform", "load", "report"],
    }
    p = etl(calls, set(), modes=modes)
    run = p.submit(ctl, mode="core")
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert calls.order == ["extract", "side"]
    assert list(run.to_frame()["node"]) == ["extract", "side"]
    assert run.summary()["mode"] == "core"

    calls2 = Calls()
    p2 = etl(calls2, set(), modes=modes)
    run2 = p2.submit(ctl, mode="standard")
    assert run2.wait(DEADLINE) is R.SUCCEEDED
    assert calls2.order == ["extract", "side", "transform", "load", "report"]
    assert run2.result("report") == "60/3"


def test_resume_runs_only_what_did_not_succeed(ctl: Controller) -> None:
    calls = Calls()
    fail = {"load"}
    p = etl(calls, fail, on_failure=AggregationPolicy.ALL_SETTLED)
    first = p.submit(ctl)
    assert first.wait(DEADLINE) is R.FAILED
    assert sorted(calls.counts) == ["extract", "load", "side", "transform"]

    fail.clear()
    calls.counts.clear()
    second = p.submit(ctl, resume_from=first.id)
    assert second.wait(DEADLINE) is R.SUCCEEDED
    # exactly the nodes that did not succeed ran again
    assert sorted(calls.counts) == ["load", "report"]
    assert second.result("report") == "60/3"  # fed by restored outputs
    summary = second.summary()
    assert sorted(summary["restored"]) == ["extract", "side", "transform"]
    assert summary["resumed_from"] == first.id
    frame = second.to_frame().set_index("node")
    assert bool(frame.loc["extract", "restored"]) and not bool(frame.loc["load", "restored"])


def test_an_unrestorable_output_is_named_and_rerun(ctl: Controller) -> None:
    calls = Calls()
    fail = {"load"}
    p = etl(calls, fail, on_failure=AggregationPolicy.ALL_SETTLED)
    first = p.submit(ctl)
    first.wait(DEADLINE)
    # corrupt one stored output
    spec = run_spec(first)
    out = next(n["output"] for n in spec["nodes"] if n["name"] == "transform")
    Path(out).write_bytes(b"not a pickle")
    fail.clear()
    calls.counts.clear()
    second = p.submit(ctl, resume_from=first.id)
    assert second.wait(DEADLINE) is R.SUCCEEDED
    assert sorted(calls.counts) == ["load", "report", "transform"]
    warns = ctl.events(second.handle("transform").id, types=[TaskWarning])
    assert len(warns) == 1
    assert "transform" in warns[0].message and "running it again" in warns[0].message


def test_unpicklable_output_is_not_restored(ctl: Controller) -> None:
    calls = Calls()
    p = Pipeline("locks", on_failure=AggregationPolicy.ALL_SETTLED)

    def make_lock(ctx: Any) -> Any:
        calls.hit("lock")
        return threading.Lock()  # cannot be pickled

    a = p.add(make_lock, name="lock")
    p.add(lambda ctx: 1 / 0, deps=[a], name="div")
    first = p.submit(ctl)
    first.wait(DEADLINE)
    assert first.handle("lock").status == "succeeded"  # the task itself is fine
    calls.counts.clear()
    second = p.submit(ctl, resume_from=first.id)
    second.wait(DEADLINE)
    assert calls.counts == {"lock": 1}  # no stored output: it ran again


def test_resume_after_a_crash_from_a_new_controller(tmp_path: Path) -> None:
    db = tmp_path / "tasks.sqlite"
    arts = tmp_path / "artifacts"
    calls = Calls()
    fail = {"transform"}
    ctl1 = Controller(
        store=SqliteStore(db), executor="thread", artifacts_root=arts,
        concurrency=ConcurrencyPolicy(max_parallel=4),
    )  # fmt: skip
    try:
        p = etl(calls, fail)
        first = p.submit(ctl1)
        assert first.wait(DEADLINE) is R.FAILED
        run_id = first.id
        ctl1.flush()
    finally:
        ctl1.close()
    rec = SqliteStore(db).get_run(run_id)
    assert rec is not None and rec.status == "failed"
    assert rec.spec["succeeded"] == ["extract"] or set(rec.spec["succeeded"]) == {
        "extract",
        "side",
    }

    # "the kernel restarted": a new controller, a new pipeline object, the same store
    from chongming_nb.control.pipeline._resume import RUNS

    RUNS.clear()
    fail.clear()
    calls.counts.clear()
    ctl2 = Controller(
        store=SqliteStore(db), executor="thread", artifacts_root=arts,
        concurrency=ConcurrencyPolicy(max_parallel=4),
    )  # fmt: skip
    try:
        p2 = etl(calls, fail)
        second = p2.submit(ctl2, resume_from=run_id)
        assert second.wait(DEADLINE) is R.SUCCEEDED
        succeeded_before = set(rec.spec["succeeded"])
        assert set(calls.counts) == {"extract", "transform", "side", "load", "report"} - (
            succeeded_before
        )
        assert second.result("report") == "60/3"
    finally:
        ctl2.close()


def test_rolled_back_nodes_are_not_restored(ctl: Controller) -> None:
    calls = Calls()
    undone: list[Any] = []
    p = Pipeline("rb")

    def a(ctx: Any) -> str:
        calls.hit("a")
        return "a"

    fail = {"b"}

    def b(ctx: Any) -> str:
        calls.hit("b")
        if "b" in fail:
            raise RuntimeError("no")
        return "b"

    na = p.add(a, compensate=undone.append)
    p.add(b, deps=[na])
    first = p.submit(ctl, rollback=True)
    assert first.wait(DEADLINE) is R.FAILED
    assert undone == ["a"]
    fail.clear()
    calls.counts.clear()
    second = p.submit(ctl, resume_from=first.id)
    assert second.wait(DEADLINE) is R.SUCCEEDED
    assert calls.counts == {"a": 1, "b": 1}  # a's effects were undone: it runs again


def test_custom_serializer(ctl: Controller, tmp_path: Path) -> None:
    import json

    class JsonSerializer:
        suffix = ".json"

        def dump(self, value: Any, path: Path) -> None:
            path.write_text(json.dumps(value))

        def load(self, path: Path) -> Any:
            return json.loads(path.read_text())

    calls = Calls()
    fail = {"load"}
    p = etl(calls, fail, serializer=JsonSerializer(), on_failure=AggregationPolicy.ALL_SETTLED)
    first = p.submit(ctl)
    first.wait(DEADLINE)
    assert first.outputs_dir is not None
    assert sorted(f.suffix for f in first.outputs_dir.glob("*.json")) == [".json"] * 3
    fail.clear()
    calls.counts.clear()
    second = p.submit(ctl, resume_from=first)
    assert second.wait(DEADLINE) is R.SUCCEEDED
    assert sorted(calls.counts) == ["load", "report"]


def test_bad_serializer_is_refused() -> None:
    from chongming_nb import ConfigurationError

    with pytest.raises(ConfigurationError, match="serializer"):
        Pipeline("p", serializer=object())  # type: ignore[arg-type]


def test_a_succeeded_map_is_restored_whole(ctl: Controller) -> None:
    calls = Calls()
    fail = {"total"}
    p = Pipeline("mapresume")

    def square(ctx: Any, x: int) -> int:
        calls.hit(f"square{x}")
        return x * x

    def total(ctx: Any) -> int:
        calls.hit("total")
        if "total" in fail:
            raise RuntimeError("not yet")
        return sum(ctx.upstream("square"))

    m = p.map(square, items=[1, 2, 3], name="square")
    p.add(total, deps=[m])
    first = p.submit(ctl)
    assert first.wait(DEADLINE) is R.FAILED
    fail.clear()
    calls.counts.clear()
    second = p.submit(ctl, resume_from=first.id)
    assert second.wait(DEADLINE) is R.SUCCEEDED
    assert calls.counts == {"total": 1}  # no child ran again
    assert second.result("total") == 14
    roles = list(second.to_frame()["role"])
    assert roles == ["node", "node"]  # the map came back as one restored task

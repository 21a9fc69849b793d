"""DAG shapes on a real threaded controller: diamond, long chain, wide fan-out,
conditional nodes, dynamic fan-out and join modes."""

from __future__ import annotations

import threading
from typing import Any

from pipe_helpers import DEADLINE, Calls

from chongming_nb import Controller, FailureKind, JoinMode, TaskStatus
from chongming_nb.control.pipeline import Pipeline, PipelineRunStatus

S = TaskStatus
R = PipelineRunStatus


def test_diamond_injects_upstream_results(ctl: Controller) -> None:
    p = Pipeline("diamond")

    def src(ctx: Any) -> int:
        return 10

    def left(ctx: Any) -> int:
        return ctx.upstream("src") + 1

    def right(ctx: Any) -> int:
        return ctx.upstream(a) * 2  # by Node

    def join(ctx: Any) -> tuple[int, int]:
        return ctx.upstream(b), ctx.upstream("right")

    a = p.add(src)
    b = p.add(left, deps=[a])
    c = p.add(right, deps=[a])
    d = p.add(join, deps=[b, c])
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert run.result(d) == (11, 20)
    assert run.status == "succeeded"
    frame = run.to_frame()
    assert list(frame["node"]) == ["src", "left", "right", "join"]
    assert (frame["status"] == "succeeded").all()
    assert (frame["attempts"] == 1).all()
    assert (frame["duration"].dt.total_seconds() >= 0).all()
    # the controller's graph has the run's edges
    g = ctl.graph()
    ids = {n.name: run.handle(n).id for n in (a, b, c, d)}
    for x, y in [("src", "left"), ("src", "right"), ("left", "join"), ("right", "join")]:
        assert (ids[x], ids[y]) in g["edges"]


def test_long_chain_runs_in_order(ctl: Controller) -> None:
    calls = Calls()
    p = Pipeline("chain")

    def step(ctx: Any, i: int) -> int:
        calls.hit(str(i))
        return i

    prev = None
    for i in range(150):
        prev = p.add(step, args=(i,), name=f"s{i}", deps=[prev] if prev else [])
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert calls.order == [str(i) for i in range(150)]
    assert run.summary()["counts"] == {"succeeded": 150}


def test_wide_fan_out_honours_max_parallel(ctl: Controller) -> None:
    lock = threading.Lock()
    live = [0]
    peak = [0]

    def work(ctx: Any, x: int) -> int:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        try:
            # give the others a chance to overlap if the limit were not enforced
            for _ in range(200):
                ctx.checkpoint()
            return x * x
        finally:
            with lock:
                live[0] -= 1

    p = Pipeline("wide")
    m = p.map(work, items=range(120), max_parallel=2)
    total = p.add(lambda ctx: sum(ctx.upstream("work")), deps=[m], name="total")
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert run.result(m) == [x * x for x in range(120)]
    assert run.result(total) == sum(x * x for x in range(120))
    assert 1 <= peak[0] <= 2
    frame = run.to_frame()
    assert (frame["role"] == "child").sum() == 120
    # the map's tag limit is gone once the run is over
    assert not ctl._admission.run_limits


def test_wide_independent_nodes_respect_the_controller_limit(ctl: Controller) -> None:
    lock = threading.Lock()
    live = [0]
    peak = [0]

    def work(ctx: Any) -> None:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        for _ in range(100):
            ctx.checkpoint()
        with lock:
            live[0] -= 1

    p = Pipeline("flat")
    for i in range(60):
        p.add(work, name=f"w{i}")
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert peak[0] <= 4


def test_conditional_node_is_skipped_with_condition_false(ctl: Controller) -> None:
    calls = Calls()
    p = Pipeline("cond", on_failure=__import__("chongming_nb").AggregationPolicy.ALL_SETTLED)

    def rows(ctx: Any) -> list[int]:
        return []

    def load(ctx: Any) -> str:
        calls.hit("load")
        return "loaded"

    def report(ctx: Any) -> str:
        calls.hit("report")
        return "report"

    a = p.add(rows)
    b = p.add(load, deps=[a], when=lambda up: len(up[a]) > 0)
    c = p.add(report, deps=[a], when=lambda up: len(up["rows"]) == 0)
    d = p.add(lambda ctx: "after", deps=[b], name="after_load")
    e = p.add(lambda ctx: "always", deps=[b], name="always", join=JoinMode.ALL_DONE)
    run = p.submit(ctl)
    run.wait(DEADLINE)
    snap_b = run.handle(b).snapshot
    assert snap_b.status is S.SKIPPED
    assert snap_b.failure is not None and snap_b.failure.kind is FailureKind.CONDITION_FALSE
    assert run.handle(c).status is S.SUCCEEDED
    assert calls.counts == {"report": 1}
    # a skipped upstream is not a success: an all_succeeded dependant is cancelled...
    snap_d = run.handle(d).snapshot
    assert snap_d.status is S.CANCELLED
    assert snap_d.failure is not None and snap_d.failure.kind is FailureKind.DEPENDENCY_FAILED
    # ...an all_done one runs
    assert run.result(e) == "always"


def test_dynamic_fan_out_from_a_callable_and_from_a_node(ctl: Controller) -> None:
    p = Pipeline("dyn")
    src = p.add(lambda ctx: {"ids": [3, 1, 2]}, name="src")
    m1 = p.map(lambda ctx, x: x * 10, items=lambda up: up[src]["ids"], deps=[src], name="m1")
    lst = p.add(lambda ctx: ["a", "b"], name="lst")
    m2 = p.map(lambda ctx, s: s.upper(), items=lst, name="m2")  # the Node is an implicit dep
    empty = p.map(lambda ctx, x: x, items=lambda up: [], deps=[src], name="empty")
    last = p.add(
        lambda ctx: (ctx.upstream("m1"), ctx.upstream(m2), ctx.upstream(empty)),
        deps=[m1, m2, empty],
        name="last",
    )
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert run.result(last) == ([30, 10, 20], ["A", "B"], [])
    assert "lst" in m2.deps


def test_failing_items_callable_fails_the_map_and_its_dependants(ctl: Controller) -> None:
    p = Pipeline("badmap")
    src = p.add(lambda ctx: 7, name="src")
    m = p.map(lambda ctx, x: x, items=lambda up: up[src], deps=[src], name="m")  # 7: not a list
    after = p.add(lambda ctx: 1, deps=[m], name="after")
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.FAILED
    frame = run.to_frame().set_index("node")
    assert frame.loc["m.items", "status"] == "failed"
    snap = run.handle(after).snapshot
    assert snap.status is S.CANCELLED
    assert snap.failure is not None and snap.failure.kind is FailureKind.DEPENDENCY_FAILED
    first = run.summary()["first_failure"]
    assert first["node"] == "m.items"
    assert "items must be a list" in first["message"]


def test_any_succeeded_join(ctl: Controller) -> None:
    from chongming_nb import AggregationPolicy

    p = Pipeline("any", on_failure=AggregationPolicy.ALL_SETTLED)

    def boom(ctx: Any) -> None:
        raise RuntimeError("mirror down")

    a = p.add(boom, name="mirror1")
    b = p.add(lambda ctx: "data", name="mirror2")
    c = p.add(lambda ctx: "got it", deps=[a, b], join=JoinMode.ANY_SUCCEEDED, name="use")
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.FAILED  # a node failed: the run reports it
    assert run.result(c) == "got it"


def test_async_node_and_outputs_of_a_run(ctl: Controller) -> None:
    p = Pipeline("async")

    async def fetch(ctx: Any) -> int:
        return 5

    a = p.add(fetch)
    run = p.submit(ctl)
    assert run.wait(DEADLINE) is R.SUCCEEDED
    assert run.result(a) == 5
    assert run.outputs_dir is not None
    assert (run.outputs_dir / "manifest.jsonl").exists()


def test_graph_includes_the_dag_built_cell_by_cell(ctl: Controller) -> None:
    h1 = ctl.submit(lambda: 1)
    h2 = ctl.submit(lambda: 2)
    h3 = ctl.submit(lambda: 3, after=[h1, h2])
    p = Pipeline("mixed")
    a = p.add(lambda ctx: 1, name="a")
    p.add(lambda ctx: 2, deps=[a], name="b")
    run = p.submit(ctl)
    run.wait(DEADLINE)
    h3.wait(DEADLINE)
    g = ctl.graph()
    assert {(h1.id, h3.id), (h2.id, h3.id)} <= set(g["edges"])
    assert (run.handle("a").id, run.handle("b").id) in g["edges"]
    by_id = {n["id"]: n for n in g["nodes"]}
    assert by_id[run.handle("b").id]["pipeline_run_id"] == run.id
    assert by_id[h3.id]["pipeline_run_id"] is None


def test_to_frame_types_and_pending_nodes(ctl: Controller) -> None:
    import threading

    gate = threading.Event()

    def hold(ctx: Any) -> list[int]:
        while not gate.wait(0.005):
            ctx.checkpoint()
        return [1, 2]

    p = Pipeline("frame")
    a = p.add(hold, name="a")
    m = p.map(lambda ctx, x: x, items=a, name="m")
    p.add(lambda ctx: 0, deps=[m], name="after")
    run = p.submit(ctl)
    frame = run.to_frame()
    # the map's dependant has no task until the items are known
    pending = frame[frame["task_id"].isna()]
    assert list(pending["node"]) == ["after"]
    gate.set()
    assert run.wait(DEADLINE) is R.SUCCEEDED
    frame = run.to_frame()
    assert str(frame["status"].dtype) == "category"
    assert str(frame["started"].dtype).startswith("datetime64") and "UTC" in str(
        frame["started"].dtype
    )
    assert str(frame["duration"].dtype).startswith("timedelta64")
    assert frame["attempts"].dtype == "int64"
    assert list(frame["role"]) == ["node", "expander", "child", "child", "collector", "node"]


def test_when_can_read_any_succeeded_node_upstream(ctl: Controller) -> None:
    # seed 001's example: c depends on b only, but decides on a's result
    p = Pipeline("transitive")
    a = p.add(lambda ctx: {"row_count": 0}, name="a")
    b = p.add(lambda ctx: "t", deps=[a], name="b")
    c = p.add(lambda ctx: "loaded", deps=[b], name="c", when=lambda up: up[a]["row_count"] > 0)
    d = p.add(lambda ctx: "d", deps=[b], name="d", when=lambda up: up["a"]["row_count"] == 0)
    free = p.add(lambda ctx: 1, name="free")
    e = p.add(lambda ctx: "e", deps=[b], name="e", when=lambda up: up[free] == 1)
    run = p.submit(ctl)
    run.wait(DEADLINE)
    assert run.handle(c).status is S.SKIPPED
    assert run.result(d) == "d"
    # a node that is not upstream cannot be read (its result would be a race)
    snap = run.handle(e).snapshot
    assert snap.status is S.CANCELLED
    assert snap.failure is not None and "KeyError" in (snap.failure.message or "")

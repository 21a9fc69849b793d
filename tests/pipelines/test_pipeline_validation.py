"""Everything wrong with a pipeline is reported before any work: a clear error that names
what is wrong, and not one task created."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from chongming_nb import (
    AggregationPolicy,
    CircularDependency,
    ConfigurationError,
    Controller,
    JoinMode,
    UnknownDependency,
)
from chongming_nb.control.pipeline import Pipeline


def one(ctx: Any) -> int:
    return 1


def add(ctx: Any, x: int, y: int = 0) -> int:
    return x + y


def item(ctx: Any, x: int) -> int:
    return x


def test_unknown_dependency_is_named_and_nothing_runs(ctl: Controller) -> None:
    p = Pipeline("p")
    p.add(one, name="a")
    p.add(one, name="b", deps=["a", "nowhere"])
    with pytest.raises(UnknownDependency) as err:
        p.submit(ctl)
    assert err.value.node == "b"
    assert err.value.missing == ("nowhere",)
    assert "'nowhere'" in str(err.value)
    assert ctl.list_tasks() == []


def test_cycle_is_reported_with_its_path(ctl: Controller) -> None:
    p = Pipeline("p")
    p.add(one, name="a", deps=["c"])
    p.add(one, name="b", deps=["a"])
    p.add(one, name="c", deps=["b"])
    p.add(one, name="free")
    with pytest.raises(CircularDependency) as err:
        p.submit(ctl)
    cyc = err.value.cycle
    assert cyc[0] == cyc[-1]
    assert set(cyc) == {"a", "b", "c"}
    # every step of the reported path is a real edge (x -> y means y depends on x)
    for x, y in itertools.pairwise(cyc):
        assert x in p[y].deps
    assert " -> " in str(err.value)
    assert ctl.list_tasks() == []


def test_self_dependency_is_a_cycle() -> None:
    p = Pipeline("p")
    with pytest.raises(CircularDependency, match="a -> a"):
        p.add(one, name="a", deps=["a"])


def test_unknown_mode_is_named(ctl: Controller) -> None:
    p = Pipeline("p", modes={"core": ["a"]})
    p.add(one, name="a")
    with pytest.raises(ConfigurationError, match=r"unknown mode 'full'.*'core'"):
        p.submit(ctl, mode="full")
    assert ctl.list_tasks() == []


def test_mode_naming_an_unknown_node(ctl: Controller) -> None:
    p = Pipeline("p", modes={"core": ["a", "ghost"]})
    p.add(one, name="a")
    with pytest.raises(ConfigurationError, match="'ghost'"):
        p.submit(ctl, mode="core")
    assert ctl.list_tasks() == []


def test_mode_must_include_dependencies_and_respect_their_order(ctl: Controller) -> None:
    p = Pipeline("p", modes={"partial": ["b"], "backwards": ["b", "a"]})
    a = p.add(one, name="a")
    p.add(add, args=(1,), name="b", deps=[a])
    with pytest.raises(ConfigurationError, match="selects 'b' but not its dependency 'a'"):
        p.submit(ctl, mode="partial")
    with pytest.raises(ConfigurationError, match="lists 'b' before its dependency 'a'"):
        p.submit(ctl, mode="backwards")
    assert ctl.list_tasks() == []


@pytest.mark.parametrize("bad", [42, "yes", object()])
def test_bad_when_is_refused_at_add(bad: Any) -> None:
    p = Pipeline("p")
    a = p.add(one, name="a")
    with pytest.raises(ConfigurationError, match="when="):
        p.add(one, name="b", deps=[a], when=bad)
    assert len(p) == 1


def test_when_without_deps_is_refused() -> None:
    p = Pipeline("p")
    with pytest.raises(ConfigurationError, match="needs deps"):
        p.add(one, name="a", when=lambda up: True)


@pytest.mark.parametrize("bad", ["sometimes", 3, None])
def test_bad_join_is_refused_and_names_the_choices(bad: Any) -> None:
    p = Pipeline("p")
    a = p.add(one, name="a")
    with pytest.raises(ConfigurationError, match="all_succeeded, all_done, any_succeeded"):
        p.add(one, name="b", deps=[a], join=bad)
    assert len(p) == 1


def test_join_accepts_its_string_value() -> None:
    p = Pipeline("p")
    a = p.add(one, name="a")
    b = p.add(one, name="b", deps=[a], join="all_done")
    assert b.join is JoinMode.ALL_DONE


def test_wrong_arguments_fail_at_add() -> None:
    p = Pipeline("p")
    with pytest.raises(ConfigurationError, match="cannot be called"):
        p.add(add, args=(1, 2, 3))
    with pytest.raises(ConfigurationError, match="cannot be called"):
        p.map(add, items=[1], args=(1, 2))
    assert len(p) == 0


def test_duplicate_names_and_foreign_nodes() -> None:
    p, q = Pipeline("p"), Pipeline("q")
    p.add(one, name="a")
    with pytest.raises(ConfigurationError, match="already has a node 'a'"):
        p.add(one, name="a")
    # an unnamed node gets a fresh name
    assert p.add(one).name == "one"
    assert p.add(one).name == "one-2"
    qa = q.add(one, name="qa")
    with pytest.raises(ConfigurationError, match="belongs to pipeline 'q'"):
        p.add(one, name="x", deps=[qa])
    with pytest.raises(ConfigurationError, match="dependencies are Nodes"):
        p.add(one, name="y", deps=[3])


@pytest.mark.parametrize("items", ["abc", 5, None])
def test_map_items_must_be_a_list_node_or_callable(items: Any) -> None:
    p = Pipeline("p")
    with pytest.raises(ConfigurationError, match="items"):
        p.map(item, items=items)


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_map_max_parallel_must_be_positive_int(n: Any) -> None:
    p = Pipeline("p")
    with pytest.raises(ConfigurationError, match="max_parallel"):
        p.map(item, items=[1], max_parallel=n)


def test_quorum_that_can_never_be_reached(ctl: Controller) -> None:
    p = Pipeline("p", on_failure=AggregationPolicy.quorum(3))
    p.add(one, name="a")
    p.add(one, name="b")
    with pytest.raises(ConfigurationError, match=r"quorum\(3\) can never be reached"):
        p.submit(ctl)
    assert ctl.list_tasks() == []


def test_bad_policy_controller_and_resume(ctl: Controller) -> None:
    with pytest.raises(ConfigurationError, match="AggregationPolicy"):
        Pipeline("p", on_failure="fail_fast")  # type: ignore[arg-type]
    p = Pipeline("p")
    p.add(one, name="a")
    with pytest.raises(ConfigurationError, match="needs a Controller"):
        p.submit(object())
    with pytest.raises(ConfigurationError, match="unknown run 'run-nope'"):
        p.submit(ctl, resume_from="run-nope")
    assert ctl.list_tasks() == []


def test_plan_orders_nodes_and_creates_nothing(ctl: Controller) -> None:
    p = Pipeline("p", modes={"core": ["a", "c"]})
    p.add(one, name="c", deps=["a"])
    p.add(one, name="a")
    p.add(one, name="b")
    order = [n.name for n in p.plan()]
    assert order.index("a") < order.index("c")
    assert [n.name for n in p.plan("core")] == ["a", "c"]
    assert ctl.list_tasks() == []

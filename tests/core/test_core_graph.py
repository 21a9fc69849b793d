"""The DAG: validation with useful messages, cycle paths, topological readiness."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chongming_nb import CircularDependency, ConfigurationError, Graph, UnknownDependency


def assert_is_cycle(g_deps: dict[str, list[str]], cycle: tuple[str, ...]) -> None:
    """``cycle`` is a closed path u0 -> u1 -> ... -> u0 in execution order: each node is a
    dependency of the next one."""
    assert len(cycle) >= 2
    assert cycle[0] == cycle[-1]
    assert len(set(cycle[:-1])) == len(cycle) - 1
    for up, down in itertools.pairwise(cycle):
        assert up in g_deps[down], (up, down, cycle)


def test_unknown_dependency_is_named() -> None:
    with pytest.raises(UnknownDependency) as ei:
        Graph({"load": ["transform", "extrct"], "transform": []})
    assert ei.value.node == "load"
    assert ei.value.missing == ("extrct",)
    assert "'load' depends on unknown 'extrct'" in str(ei.value)
    assert isinstance(ei.value, ConfigurationError)


def test_three_cycle_is_reported_as_a_path() -> None:
    deps = {"a": ["c"], "b": ["a"], "c": ["b"]}  # a -> b -> c -> a in execution order
    with pytest.raises(CircularDependency) as ei:
        Graph(deps)
    cyc = ei.value.cycle
    assert_is_cycle(deps, cyc)
    assert set(cyc) == {"a", "b", "c"}
    assert str(ei.value) == "dependency cycle: " + " -> ".join(cyc)
    assert str(ei.value) == "dependency cycle: a -> b -> c -> a"


def test_cycle_behind_a_healthy_prefix() -> None:
    deps = {"root": [], "x": ["root", "z"], "y": ["x"], "z": ["y"], "leaf": ["z"]}
    with pytest.raises(CircularDependency) as ei:
        Graph(deps)
    assert_is_cycle(deps, ei.value.cycle)
    assert "root" not in ei.value.cycle and "leaf" not in ei.value.cycle


def test_self_dependency() -> None:
    with pytest.raises(CircularDependency) as ei:
        Graph({"a": ["a"]})
    assert ei.value.cycle == ("a", "a")


def test_layers_order_ready_downstream() -> None:
    g = Graph(
        {
            "extract": [],
            "weather": [],
            "clean": ["extract"],
            "join": ["clean", "weather"],
            "report": ["join"],
            "audit": ["extract"],
        }
    )
    assert g.nodes == ("extract", "weather", "clean", "join", "report", "audit")
    assert g.layers() == [["extract", "weather"], ["clean", "audit"], ["join"], ["report"]]
    order = g.topological_order()
    assert sorted(order) == sorted(g.nodes)
    for up, down in g.edges:
        assert order.index(up) < order.index(down)
    assert g.ready(done=set()) == ["extract", "weather"]
    assert g.ready(done={"extract"}, started={"weather"}) == ["clean", "audit"]
    assert g.ready(done={"extract", "clean"}) == ["weather", "audit"]
    assert set(g.downstream("extract")) == {"clean", "join", "report", "audit"}
    assert g.downstream("report") == []
    assert g.deps("join") == ("clean", "weather")
    assert set(g.dependants("extract")) == {"clean", "audit"}


def test_duplicate_dependencies_collapse() -> None:
    g = Graph({"a": [], "b": ["a", "a"]})
    assert g.deps("b") == ("a",)
    assert g.edges == [("a", "b")]


def test_empty_graph() -> None:
    g = Graph({})
    assert (g.nodes, g.layers(), g.topological_order(), g.ready(set())) == ((), [], (), [])


def test_subgraph_drops_edges_to_removed_nodes() -> None:
    g = Graph({"a": [], "b": ["a"], "c": ["b"]})
    sub = g.subgraph(["b", "c"])
    assert sub.deps("b") == ()
    assert sub.layers() == [["b"], ["c"]]


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """A random DAG: edges only from earlier to later nodes of a shuffled order."""
    n = draw(st.integers(0, 12))
    names = draw(st.permutations([f"n{i}" for i in range(n)]))
    deps: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        deps[name] = draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else []
    keys = draw(st.permutations(list(deps)))  # insertion order independent of topology
    return {k: deps[k] for k in keys}


def _closure(deps: dict[str, list[str]], node: str) -> set[str]:
    out: set[str] = set()
    frontier = [n for n, ds in deps.items() if node in ds]
    while frontier:
        n = frontier.pop()
        if n not in out:
            out.add(n)
            frontier.extend(m for m, ds in deps.items() if n in ds)
    return out


@given(dags())
def test_random_dags(deps: dict[str, list[str]]) -> None:
    g = Graph(deps)
    order = g.topological_order()
    assert sorted(order) == sorted(deps)
    pos = {n: i for i, n in enumerate(order)}
    for node, ds in deps.items():
        assert all(pos[d] < pos[node] for d in ds)
    layers = g.layers()
    level = {n: i for i, layer in enumerate(layers) for n in layer}
    assert sorted(level) == sorted(deps)
    for node, ds in deps.items():
        assert all(level[d] < level[node] for d in ds)
        # tight: a node sits one layer after its deepest dependency
        assert level[node] == (1 + max(level[d] for d in ds) if ds else 0)
    assert g.ready(set()) == [n for n in deps if not deps[n]]
    for node in deps:
        assert set(g.downstream(node)) == _closure(deps, node)
    # running the layers in order finishes everything
    done: set[str] = set()
    while len(done) < len(deps):
        ready = g.ready(done)
        assert ready
        done |= set(ready)


@given(dags(), st.data())
def test_random_back_edge_makes_a_reported_cycle(
    deps: dict[str, list[str]], data: st.DataObject
) -> None:
    g = Graph(deps)
    pairs = [(a, b) for a in deps for b in deps if b in g.downstream(a) or a == b]
    if not pairs:
        return
    up, down = data.draw(st.sampled_from(pairs))
    bad = {k: list(v) for k, v in deps.items()}
    bad[up] = [*bad[up], down]  # up now depends on something downstream of it
    with pytest.raises(CircularDependency) as ei:
        Graph(bad)
    assert_is_cycle(bad, ei.value.cycle)

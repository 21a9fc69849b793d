"""The pipeline graph: layered left to right, toned by status, marks for joins, conditions,
compensations and map fan-outs; escaped SVG."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

import chongming_nb as cn
from chongming_nb.pictures import GraphNode, layout

SVG = "{http://www.w3.org/2000/svg}"


def _nodes(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {g.get("data-node"): g for g in root.iter(f"{SVG}g") if "cn-node" in g.get("class", "")}


def test_every_node_is_right_of_all_its_dependencies_and_each_dependency_is_one_edge() -> None:
    nodes = [
        GraphNode("extract"),
        GraphNode("weather"),
        GraphNode("join", deps=("extract", "weather")),
        GraphNode("load", deps=("join",)),
        GraphNode("report", deps=("join", "extract")),
    ]
    pic = layout(nodes)
    for n in nodes:
        for d in n.deps:
            assert pic.positions[d][0] < pic.positions[n.name][0], (d, n.name)
    root = ET.fromstring(pic.to_svg())
    edges = [p for p in root.iter(f"{SVG}path") if "cn-edge" in p.get("class", "")]
    assert len(edges) == sum(len(n.deps) for n in nodes)
    # nodes of one layer do not overlap
    xs = {}
    for x, y in pic.positions.values():
        xs.setdefault(x, []).append(y)
    for ys in xs.values():
        ys.sort()
        assert all(b - a >= 46 for a, b in itertools.pairwise(ys))


@pytest.fixture
def ctl():
    c = cn.Controller()
    yield c
    c.close()


def _pipeline():
    def a(ctx):
        return [1, 2, 3]

    def never(ctx):
        return 1

    def square(ctx, x):
        return x * x

    def broken(ctx):
        raise ValueError("on purpose")

    def undo(*_):
        return None

    pipe = cn.Pipeline("shapes <x>")
    na = pipe.add(a, compensate=undo)
    nb = pipe.add(never, deps=[na], when=lambda up: False)
    nc = pipe.add(broken, deps=[na])
    nm = pipe.map(square, items=[1, 2, 3], deps=[na])
    pipe.add(never, deps=[nb, nc, nm], join="all_done", name="final")
    return pipe


def test_a_pipeline_graph_before_any_run_is_planned_and_marks_its_shapes() -> None:
    pic = _pipeline().graph()
    svg = pic.to_svg()
    nodes = _nodes(svg)
    assert set(nodes) == {"a", "never", "broken", "square", "final"}
    assert {g.get("data-status") for g in nodes.values()} == {"planned"}
    assert "? never" in svg  # a when= condition
    assert "all done" in svg  # a join mode other than the default
    assert "shapes &lt;x&gt;" in svg and "shapes <x>" not in svg
    assert "5 nodes (5 planned)" in pic.summary()


def test_a_runs_graph_shows_statuses_map_counts_skips_and_compensations(ctl) -> None:
    run = _pipeline().submit(ctl, rollback=True)
    run.wait(30)
    pic = run.graph()
    nodes = _nodes(pic.to_svg())
    status = {name: g.get("data-status") for name, g in nodes.items()}
    assert status["a"] == "succeeded" and status["broken"] == "failed"
    assert status["never"] == "skipped"
    assert nodes["never"].get("opacity") == "0.45"  # a skipped branch is dimmed
    assert "cn-tone-bad" in nodes["broken"].get("class")
    text = "".join(nodes["square"].itertext())
    assert "3 items (3 done)" in text
    assert "undone" in "".join(nodes["a"].itertext())  # the rollback ran its compensation
    bundle = pic._repr_mimebundle_()
    assert bundle["text/html"].startswith('<div class="cn-graph-output"')
    # a wide graph scrolls at its own size rather than shrinking to the output's width
    assert 'style="max-width:none"' in bundle["text/html"]
    assert "1 failed" in bundle["text/plain"]


def test_a_graph_with_an_unknown_dependency_is_refused() -> None:
    pipe = cn.Pipeline("bad")

    def f(ctx):
        return 1

    pipe.add(f, deps=["nowhere"])  # names may refer to nodes added later
    with pytest.raises(cn.ConfigurationError, match="nowhere"):
        pipe.graph()

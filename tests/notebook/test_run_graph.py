"""A displayed pipeline run is one widget: its graph (the ``graph`` trait, laid out and
drawn by the front end) above its table. The trait names the task standing for each node
and is sent again only when that changes; the saved output keeps the final graph, as an
inline SVG in the html and as data (with each node's status) in the snapshot json."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import chongming_nb as cn
from chongming_nb.notebook.outputs import SNAPSHOT_MIME, WIDGET_MIME
from chongming_nb.notebook.run_graph import RunTable
from chongming_nb.testing.widgets import recording_comms


@pytest.fixture
def ctl() -> Iterator[cn.Controller]:
    c = cn.Controller(executor="thread")
    yield c
    c.close()


def _spec_nodes(table: RunTable) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in table.graph["nodes"]}


def test_a_run_displays_one_widget_with_its_graph_above_its_table(ctl: cn.Controller) -> None:
    gate = threading.Event()
    pipe = cn.Pipeline("etl")
    a = pipe.add(lambda ctx: gate.wait(30) and 3, name="extract")
    b = pipe.add(lambda ctx: ctx.upstream("extract") + 1, deps=[a], name="clean")
    pipe.add(lambda ctx: 0, deps=[b], when=lambda up: False, name="never")
    with recording_comms():
        run = pipe.submit(ctl)
        data, _ = run._repr_mimebundle_()
        table = next(t for t in _tables() if t.model_id == data[WIDGET_MIME]["model_id"])
        assert isinstance(table, RunTable) and table.kind == "run"
        nodes = _spec_nodes(table)
        assert list(nodes) == ["extract", "clean", "never"]
        assert nodes["clean"]["deps"] == ["extract"] and nodes["never"]["condition"] is True
        # every node's task is a row of the same table: the front end colours the node by it
        row_ids = set(table.task_ids)
        assert {n["task"] for n in nodes.values()} <= row_ids
        gate.set()
        run.wait(30)
        table.flush(force=True)
        saved = table.snapshot_data()
        graph = {n["name"]: n["status"] for n in saved[SNAPSHOT_MIME]["graph"]["nodes"]}
        assert graph == {"extract": "succeeded", "clean": "succeeded", "never": "skipped"}
        html = saved["text/html"]
        assert html.index('class="cn-graph"') < html.index("<table>")  # the graph first
        assert 'data-node="never" data-status="skipped"' in html
        table.close()


def test_the_graph_trait_is_sent_again_only_when_a_node_gets_its_tasks(
    ctl: cn.Controller,
) -> None:
    gate = threading.Event()
    pipe = cn.Pipeline("fan")
    src = pipe.add(lambda ctx: gate.wait(30) and [1, 2, 3], name="items")
    pipe.map(lambda ctx, x: x * 2, items=src, name="double")
    with recording_comms():
        run = pipe.submit(ctl)
        table = RunTable(ctl, run, title="fan")
        sent: list[dict[str, Any]] = []
        table.observe(lambda change: sent.append(change["new"]), names="graph")
        assert _spec_nodes(table)["double"]["children"] == []
        gate.set()
        run.wait(30)
        table.flush(force=True)
        assert sent, "the map's item tasks never reached the graph"
        assert len(_spec_nodes(table)["double"]["children"]) == 3
        count = len(sent)
        table.flush(force=True)  # nothing new about the structure: nothing sent
        assert len(sent) == count
        table.close()


def _tables() -> list[RunTable]:
    import gc

    return [o for o in gc.get_objects() if isinstance(o, RunTable) and not o.closed]

"""Render time of the pictures of the work (issue 25) in real Chromium.

Timeline: N attempts (``attempts_per_task`` per task, one failure and retry wait in five)
built into a :class:`~chongming_nb.pictures.Timeline`; ours is the canvas timeline of
``static/pictures.js`` (``renderTimeline``: the synchronous draw of the lanes in view,
the axis and the slots strip, from the columns of ``to_json``), timed with
``performance.now()`` around the call. Peer: the same timeline as the static SVG (what
a viewer without the extension shows), put into the page with ``innerHTML`` and laid out
(a forced ``getBoundingClientRect``). Target: 10,000 attempts in <= 200 ms.

Graph: what a user waits for, from the run graph's structure arriving to its nodes and
edges drawn: ours is the run graph of ``static/pictures.js`` (``GraphView.setSpec``: the
dagre layout, in the layout worker for a graph this large, then the SVG nodes and edges
with their statuses; ``await view.drawn()``), timed with ``performance.now()``, with the
layout kept from an earlier view forgotten first (``clearLayoutCache``): a first view.
Beside it, how long ``setSpec`` held the page's main thread (``main_thread_ms``: the
page stays responsive while the worker lays out). Two graphs of N nodes: a pipeline
built in a loop (``pipeline_of``: per source table an extract -> clean -> validate ->
load chain, marts joining loads, reports, dashboards; the shape a 300-node run graph
has) and, as a stress case, a dense random layered DAG (``dag_of``: up to 3 dependencies
each from the 3 layers before, so long edges: dagre lays out about 1,350 bend points
besides the 300 nodes). Peer: the Python layout and SVG (``chongming_nb.pictures.graph.
layout`` + ``to_svg``) put into the page the same way; the Python time to compute it is
reported beside. Each figure is the median of ``repeats`` fresh renders.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks._ui import UnavailableError, static_page
from benchmarks.common import result, safe_ratio
from benchmarks.sizes import size_of
from chongming_nb.core.models import AttemptRecord, FailureKind, Transition
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.frames import attempts_frame, transitions_frame
from chongming_nb.notebook.widget import _STATIC
from chongming_nb.pictures import GraphNode, build, layout
from chongming_nb.pictures.graph import node_spec
from chongming_nb.pictures.timeline import Timeline, to_json

TIMELINE_MS = 200.0
GRAPH_MS = 1000.0

_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="widget.css"></head>
<body style="width:1200px"><div id="out"></div>
<script type="module">
import * as pictures from './pictures.js';
window.__pictures = pictures;
</script></body></html>"""

_TIMELINE = """(data) => {
    const out = document.getElementById('out');
    out.replaceChildren();
    const t0 = performance.now();
    window.__pictures.renderTimeline(out, data);
    return performance.now() - t0;
}"""

_GRAPH = """async (spec) => {
    const out = document.getElementById('out');
    out.replaceChildren();
    window.__pictures.clearLayoutCache?.();  // (?.: the same script times an older bundle)
    const t0 = performance.now();
    const view = new window.__pictures.GraphView({ row: () => undefined });
    out.appendChild(view.el);
    view.setSpec(spec);
    const blocked = performance.now() - t0;
    await view.drawn?.();
    view.el.getBoundingClientRect();
    return [performance.now() - t0, blocked, view.el.querySelectorAll('.cn-graph-node').length];
}"""

_SVG = """(svg) => {
    const out = document.getElementById('out');
    out.replaceChildren();
    const t0 = performance.now();
    out.innerHTML = svg;
    out.getBoundingClientRect();
    out.lastElementChild && out.lastElementChild.getBBox && out.lastElementChild.getBBox();
    return performance.now() - t0;
}"""


def timeline_of(n: int, per_task: int, seed: int = 7) -> Timeline:
    """``n`` attempts over ``n / per_task`` tasks on 8 slots; one attempt in five fails
    and waits before the next."""
    rnd = random.Random(seed)
    t0 = datetime(2026, 12, 1, 14, tzinfo=UTC)
    attempts, transitions, names = [], [], {}
    tasks = max(n // per_task, 1)
    for k in range(tasks):
        tid = f"t{k:05d}"
        names[tid] = f"task {k}"
        at = (k % 8) * 3.0 + (k // 8) * per_task * 2.0
        version = 0
        for a in range(1, per_task + 1):
            start, end = at, at + rnd.uniform(0.5, 1.5)
            failed = a < per_task and rnd.random() < 0.2
            outcome = S.RETRY_WAIT if failed else (S.SUCCEEDED if a == per_task else S.QUEUED)
            attempts.append(
                AttemptRecord(
                    tid,
                    a,
                    t0 + timedelta(seconds=start),
                    t0 + timedelta(seconds=end),
                    outcome,
                    FailureKind.EXCEPTION if failed else None,
                    "boom" if failed else None,
                )
            )
            for frm, to, when in (
                (S.QUEUED, S.RUNNING, start),
                (S.RUNNING, S.RETRY_WAIT if failed else S.QUEUED, end),
            ):
                version += 1
                transitions.append(
                    Transition(
                        tid, frm, to, "bench", "bench", None, t0 + timedelta(seconds=when), version
                    )
                )
            at = end + (0.4 if failed else 0.1)
        version += 1
        transitions.append(
            Transition(
                tid,
                S.QUEUED,
                S.SUCCEEDED,
                "bench",
                "bench",
                None,
                t0 + timedelta(seconds=at),
                version,
            )
        )
    return build(attempts_frame(attempts, names), transitions_frame(transitions, names))


def dag_of(n: int, seed: int = 11) -> list[GraphNode]:
    """A layered DAG: ~sqrt(2n) layers, each node depending on up to 3 earlier nodes."""
    rnd = random.Random(seed)
    width = max(int((n / 2) ** 0.5), 1)
    nodes: list[GraphNode] = []
    statuses = ["succeeded", "running", "blocked", "failed", "skipped", None]
    for i in range(n):
        layer = i // width
        earlier = [m.name for m in nodes[: layer * width]][-3 * width :]
        deps = tuple(sorted(set(rnd.sample(earlier, min(len(earlier), rnd.randint(1, 3))))))
        nodes.append(
            GraphNode(name=f"step-{i:03d}", deps=deps if layer else (), status=rnd.choice(statuses))
        )
    return nodes


def pipeline_of(n: int, seed: int = 11) -> list[GraphNode]:
    """A pipeline built in a loop, ``n`` nodes: one ``config`` step; per source table (a
    fifth of ``n``) an extract -> clean -> validate -> load chain; marts joining two to four
    loads, reports from two or three marts, dashboards from reports; a last ``notify``."""
    rnd = random.Random(seed)
    statuses = ["succeeded", "running", "blocked", "failed", "skipped", None]
    sources = max(n // 5, 1)
    rest = max(n - 2 - 4 * sources, 3)
    counts = {"mart": max(rest * 2 // 3, 1), "report": max((rest - rest * 2 // 3) * 3 // 4, 1)}
    counts["dashboard"] = max(rest - counts["mart"] - counts["report"], 1)
    nodes = [GraphNode(name="config", deps=(), status="succeeded")]
    loads = []
    for i in range(sources):
        prev = "config"
        for step in ("extract", "clean", "validate", "load"):
            name = f"{step}_{i:03d}"
            nodes.append(GraphNode(name=name, deps=(prev,), status=rnd.choice(statuses)))
            prev = name
        loads.append(prev)
    upstream = loads
    for kind, (lo, hi) in (("mart", (2, 4)), ("report", (2, 3)), ("dashboard", (2, 5))):
        made = []
        for i in range(counts[kind]):
            deps = tuple(sorted(rnd.sample(upstream, min(len(upstream), rnd.randint(lo, hi)))))
            made.append(GraphNode(name=f"{kind}_{i:02d}", deps=deps, status=rnd.choice(statuses)))
        nodes.extend(made)
        upstream = [m.name for m in made]
    nodes.append(GraphNode(name="notify", deps=tuple(upstream), status=None))
    return nodes


def _spec(nodes: list[GraphNode]) -> dict[str, Any]:
    return {"title": "bench", "nodes": [node_spec(g) for g in nodes]}


def _in_browser(calls: list[tuple[str, Any]], repeats: int) -> list[list[Any]]:
    files = {
        "index.html": (_PAGE, "text/html"),
        "pictures.js": ((_STATIC / "pictures.js").read_text(), "text/javascript"),
        "widget.css": ((_STATIC / "widget.css").read_text(), "text/css"),
    }

    out: list[list[Any]] = []
    with static_page(files, 1250) as page:
        page.wait_for_function("() => window.__pictures !== undefined")
        for script, arg in calls:
            page.evaluate(script, arg)  # warm-up: the first call compiles the code
            out.append([page.evaluate(script, arg) for _ in range(repeats)])
    return out


def _median(samples: list[Any], k: int = 0) -> float:
    return statistics.median(float(s[k]) if isinstance(s, list) else float(s) for s in samples)


def _unmeasured(metrics: list[tuple[str, float]], why: str) -> list[dict[str, Any]]:
    return [result(m, None, "ms", target=f"<= {t:g} ms", passed=None, note=why) for m, t in metrics]


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "pictures")
    attempts = int(p.get("attempts", 1_000))
    nodes_n = int(p.get("nodes", 50))
    repeats = int(p.get("repeats", 3))
    tl = timeline_of(attempts, int(p.get("attempts_per_task", 5)))
    t_json = time.perf_counter()
    data = to_json(tl)
    json_s = time.perf_counter() - t_json
    svg = tl.to_svg()
    graphs = {"pipeline": pipeline_of(nodes_n), "dense": dag_of(nodes_n)}
    graph_svgs, graph_py_ms = {}, {}
    for kind, dag in graphs.items():
        t_py = time.perf_counter()
        graph_svgs[kind] = layout(dag).to_svg()
        graph_py_ms[kind] = (time.perf_counter() - t_py) * 1000
    tl_metric = (
        f"pictures: timeline render time, {len(tl.bars):,} attempts on {len(tl.lanes):,} "
        "lanes (Chromium, canvas; peer: the static SVG laid out)"
    )
    graph_metrics = {
        "pipeline": f"pictures: run graph until drawn, a {nodes_n}-node pipeline (Chromium, "
        "dagre layout in a worker + SVG; peer: the Python layout's SVG laid out)",
        "dense": f"pictures: run graph until drawn, {nodes_n} nodes of a dense random DAG "
        "(stress; Chromium, dagre layout in a worker + SVG; peer: the Python layout's SVG)",
    }
    metrics = [(tl_metric, TIMELINE_MS)] + [(m, GRAPH_MS) for m in graph_metrics.values()]
    if size != "full":  # the smoke size builds the data only: no browser in the test suite
        return _unmeasured(metrics, "measured at full size only")
    calls: list[tuple[str, Any]] = [(_TIMELINE, data), (_SVG, svg)]
    for kind, dag in graphs.items():
        calls += [(_GRAPH, _spec(dag)), (_SVG, graph_svgs[kind])]
    try:
        samples = _in_browser(calls, repeats)
    except UnavailableError as exc:
        return _unmeasured(metrics, str(exc))
    ours_tl, peer_tl = _median(samples[0]), _median(samples[1])
    measured: list[tuple[str, float, float, dict[str, Any], dict[str, Any]]] = [
        (
            tl_metric,
            TIMELINE_MS,
            ours_tl,
            {"static SVG": peer_tl},
            {"to_json_ms": json_s * 1000, "svg_bytes": len(svg)},
        ),
    ]
    for k, kind in enumerate(graphs):
        ours, peer = samples[2 + 2 * k], _median(samples[3 + 2 * k])
        extra = {
            "main_thread_ms": _median(ours, 1),
            "nodes_drawn": int(_median(ours, 2)),
            "python_layout_svg_ms": graph_py_ms[kind],
        }
        measured.append((graph_metrics[kind], GRAPH_MS, _median(ours), {"Python SVG": peer}, extra))
    rows = []
    for metric, target, value, peers, extra in measured:
        (peer_value,) = peers.values()
        rows.append(
            result(
                metric,
                value,
                "ms",
                target=f"<= {target:g} ms",
                passed=value <= target,
                peer=peers,
                ratio=safe_ratio(value, peer_value),
                **extra,
            )
        )
    return rows


if __name__ == "__main__":
    import sys

    for r in run(sys.argv[1] if len(sys.argv) > 1 else "tiny"):
        print(r)

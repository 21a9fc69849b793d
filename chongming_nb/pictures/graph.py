"""The pipeline graph as a picture: nodes in dependency layers, left to right, toned by
status, with their progress, join modes, ``when`` conditions, compensations and map
fan-outs marked.

Pure: it is given plain :class:`GraphNode` values (the control layer makes them from a
Pipeline and, for a run, from its tasks) and returns SVG. Layers come from the core's
:meth:`Graph.layers` (every node right of all its dependencies); inside a layer nodes are
ordered by the mean position of their dependencies (two sweeps), so edges cross less.

Invariants:

* every node is drawn once, in the layer ``Graph.layers()`` gives it;
* every dependency is one edge, from the dependency's right side to the node's left;
* a node with no run state is drawn as planned (no status), never as running.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chongming_nb.core.graph import Graph
from chongming_nb.core.states import STATUS_TONES
from chongming_nb.pictures.timeline import TONE_COLOURS

NODE_W = 170
NODE_H = 46
GAP_X = 60
GAP_Y = 14
PAD = 10


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One step as drawn. ``status`` is None before a run exists for it."""

    name: str
    deps: tuple[str, ...] = ()
    join: str = "all_succeeded"
    condition: bool = False  # has a when= condition
    compensate: bool = False  # has a compensation step
    is_map: bool = False
    status: str | None = None
    done: float | None = None
    total: float | None = None
    items: int | None = None  # a map's fan-out, once known
    items_done: int = 0
    compensation: str | None = None  # "ok" / "failed" once the compensation ran


@dataclass(frozen=True, slots=True)
class GraphPicture:
    nodes: tuple[GraphNode, ...]
    positions: Mapping[str, tuple[float, float]]  # top-left corner of each node
    width: float
    height: float
    title: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_svg(self, path: Any = None) -> str:
        svg = to_svg(self)
        if path is not None:
            from pathlib import Path

            Path(path).write_text(svg, encoding="utf-8")
        return svg

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for n in self.nodes:
            key = n.status or "planned"
            counts[key] = counts.get(key, 0) + 1
        said = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        return f"{self.title or 'pipeline'}: {len(self.nodes)} nodes ({said})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        svg = to_svg(self)
        return {
            # scrolls (and the browser zooms) when a graph is larger than the output area
            "text/html": f'<div class="cn-graph-output" style="overflow:auto;max-height:640px">'
            f"{svg}</div>",
            "image/svg+xml": svg,
            "text/plain": self.summary(),
        }

    def __repr__(self) -> str:
        return f"<GraphPicture {self.summary()}>"


def layout(nodes: Sequence[GraphNode], title: str = "") -> GraphPicture:
    """Positions for ``nodes`` (names unique; deps name other nodes)."""
    by_name = {n.name: n for n in nodes}
    graph = Graph({n.name: tuple(d for d in n.deps if d in by_name) for n in nodes})
    layers = graph.layers()
    rank: dict[str, float] = {}
    for layer in layers:
        for i, name in enumerate(layer):
            rank[name] = float(i)
    for _ in range(2):  # order each layer by the mean rank of its dependencies
        for layer in layers[1:]:
            layer.sort(
                key=lambda name: (
                    sum(rank[d] for d in graph.deps(name)) / max(len(graph.deps(name)), 1),
                    name,
                )
            )
            for i, name in enumerate(layer):
                rank[name] = float(i)
    top = 24 if title else PAD
    tallest = max((len(layer) for layer in layers), default=0)
    height = top + tallest * (NODE_H + GAP_Y) + PAD
    positions: dict[str, tuple[float, float]] = {}
    for col, layer in enumerate(layers):
        offset = (tallest - len(layer)) * (NODE_H + GAP_Y) / 2  # centre shorter layers
        for row, name in enumerate(layer):
            positions[name] = (PAD + col * (NODE_W + GAP_X), top + offset + row * (NODE_H + GAP_Y))
    width = PAD * 2 + max(len(layers), 1) * (NODE_W + GAP_X) - GAP_X
    return GraphPicture(tuple(nodes), positions, width, max(height, top + NODE_H + PAD), title)


def _tone(node: GraphNode) -> str:
    return "idle" if node.status is None else STATUS_TONES.get(node.status, "idle")


def to_svg(pic: GraphPicture) -> str:
    esc = html.escape
    fg = "var(--jp-ui-font-color1, #1f2328)"
    muted = "var(--jp-ui-font-color2, #57606a)"
    bg = "var(--jp-layout-color1, #ffffff)"
    out = [
        # max-width:none: a wide graph scrolls in its output instead of shrinking until its
        # text cannot be read (JupyterLab scales images and SVGs to the output's width)
        f'<svg xmlns="http://www.w3.org/2000/svg" class="cn-graph" style="max-width:none" '
        f'width="{pic.width:.0f}" '
        f'height="{pic.height:.0f}" viewBox="0 0 {pic.width:.0f} {pic.height:.0f}" role="img" '
        f'aria-label="{esc(pic.title or "pipeline graph")}" '
        'font-family="var(--jp-ui-font-family, sans-serif)" font-size="11">'
    ]
    if pic.title:
        out.append(
            f'<text x="{PAD}" y="16" style="fill:{fg}" font-weight="600">{esc(pic.title)}</text>'
        )
    by_name = {n.name: n for n in pic.nodes}
    for n in pic.nodes:  # edges first, under the nodes
        x2, y2 = pic.positions[n.name]
        for d in n.deps:
            if d not in pic.positions:
                continue
            x1, y1 = pic.positions[d]
            sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2
            mid = (sx + ex) / 2
            skipped = by_name[n.name].status == "skipped"
            out.append(
                f'<path class="cn-edge" d="M{sx:.1f},{sy:.1f} C{mid:.1f},{sy:.1f} '
                f'{mid:.1f},{ey:.1f} {ex:.1f},{ey:.1f}" style="fill:none;stroke:{muted}" '
                'stroke-width="1.2"'
                + (' opacity="0.35"' if skipped else "")
                + f"><title>{esc(d)} → {esc(n.name)}</title></path>"
            )
        if n.join != "all_succeeded" and n.deps:
            label = n.join.replace("_", " ")
            out.append(
                f'<text class="cn-join" x="{x2 - 4:.1f}" y="{y2 - 3:.1f}" text-anchor="end" '
                f'style="fill:{muted}" font-size="10">{esc(label)}</text>'
            )
    for n in pic.nodes:
        x, y = pic.positions[n.name]
        tone = _tone(n)
        colour = TONE_COLOURS[tone]
        dim = ' opacity="0.45"' if n.status == "skipped" else ""
        status = n.status or "planned"
        tip = [f"{n.name}: {status}"]
        if n.condition:
            tip.append("runs only when its condition holds")
        if n.join != "all_succeeded":
            tip.append(f"join: {n.join}")
        if n.compensation:
            tip.append(f"compensation: {n.compensation}")
        out.append(
            f'<g class="cn-node cn-tone-{tone}" data-node="{esc(n.name)}" '
            f'data-status="{esc(status)}"{dim}><title>{esc(chr(10).join(tip))}</title>'
        )
        if n.is_map:  # a stack: the fan-out folded into one node
            out.append(
                f'<rect x="{x + 4}" y="{y - 4}" width="{NODE_W}" height="{NODE_H}" rx="6" '
                f'style="fill:{bg};stroke:{colour}"/>'
            )
        out.append(
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" '
            f'style="fill:{bg};stroke:{colour}" stroke-width="2"'
            + (' stroke-dasharray="4 3"' if n.status is None else "")
            + "/>"
        )
        name = n.name if len(n.name) <= 22 else n.name[:21] + "…"
        badge = ("? " if n.condition else "") + name
        out.append(
            f'<text x="{x + 8}" y="{y + 16}" style="fill:{fg}" font-weight="600">'
            f"{esc(badge)}</text>"
        )
        detail = status
        if n.is_map:
            detail += f" · {n.items} items" if n.items is not None else " · map"
            if n.items:
                detail += f" ({n.items_done} done)"
        if n.compensation:
            detail += " · ↺ undone" if n.compensation == "ok" else " · ↺ failed"
        out.append(f'<text x="{x + 8}" y="{y + 30}" style="fill:{colour}">{esc(detail)}</text>')
        fraction = _fraction(n)
        if fraction is not None:
            out.append(
                f'<rect x="{x + 8}" y="{y + NODE_H - 9}" width="{NODE_W - 16}" height="4" rx="2" '
                'style="fill:var(--jp-layout-color3, #d0d7de)"/>'
                f'<rect class="cn-node-progress" x="{x + 8}" y="{y + NODE_H - 9}" '
                f'width="{(NODE_W - 16) * fraction:.1f}" height="4" rx="2" style="fill:{colour}"/>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _fraction(n: GraphNode) -> float | None:
    if n.is_map and n.items:
        return min(n.items_done / n.items, 1.0)
    if n.total:
        return max(0.0, min((n.done or 0) / n.total, 1.0))
    return None


def node_spec(
    n: GraphNode, task: str | None = None, children: Iterable[str] = ()
) -> dict[str, Any]:
    """One node as the front end's graph reads it (``labextension/src/graph.ts``
    ``GraphNodeSpec``): its structure and state, and the task(s) standing for it."""
    return {
        "name": n.name,
        "deps": list(n.deps),
        "join": n.join,
        "condition": n.condition,
        "compensate": n.compensate,
        "is_map": n.is_map,
        "task": task,
        "children": list(children),
        "compensation": n.compensation,
        "status": n.status,
        "done": n.done,
        "total": n.total,
        "items": n.items,
        "items_done": n.items_done,
    }


def nodes_of(
    steps: Iterable[Any], state: Mapping[str, Mapping[str, Any]] | None = None
) -> list[GraphNode]:
    """GraphNodes from anything shaped like a pipeline's nodes (``name``, ``deps``,
    ``join``, ``when``, ``compensate``, ``is_map``) and an optional per-node run state
    (``status``, ``done``, ``total``, ``items``, ``items_done``, ``compensation``)."""
    state = state or {}
    out = []
    for s in steps:
        extra = dict(state.get(s.name, {}))
        out.append(
            GraphNode(
                name=s.name,
                deps=tuple(s.deps),
                join=str(getattr(s.join, "value", s.join)),
                condition=s.when is not None,
                compensate=s.compensate is not None,
                is_map=bool(s.is_map),
                **extra,
            )
        )
    return out

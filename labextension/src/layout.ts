/**
 * The run graph's layout: dagre (`@dagrejs/dagre`, layered, left to right). No DOM here,
 * so the same module runs in the page and in the layout worker (`layout-worker.ts`).
 *
 * What it costs (docs/performance.md, "Pictures of the work"): ranking with `tight-tree`
 * takes about half the time of dagre's default network-simplex and still puts every node
 * right of the nodes it depends on; dagre's crossing reduction (its repeated layer
 * sweeps) is most of the rest, so it runs for graphs of up to `ORDER_SWEEPS_MAX_NODES`
 * nodes. Above that, the nodes keep dagre's first ordering (a depth-first walk from the
 * sources): it roughly halves the time of a 300-node graph for about a fifth more
 * crossings, which zoom and pan make up for.
 */
import dagre from '@dagrejs/dagre';

export const NODE_W = 170;
export const NODE_H = 46;
/** Above this many nodes, dagre's crossing-reduction sweeps are skipped. */
export const ORDER_SWEEPS_MAX_NODES = 100;

/** What the layout reads of a graph: node names and their dependencies. */
export interface LayoutInput {
  nodes: { name: string; deps: string[] }[];
}

export interface Placed {
  x: number; // top-left
  y: number;
}

export interface Layout {
  width: number;
  height: number;
  nodes: Map<string, Placed>;
  /** Edge polylines, keyed `dep\u0000node`. */
  edges: Map<string, { x: number; y: number }[]>;
}

/** The structure of `spec` as one string: two graphs with the same key lay out alike. */
export function structureKey(spec: LayoutInput): string {
  return spec.nodes.map(n => `${n.name}\u0001${n.deps.join('\u0002')}`).join('\u0003');
}

/** Lay `spec` out with dagre: every node right of its dependencies, edges routed. */
export function layoutGraph(spec: LayoutInput): Layout {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'LR', ranker: 'tight-tree', nodesep: 16, ranksep: 56, edgesep: 8, marginx: 10, marginy: 14 });
  g.setDefaultEdgeLabel(() => ({}));
  const names = new Set(spec.nodes.map(n => n.name));
  for (const n of spec.nodes) {
    g.setNode(n.name, { width: NODE_W, height: NODE_H });
  }
  for (const n of spec.nodes) {
    for (const d of n.deps) {
      if (names.has(d)) {
        g.setEdge(d, n.name);
      }
    }
  }
  dagre.layout(g, { disableOptimalOrderHeuristic: spec.nodes.length > ORDER_SWEEPS_MAX_NODES });
  const nodes = new Map<string, Placed>();
  for (const name of g.nodes()) {
    const p = g.node(name) as { x: number; y: number };
    nodes.set(name, { x: p.x - NODE_W / 2, y: p.y - NODE_H / 2 });
  }
  const edges = new Map<string, { x: number; y: number }[]>();
  for (const e of g.edges()) {
    const pts = (g.edge(e) as { points?: { x: number; y: number }[] }).points || [];
    edges.set(`${e.v}\u0000${e.w}`, pts);
  }
  const info = g.graph() as { width?: number; height?: number };
  return { width: Math.max(info.width || 0, NODE_W + 20), height: Math.max(info.height || 0, NODE_H + 28), nodes, edges };
}

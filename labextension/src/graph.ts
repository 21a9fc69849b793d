/**
 * A pipeline run's graph, drawn in the front end above the run's table (the notebook
 * widget) and in a saved snapshot. Laid out by dagre (`@dagrejs/dagre`, layered, left to
 * right); drawn as SVG with zoom (Ctrl/⌘ + wheel, or the +/− buttons) and pan (drag), so
 * a 300-node graph stays readable.
 *
 * The kernel sends the graph's structure (`GraphSpec`: nodes, their dependencies, join
 * modes, `when` conditions, map fan-outs and which task each node is); the statuses and
 * progress come from the table's own rows, so the graph updates with the patches the
 * table already receives (coalesced by the kernel, drawn once per animation frame).
 * The layout is computed again only when the structure changes.
 *
 * A click on a node selects it: the host selects the node's row, and a small panel shows
 * the node's status and the verbs its row allows now (which the host sends through the
 * table's own verb path). Every user string goes into the DOM as text.
 */
import dagre from '@dagrejs/dagre';

import { ControlVerb, STATUS_LABELS, STATUS_TONES, TaskRow, TaskStatus, VERB_LABELS, VERB_TIPS, isTerminal } from './contract';
import { allowedVerbs } from './row';

/** One node as the kernel describes it (`chongming_nb/notebook/run_graph.py`). */
export interface GraphNodeSpec {
  name: string;
  deps: string[];
  join: string;
  condition: boolean;
  compensate: boolean;
  is_map: boolean;
  /** The node's task (a map's expander); null until it exists. */
  task: string | null;
  /** A map's item tasks. */
  children?: string[];
  /** 'ok' / 'failed' once its compensation ran. */
  compensation?: string | null;
  /** The status when no row is at hand (a saved snapshot keeps it here). */
  status?: string | null;
  done?: number | null;
  total?: number | null;
  items?: number | null;
  items_done?: number | null;
}

export interface GraphSpec {
  title?: string;
  nodes: GraphNodeSpec[];
}

export interface GraphHost {
  /** The rows of the table, by task id (statuses, progress, `can`). */
  row(taskId: string): TaskRow | undefined;
  /** A node was clicked: select its row. */
  onSelect?(taskId: string | null, node: string): void;
  /** A verb button of the selected node. */
  onVerb?(taskId: string, verb: ControlVerb): void;
  disconnected?(): boolean;
}

export const NODE_W = 170;
export const NODE_H = 46;
const MAX_H = 460; // px: the graph's viewport at most
const MIN_READABLE = 0.6; // the first view never shrinks text below this scale
const SVG_NS = 'http://www.w3.org/2000/svg';

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> = {}): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, String(v));
  }
  return node;
}

function html<K extends keyof HTMLElementTagNameMap>(tag: K, cls = '', text = ''): HTMLElementTagNameMap[K] {
  const node = Object.assign(document.createElement(tag), { className: cls });
  node.textContent = text;
  return node;
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

/** Lay `spec` out with dagre: every node right of its dependencies, edges routed. */
export function layoutGraph(spec: GraphSpec): Layout {
  const g = new dagre.graphlib.Graph();
  // tight-tree ranking: about half the time of network-simplex on a 300-node graph, and
  // still every node right of the nodes it depends on
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
  dagre.layout(g);
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

/** What a node shows now: from its row when the table has it, else from the spec. */
export interface NodeState {
  status: string | null;
  tone: string;
  fraction: number | null;
  detail: string;
}

export function nodeState(n: GraphNodeSpec, host: GraphHost): NodeState {
  const row = n.task ? host.row(n.task) : undefined;
  const status = row ? row.status : (n.status ?? null);
  let items = n.items ?? null;
  let itemsDone = n.items_done ?? 0;
  if (n.children && n.children.length) {
    items = n.children.length;
    let done = 0;
    let seen = 0;
    for (const c of n.children) {
      const r = host.row(c);
      if (r) {
        seen += 1;
        if (isTerminal(r.status)) {
          done += 1;
        }
      }
    }
    if (seen) {
      itemsDone = done;
    }
  }
  let fraction: number | null = null;
  if (n.is_map && items) {
    fraction = Math.min(itemsDone / items, 1);
  } else {
    const total = row ? row.total : (n.total ?? null);
    const done = row ? row.done : (n.done ?? 0);
    if (total) {
      fraction = Math.max(0, Math.min((done || 0) / total, 1));
    }
  }
  let detail = status ? (STATUS_LABELS[status as TaskStatus] ?? status) : 'planned';
  if (n.is_map) {
    detail += items !== null ? ` · ${items} items` : ' · map';
    if (items) {
      detail += ` (${itemsDone} done)`;
    }
  }
  if (row && row.attempt > 1) {
    detail += ` · attempt ${row.attempt}`;
  }
  if (n.compensation) {
    detail += n.compensation === 'ok' ? ' · ↺ undone' : ' · ↺ failed';
  }
  const tone = status ? (STATUS_TONES[status as TaskStatus] ?? 'idle') : 'idle';
  return { status, tone, fraction, detail };
}

function structureKey(spec: GraphSpec): string {
  return spec.nodes.map(n => `${n.name}\u0001${n.deps.join('\u0002')}`).join('\u0003');
}

function recordGraphTime(ms: number): void {
  const g = globalThis as any;
  (g.__cnGraphTimes = g.__cnGraphTimes || []).push(ms);
}

interface NodeRefs {
  g: SVGGElement;
  box: SVGRectElement;
  detail: SVGTextElement;
  fill: SVGRectElement;
  track: SVGRectElement;
  tip: SVGTitleElement;
  sig: string;
}

/** The graph view: `el` goes into the page; `setSpec` and `update` keep it current. */
export class GraphView {
  readonly el: HTMLElement;
  private readonly _svg: SVGSVGElement;
  private readonly _world: SVGGElement;
  private readonly _panel: HTMLElement;
  private _spec: GraphSpec = { nodes: [] };
  private _key = '';
  private _layout: Layout | null = null;
  private readonly _refs = new Map<string, NodeRefs>();
  private readonly _edgeEls = new Map<string, SVGPathElement>();
  private _selected: string | null = null;
  private _k = 1;
  private _x = 0;
  private _y = 0;
  private _panelSig = '';

  constructor(private readonly _host: GraphHost, private readonly _interactive = true) {
    this.el = html('div', 'cn-graph-view');
    this.el.setAttribute('role', 'group');
    const tools = html('div', 'cn-graph-tools');
    if (_interactive) {
      for (const [label, tip, act] of [
        ['−', 'Zoom out', () => this.zoomBy(1 / 1.25)],
        ['+', 'Zoom in', () => this.zoomBy(1.25)],
        ['fit', 'Show the whole graph', () => this.fit(true)]
      ] as [string, string, () => void][]) {
        const b = html('button', 'cn-btn cn-graph-zoom', label);
        b.type = 'button';
        b.title = tip;
        b.setAttribute('aria-label', tip);
        b.addEventListener('click', act);
        tools.appendChild(b);
      }
      tools.appendChild(html('span', 'cn-graph-hint', 'drag to pan · Ctrl/⌘ + wheel to zoom'));
    }
    this._svg = svg('svg', { class: 'cn-graph-svg', role: 'img' });
    const defs = svg('defs');
    const marker = svg('marker', {
      id: `cn-arrow-${Math.random().toString(36).slice(2, 8)}`,
      viewBox: '0 0 8 8',
      refX: 7,
      refY: 4,
      markerWidth: 7,
      markerHeight: 7,
      orient: 'auto'
    });
    marker.appendChild(svg('path', { d: 'M0,0 L8,4 L0,8 z', class: 'cn-graph-arrow' }));
    defs.appendChild(marker);
    this._arrow = marker.id;
    this._svg.appendChild(defs);
    this._world = svg('g', { class: 'cn-graph-world' });
    this._svg.appendChild(this._world);
    this._panel = html('div', 'cn-graph-panel');
    this._panel.setAttribute('role', 'status');
    this._panel.hidden = true;
    this.el.append(tools, this._svg, this._panel);
    if (_interactive) {
      this._wirePanZoom();
    }
  }

  private readonly _arrow: string;

  get selected(): string | null {
    return this._selected;
  }

  /** The structure from the kernel; laid out again only when it changed. */
  setSpec(spec: GraphSpec | null | undefined): void {
    this._spec = spec && Array.isArray(spec.nodes) ? spec : { nodes: [] };
    this.el.hidden = this._spec.nodes.length === 0;
    this._svg.setAttribute('aria-label', this._spec.title || 'pipeline graph');
    const key = structureKey(this._spec);
    if (key !== this._key) {
      this._key = key;
      const t0 = performance.now();
      this._layout = layoutGraph(this._spec);
      this._build();
      this.update();
      this.fit(false);
      recordGraphTime(performance.now() - t0);
    } else {
      this.update();
    }
  }

  private _build(): void {
    const lay = this._layout as Layout;
    this._world.replaceChildren();
    this._refs.clear();
    this._edgeEls.clear();
    const edges = svg('g', { class: 'cn-graph-edges' });
    const nodes = svg('g', { class: 'cn-graph-nodes' });
    this._world.append(edges, nodes);
    for (const n of this._spec.nodes) {
      for (const d of n.deps) {
        const pts = lay.edges.get(`${d}\u0000${n.name}`);
        if (!pts || !pts.length) {
          continue;
        }
        const path = svg('path', {
          class: 'cn-graph-edge',
          d: `M${pts.map(p => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' L')}`,
          'marker-end': `url(#${this._arrow})`
        });
        path.dataset.from = d;
        path.dataset.to = n.name;
        const t = svg('title');
        t.textContent = `${d} → ${n.name}`;
        path.appendChild(t);
        edges.appendChild(path);
        this._edgeEls.set(`${d}\u0000${n.name}`, path);
      }
    }
    for (const n of this._spec.nodes) {
      const p = lay.nodes.get(n.name) as Placed;
      const g = svg('g', { class: 'cn-graph-node', transform: `translate(${p.x.toFixed(1)},${p.y.toFixed(1)})` });
      g.dataset.node = n.name;
      if (this._interactive) {
        g.setAttribute('tabindex', '0');
        g.setAttribute('role', 'button');
        g.setAttribute('aria-label', `select ${n.name}`);
        g.addEventListener('click', ev => {
          ev.stopPropagation();
          this.select(n.name, true);
        });
        g.addEventListener('keydown', ev => {
          if (ev.key === 'Enter' || ev.key === ' ') {
            ev.preventDefault();
            this.select(n.name, true);
          }
        });
      }
      const tip = svg('title');
      g.appendChild(tip);
      if (n.is_map) {
        g.appendChild(svg('rect', { class: 'cn-graph-stack', x: 4, y: -4, width: NODE_W, height: NODE_H, rx: 6 }));
      }
      const box = svg('rect', { class: 'cn-graph-box', width: NODE_W, height: NODE_H, rx: 6 });
      g.appendChild(box);
      const label = n.name.length <= 22 ? n.name : `${n.name.slice(0, 21)}…`;
      const name = svg('text', { class: 'cn-graph-name', x: 8, y: 16 });
      name.textContent = (n.condition ? '? ' : '') + label;
      g.appendChild(name);
      const detail = svg('text', { class: 'cn-graph-detail', x: 8, y: 30 });
      g.appendChild(detail);
      const track = svg('rect', { class: 'cn-graph-track', x: 8, y: NODE_H - 9, width: NODE_W - 16, height: 4, rx: 2 });
      const fill = svg('rect', { class: 'cn-graph-fill', x: 8, y: NODE_H - 9, width: 0, height: 4, rx: 2 });
      g.append(track, fill);
      if (n.join && n.join !== 'all_succeeded' && n.deps.length) {
        const j = svg('text', { class: 'cn-graph-join', x: -4, y: -3, 'text-anchor': 'end' });
        j.textContent = n.join.replace(/_/g, ' ');
        g.appendChild(j);
      }
      nodes.appendChild(g);
      this._refs.set(n.name, { g, box, detail, fill, track, tip, sig: '' });
    }
  }

  /** Restyle the nodes from the current rows (only the nodes whose state changed). */
  update(): void {
    const states = new Map(this._spec.nodes.map(n => [n.name, nodeState(n, this._host)]));
    for (const n of this._spec.nodes) {
      const refs = this._refs.get(n.name);
      if (!refs) {
        continue;
      }
      const st = states.get(n.name) as NodeState;
      const sel = this._selected === n.name;
      const skippedIn = n.deps.map(d => (states.get(d)?.status === 'skipped' ? 1 : 0)).join('');
      const sig = `${st.status}\u0001${st.detail}\u0001${st.fraction}\u0001${sel ? 1 : 0}\u0001${skippedIn}`;
      if (sig === refs.sig) {
        continue;
      }
      refs.sig = sig;
      refs.g.dataset.status = st.status ?? 'planned';
      refs.g.dataset.tone = st.tone;
      refs.g.classList.toggle('cn-graph-planned', st.status === null);
      refs.g.classList.toggle('cn-graph-skipped', st.status === 'skipped');
      refs.g.classList.toggle('cn-graph-selected', sel);
      if (this._interactive) {
        refs.g.setAttribute('aria-pressed', sel ? 'true' : 'false');
      }
      refs.detail.textContent = st.detail;
      const tip = [`${n.name}: ${st.status ?? 'planned'}`];
      if (n.condition) {
        tip.push('runs only when its condition holds');
      }
      if (n.join !== 'all_succeeded') {
        tip.push(`join: ${n.join}`);
      }
      if (n.compensation) {
        tip.push(`compensation: ${n.compensation}`);
      }
      refs.tip.textContent = tip.join('\n');
      const show = st.fraction !== null;
      refs.track.style.display = show ? '' : 'none';
      refs.fill.style.display = show ? '' : 'none';
      refs.fill.setAttribute('width', ((NODE_W - 16) * (st.fraction ?? 0)).toFixed(1));
      for (const d of n.deps) {
        const e = this._edgeEls.get(`${d}\u0000${n.name}`);
        e?.classList.toggle('cn-graph-edge-skipped', st.status === 'skipped' || states.get(d)?.status === 'skipped');
      }
    }
    this._paintPanel();
  }

  /** Select a node (null: none). From a click, the host is told. */
  select(name: string | null, fromUser = false): void {
    this._selected = name && this._refs.has(name) ? name : null;
    this.update();
    if (fromUser && this._host.onSelect && this._selected) {
      const n = this._spec.nodes.find(x => x.name === this._selected);
      this._host.onSelect(n?.task ?? null, this._selected);
    }
  }

  private _paintPanel(): void {
    if (!this._interactive) {
      return;
    }
    const n = this._selected ? this._spec.nodes.find(x => x.name === this._selected) : undefined;
    if (!n) {
      this._panel.hidden = true;
      this._panelSig = '';
      return;
    }
    const row = n.task ? this._host.row(n.task) : undefined;
    const disconnected = this._host.disconnected ? this._host.disconnected() : false;
    const verbs = row ? allowedVerbs(row, disconnected) : [];
    const st = nodeState(n, this._host);
    const sig = `${n.name}\u0001${st.detail}\u0001${verbs.join(',')}`;
    if (sig === this._panelSig) {
      return;
    }
    this._panelSig = sig;
    this._panel.hidden = false;
    this._panel.replaceChildren();
    this._panel.dataset.node = n.name;
    this._panel.append(html('strong', 'cn-graph-panel-name', n.name), html('span', 'cn-graph-panel-detail', ` ${st.detail}`));
    if (!row) {
      this._panel.appendChild(html('span', 'cn-graph-panel-none', ' · no task yet'));
    } else if (!verbs.length) {
      this._panel.appendChild(html('span', 'cn-graph-panel-none', disconnected ? ' · disconnected' : ' · no action allowed now'));
    }
    for (const verb of verbs) {
      const b = html('button', 'cn-btn cn-graph-verb', VERB_LABELS[verb]);
      b.type = 'button';
      b.dataset.verb = verb;
      b.title = VERB_TIPS[verb];
      b.setAttribute('aria-label', `${VERB_LABELS[verb]} ${n.name}`);
      b.addEventListener('click', () => {
        if (row && this._host.onVerb) {
          this._host.onVerb(row.id, verb);
        }
      });
      this._panel.appendChild(b);
    }
  }

  // ------------------------------------------------------------------ zoom and pan
  private _apply(): void {
    this._world.setAttribute('transform', `translate(${this._x.toFixed(1)},${this._y.toFixed(1)}) scale(${this._k.toFixed(4)})`);
    this.el.dataset.zoom = this._k.toFixed(3);
  }

  private _viewSize(): { w: number; h: number } {
    const lay = this._layout;
    const w = this._svg.clientWidth || this.el.clientWidth || 900;
    const h = lay ? Math.min(MAX_H, Math.ceil(lay.height * (this._interactive ? Math.max(this._fitScale(w), MIN_READABLE) : 1))) : 0;
    return { w, h };
  }

  private _fitScale(w: number): number {
    const lay = this._layout;
    if (!lay) {
      return 1;
    }
    return Math.min(1, w / lay.width, MAX_H / lay.height);
  }

  /** Fit the graph in view; on the first view never below a readable scale. */
  fit(all: boolean): void {
    const lay = this._layout;
    if (!lay) {
      return;
    }
    if (!this._interactive) {
      this._svg.setAttribute('width', String(Math.ceil(lay.width)));
      this._svg.setAttribute('height', String(Math.ceil(lay.height)));
      this._svg.setAttribute('viewBox', `0 0 ${Math.ceil(lay.width)} ${Math.ceil(lay.height)}`);
      return;
    }
    const { w } = this._viewSize();
    const k = this._fitScale(w);
    this._k = all ? k : Math.max(k, MIN_READABLE);
    const h = Math.min(MAX_H, Math.ceil(lay.height * this._k));
    this._svg.style.height = `${Math.max(h, 60)}px`;
    this._x = Math.max(0, (w - lay.width * this._k) / 2);
    this._y = 0;
    this._apply();
  }

  zoomBy(f: number, cx?: number, cy?: number): void {
    const k = Math.max(0.05, Math.min(4, this._k * f));
    const px = cx ?? (this._svg.clientWidth || 900) / 2;
    const py = cy ?? (this._svg.clientHeight || 200) / 2;
    this._x = px - ((px - this._x) * k) / this._k;
    this._y = py - ((py - this._y) * k) / this._k;
    this._k = k;
    this._apply();
  }

  private _wirePanZoom(): void {
    let drag: { x: number; y: number; ox: number; oy: number; moved: boolean } | null = null;
    this._svg.addEventListener('pointerdown', ev => {
      if (ev.button !== 0 || (ev.target as Element).closest('.cn-graph-node')) {
        return;
      }
      drag = { x: ev.clientX, y: ev.clientY, ox: this._x, oy: this._y, moved: false };
      this._svg.setPointerCapture?.(ev.pointerId);
      this._svg.classList.add('cn-graph-dragging');
    });
    this._svg.addEventListener('pointermove', ev => {
      if (!drag) {
        return;
      }
      this._x = drag.ox + ev.clientX - drag.x;
      this._y = drag.oy + ev.clientY - drag.y;
      drag.moved = true;
      this._apply();
    });
    const end = () => {
      drag = null;
      this._svg.classList.remove('cn-graph-dragging');
    };
    this._svg.addEventListener('pointerup', end);
    this._svg.addEventListener('pointercancel', end);
    this._svg.addEventListener(
      'wheel',
      ev => {
        if (!(ev.ctrlKey || ev.metaKey)) {
          return; // the notebook scrolls as usual
        }
        ev.preventDefault();
        const r = this._svg.getBoundingClientRect();
        this.zoomBy(Math.exp(-ev.deltaY / 300), ev.clientX - r.left, ev.clientY - r.top);
      },
      { passive: false }
    );
  }
}

/** A static drawing of `spec` (a saved snapshot): no zoom tools, no panel. */
export function renderStaticGraph(node: HTMLElement, spec: GraphSpec, rows: Map<string, TaskRow>): GraphView {
  const view = new GraphView({ row: id => rows.get(id) }, false);
  view.el.classList.add('cn-graph-static');
  node.appendChild(view.el);
  view.setSpec(spec);
  return view;
}

/** The part of the widget's anywidget model the graph reads (the `graph` trait). */
interface GraphModel {
  get(name: string): any;
  on(event: string, cb: () => void): void;
  off(event: string, cb: () => void): void;
}

/**
 * A run table's graph: put above `before` in `parent`, its structure from the model's
 * `graph` trait, its statuses from the table's rows. `update()` after the rows changed;
 * the returned `dispose` unwires it.
 */
export function mountRunGraph(
  model: GraphModel,
  parent: HTMLElement,
  before: Node | null,
  host: GraphHost
): { view: GraphView; update(): void; dispose(): void } {
  const view = new GraphView(host);
  parent.insertBefore(view.el, before);
  const onSpec = () => view.setSpec(model.get('graph'));
  model.on('change:graph', onSpec);
  onSpec();
  return {
    view,
    update: () => view.update(),
    dispose: () => model.off('change:graph', onSpec)
  };
}

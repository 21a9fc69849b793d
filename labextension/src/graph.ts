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
import { ControlVerb, STATUS_LABELS, STATUS_TONES, TaskRow, TaskStatus, VERB_LABELS, VERB_TIPS, isTerminal } from './contract';
import { Layout, LayoutInput, NODE_H, NODE_W, Placed, layoutGraph, structureKey } from './layout';
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

export { NODE_H, NODE_W, ORDER_SWEEPS_MAX_NODES, layoutGraph, structureKey } from './layout';
export type { Layout, LayoutInput, Placed } from './layout';

const MAX_H = 460; // px: the graph's viewport at most (unless it fills its container)
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

// ------------------------------------------------------------------ layouts, once per structure
/**
 * A layout depends only on the structure (node names and dependencies), so it is kept by
 * `structureKey`: a status change, a node's task created, a map expanded, a second view
 * of the same run (the sidebar's, a re-rendered output) never lay out again. Graphs of
 * `WORKER_MIN_NODES` nodes or more are laid out in a worker (`layout-worker.ts`, started
 * from the source the widget and pictures bundles carry) while the view shows a
 * placeholder, so the page never freezes; without a worker (the JupyterLab extension's
 * bundle, a test), or when it fails, they are laid out at once on the main thread.
 */
export const WORKER_MIN_NODES = 40;
const CACHE_SIZE = 16;

/** What the view needs of a worker (a test passes its own). */
export interface LayoutWorker {
  postMessage(msg: unknown): void;
  onmessage: ((ev: MessageEvent) => void) | null;
  onerror: ((ev: any) => void) | null;
  terminate(): void;
}

// the worker's bundled source, put in by build-widget.mjs (absent from the tsc build)
declare const __CN_LAYOUT_WORKER__: string | undefined;

function blobWorker(): LayoutWorker | null {
  if (typeof __CN_LAYOUT_WORKER__ !== 'string' || typeof Worker === 'undefined' || typeof Blob === 'undefined') {
    return null;
  }
  // the URL stays valid for the page's life: one worker per page
  return new Worker(URL.createObjectURL(new Blob([__CN_LAYOUT_WORKER__], { type: 'text/javascript' })));
}

interface Pending {
  resolve(lay: Layout): void;
  reject(err: Error): void;
}

let makeWorker: () => LayoutWorker | null = blobWorker;
let worker: { w: LayoutWorker; pending: Map<number, Pending> } | null | undefined;
let nextId = 1;
const cache = new Map<string, Layout>();
const inflight = new Map<string, Promise<Layout>>();

type Where = 'page' | 'worker';

function counted(): { __cnGraphLayouts?: Record<Where, number> } {
  const g = globalThis as { __cnGraphLayouts?: Record<Where, number> };
  g.__cnGraphLayouts = g.__cnGraphLayouts || { page: 0, worker: 0 };
  return g;
}

function count(where: Where): void {
  (counted().__cnGraphLayouts as Record<Where, number>)[where] += 1;
}

/** How many layouts this page has run (`where`: on its main thread or in the worker; both
 * by default), for tests: kept in `globalThis.__cnGraphLayouts`, shared by the bundles. */
export function layoutCount(where?: Where): number {
  const c = counted().__cnGraphLayouts as Record<Where, number>;
  return where ? c[where] : c.page + c.worker;
}

/** Forget the kept layouts (a benchmark measures a first view each time). */
export function clearLayoutCache(): void {
  cache.clear();
}

/** Use `factory` for the layout worker (null: lay out on the main thread). */
export function setLayoutWorker(factory: (() => LayoutWorker | null) | null): void {
  worker?.w.terminate();
  worker = undefined;
  makeWorker = factory ?? (() => null);
}

function keep(key: string, lay: Layout): Layout {
  cache.delete(key);
  cache.set(key, lay);
  while (cache.size > CACHE_SIZE) {
    cache.delete(cache.keys().next().value as string);
  }
  return lay;
}

function layoutHere(spec: LayoutInput): Layout {
  count('page');
  return layoutGraph(spec);
}

function startWorker(): typeof worker {
  if (worker === undefined) {
    let w: LayoutWorker | null = null;
    try {
      w = makeWorker();
    } catch {
      w = null; // a page that forbids workers: lay out here
    }
    worker = w ? { w, pending: new Map() } : null;
    if (worker) {
      const live = worker;
      live.w.onmessage = ev => {
        const { id, layout, error } = ev.data as { id: number; layout?: Layout; error?: string };
        const p = live.pending.get(id);
        live.pending.delete(id);
        if (p) {
          layout ? p.resolve(layout) : p.reject(new Error(error || 'the layout failed'));
        }
      };
      live.w.onerror = (ev: { message?: string } | undefined) => {
        // the worker could not start (or died): every waiting graph is laid out here
        console.warn(`chongming: the graph layout worker failed (${ev?.message || 'no message'}); laying out on the page`);
        for (const p of live.pending.values()) {
          p.reject(new Error('the layout worker failed'));
        }
        live.pending.clear();
        live.w.terminate();
        if (worker === live) {
          worker = null;
        }
      };
    }
  }
  return worker;
}

function inWorker(live: NonNullable<typeof worker>, spec: LayoutInput): Promise<Layout> {
  const id = nextId++;
  count('worker');
  const input: LayoutInput = { nodes: spec.nodes.map(n => ({ name: n.name, deps: n.deps })) };
  return new Promise<Layout>((resolve, reject) => {
    live.pending.set(id, { resolve, reject });
    live.w.postMessage({ id, spec: input });
  });
}

/** The layout of `spec` (its structure is `key`): kept, computed now, or on its way. */
function obtainLayout(key: string, spec: LayoutInput): Layout | Promise<Layout> {
  const kept = cache.get(key);
  if (kept) {
    return keep(key, kept);
  }
  const coming = inflight.get(key);
  if (coming) {
    return coming;
  }
  const live = spec.nodes.length >= WORKER_MIN_NODES ? startWorker() : null;
  if (!live) {
    return keep(key, layoutHere(spec));
  }
  const p = inWorker(live, spec)
    .catch(() => layoutHere(spec))
    .then(lay => keep(key, lay))
    .finally(() => inflight.delete(key));
  inflight.set(key, p);
  return p;
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

/** How a view sizes itself. */
export interface GraphViewOptions {
  /** The viewport takes the height its container gives `el` (a main-area tab) and is
   * fitted again when that height changes; by default (a notebook output) its height
   * follows the drawing, at most `MAX_H` px. */
  fill?: boolean;
}

/** The graph view: `el` goes into the page; `setSpec` and `update` keep it current. */
export class GraphView {
  readonly el: HTMLElement;
  private readonly _svg: SVGSVGElement;
  private readonly _world: SVGGElement;
  private readonly _panel: HTMLElement;
  private readonly _wait: HTMLElement;
  private _drawn: Promise<void> = Promise.resolve();
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
  private readonly _fill: boolean;

  constructor(
    private readonly _host: GraphHost,
    private readonly _interactive = true,
    options: GraphViewOptions = {}
  ) {
    this._fill = options.fill === true && _interactive;
    this.el = html('div', this._fill ? 'cn-graph-view cn-graph-fill-view' : 'cn-graph-view');
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
    this._wait = html('div', 'cn-graph-wait');
    this._wait.setAttribute('role', 'status');
    this._wait.hidden = true;
    this.el.append(tools, this._wait, this._svg, this._panel);
    if (_interactive) {
      this._wirePanZoom();
      // the first view fits the width the view gets once it is in the page (a widget's
      // view is often drawn before it is attached) and again when the output is resized
      // (a filling view: its height too), until the user zooms or pans
      if (typeof ResizeObserver !== 'undefined') {
        new ResizeObserver(() => {
          const w = this._svg.clientWidth;
          const h = this._fill ? this._svg.clientHeight : this._fitH;
          if (w && this._auto && this._layout && (w !== this._fitW || h !== this._fitH)) {
            this.fit(this._auto === 'all', w);
          }
        }).observe(this._svg);
      }
    }
  }

  /** How the view was last fitted on its own ('first': the readable first view), null once
   * the user zoomed or panned; and for what width. */
  private _auto: 'first' | 'all' | null = 'first';
  private _fitW = 0;
  private _fitH = 0;

  private readonly _arrow: string;

  get selected(): string | null {
    return this._selected;
  }

  /** The structure from the kernel; laid out again only when it changed. A large graph is
   * laid out off the main thread: a placeholder shows until it is drawn (`drawn()`). */
  setSpec(spec: GraphSpec | null | undefined): void {
    this._spec = spec && Array.isArray(spec.nodes) ? spec : { nodes: [] };
    this.el.hidden = this._spec.nodes.length === 0;
    this._svg.setAttribute('aria-label', this._spec.title || 'pipeline graph');
    const key = structureKey(this._spec);
    if (key === this._key) {
      this.update();
      return;
    }
    this._key = key;
    const t0 = performance.now();
    const got = obtainLayout(key, this._spec);
    if (!(got instanceof Promise)) {
      this._draw(got, t0);
      this._drawn = Promise.resolve();
      return;
    }
    this._layout = null;
    this._world.replaceChildren();
    this._refs.clear();
    this._edgeEls.clear();
    this._wait.textContent = `laying out ${this._spec.nodes.length} nodes…`;
    this._wait.hidden = false;
    this._svg.style.display = 'none';
    this.el.dataset.layout = 'pending';
    this._drawn = got.then(
      lay => {
        if (this._key === key) {
          this._draw(lay, t0);
        }
      },
      err => {
        if (this._key === key) {
          this._wait.textContent = `the graph could not be laid out: ${String(err?.message ?? err)}`;
          this.el.dataset.layout = 'failed';
        }
      }
    );
  }

  /** Resolves once the structure given last is drawn (at once for a small graph). */
  drawn(): Promise<void> {
    return this._drawn;
  }

  private _draw(lay: Layout, t0: number): void {
    this._layout = lay;
    this._wait.hidden = true;
    this._svg.style.display = '';
    // the view's width read before the nodes exist: the style and layout it forces are of
    // an empty drawing, not of thousands of new elements (drawn once, by the next frame)
    const width = this._interactive ? this._viewWidth() : undefined;
    this._world.replaceChildren();
    this._build();
    this.update();
    this.fit(false, width);
    this.el.dataset.layout = 'done';
    recordGraphTime(performance.now() - t0);
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
    // a node of the spec (also while its layout is on its way: drawn selected then)
    this._selected = name && this._spec.nodes.some(n => n.name === name) ? name : null;
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

  private _viewWidth(): number {
    return this._svg.clientWidth || this.el.clientWidth || 900;
  }

  /** The viewport's height the graph is fitted into: a filling view's own (as its
   * container lays it out), else at most `MAX_H`. */
  private _viewHeight(): number {
    return this._fill ? this._svg.clientHeight || MAX_H : MAX_H;
  }

  private _fitScale(w: number, h: number): number {
    const lay = this._layout;
    if (!lay) {
      return 1;
    }
    return Math.min(1, w / lay.width, h / lay.height);
  }

  /** Fit the graph in view; on the first view never below a readable scale. */
  fit(all: boolean, width?: number): void {
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
    const w = width ?? this._viewWidth();
    const viewH = this._viewHeight();
    this._auto = all ? 'all' : 'first';
    this._fitW = w;
    this._fitH = this._fill ? this._svg.clientHeight : 0;
    const k = this._fitScale(w, viewH);
    this._k = all ? k : Math.max(k, MIN_READABLE);
    if (this._fill) {
      // the container sets the height (CSS): the drawing is centred in it
      this._y = Math.max(0, (viewH - lay.height * this._k) / 2);
    } else {
      const h = Math.min(MAX_H, Math.ceil(lay.height * this._k));
      this._svg.style.height = `${Math.max(h, 60)}px`;
      this._y = 0;
    }
    this._x = Math.max(0, (w - lay.width * this._k) / 2);
    this._apply();
  }

  zoomBy(f: number, cx?: number, cy?: number): void {
    const k = Math.max(0.05, Math.min(4, this._k * f));
    const px = cx ?? (this._svg.clientWidth || 900) / 2;
    const py = cy ?? (this._svg.clientHeight || 200) / 2;
    this._x = px - ((px - this._x) * k) / this._k;
    this._y = py - ((py - this._y) * k) / this._k;
    this._k = k;
    this._auto = null;
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
      this._auto = null;
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

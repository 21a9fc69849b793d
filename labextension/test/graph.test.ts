import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { TaskRow } from '../src/contract';
import {
  GraphNodeSpec,
  GraphSpec,
  GraphView,
  LayoutWorker,
  WORKER_MIN_NODES,
  clearLayoutCache,
  layoutCount,
  layoutGraph,
  setLayoutWorker
} from '../src/graph';
import { row } from './fixtures';

function node(name: string, deps: string[] = [], extra: Partial<GraphNodeSpec> = {}): GraphNodeSpec {
  return { name, deps, join: 'all_succeeded', condition: false, compensate: false, is_map: false, task: null, ...extra };
}

/** Six steps as a run graph sends them: a fan-out from `extract`, a join, a report. */
function six(): GraphSpec {
  return {
    title: 'run six',
    nodes: [
      node('extract', [], { task: 't-extract' }),
      node('flaky', ['extract'], { task: 't-flaky' }),
      node('slow', ['extract'], { task: 't-slow' }),
      node('branch', ['extract'], { condition: true }),
      node('combine', ['flaky', 'slow'], { join: 'any_succeeded' }),
      node('report', ['combine'])
    ]
  };
}

/** `n` steps in layers of 12, each depending on one to three steps of the layer before. */
function layered(n: number, prefix = 'step'): GraphSpec {
  const width = 12;
  const nodes: GraphNodeSpec[] = [];
  for (let i = 0; i < n; i++) {
    const layer = Math.floor(i / width);
    const deps = layer ? [...new Set([0, 5, 7].slice(0, 1 + (i % 3)).map(k => `${prefix}-${(layer - 1) * width + ((i + k) % width)}`))] : [];
    nodes.push(node(`${prefix}-${i}`, deps, { task: `t-${prefix}-${i}` }));
  }
  return { title: `${n} steps`, nodes };
}

function statuses(view: GraphView): Record<string, string> {
  return Object.fromEntries([...view.el.querySelectorAll<SVGGElement>('.cn-graph-node')].map(g => [g.dataset.node, g.dataset.status]));
}

/** A worker the test answers by hand: `deliver()` lays out what was posted, `fail()` dies. */
class HandWorker implements LayoutWorker {
  onmessage: ((ev: MessageEvent) => void) | null = null;
  onerror: ((ev: any) => void) | null = null;
  posted: { id: number; spec: GraphSpec }[] = [];
  terminated = false;
  postMessage(msg: unknown): void {
    this.posted.push(msg as { id: number; spec: GraphSpec });
  }
  deliver(): void {
    for (const m of this.posted.splice(0)) {
      this.onmessage?.({ data: { id: m.id, layout: layoutGraph(m.spec) } } as MessageEvent);
    }
  }
  fail(): void {
    this.onerror?.({});
  }
  terminate(): void {
    this.terminated = true;
  }
}

// 300-node layouts in happy-dom take seconds on a loaded machine (a watchdog, not a timing)
vi.setConfig({ testTimeout: 60_000 });

beforeEach(() => {
  clearLayoutCache();
  setLayoutWorker(null);
});

afterEach(() => {
  setLayoutWorker(null);
});

describe('the run graph lays a structure out once', () => {
  it('does not lay the graph out again for a status change, a task created or a map expanded', () => {
    const rows = new Map<string, TaskRow>();
    const view = new GraphView({ row: id => rows.get(id) });
    view.setSpec(six());
    const once = layoutCount();
    expect(Object.keys(statuses(view))).toHaveLength(6);
    const where = view.el.querySelector<SVGGElement>('.cn-graph-node[data-node=combine]')!.getAttribute('transform');

    // statuses from the table's rows, then a spec whose nodes carry new tasks and states
    rows.set('t-extract', row({ id: 't-extract', status: 'succeeded' }));
    rows.set('t-slow', row({ id: 't-slow', status: 'paused' }));
    view.update();
    const later = six();
    later.nodes[3] = node('branch', ['extract'], { condition: true, status: 'skipped' });
    later.nodes[4] = node('combine', ['flaky', 'slow'], { join: 'any_succeeded', task: 't-combine', children: ['c1', 'c2'] });
    view.setSpec(later);
    expect(statuses(view)).toMatchObject({ extract: 'succeeded', slow: 'paused', branch: 'skipped', report: 'planned' });
    expect(layoutCount()).toBe(once);
    expect(view.el.querySelector('.cn-graph-node[data-node=combine]')!.getAttribute('transform')).toBe(where);

    // a new dependency is a new structure: laid out again
    const more = six();
    more.nodes[5] = node('report', ['combine', 'branch']);
    view.setSpec(more);
    expect(layoutCount()).toBe(once + 1);
    expect(view.el.querySelectorAll('.cn-graph-edge')).toHaveLength(7);
  });

  it('reuses the layout of the same structure in a second view', () => {
    new GraphView({ row: () => undefined }).setSpec(six());
    const once = layoutCount();
    const second = new GraphView({ row: () => undefined });
    second.setSpec(six());
    expect(layoutCount()).toBe(once);
    expect(Object.keys(statuses(second))).toHaveLength(6);
    clearLayoutCache();
    new GraphView({ row: () => undefined }).setSpec(six());
    expect(layoutCount()).toBe(once + 1);
  });

  it('draws every node and edge of a 300-node graph', () => {
    const spec = layered(300);
    const view = new GraphView({ row: () => undefined });
    view.setSpec(spec);
    const drawn = view.el.querySelectorAll<SVGGElement>('.cn-graph-node');
    expect(drawn).toHaveLength(300);
    expect(new Set([...drawn].map(g => g.getAttribute('transform'))).size).toBe(300); // no two on one spot
    const deps = spec.nodes.reduce((k, n) => k + n.deps.length, 0);
    expect(view.el.querySelectorAll('.cn-graph-edge')).toHaveLength(deps);
  });
});

describe('a large graph is laid out off the main thread', () => {
  it('shows a placeholder until the worker answers, then the graph', async () => {
    const w = new HandWorker();
    setLayoutWorker(() => w);
    const view = new GraphView({ row: () => undefined });
    view.setSpec(layered(300));
    expect(view.el.dataset.layout).toBe('pending');
    const wait = view.el.querySelector<HTMLElement>('.cn-graph-wait')!;
    expect(wait.hidden).toBe(false);
    expect(wait.textContent).toBe('laying out 300 nodes…');
    expect(view.el.querySelectorAll('.cn-graph-node')).toHaveLength(0);
    expect(w.posted).toHaveLength(1);
    expect(w.posted[0].spec.nodes[12]).toEqual({ name: 'step-12', deps: ['step-0'] }); // the structure only

    // a selection made meanwhile is drawn with the graph
    view.select('step-3');
    w.deliver();
    await view.drawn();
    expect(view.el.dataset.layout).toBe('done');
    expect(wait.hidden).toBe(true);
    expect(view.el.querySelectorAll('.cn-graph-node')).toHaveLength(300);
    expect(view.el.querySelector('.cn-graph-node[data-node=step-3]')!.classList.contains('cn-graph-selected')).toBe(true);

    // the next view of it, and a status update, need no worker
    const again = new GraphView({ row: () => undefined });
    again.setSpec(layered(300));
    expect(w.posted).toHaveLength(0);
    expect(again.el.querySelectorAll('.cn-graph-node')).toHaveLength(300);
  });

  it('draws only the structure given last when an earlier layout arrives late', async () => {
    const w = new HandWorker();
    setLayoutWorker(() => w);
    const view = new GraphView({ row: () => undefined });
    view.setSpec(layered(200, 'old'));
    view.setSpec(layered(240, 'new'));
    expect(w.posted).toHaveLength(2);
    w.deliver();
    await view.drawn();
    const names = Object.keys(statuses(view));
    expect(names).toHaveLength(240);
    expect(names.every(n => n.startsWith('new-'))).toBe(true);
  });

  it('lays the graph out on the main thread when the worker fails', async () => {
    const w = new HandWorker();
    setLayoutWorker(() => w);
    const view = new GraphView({ row: () => undefined });
    view.setSpec(layered(300));
    const before = layoutCount();
    w.fail();
    await view.drawn();
    expect(view.el.querySelectorAll('.cn-graph-node')).toHaveLength(300);
    expect(layoutCount()).toBe(before + 1);
    expect(w.terminated).toBe(true);
  });

  it('lays a small graph out at once, without the worker', () => {
    const w = new HandWorker();
    setLayoutWorker(() => w);
    const view = new GraphView({ row: () => undefined });
    view.setSpec(layered(WORKER_MIN_NODES - 1));
    expect(w.posted).toHaveLength(0);
    expect(view.el.dataset.layout).toBe('done');
    expect(view.el.querySelectorAll('.cn-graph-node')).toHaveLength(WORKER_MIN_NODES - 1);
  });
});

/** Run `body` with a ResizeObserver whose callbacks the test calls (`observed`). */
function withResizes(body: (observed: (() => void)[]) => void): void {
  const observed: (() => void)[] = [];
  const real = (globalThis as any).ResizeObserver;
  (globalThis as any).ResizeObserver = class {
    constructor(private readonly cb: () => void) {}
    observe(): void {
      observed.push(this.cb);
    }
    disconnect(): void {}
  };
  try {
    body(observed);
  } finally {
    (globalThis as any).ResizeObserver = real;
  }
}

describe('the first view', () => {
  it('fits the width the view gets once it is in the page, until the user zooms', () => {
    withResizes(observed => {
      const view = new GraphView({ row: () => undefined });
      view.setSpec(six()); // drawn before it has a width: fitted to 900 px
      const svgEl = view.el.querySelector('svg') as SVGSVGElement;
      const first = Number(view.el.dataset.zoom);
      let width = 640;
      Object.defineProperty(svgEl, 'clientWidth', { get: () => width });
      observed.forEach(cb => cb()); // attached: 640 px wide
      const narrow = Number(view.el.dataset.zoom);
      expect(narrow).toBeLessThan(first);
      expect(narrow).toBeGreaterThanOrEqual(0.6); // never below a readable scale
      view.zoomBy(1.25); // the user zooms: a resize no longer refits
      const zoomed = Number(view.el.dataset.zoom);
      width = 1400;
      observed.forEach(cb => cb());
      expect(Number(view.el.dataset.zoom)).toBe(zoomed);
    });
  });

  it('keeps a notebook view at most 460 px high, and lets a filling view take its container height', () => {
    withResizes(observed => {
      // a tall graph (a fan-out of 12, stacked top to bottom) and a flat one (a chain)
      const chain: GraphSpec = { nodes: Array.from({ length: 12 }, (_, i) => node(`s${i}`, i ? [`s${i - 1}`] : [])) };
      const tall: GraphSpec = { nodes: [node('root'), ...Array.from({ length: 12 }, (_, i) => node(`c${i}`, ['root']))] };
      const capped = new GraphView({ row: () => undefined });
      capped.setSpec(tall);
      const cappedSvg = capped.el.querySelector('svg') as SVGSVGElement;
      expect(parseFloat(cappedSvg.style.height)).toBeLessThanOrEqual(460);
      expect(capped.el.classList.contains('cn-graph-fill-view')).toBe(false);

      const filling = new GraphView({ row: () => undefined }, true, { fill: true });
      expect(filling.el.classList.contains('cn-graph-fill-view')).toBe(true);
      const svgEl = filling.el.querySelector('svg') as SVGSVGElement;
      let height = 300;
      Object.defineProperty(svgEl, 'clientWidth', { get: () => 900 });
      Object.defineProperty(svgEl, 'clientHeight', { get: () => height });
      filling.setSpec(tall);
      expect(svgEl.style.height).toBe(''); // the container's CSS sets it
      const low = Number(filling.el.dataset.zoom);
      height = 1200; // the tab grew: fitted again to the new height
      observed.forEach(cb => cb());
      const high = Number(filling.el.dataset.zoom);
      expect(high).toBeGreaterThan(low);
      // centred in the height it has
      const y = Number(/translate\([^,]+,([^)]+)\)/.exec(filling.el.querySelector('.cn-graph-world')!.getAttribute('transform')!)![1]);
      expect(y).toBeGreaterThanOrEqual(0);
      filling.setSpec(chain); // a wide, flat graph sits in the middle of a tall view
      const yFlat = Number(/translate\([^,]+,([^)]+)\)/.exec(filling.el.querySelector('.cn-graph-world')!.getAttribute('transform')!)![1]);
      expect(yFlat).toBeGreaterThan(100);
    });
  });
});

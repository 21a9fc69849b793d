/**
 * The attempt timeline drawn on a canvas: one lane per task, attempts as bars toned by
 * outcome, retry waits / pauses / stops as translucent boxes, stops and timeouts as
 * ticks, the slots in use as a strip underneath. A canvas, because 10,000 attempts as
 * SVG elements are too slow to draw and to hover; only the lanes in view are painted
 * (the lanes scroll), so the cost of a redraw follows the view, not the history.
 *
 * The data is the kernel's `application/vnd.chongming.timeline+json` (columns, see
 * `chongming_nb/pictures/timeline.py` `to_json`). Hovering a bar shows its row of
 * `attempts_df()` in a tooltip; every string goes into the DOM as text.
 */

export const TIMELINE_MIME = 'application/vnd.chongming.timeline+json';

export interface TimelineData {
  version: number;
  title: string;
  /** Epoch ms of the timeline's start (null: no attempts). */
  t0: number | null;
  /** Seconds from t0 to the end of the picture. */
  span: number;
  lanes: string[];
  lane_ids: string[];
  bars: { lane: number[]; start: number[]; end: number[]; tone: string[]; attempt: number[]; running: number[] };
  /** The columns of each bar's attempt row, and per bar its values ('' when empty). */
  keys: string[];
  details: string[][];
  /** `tone`: the colour of each mark (the kernel's MARK_TONES). */
  marks: { lane: number[]; kind: string[]; tone: string[]; start: number[]; end: number[]; label: string[] };
  slots: [number, number][];
  max_slots: number;
}

const LABEL_W = 160;
const LANE_H = 16;
const AXIS_H = 20;
const STRIP_H = 36;
const MAX_LANES_H = 420; // px of lanes in view at most; more lanes scroll
const MIN_PLOT_W = 200;

/**
 * How a view is drawn. The defaults are the notebook's timeline; the sidebar's small
 * timeline of one task (`sidebar-detail.ts`) draws one taller lane without its label
 * column and slots strip, in a panel 250-400 px wide.
 */
export interface TimelineOptions {
  /** px of the lane names' column (0: no names: one task, named elsewhere). */
  labelWidth?: number;
  laneHeight?: number;
  /** px the time axis keeps at least (a narrower view is as wide as this). */
  minPlotWidth?: number;
  /** Draw the "slots in use" strip underneath. */
  strip?: boolean;
  /** The heading's text (default: tasks, attempts, span and slots). */
  heading?: (data: TimelineData) => string;
}
const POINT_MARKS = new Set(['stop', 'timeout']);
const TONE_VARS: Record<string, [string, string]> = {
  idle: ['--jp-layout-color3', '#9aa4ad'],
  active: ['--jp-brand-color1', '#1976d2'],
  warn: ['--jp-warn-color1', '#b26a00'],
  ok: ['--jp-success-color1', '#2e7d32'],
  bad: ['--jp-error-color1', '#c62828'],
  muted: ['--jp-ui-font-color2', '#6e7781']
};

function html<K extends keyof HTMLElementTagNameMap>(tag: K, cls = '', text = ''): HTMLElementTagNameMap[K] {
  const node = Object.assign(document.createElement(tag), { className: cls });
  node.textContent = text;
  return node;
}

/** `0.25` -> `250ms`, `75` -> `1m15s`, `7260` -> `2h01m` (as the Python side says it). */
export function humanSeconds(s: number): string {
  if (!isFinite(s)) {
    return '';
  }
  if (s < 1) {
    return `${Math.round(s * 1000)}ms`;
  }
  if (s < 60) {
    return `${s.toFixed(1)}s`;
  }
  const m = Math.floor(Math.round(s) / 60);
  const sec = Math.round(s) % 60;
  if (m < 60) {
    return `${m}m${String(sec).padStart(2, '0')}s`;
  }
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

function recordTimelineTime(ms: number): void {
  const g = globalThis as any;
  (g.__cnTimelineTimes = g.__cnTimelineTimes || []).push(ms);
}

/** The timeline view: `el` goes into the page; `setData` draws (again). */
export class TimelineView {
  readonly el: HTMLElement;
  private readonly _labelW: number;
  private readonly _laneH: number;
  private readonly _minPlotW: number;
  private readonly _heading: ((data: TimelineData) => string) | null;
  private readonly _scroller: HTMLElement;
  private readonly _spacer: HTMLElement;
  private readonly _canvas: HTMLCanvasElement;
  private readonly _strip: HTMLCanvasElement;
  private readonly _tip: HTMLElement;
  private readonly _head: HTMLElement;
  private _data: TimelineData | null = null;
  /** Per lane, the index of its first bar (bars come sorted by lane, then start). */
  private _laneStart: Int32Array = new Int32Array(1);
  private _colours: Record<string, string> = {};
  private _frame = 0;
  private _width = 0;

  constructor(options: TimelineOptions = {}) {
    this._labelW = options.labelWidth ?? LABEL_W;
    this._laneH = options.laneHeight ?? LANE_H;
    this._minPlotW = options.minPlotWidth ?? MIN_PLOT_W;
    this._heading = options.heading ?? null;
    this.el = html('div', 'cn-timeline-view');
    this._head = html('div', 'cn-timeline-head');
    this._scroller = html('div', 'cn-timeline-lanes');
    this._spacer = html('div', 'cn-timeline-spacer');
    this._canvas = html('canvas', 'cn-timeline-canvas');
    this._canvas.setAttribute('role', 'img');
    this._scroller.append(this._canvas, this._spacer);
    this._strip = html('canvas', 'cn-timeline-strip');
    this._strip.setAttribute('aria-hidden', 'true');
    this._strip.hidden = options.strip === false;
    this._tip = html('div', 'cn-timeline-tip');
    this._tip.hidden = true;
    this._tip.setAttribute('role', 'tooltip');
    this.el.append(this._head, this._scroller, this._strip, this._tip);
    this._scroller.addEventListener('scroll', () => this._schedule(), { passive: true });
    this._scroller.addEventListener('mousemove', ev => this._hover(ev));
    this._scroller.addEventListener('mouseleave', () => {
      this._tip.hidden = true;
    });
  }

  get data(): TimelineData | null {
    return this._data;
  }

  /** Draw `data` now (synchronously: the render time is what a caller measures). */
  setData(data: TimelineData): void {
    this._data = data;
    const n = data.lanes.length;
    const starts = new Int32Array(n + 1).fill(-1);
    const lanes = data.bars.lane;
    for (let i = lanes.length - 1; i >= 0; i--) {
      starts[lanes[i]] = i;
    }
    starts[n] = lanes.length;
    for (let l = n - 1; l >= 0; l--) {
      if (starts[l] < 0) {
        starts[l] = starts[l + 1];
      }
    }
    this._laneStart = starts;
    const count = lanes.length;
    this._head.textContent = this._heading
      ? this._heading(data)
      : data.lanes.length
        ? `${data.title || 'timeline'}: ${n} task${n === 1 ? '' : 's'}, ${count} attempt${count === 1 ? '' : 's'} over ${humanSeconds(data.span)}, at most ${data.max_slots} running at once`
        : `${data.title || 'timeline'}: no attempts yet`;
    this._canvas.setAttribute('aria-label', this._head.textContent);
    this._spacer.style.height = `${n * this._laneH}px`;
    this._scroller.style.height = `${Math.min(n * this._laneH, MAX_LANES_H) + AXIS_H}px`;
    this.el.dataset.attempts = String(count);
    this.el.dataset.lanes = String(n);
    this.paint();
  }

  private _schedule(): void {
    if (!this._frame) {
      this._frame = requestAnimationFrame(() => {
        this._frame = 0;
        this.paint();
      });
    }
  }

  private _resolveColours(): void {
    const style = getComputedStyle(this.el);
    const read = (name: string, fallback: string) => style.getPropertyValue(name).trim() || fallback;
    for (const [tone, [name, fallback]] of Object.entries(TONE_VARS)) {
      this._colours[tone] = read(name, fallback);
    }
    this._colours.fg = read('--jp-ui-font-color1', '#1f2328');
    this._colours.muted = read('--jp-ui-font-color2', '#57606a');
    this._colours.alt = read('--jp-layout-color2', '#f3f4f6');
  }

  private _x(t: number, plotW: number): number {
    const span = this._data && this._data.span > 0 ? this._data.span : 1;
    return this._labelW + (plotW * t) / span;
  }

  /** Paint the lanes in view, the axis and the slots strip. */
  paint(): void {
    const data = this._data;
    if (!data) {
      return;
    }
    const t0 = performance.now();
    this._resolveColours();
    const dpr = window.devicePixelRatio || 1;
    const labelW = this._labelW;
    const laneH = this._laneH;
    const width = Math.max(this._scroller.clientWidth || this.el.clientWidth || 800, labelW + this._minPlotW);
    this._width = width;
    const plotW = this._plotW();
    const viewH = Math.min(data.lanes.length * laneH, MAX_LANES_H) + AXIS_H;
    const top = this._scroller.scrollTop;
    const c = this._canvas;
    c.style.width = `${width}px`;
    c.style.height = `${viewH}px`;
    c.style.top = `${top}px`;
    if (c.width !== Math.round(width * dpr) || c.height !== Math.round(viewH * dpr)) {
      c.width = Math.round(width * dpr);
      c.height = Math.round(viewH * dpr);
    }
    const g = c.getContext('2d');
    if (!g) {
      return;
    }
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, viewH);
    g.font = '11px var(--jp-ui-font-family, sans-serif)';
    g.textBaseline = 'middle';
    const first = Math.floor(top / laneH);
    const last = Math.min(data.lanes.length, Math.ceil((top + viewH - AXIS_H) / laneH));
    const y = (lane: number) => lane * laneH - top;
    for (let l = first; l < last; l++) {
      if (l % 2) {
        g.fillStyle = this._colours.alt;
        g.fillRect(0, y(l), width, laneH);
      }
      if (labelW > 0) {
        g.fillStyle = this._colours.fg;
        const name = data.lanes[l];
        g.fillText(name.length <= 24 ? name : `${name.slice(0, 23)}…`, 4, y(l) + laneH / 2, labelW - 8);
      }
    }
    // bars, one fill style per tone (a canvas state change per bar is the slow part)
    const b = data.bars;
    const from = this._laneStart[first] ?? 0;
    const to = this._laneStart[last] ?? b.lane.length;
    for (const tone of Object.keys(TONE_VARS)) {
      g.fillStyle = this._colours[tone];
      for (let i = from; i < to; i++) {
        if (b.tone[i] !== tone) {
          continue;
        }
        const x0 = this._x(b.start[i], plotW);
        const w = Math.max(this._x(b.end[i], plotW) - x0, 1.5);
        g.globalAlpha = b.running[i] ? 0.6 : 1;
        g.fillRect(x0, y(b.lane[i]) + 3, w, laneH - 6);
      }
    }
    g.globalAlpha = 1;
    const m = data.marks;
    for (let i = 0; i < m.lane.length; i++) {
      const l = m.lane[i];
      if (l < first || l >= last) {
        continue;
      }
      const colour = this._colours[m.tone[i]] ?? this._colours.muted;
      const x0 = this._x(m.start[i], plotW);
      if (POINT_MARKS.has(m.kind[i])) {
        g.fillStyle = colour;
        g.fillRect(x0 - 1, y(l) + 1, 2, laneH - 2);
      } else {
        const w = Math.max(this._x(m.end[i], plotW) - x0, 1);
        g.globalAlpha = 0.35;
        g.fillStyle = colour;
        g.fillRect(x0, y(l) + 3, w, laneH - 6);
        g.globalAlpha = 1;
        g.strokeStyle = colour;
        g.setLineDash([3, 2]);
        g.strokeRect(x0 + 0.5, y(l) + 3.5, w - 1, laneH - 7);
        g.setLineDash([]);
      }
    }
    // the time axis, under the lanes in view
    const axisY = viewH - AXIS_H;
    g.clearRect(0, axisY, width, AXIS_H);
    g.fillStyle = this._colours.muted;
    g.fillRect(labelW, axisY, plotW, 1);
    for (let k = 0; k <= 4; k++) {
      const t = (data.span * k) / 4;
      g.textAlign = k === 0 ? 'left' : k === 4 ? 'right' : 'center';
      g.fillText(t ? humanSeconds(t) : '0', this._x(t, plotW), axisY + 11);
    }
    g.textAlign = 'left';
    if (!this._strip.hidden) {
      this._paintStrip(width, plotW, dpr);
    }
    const ms = performance.now() - t0;
    this.el.dataset.renderMs = ms.toFixed(1);
    recordTimelineTime(ms);
  }

  private _paintStrip(width: number, plotW: number, dpr: number): void {
    const data = this._data as TimelineData;
    const s = this._strip;
    s.style.width = `${width}px`;
    s.style.height = `${STRIP_H}px`;
    s.width = Math.round(width * dpr);
    s.height = Math.round(STRIP_H * dpr);
    const g = s.getContext('2d');
    if (!g) {
      return;
    }
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, STRIP_H);
    g.font = '11px var(--jp-ui-font-family, sans-serif)';
    g.fillStyle = this._colours.muted;
    g.textBaseline = 'top';
    g.fillText(`slots in use (max ${data.max_slots})`, 4, 2, Math.max(this._labelW - 8, 120));
    const peak = Math.max(data.max_slots, 1);
    const h = (n: number) => STRIP_H - (STRIP_H - 4) * (n / peak);
    g.beginPath();
    g.moveTo(this._x(0, plotW), STRIP_H);
    let level = 0;
    for (const [at, count] of data.slots) {
      const x = this._x(at, plotW);
      g.lineTo(x, h(level));
      g.lineTo(x, h(count));
      level = count;
    }
    g.lineTo(this._x(data.span, plotW), h(level));
    g.lineTo(this._x(data.span, plotW), STRIP_H);
    g.closePath();
    g.globalAlpha = 0.35;
    g.fillStyle = this._colours.active;
    g.fill();
    g.globalAlpha = 1;
  }

  /** px of the time axis: the width but the label column and a 12 px margin. */
  private _plotW(): number {
    return this._width - this._labelW - 12;
  }

  /** The bar under (x, y) of the lanes' scroller, or -1. */
  barAt(x: number, y: number): number {
    const data = this._data;
    if (!data || x < this._labelW) {
      return -1;
    }
    const lane = Math.floor((y + this._scroller.scrollTop) / this._laneH);
    if (lane < 0 || lane >= data.lanes.length) {
      return -1;
    }
    const plotW = this._plotW();
    const b = data.bars;
    let best = -1;
    for (let i = this._laneStart[lane]; i < this._laneStart[lane + 1]; i++) {
      const x0 = this._x(b.start[i], plotW);
      const x1 = Math.max(this._x(b.end[i], plotW), x0 + 1.5);
      if (x >= x0 - 2 && x <= x1 + 2) {
        best = i; // the last one drawn wins, as on screen
      }
    }
    return best;
  }

  /** The attempt row of bar `i`, as (key, value) pairs. */
  details(i: number): [string, string][] {
    const data = this._data as TimelineData;
    const values = data.details[i] || [];
    const out: [string, string][] = [];
    data.keys.forEach((k, j) => {
      if (values[j]) {
        out.push([k, values[j]]);
      }
    });
    return out;
  }

  private _hover(ev: MouseEvent): void {
    const r = this._scroller.getBoundingClientRect();
    const x = ev.clientX - r.left;
    const y = ev.clientY - r.top;
    const i = y < this._scroller.clientHeight - AXIS_H ? this.barAt(x, y) : -1;
    if (i < 0) {
      this._tip.hidden = true;
      return;
    }
    this._tip.replaceChildren();
    this._tip.dataset.task = (this._data as TimelineData).lane_ids[(this._data as TimelineData).bars.lane[i]] ?? '';
    this._tip.dataset.attempt = String((this._data as TimelineData).bars.attempt[i]);
    for (const [k, v] of this.details(i)) {
      const line = html('div', 'cn-timeline-tip-row');
      line.append(html('span', 'cn-timeline-tip-key', `${k}: `), html('span', 'cn-timeline-tip-value', v));
      this._tip.appendChild(line);
    }
    this._tip.hidden = false;
    const er = this.el.getBoundingClientRect();
    // kept inside the view: in a narrow panel the tip is as wide as the view at most
    const tipW = Math.min(this._tip.offsetWidth || 260, er.width);
    this._tip.style.left = `${Math.max(0, Math.min(ev.clientX - er.left + 12, er.width - tipW))}px`;
    this._tip.style.top = `${ev.clientY - er.top + 14}px`;
  }
}

/** Draw `data` into `node` (replacing what is there); returns the view. */
export function renderTimeline(node: HTMLElement, data: TimelineData): TimelineView {
  const view = new TimelineView();
  node.replaceChildren(view.el);
  view.setData(data);
  return view;
}

/**
 * Rendering logic of the Tasks panel and the status bar: pure functions plus one keyed,
 * windowed list view. The rows themselves are drawn by `row.ts`, the module the notebook
 * widget draws its rows with too. Every user-supplied string (task names, messages,
 * tracebacks, logs, paths) goes into the DOM through `textContent` or an attribute,
 * never as markup.
 */
import { AttemptRow, LogRow, TaskDetail, TransitionRow } from './api';
import { FAILED_STATUSES } from './model';
import {
  ControlVerb,
  ListingRow,
  OCCUPIED_STATUSES,
  STATUS_LABELS,
  TASK_STATUSES,
  TaskStatus,
  VERB_LABELS,
  VERB_TIPS
} from './contract';
import {
  epochMs,
  formatAttempt,
  formatClock,
  formatCount,
  formatDuration,
  formatPercent,
  formatTimestamp
} from './format';
import {
  ROW_VERBS,
  RowContext,
  boardCompare,
  createRow,
  drawnSignature,
  endedByPerson,
  patchRow,
  rowSignature,
  setAttr,
  setClass,
  setRowContext,
  setText,
  statusNote
} from './row';

export { ROW_VERBS };
export type { RowContext };

export const NO_KERNEL_KEY = '';
/** The key of a kernel no notebook session knows: this prefix and its id. */
export const KERNEL_KEY_PREFIX = 'kernel:';

// ------------------------------------------------------------------ formatting

/** Progress as one phrase: `42% (84/200 rows)`, `84 rows`; '' without progress. */
export function formatProgress(row: ListingRow): string {
  const count = formatCount(row);
  const pct = formatPercent(row);
  return pct ? `${pct} (${count})` : count;
}

export function shortId(id: string): string {
  return id.length > 8 ? id.slice(0, 8) : id;
}

/** The group a task belongs to: its notebook, else its kernel, else "no kernel". */
export function notebookKey(row: ListingRow): string {
  return row.notebook ?? (row.kernel_id ? `${KERNEL_KEY_PREFIX}${row.kernel_id}` : NO_KERNEL_KEY);
}

/** When the controller that owns a task started (ms), from its owner id
 * (`host:pid:kernel:STARTED-NONCE`, STARTED in hundredths of a second); null if unknown. */
export function ownerStarted(owner: string | null | undefined): number | null {
  const m = owner ? /:(\d+)-[^:]*$/.exec(owner) : null;
  return m ? Number(m[1]) * 10 : null;
}

/**
 * A group's label for people: the notebook; for a kernel no session knows (its notebook
 * is not known here), what became of it and when it started — "A kernel that is gone,
 * started 14:05" — never its raw id.
 */
export function notebookLabel(key: string, rows: readonly ListingRow[] = []): string {
  if (key === NO_KERNEL_KEY) {
    return 'No live kernel';
  }
  if (key.startsWith(KERNEL_KEY_PREFIX)) {
    const gone = rows.some(r => r.kernel_gone || r.kernel_gone_reason !== null);
    const started = rows.map(r => ownerStarted(r.owner)).find(t => t !== null) ?? null;
    const when = started !== null ? `, started ${formatClock(started)}` : '';
    return `${gone ? 'A kernel that is gone' : 'A kernel with no notebook'}${when}`;
  }
  return key;
}

// ------------------------------------------------------------------ counting

export interface StatusCounts {
  running: number;
  paused: number;
  failed: number;
}

/** Counts for the status bar: occupied states count as running, lost counts as failed. */
export function countStatuses(rows: Iterable<ListingRow>, kernelId: string | null): StatusCounts {
  const counts: StatusCounts = { running: 0, paused: 0, failed: 0 };
  if (!kernelId) {
    return counts;
  }
  for (const row of rows) {
    if (row.kernel_id !== kernelId || row.kernel_gone) {
      continue; // a gone kernel's tasks run nowhere: not counted as running or paused
    }
    if ((OCCUPIED_STATUSES as readonly string[]).includes(row.status)) {
      counts.running += 1;
    } else if (row.status === 'paused') {
      counts.paused += 1;
    } else if (FAILED_STATUSES.includes(row.status)) {
      counts.failed += 1;
    }
  }
  return counts;
}

export function statusBarText(counts: StatusCounts): string {
  return `${counts.running} running · ${counts.paused} paused · ${counts.failed} failed`;
}

// ------------------------------------------------------------------ filtering, grouping

export interface TaskFilter {
  /** Statuses to show; empty shows all. */
  statuses: ReadonlySet<string>;
  /** A notebook key (see `notebookKey`), or null for all notebooks. */
  notebook: string | null;
  /** Case-insensitive substring of the name or id. */
  text: string;
}

export const EMPTY_FILTER: TaskFilter = { statuses: new Set(), notebook: null, text: '' };

export function filterTasks(rows: Iterable<ListingRow>, filter: TaskFilter): ListingRow[] {
  const text = filter.text.trim().toLowerCase();
  const out: ListingRow[] = [];
  for (const row of rows) {
    if (filter.statuses.size > 0 && !filter.statuses.has(row.status)) {
      continue;
    }
    if (filter.notebook !== null && notebookKey(row) !== filter.notebook) {
      continue;
    }
    if (text && !row.name.toLowerCase().includes(text) && !row.id.toLowerCase().includes(text)) {
      continue;
    }
    out.push(row);
  }
  return out;
}

export interface TaskGroup {
  key: string;
  label: string;
  rows: ListingRow[];
}

/**
 * Groups by notebook (alphabetical, "no live kernel" last); inside a group the board
 * order: running, paused, queued, finished, newest first in each.
 */
export function groupByNotebook(rows: Iterable<ListingRow>): TaskGroup[] {
  const groups = new Map<string, ListingRow[]>();
  for (const row of rows) {
    const key = notebookKey(row);
    const list = groups.get(key);
    if (list) {
      list.push(row);
    } else {
      groups.set(key, [row]);
    }
  }
  const keys = Array.from(groups.keys()).sort((a, b) => {
    if (a === NO_KERNEL_KEY || b === NO_KERNEL_KEY) {
      return a === NO_KERNEL_KEY ? (b === NO_KERNEL_KEY ? 0 : 1) : -1;
    }
    return a.localeCompare(b);
  });
  return keys.map(key => ({
    key,
    label: notebookLabel(key, groups.get(key) ?? []),
    rows: (groups.get(key) ?? []).sort(boardCompare)
  }));
}

/** Notebook keys present in `rows`, for the notebook filter. */
export function notebookOptions(rows: Iterable<ListingRow>): { key: string; label: string }[] {
  return groupByNotebook(rows).map(g => ({ key: g.key, label: g.label }));
}

export function statusOptions(): readonly TaskStatus[] {
  return TASK_STATUSES;
}

// ------------------------------------------------------------------ DOM helpers

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** A new row element for `row` (the shared row of `row.ts`, as a list item). */
export function renderTaskRow(row: ListingRow, ctx: RowContext): HTMLElement {
  const item = createRow(row.id, ctx, 'li');
  patchRow(item, row, ctx);
  return item;
}

/** Bring a row drawn by `renderTaskRow` up to date in place (see `row.patchRow`). */
export function patchTaskRow(item: HTMLElement, row: ListingRow, ctx: RowContext, signature?: string): void {
  patchRow(item, row, ctx, signature);
}

// ------------------------------------------------------------------ the windowed list

export interface TaskListOptions {
  /** Items drawn beyond each edge of the viewport (default 4). */
  overscan?: number;
  /** Height assumed for a row of a shape never measured, px (default 84). */
  rowHeight?: number;
  /** Height assumed for a group title never measured, px (default 28). */
  headerHeight?: number;
  /** Viewport height assumed while the list has no layout (hidden, tests), px. */
  fallbackViewport?: number;
  /** Called when the viewport moved or changed size: the owner should `draw` soon. */
  onViewportChange?: () => void;
}

interface HeaderItem {
  kind: 'header';
  group: TaskGroup;
}

interface RowItem {
  kind: 'row';
  group: TaskGroup;
  row: ListingRow;
  /** Position in its group, from 0. */
  pos: number;
}

type ListItem = HeaderItem | RowItem;

/** The DOM of a group: its section, title and list (the title only while in view). */
interface GroupNodes {
  section: HTMLElement;
  header: HTMLElement;
  list: HTMLElement;
}

/** Rows of the same shape have the same height at a given width (every shared row has
 * the same lines, so one shape). */
function rowShape(_row: ListingRow): string {
  return 'r';
}

/** Index of the last offset <= `y` (offsets ascending, offsets[0] = 0). */
function itemAt(offsets: Float64Array, count: number, y: number): number {
  let lo = 0;
  let hi = count - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= y) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/** Make `parent`'s element children exactly `desired`, moving as little as possible. */
function syncChildren(parent: HTMLElement, desired: readonly HTMLElement[]): void {
  const keep = new Set<Element>(desired);
  for (let child = parent.firstElementChild; child !== null; ) {
    const next = child.nextElementSibling;
    if (!keep.has(child)) {
      child.remove();
    }
    child = next;
  }
  let cursor = parent.firstElementChild;
  for (const node of desired) {
    if (cursor === node) {
      cursor = cursor.nextElementSibling;
    } else {
      parent.insertBefore(node, cursor);
    }
  }
}

/**
 * The task list, grouped by notebook and windowed: `node` is the scrolling viewport,
 * and only the group titles and rows within it (plus `overscan` items on each side) are
 * in the DOM, inside a sizer as tall as the whole list. Heights of items not drawn are
 * estimated (the last measured height of that row, else of a row of the same shape);
 * drawn items are measured, and the scroll position is corrected so that what is on
 * screen does not jump when an estimate was wrong. A drawn row is patched in place when
 * its signature changed, so a feed update or the duration tick touches only the few
 * visible rows that changed.
 */
export class TaskListView {
  constructor(
    readonly node: HTMLElement,
    options: TaskListOptions = {}
  ) {
    this._overscan = options.overscan ?? 4;
    this._defaultRow = options.rowHeight ?? 84;
    this._defaultHeader = options.headerHeight ?? 28;
    this._fallbackViewport = options.fallbackViewport ?? 800;
    node.classList.add('cm-TaskList', 'cm-Rows');
    // a scrollable region a keyboard can reach and scroll
    node.tabIndex = 0;
    node.setAttribute('role', 'group');
    node.setAttribute('aria-label', 'Task list');
    this._sizer = el('div', 'cm-TaskList-sizer');
    this._window = el('div', 'cm-TaskList-window');
    this._sizer.append(this._window);
    this._empty = el('p', 'cm-TaskList-empty', 'No tasks match.');
    node.append(this._sizer);
    const changed = options.onViewportChange;
    if (changed) {
      node.addEventListener('scroll', () => changed(), { passive: true });
      if (typeof ResizeObserver !== 'undefined') {
        this._resize = new ResizeObserver(() => changed());
        this._resize.observe(node);
      }
    }
  }

  /** Rows created or patched by the last draw (for tests and benchmarks). */
  redrawn = 0;

  /** Rows in the list (drawn or not). */
  get rowCount(): number {
    return this._rowCount;
  }

  /** Rows in the DOM now. */
  get drawnCount(): number {
    return this._drawn.size;
  }

  /** Total height of the list, px (estimated for items never drawn). */
  get height(): number {
    return this._offsets[this._items.length] ?? 0;
  }

  /** Set the groups and draw them. */
  update(groups: TaskGroup[], ctx: RowContext): void {
    this.setGroups(groups);
    this.draw(ctx);
  }

  /** Replace the list (new filter, or tasks added, removed, moved); draws nothing. */
  setGroups(groups: TaskGroup[]): void {
    const items: ListItem[] = [];
    let rows = 0;
    for (const group of groups) {
      items.push({ kind: 'header', group });
      group.rows.forEach((row, pos) => items.push({ kind: 'row', group, row, pos }));
      rows += group.rows.length;
    }
    this._items = items;
    this._groups = groups;
    this._rowCount = rows;
    this._index = new Map();
    items.forEach((item, i) => {
      if (item.kind === 'row') {
        this._index.set(item.row.id, i);
      }
    });
    this._layout();
  }

  /**
   * Point the list at newer copies of its rows, keeping membership and order (the caller
   * knows no task was added, removed or moved); draws nothing.
   */
  replaceRows(lookup: (taskId: string) => ListingRow | undefined): void {
    let shapes = false;
    for (const item of this._items) {
      if (item.kind === 'row') {
        const row = lookup(item.row.id);
        if (row !== undefined && row !== item.row) {
          shapes ||= rowShape(row) !== rowShape(item.row);
          item.row = row;
        }
      }
    }
    if (shapes) {
      this._layout();
    }
  }

  /** Bring the viewport to a task's row; false when the list does not hold it. */
  scrollToTask(taskId: string): boolean {
    const i = this._index.get(taskId);
    if (i === undefined) {
      return false;
    }
    const top = this._offsets[i];
    const viewport = this._viewport();
    const scroll = this.node.scrollTop;
    if (top < scroll) {
      this.node.scrollTop = top;
    } else if (top + this._heights[i] > scroll + viewport) {
      this.node.scrollTop = Math.max(0, top + this._heights[i] - viewport);
    }
    return true;
  }

  /** Draw the items in view (and the overscan) for the current scroll position. */
  draw(ctx: RowContext): void {
    this.redrawn = 0;
    const n = this._items.length;
    if (n === 0) {
      syncChildren(this._window, []);
      this._drawn.clear();
      this._setHeight(0);
      if (this._empty.parentNode !== this.node) {
        this.node.append(this._empty);
      }
      return;
    }
    if (this._empty.parentNode === this.node) {
      this._empty.remove();
    }
    const width = this.node.clientWidth;
    if (width !== this._width) {
      // rows wrap differently at another width: measure again
      this._width = width;
      this._measured.clear();
      this._layout();
    }
    // a wrong estimate above the viewport moves what is on screen: draw, measure and
    // correct the scroll position until the drawn heights match (twice at most here)
    // a list scrolled to its end stays at its end when measured heights change it
    const atEnd =
      this.node.scrollTop > 0 && this.node.scrollTop >= this.height - this._viewport() - 1;
    for (let pass = 0; pass < 3; pass++) {
      const scroll = Math.min(this.node.scrollTop, Math.max(0, this.height - this._viewport()));
      const viewport = this._viewport();
      const first = itemAt(this._offsets, n, scroll);
      const last = itemAt(this._offsets, n, scroll + viewport);
      const start = Math.max(0, first - this._overscan);
      const end = Math.min(n, last + 1 + this._overscan);
      this._drawRange(start, end, ctx);
      const anchorShift = scroll - this._offsets[first];
      if (!this._measure(start, end)) {
        break;
      }
      this._layout();
      if (scroll > 0) {
        const target = atEnd
          ? Math.max(0, this.height - viewport)
          : this._offsets[first] + anchorShift;
        if (Math.abs(this.node.scrollTop - target) >= 1) {
          this.node.scrollTop = target;
        }
      }
    }
  }

  dispose(): void {
    this._resize?.disconnect();
  }

  private _viewport(): number {
    return this.node.clientHeight || this._fallbackViewport;
  }

  private _setHeight(px: number): void {
    const height = `${Math.round(px)}px`;
    if (this._sizer.style.height !== height) {
      this._sizer.style.height = height;
    }
  }

  /** Heights (measured or estimated) and offsets of every item. */
  private _layout(): void {
    const n = this._items.length;
    if (this._heights.length !== n) {
      this._heights = new Float64Array(n);
      this._offsets = new Float64Array(n + 1);
    }
    let y = 0;
    for (let i = 0; i < n; i++) {
      const item = this._items[i];
      let h: number;
      if (item.kind === 'header') {
        h = this._shapes.get('header') ?? this._defaultHeader;
      } else {
        const shape = rowShape(item.row);
        const known = this._measured.get(item.row.id);
        h =
          known !== undefined && known.shape === shape
            ? known.height
            : (this._shapes.get(shape) ?? this._defaultRow);
      }
      this._heights[i] = h;
      this._offsets[i] = y;
      y += h;
    }
    this._offsets[n] = y;
    this._setHeight(y);
  }

  private _drawRange(start: number, end: number, ctx: RowContext): void {
    const active = document.activeElement;
    const focused = active instanceof HTMLElement && this.node.contains(active) ? active : null;
    const sections: HTMLElement[] = [];
    const drawn = new Map<string, HTMLElement>();
    let rows: HTMLElement[] = [];
    let current: { nodes: GroupNodes; header: boolean } | null = null;
    const flush = () => {
      if (current) {
        const { section, header, list } = current.nodes;
        syncChildren(section, current.header ? [header, list] : [list]);
        syncChildren(list, rows);
      }
      rows = [];
    };
    for (let i = start; i < end; i++) {
      const item = this._items[i];
      if (
        current === null ||
        item.kind === 'header' ||
        current.nodes.section.dataset.notebook !== item.group.key
      ) {
        flush();
        const nodes = this._section(item.group);
        sections.push(nodes.section);
        current = { nodes, header: item.kind === 'header' };
      }
      if (item.kind === 'header') {
        continue;
      }
      const row = item.row;
      let node = this._drawn.get(row.id);
      const sig = rowSignature(row, ctx);
      if (node === undefined) {
        node = createRow(row.id, ctx, 'li');
        patchRow(node, row, ctx, sig);
        this.redrawn += 1;
      } else if (drawnSignature(node) !== sig) {
        patchRow(node, row, ctx, sig);
        this.redrawn += 1;
      } else {
        setRowContext(node, ctx);
      }
      setClass(node, 'cm-mod-kernel-gone', row.kernel_gone === true);
      setAttr(node, 'aria-setsize', String(item.group.rows.length));
      setAttr(node, 'aria-posinset', String(item.pos + 1));
      drawn.set(row.id, node);
      rows.push(node);
    }
    flush();
    syncChildren(this._window, sections);
    const top = `${Math.round(this._offsets[start])}px`;
    if (this._window.style.top !== top) {
      this._window.style.top = top;
    }
    this._drawn = drawn;
    if (focused !== null && !focused.isConnected) {
      // the focused row scrolled out of the window: keep the focus in the list
      this.node.focus({ preventScroll: true });
    }
    // forget the sections of groups that are gone
    if (this._sections.size > this._groups.length) {
      const keys = new Set(this._groups.map(g => g.key));
      for (const key of this._sections.keys()) {
        if (!keys.has(key)) {
          this._sections.delete(key);
        }
      }
    }
  }

  /** Measure the drawn items; true when a height differs from the one assumed. */
  private _measure(start: number, end: number): boolean {
    const nodes: HTMLElement[] = [];
    for (let i = start; i < end; i++) {
      const item = this._items[i];
      const node =
        item.kind === 'header'
          ? this._sections.get(item.group.key)?.header
          : this._drawn.get(item.row.id);
      if (!node) {
        return false;
      }
      nodes.push(node);
    }
    const tops = nodes.map(n => n.getBoundingClientRect().top);
    const bottom = this._window.getBoundingClientRect().bottom;
    let changed = false;
    for (let k = 0; k < nodes.length; k++) {
      const h = (k + 1 < nodes.length ? tops[k + 1] : bottom) - tops[k];
      if (!(h > 0)) {
        return false; // no layout (hidden, or a DOM without one): keep the estimates
      }
      const item = this._items[start + k];
      if (item.kind === 'header') {
        this._shapes.set('header', h);
      } else {
        const shape = rowShape(item.row);
        this._measured.set(item.row.id, { shape, height: h });
        this._shapes.set(shape, h);
      }
      if (Math.abs(h - this._heights[start + k]) >= 0.5) {
        changed = true;
      }
    }
    return changed;
  }

  private _section(group: TaskGroup): GroupNodes {
    let nodes = this._sections.get(group.key);
    if (!nodes) {
      const section = el('section', 'cm-TaskGroup');
      section.dataset.notebook = group.key;
      const header = el('h3', 'cm-TaskGroup-title');
      const list = el('ul', 'cm-TaskGroup-rows');
      section.append(header, list);
      nodes = { section, header, list };
      this._sections.set(group.key, nodes);
    }
    setText(nodes.header, `${group.label} (${group.rows.length})`);
    setAttr(nodes.header, 'title', group.label);
    setAttr(nodes.list, 'aria-label', `Tasks of ${group.label}`);
    return nodes;
  }

  private _overscan: number;
  private _defaultRow: number;
  private _defaultHeader: number;
  private _fallbackViewport: number;
  private _sizer: HTMLElement;
  private _window: HTMLElement;
  private _empty: HTMLElement;
  private _resize: ResizeObserver | null = null;
  private _items: ListItem[] = [];
  private _groups: TaskGroup[] = [];
  private _rowCount = 0;
  private _index = new Map<string, number>();
  private _heights = new Float64Array(0);
  private _offsets = new Float64Array(1);
  private _width = -1;
  /** Measured height of a row, valid while its shape stays the same. */
  private _measured = new Map<string, { shape: string; height: number }>();
  /** Last measured height per row shape ('header' for group titles). */
  private _shapes = new Map<string, number>();
  private _drawn = new Map<string, HTMLElement>();
  private _sections = new Map<string, GroupNodes>();
}

// ------------------------------------------------------------------ details

function table(headers: string[], rows: string[][], className: string): HTMLTableElement {
  const t = el('table', className);
  const thead = el('thead');
  const tr = el('tr');
  for (const h of headers) {
    const th = el('th', undefined, h);
    th.scope = 'col';
    tr.append(th);
  }
  thead.append(tr);
  const tbody = el('tbody');
  for (const r of rows) {
    const row = el('tr');
    for (const cell of r) {
      row.append(el('td', undefined, cell));
    }
    tbody.append(row);
  }
  t.append(thead, tbody);
  return t;
}

/** A time in the details: 24-hour with seconds, like every time the rows show. */
function time(value: string | null): string {
  const ms = epochMs(value);
  return ms === null ? (value ?? '—') : formatClock(ms, true);
}

export interface DetailsContext {
  onVerb(taskId: string, verb: ControlVerb): void;
  onClose(): void;
}

export function renderAttempts(attempts: AttemptRow[]): HTMLElement {
  const box = el('div', 'cm-Details-attempts');
  box.append(el('h4', undefined, `Attempts (${attempts.length})`));
  box.append(
    table(
      ['#', 'outcome', 'started', 'duration', 'failure'],
      attempts.map(a => [
        String(a.attempt),
        (a.outcome ?? 'running') + (a.abandoned ? ' (abandoned)' : ''),
        time(a.started_at),
        formatDuration(a.duration_s) || '—',
        a.failure_kind ? `${a.failure_kind}: ${a.failure_message ?? ''}` : ''
      ]),
      'cm-Details-table'
    )
  );
  for (const a of attempts) {
    if (a.traceback) {
      const details = el('details', 'cm-Details-traceback');
      details.append(el('summary', undefined, `Traceback of attempt ${a.attempt}`));
      details.append(el('pre', undefined, a.traceback));
      box.append(details);
    }
  }
  return box;
}

export function renderHistory(history: TransitionRow[]): HTMLElement {
  const box = el('details', 'cm-Details-history');
  box.append(el('summary', undefined, `History (${history.length} transitions)`));
  box.append(
    table(
      ['v', 'at', 'from → to', 'trigger', 'actor', 'reason'],
      history.map(h => [
        String(h.version),
        time(h.at),
        `${h.from_status} → ${h.to_status}`,
        h.trigger + (h.override ? ' (override)' : ''),
        h.actor,
        h.reason ?? ''
      ]),
      'cm-Details-table'
    )
  );
  return box;
}

export function renderLogs(logs: LogRow[]): HTMLElement {
  const box = el('div', 'cm-Details-logs');
  box.append(el('h4', undefined, `Log (${logs.length} lines)`));
  const pre = el('pre', 'cm-Details-logText');
  pre.setAttribute('aria-label', 'Task log');
  pre.textContent = logs
    .map(l => `${l.stream && l.stream !== 'stdout' ? `[${l.stream}] ` : ''}${l.line}`)
    .join('\n');
  box.append(pre);
  return box;
}

/** The facts that are ids or paths: one line each, cut with an ellipsis (the whole text in
 * the DOM, selectable, in the tooltip and behind a copy button), so a long owner id
 * (`host:pid:kernel:start-nonce`) never pushes the rest of the details out of view. */
const ID_FACTS: ReadonlySet<string> = new Set(['id', 'notebook', 'kernel', 'owner']);

function factList(className: string, facts: [string, string][]): HTMLElement {
  const dl = el('dl', className);
  for (const [k, v] of facts) {
    dl.append(el('dt', undefined, k), factValue(k, v));
  }
  return dl;
}

function factValue(fact: string, value: string): HTMLElement {
  const dd = el('dd');
  dd.dataset.fact = fact;
  const text = el('span', 'cm-Details-value', value);
  dd.append(text);
  if (ID_FACTS.has(fact) && value !== '—') {
    dd.classList.add('cm-Details-id');
    text.title = value;
    dd.append(copyButton(fact, value, text));
  }
  return dd;
}

/** Copies `value` to the clipboard; where the page may not write it, selects `text` for
 * the user's own Ctrl+C. */
function copyButton(fact: string, value: string, text: HTMLElement): HTMLButtonElement {
  const button = el('button', 'cm-Details-copy', 'copy');
  button.type = 'button';
  button.title = `Copy the ${fact} (${value})`;
  button.setAttribute('aria-label', `Copy the ${fact}`);
  const selectText = () => {
    const range = document.createRange();
    range.selectNodeContents(text);
    const selection = window.getSelection();
    selection?.removeAllRanges();
    selection?.addRange(range);
    button.textContent = 'selected';
  };
  button.addEventListener('click', () => {
    if (!navigator.clipboard?.writeText) {
      selectText();
      return;
    }
    navigator.clipboard.writeText(value).then(() => {
      button.textContent = 'copied';
    }, selectText);
  });
  return button;
}

export function renderDetails(detail: TaskDetail, ctx: DetailsContext): HTMLElement {
  const t = detail.task;
  const box = el('div', 'cm-Details');
  box.dataset.taskId = t.id;
  box.setAttribute('role', 'region');
  box.setAttribute('aria-label', `Details of task ${t.name}`);

  const head = el('div', 'cm-Details-head');
  head.append(el('h3', 'cm-Details-title', t.name));
  const close = el('button', 'cm-Details-close', '×');
  close.type = 'button';
  close.setAttribute('aria-label', 'Close task details');
  close.addEventListener('click', () => ctx.onClose());
  head.append(close);
  box.append(head);

  // the essentials first, then the verbs (and, put there by the sidebar, the small
  // timeline of attempts: all in view in a short sidebar); when, where and who below
  const note = statusNote(t);
  box.append(
    factList('cm-Details-facts', [
      ['status', STATUS_LABELS[t.status] + (t.requested ? ` (${t.requested} requested)` : '')],
      ...(note ? ([['what happened', note]] as [string, string][]) : []),
      ['attempt', formatAttempt(t.attempt, t.max_attempts)],
      ['progress', formatProgress(t) || '—']
    ])
  );

  const actions = el('div', 'cm-Details-actions');
  for (const verb of ROW_VERBS) {
    const button = el('button', `cm-VerbButton cm-verb-${verb}`, VERB_LABELS[verb]);
    button.type = 'button';
    button.dataset.verb = verb;
    button.disabled = t.can[verb] !== true;
    button.title = t.can[verb] ? VERB_TIPS[verb] : (t.why[verb] ?? 'not allowed now');
    button.setAttribute('aria-label', `${VERB_LABELS[verb]} task ${t.name}`);
    button.addEventListener('click', () => ctx.onVerb(t.id, verb));
    actions.append(button);
  }
  box.append(actions);

  if (t.failure && !endedByPerson(t)) {
    const failure = el('div', 'cm-Details-failure');
    failure.append(
      el(
        'p',
        undefined,
        `${t.failure.kind}${t.failure.exception_type ? ` (${t.failure.exception_type})` : ''}: ${t.failure.message}`
      )
    );
    if (t.failure.traceback) {
      failure.append(el('pre', 'cm-Details-tracebackText', t.failure.traceback));
    }
    box.append(failure);
  }
  box.append(
    factList('cm-Details-facts cm-Details-where', [
      ['id', t.id],
      ['started', t.started !== null ? formatTimestamp(t.started) : '—'],
      ['ended', t.ended !== null ? formatTimestamp(t.ended) : '—'],
      ['notebook', t.notebook ?? '—'],
      ['kernel', t.kernel_id ?? '—'],
      ['owner', t.owner ?? '—'],
      ['tags', t.tags.join(', ') || '—']
    ]),
    renderAttempts(detail.attempts),
    renderLogs(detail.logs),
    renderHistory(detail.history)
  );
  return box;
}

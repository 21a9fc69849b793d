/**
 * Rendering logic of the Tasks panel and the status bar: pure functions plus one keyed
 * list view. Every user-supplied string (task names, messages, tracebacks, logs, paths)
 * goes into the DOM through `textContent` or an attribute, never as markup.
 */
import { AttemptRow, LogRow, TaskDetail, TaskRow, TransitionRow } from './api';
import {
  ControlVerb,
  OCCUPIED_STATUSES,
  TASK_STATUSES,
  TaskStatus,
  isTerminal
} from './contract';
import { PendingCommand } from './model';

/** The buttons each row shows (skip lives in the details view). */
export const ROW_VERBS: readonly ControlVerb[] = ['pause', 'resume', 'stop', 'retry'];

export const VERB_LABELS: Record<ControlVerb, string> = {
  pause: 'Pause',
  resume: 'Resume',
  stop: 'Stop',
  retry: 'Retry',
  skip: 'Skip'
};

export const NO_KERNEL_KEY = '';

// ------------------------------------------------------------------ formatting

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) {
    return '—';
  }
  const s = Math.floor(seconds);
  if (s < 60) {
    return `${s}s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m}m ${String(s % 60).padStart(2, '0')}s`;
  }
  const h = Math.floor(m / 60);
  return `${h}h ${String(m % 60).padStart(2, '0')}m`;
}

/**
 * Seconds the current attempt has run: up to `ended_at` for a finished one, up to the
 * server's `now` (ms since the epoch) for one still going, else the server's figure.
 */
export function liveDuration(row: TaskRow, serverNow: number): number | null {
  const started = row.started_at ? Date.parse(row.started_at) : NaN;
  if (Number.isNaN(started)) {
    return row.duration_s ?? null;
  }
  const ended = row.ended_at ? Date.parse(row.ended_at) : NaN;
  if (!Number.isNaN(ended)) {
    return Math.max(0, (ended - started) / 1000);
  }
  if (row.terminal) {
    return row.duration_s ?? null;
  }
  return Math.max(0, (serverNow - started) / 1000);
}

function trimNumber(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

export function formatProgress(row: TaskRow): string {
  const p = row.progress;
  if (!p) {
    return '';
  }
  const unit = p.unit ? ` ${p.unit}` : '';
  if (p.total !== null && p.total !== undefined && p.total > 0) {
    const pct = Math.round(Math.min(1, Math.max(0, p.done / p.total)) * 100);
    return `${pct}% (${trimNumber(p.done)}/${trimNumber(p.total)}${unit})`;
  }
  return `${trimNumber(p.done)}${unit}`;
}

export function formatAttempt(row: TaskRow): string {
  return `${row.attempt}/${row.max_attempts}`;
}

export function shortId(id: string): string {
  return id.length > 8 ? id.slice(0, 8) : id;
}

/** The group a task belongs to: its notebook, else its kernel, else "no kernel". */
export function notebookKey(row: TaskRow): string {
  return row.notebook ?? (row.kernel_id ? `kernel:${row.kernel_id}` : NO_KERNEL_KEY);
}

export function notebookLabel(key: string): string {
  if (key === NO_KERNEL_KEY) {
    return 'No live kernel';
  }
  if (key.startsWith('kernel:')) {
    return `Kernel ${shortId(key.slice('kernel:'.length))} (no notebook)`;
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
export function countStatuses(rows: Iterable<TaskRow>, kernelId: string | null): StatusCounts {
  const counts: StatusCounts = { running: 0, paused: 0, failed: 0 };
  if (!kernelId) {
    return counts;
  }
  for (const row of rows) {
    if (row.kernel_id !== kernelId) {
      continue;
    }
    if ((OCCUPIED_STATUSES as readonly string[]).includes(row.status)) {
      counts.running += 1;
    } else if (row.status === 'paused') {
      counts.paused += 1;
    } else if (row.status === 'failed' || row.status === 'lost') {
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

export function filterTasks(rows: Iterable<TaskRow>, filter: TaskFilter): TaskRow[] {
  const text = filter.text.trim().toLowerCase();
  const out: TaskRow[] = [];
  for (const row of rows) {
    if (filter.statuses.size > 0 && !filter.statuses.has(row.status)) {
      continue;
    }
    if (filter.notebook !== null && notebookKey(row) !== filter.notebook) {
      continue;
    }
    if (
      text &&
      !row.name.toLowerCase().includes(text) &&
      !row.task_id.toLowerCase().includes(text)
    ) {
      continue;
    }
    out.push(row);
  }
  return out;
}

export interface TaskGroup {
  key: string;
  label: string;
  rows: TaskRow[];
}

function newestFirst(a: TaskRow, b: TaskRow): number {
  const ta = a.created_at ?? '';
  const tb = b.created_at ?? '';
  if (ta !== tb) {
    return ta < tb ? 1 : -1;
  }
  return a.task_id < b.task_id ? -1 : a.task_id > b.task_id ? 1 : 0;
}

/** Groups by notebook (alphabetical, "no live kernel" last), newest task first. */
export function groupByNotebook(rows: Iterable<TaskRow>): TaskGroup[] {
  const groups = new Map<string, TaskRow[]>();
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
    label: notebookLabel(key),
    rows: (groups.get(key) ?? []).sort(newestFirst)
  }));
}

/** Notebook keys present in `rows`, for the notebook filter. */
export function notebookOptions(rows: Iterable<TaskRow>): { key: string; label: string }[] {
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

export interface RowContext {
  /** The server's clock (ms since the epoch). */
  now: number;
  pending(taskId: string): PendingCommand | undefined;
  onVerb(taskId: string, verb: ControlVerb): void;
  onSelect(taskId: string): void;
  selected: string | null;
}

function pendingText(p: PendingCommand | undefined): string {
  if (!p) {
    return '';
  }
  const verb = VERB_LABELS[p.verb].toLowerCase();
  switch (p.state) {
    case 'sending':
    case 'pending':
      return p.message ?? `${verb} requested…`;
    case 'claimed':
      return `${verb}: the kernel is applying it…`;
    case 'done':
      return '';
    case 'rejected':
    case 'error':
      return `${verb} refused: ${p.message ?? 'unknown reason'}`;
  }
}

/** What a row looks like; a row is re-drawn only when this changes. */
export function rowSignature(row: TaskRow, ctx: RowContext): string {
  const p = ctx.pending(row.task_id);
  return [
    row.status_version,
    row.status,
    row.name,
    formatProgress(row),
    row.progress?.message ?? '',
    formatAttempt(row),
    formatDuration(liveDuration(row, ctx.now)),
    ROW_VERBS.map(v => (row.can[v] ? '1' : '0')).join(''),
    p ? `${p.verb}:${p.state}:${p.message ?? ''}` : '',
    ctx.selected === row.task_id ? 'sel' : '',
    row.failure?.message ?? ''
  ].join('\u0001');
}

export function renderTaskRow(row: TaskRow, ctx: RowContext): HTMLElement {
  const item = el('li', 'cm-TaskRow');
  item.dataset.taskId = row.task_id;
  item.dataset.status = row.status;
  if (ctx.selected === row.task_id) {
    item.classList.add('cm-mod-selected');
  }

  const head = el('div', 'cm-TaskRow-head');
  const badge = el('span', `cm-StatusBadge cm-status-${row.status}`, row.status.replace('_', ' '));
  badge.title = row.requested_action
    ? `${row.status} (${row.requested_action} requested)`
    : row.status;
  const name = el('button', 'cm-TaskRow-name', row.name);
  name.type = 'button';
  name.title = `${row.name} (${row.task_id})`;
  name.setAttribute('aria-label', `Show details of task ${row.name}`);
  name.addEventListener('click', () => ctx.onSelect(row.task_id));
  head.append(badge, name);

  const meta = el('div', 'cm-TaskRow-meta');
  const attempt = el('span', 'cm-TaskRow-attempt', `attempt ${formatAttempt(row)}`);
  const duration = el(
    'span',
    'cm-TaskRow-duration',
    formatDuration(liveDuration(row, ctx.now))
  );
  duration.title = 'duration of the current attempt';
  meta.append(attempt, duration);

  const progressText = formatProgress(row);
  if (row.progress) {
    const bar = el('div', 'cm-Progress');
    bar.setAttribute('role', 'progressbar');
    bar.setAttribute('aria-label', `Progress of task ${row.name}`);
    const fraction =
      row.progress.total && row.progress.total > 0
        ? Math.min(1, Math.max(0, row.progress.done / row.progress.total))
        : null;
    if (fraction !== null) {
      bar.setAttribute('aria-valuemin', '0');
      bar.setAttribute('aria-valuemax', '100');
      bar.setAttribute('aria-valuenow', String(Math.round(fraction * 100)));
    }
    bar.setAttribute('aria-valuetext', progressText);
    const fill = el('div', 'cm-Progress-fill');
    fill.style.width = fraction === null ? '100%' : `${(fraction * 100).toFixed(1)}%`;
    if (fraction === null) {
      fill.classList.add('cm-mod-indeterminate');
    }
    bar.append(fill);
    meta.append(el('span', 'cm-TaskRow-progress', progressText), bar);
  }

  const actions = el('div', 'cm-TaskRow-actions');
  for (const verb of ROW_VERBS) {
    const button = el('button', `cm-VerbButton cm-verb-${verb}`, VERB_LABELS[verb]);
    button.type = 'button';
    button.dataset.verb = verb;
    button.setAttribute('aria-label', `${VERB_LABELS[verb]} task ${row.name}`);
    const allowed = row.can[verb] === true;
    const busy = ctx.pending(row.task_id);
    const inFlight = busy !== undefined && ['sending', 'pending', 'claimed'].includes(busy.state);
    button.disabled = !allowed || inFlight;
    button.title = allowed ? `${VERB_LABELS[verb]} ${row.name}` : (row.why[verb] ?? 'not allowed now');
    button.addEventListener('click', event => {
      event.stopPropagation();
      ctx.onVerb(row.task_id, verb);
    });
    actions.append(button);
  }

  item.append(head, meta);
  if (row.progress?.message) {
    item.append(el('div', 'cm-TaskRow-message', row.progress.message));
  }
  if (row.failure && isTerminal(row.status)) {
    item.append(
      el('div', 'cm-TaskRow-failure', `${row.failure.kind}: ${row.failure.message}`)
    );
  }
  const note = pendingText(ctx.pending(row.task_id));
  if (note) {
    const notice = el('div', 'cm-TaskRow-notice', note);
    notice.setAttribute('role', 'status');
    item.append(notice);
  }
  item.append(actions);
  return item;
}

/**
 * A list of groups that re-uses the DOM of rows whose signature did not change, so a
 * feed update touching a few tasks among thousands redraws only those few.
 */
export class TaskListView {
  constructor(readonly node: HTMLElement) {
    node.classList.add('cm-TaskList');
    node.setAttribute('role', 'list');
  }

  /** Number of rows drawn by the last update (for tests and benchmarks). */
  redrawn = 0;

  update(groups: TaskGroup[], ctx: RowContext): void {
    const children: HTMLElement[] = [];
    const nextRows = new Map<string, { sig: string; node: HTMLElement }>();
    this.redrawn = 0;
    for (const group of groups) {
      const section = this._section(group);
      const list = section.querySelector('ul') as HTMLUListElement;
      const items: HTMLElement[] = [];
      for (const row of group.rows) {
        const sig = rowSignature(row, ctx);
        const old = this._rows.get(row.task_id);
        let node: HTMLElement;
        if (old && old.sig === sig) {
          node = old.node;
        } else {
          node = renderTaskRow(row, ctx);
          this.redrawn += 1;
        }
        nextRows.set(row.task_id, { sig, node });
        items.push(node);
      }
      list.replaceChildren(...items);
      children.push(section);
    }
    this._rows = nextRows;
    if (groups.length === 0) {
      const empty = el('p', 'cm-TaskList-empty', 'No tasks match.');
      children.push(empty);
    }
    this.node.replaceChildren(...children);
  }

  private _section(group: TaskGroup): HTMLElement {
    let section = this._sections.get(group.key);
    if (!section) {
      section = el('section', 'cm-TaskGroup');
      section.dataset.notebook = group.key;
      const header = el('h3', 'cm-TaskGroup-title');
      const list = el('ul', 'cm-TaskGroup-rows');
      section.append(header, list);
      this._sections.set(group.key, section);
    }
    const header = section.querySelector('h3') as HTMLElement;
    const title = `${group.label} (${group.rows.length})`;
    if (header.textContent !== title) {
      header.textContent = title;
      header.title = group.label;
    }
    const list = section.querySelector('ul') as HTMLElement;
    list.setAttribute('aria-label', `Tasks of ${group.label}`);
    return section;
  }

  private _rows = new Map<string, { sig: string; node: HTMLElement }>();
  private _sections = new Map<string, HTMLElement>();
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

function time(value: string | null): string {
  if (!value) {
    return '—';
  }
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? value : d.toLocaleTimeString();
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
        formatDuration(a.duration_s),
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

export function renderDetails(detail: TaskDetail, ctx: DetailsContext): HTMLElement {
  const t = detail.task;
  const box = el('div', 'cm-Details');
  box.dataset.taskId = t.task_id;
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

  const facts: [string, string][] = [
    ['id', t.task_id],
    ['status', t.status + (t.requested_action ? ` (${t.requested_action} requested)` : '')],
    ['attempt', formatAttempt(t)],
    ['notebook', t.notebook ?? '—'],
    ['kernel', t.kernel_id ?? '—'],
    ['owner', t.owner ?? '—'],
    ['progress', formatProgress(t) || '—'],
    ['tags', t.tags.join(', ') || '—']
  ];
  const dl = el('dl', 'cm-Details-facts');
  for (const [k, v] of facts) {
    dl.append(el('dt', undefined, k), el('dd', undefined, v));
  }
  box.append(dl);

  const actions = el('div', 'cm-Details-actions');
  for (const verb of [...ROW_VERBS, 'skip' as ControlVerb]) {
    const button = el('button', `cm-VerbButton cm-verb-${verb}`, VERB_LABELS[verb]);
    button.type = 'button';
    button.dataset.verb = verb;
    button.disabled = t.can[verb] !== true;
    button.title = t.can[verb] ? VERB_LABELS[verb] : (t.why[verb] ?? 'not allowed now');
    button.setAttribute('aria-label', `${VERB_LABELS[verb]} task ${t.name}`);
    button.addEventListener('click', () => ctx.onVerb(t.task_id, verb));
    actions.append(button);
  }
  box.append(actions);

  if (t.failure) {
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
  box.append(renderAttempts(detail.attempts), renderLogs(detail.logs), renderHistory(detail.history));
  return box;
}

/**
 * The Tasks sidebar's listing of a store of any size: keyset pages of the REST list
 * (`after=` the cursor of the page before), with the status and text filters applied by
 * the server, so neither the first page nor a filter over a million tasks loads them.
 *
 * What the sidebar shows is the pages loaded so far (newest first) joined with the live
 * picture of the `TaskModel` (the feed): every task still running or waiting, wherever
 * it sits in the history, and newer copies of loaded rows. Loaded rows stop at
 * `LIST_MAX_ROWS`; past that the footer asks for a narrower filter. The list view is
 * windowed (render.ts), so the DOM holds only the rows in view either way.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { ITasksClient, TasksResponse, tasksQuery } from './api';
import {
  LIST_MAX_ROWS,
  LIST_PAGE,
  ListingRow,
  STATUS_LABELS,
  TASK_STATUSES,
  TaskStatus,
  isTerminal
} from './contract';
import { describe } from './model';
import { KERNEL_KEY_PREFIX, NO_KERNEL_KEY } from './render';

/** The filters the server applies. */
export interface ServerFilter {
  statuses: readonly string[];
  /** Name or id contains it (any case); '' for none. */
  text: string;
  /**
   * One notebook's tasks: a notebook key (`render.notebookKey`), null or absent for
   * every notebook. The tasks of no kernel (`NO_KERNEL_KEY`) are picked in the browser
   * (the server has no owner to ask for).
   */
  notebook?: string | null;
}

export const NO_SERVER_FILTER: ServerFilter = { statuses: [], text: '', notebook: null };

/** The REST list's owner filter for a notebook key: `notebook=PATH` or `kernel=ID`. */
export function ownerQuery(key: string | null | undefined): { notebook?: string; kernel?: string } {
  if (key === null || key === undefined || key === NO_KERNEL_KEY) {
    return {};
  }
  return key.startsWith(KERNEL_KEY_PREFIX)
    ? { kernel: key.slice(KERNEL_KEY_PREFIX.length) }
    : { notebook: key };
}

export interface ITaskPagerOptions {
  pageSize?: number;
  /** Most rows kept loaded (older ones are reached with a filter). */
  maxRows?: number;
}

/** The loaded pages of one server-filtered listing. */
export class TaskPager {
  constructor(
    private readonly _client: ITasksClient,
    options: ITaskPagerOptions = {}
  ) {
    this.pageSize = options.pageSize ?? LIST_PAGE;
    this.maxRows = options.maxRows ?? LIST_MAX_ROWS;
  }

  readonly pageSize: number;
  readonly maxRows: number;

  /** Emitted when rows, counts, loading state or error change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get filter(): ServerFilter {
    return this._filter;
  }

  /** The loaded rows in the listing's order (newest first). */
  get rows(): ListingRow[] {
    return Array.from(this._rows.values());
  }

  get size(): number {
    return this._rows.size;
  }

  task(taskId: string): ListingRow | undefined {
    return this._rows.get(taskId);
  }

  /** Has the first page of the current filter arrived? */
  get loaded(): boolean {
    return this._loaded;
  }

  get loading(): boolean {
    return this._inflight !== null;
  }

  /** Resolves once no request is queued or on its way. */
  async idle(): Promise<void> {
    while (this._inflight !== null) {
      await this._inflight;
    }
  }

  get error(): string | null {
    return this._error;
  }

  /** Are there rows after the loaded ones? */
  get hasMore(): boolean {
    return this._next !== null;
  }

  /** Are rows left that the cap keeps from loading? */
  get atCap(): boolean {
    return this.hasMore && this._rows.size >= this.maxRows;
  }

  /** Tasks the filter matches in the whole store (null before the first answer, and
   * while a text filter's matches are not all loaded: no index counts them). */
  get matching(): number | null {
    if (this._counts === null) {
      return this._loaded && this._next === null ? this._rows.size : null;
    }
    return sum(this._counts);
  }

  /** Tasks per status in the whole store, from the last answer. */
  get totals(): Readonly<Record<string, number>> | null {
    return this._totals;
  }

  /** Show another filter: drops the loaded rows and reads its first page. */
  setFilter(filter: ServerFilter): Promise<void> {
    const notebook = filter.notebook ?? null;
    const same =
      filter.text === this._filter.text &&
      notebook === (this._filter.notebook ?? null) &&
      filter.statuses.length === this._filter.statuses.length &&
      filter.statuses.every(s => this._filter.statuses.includes(s));
    if (same && (this._loaded || this._inflight !== null)) {
      return this._inflight ?? Promise.resolve();
    }
    this._filter = { statuses: [...filter.statuses], text: filter.text, notebook };
    this._rows.clear();
    this._next = null;
    this._loaded = false;
    this._counts = null;
    return this._load(null, this.pageSize, true);
  }

  /** The next page after the loaded rows (nothing when none is left or at the cap). */
  more(): Promise<void> {
    if (this._inflight !== null) {
      return this._inflight;
    }
    if (!this._loaded) {
      return this._load(null, this.pageSize, true);
    }
    if (this._next === null || this.atCap) {
      return Promise.resolve();
    }
    return this._load(this._next, Math.min(this.pageSize, this.maxRows - this._rows.size), false);
  }

  /**
   * Read the loaded range again in one request (as many rows as are loaded, at least a
   * page): rows, counts and the next cursor are fresh, the place in the list is kept.
   */
  reload(): Promise<void> {
    const limit = Math.min(this.maxRows, Math.max(this.pageSize, this._rows.size));
    return this._load(null, limit, true);
  }

  /**
   * Does a task lie inside the loaded range (the rows newer than the last loaded one,
   * or every row once the last page is in)? A live task created later than the first
   * page was read is inside; a finished one older than the loaded pages is not.
   */
  covers(row: ListingRow): boolean {
    if (!this._loaded) {
      return false;
    }
    if (this._next === null) {
      return true;
    }
    const last = this._last;
    if (last === null || last.created === null) {
      return true; // undated rows come after every dated one
    }
    return row.created !== null && row.created >= last.created;
  }

  /**
   * Queue a request: one at a time per listing (a text that matches few tasks may read
   * the whole store), and one superseded by a newer filter or reload before its turn is
   * never sent; an answer that arrives superseded is dropped.
   */
  private _load(after: string | null, limit: number, replace: boolean): Promise<void> {
    const generation = ++this._generation;
    const query = tasksQuery({
      status: this._filter.statuses,
      text: this._filter.text.trim() || null,
      ...ownerQuery(this._filter.notebook),
      limit,
      after
    });
    this._pending += 1;
    const step = this._chain
      .then(() => (generation === this._generation ? this._send(generation, query, replace) : undefined))
      .finally(() => {
        this._pending -= 1;
        if (this._pending === 0) {
          this._inflight = null;
        }
        this._changed.emit();
      });
    this._chain = step.catch(() => undefined);
    this._inflight = step;
    this._changed.emit();
    return step;
  }

  private async _send(generation: number, query: string, replace: boolean): Promise<void> {
    let answer: TasksResponse;
    try {
      answer = await this._client.listTasks(query);
    } catch (error) {
      if (generation === this._generation) {
        this._error = describe(error);
      }
      return;
    }
    if (generation !== this._generation) {
      return; // a newer filter or reload is on its way
    }
    if (replace) {
      this._rows.clear();
      this._last = null;
    }
    for (const row of answer.tasks) {
      this._rows.set(row.id, row);
    }
    if (answer.tasks.length > 0) {
      this._last = answer.tasks[answer.tasks.length - 1];
    }
    this._next = answer.next ?? null;
    this._counts = answer.counts ?? null;
    this._totals = answer.totals ?? this._totals;
    this._loaded = true;
    this._error = null;
  }

  private _filter: ServerFilter = NO_SERVER_FILTER;
  private _rows = new Map<string, ListingRow>();
  private _last: ListingRow | null = null;
  private _next: string | null = null;
  private _loaded = false;
  private _error: string | null = null;
  private _counts: Record<string, number> | null = null;
  private _totals: Record<string, number> | null = null;
  private _generation = 0;
  private _pending = 0;
  private _chain: Promise<void> = Promise.resolve();
  private _inflight: Promise<void> | null = null;
  private _changed = new Signal<this, void>(this);
}

/** Where the sidebar's live rows come from (the `TaskModel`). */
export interface ILiveRows {
  readonly tasks: ListingRow[];
  task(taskId: string): ListingRow | undefined;
}

/**
 * The rows the sidebar lists: the loaded pages, each in its newest copy, and the live
 * tasks the pages do not hold (every unfinished one; finished ones inside the loaded
 * range). Before the first page arrives, the live rows alone.
 */
export function listedRows(pager: TaskPager, live: ILiveRows): ListingRow[] {
  if (!pager.loaded) {
    return live.tasks;
  }
  const out = new Map<string, ListingRow>();
  for (const row of pager.rows) {
    const fresh = live.task(row.id);
    out.set(row.id, fresh !== undefined && fresh.version >= row.version ? fresh : row);
  }
  for (const row of live.tasks) {
    if (!out.has(row.id) && (!isTerminal(row.status) || pager.covers(row))) {
      out.set(row.id, row);
    }
  }
  return Array.from(out.values());
}

/** Every status with at least one task, in the contract's order. */
function present(counts: Readonly<Record<string, number>>): TaskStatus[] {
  return TASK_STATUSES.filter(s => (counts[s] ?? 0) > 0);
}

function sum(counts: Readonly<Record<string, number>>): number {
  let n = 0;
  for (const v of Object.values(counts)) {
    n += v;
  }
  return n;
}

/** `1,234,567`, the same in every locale. */
export function grouped(n: number): string {
  return String(Math.trunc(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/**
 * The line above the list: how many rows are shown of how many, for the whole store
 * (`totals`) or, with a status or text filter, of the tasks it matches.
 */
export function listLine(shown: number, pager: TaskPager, totals: Readonly<Record<string, number>> | null, known: number): string {
  const filtered =
    pager.filter.statuses.length > 0 ||
    pager.filter.text.trim() !== '' ||
    Object.keys(ownerQuery(pager.filter.notebook)).length > 0;
  const store = Math.max(totals ? sum(totals) : 0, known);
  if (!filtered || !pager.loaded) {
    return `${grouped(shown)} of ${grouped(store)} tasks`;
  }
  const matching = pager.matching;
  // a text's or a notebook's matches are counted once all are loaded: "200+" until then
  const of = matching === null ? `${grouped(pager.size)}+` : grouped(Math.max(matching, shown));
  return `${grouped(shown)} of ${of} matching tasks (${grouped(store)} in the store)`;
}

/**
 * The counts of the whole store, one button per status present: a click filters the
 * list by that status (on the server: the way to an old failed task).
 */
export class CountsBar {
  constructor(private readonly _onPick: (status: string) => void) {
    this.node = document.createElement('div');
    this.node.className = 'cm-TasksPanel-counts';
    this.node.setAttribute('aria-label', 'Tasks per status in the store');
  }

  readonly node: HTMLElement;

  update(counts: Readonly<Record<string, number>> | null, active: readonly string[]): void {
    const statuses = counts ? present(counts) : [];
    const key = statuses.map(s => `${s}=${counts?.[s]}`).join(',') + `|${active.join(',')}`;
    if (key === this._drawn) {
      return;
    }
    this._drawn = key;
    const buttons = statuses.map(s => {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'cm-Count';
      b.dataset.status = s;
      const n = grouped(counts?.[s] ?? 0);
      b.textContent = `${STATUS_LABELS[s]} ${n}`;
      const on = active.length === 1 && active[0] === s;
      b.setAttribute('aria-pressed', on ? 'true' : 'false');
      b.title = on ? 'Show every status again' : `List the ${n} ${STATUS_LABELS[s].toLowerCase()} tasks`;
      b.addEventListener('click', () => this._onPick(on ? '' : s));
      return b;
    });
    this.node.replaceChildren(...buttons);
  }

  private _drawn = '';
}

/** Below the list: the button for older tasks, or why there is none. */
export class ListFooter {
  constructor(onMore: () => void) {
    this.node = document.createElement('div');
    this.node.className = 'cm-TasksPanel-more';
    this._text = document.createElement('span');
    this._text.className = 'cm-TasksPanel-moreText';
    this._button = document.createElement('button');
    this._button.type = 'button';
    this._button.className = 'cm-TasksPanel-moreButton';
    this._button.addEventListener('click', () => onMore());
    this.node.append(this._text, this._button);
  }

  readonly node: HTMLElement;

  update(pager: TaskPager): void {
    let text = '';
    let button: string | null = null;
    if (pager.error !== null) {
      text = `Cannot load tasks: ${pager.error}`;
      button = 'Try again';
    } else if (pager.loading && pager.loaded) {
      text = 'Loading older tasks…';
    } else if (pager.atCap) {
      text =
        `The newest ${grouped(pager.size)} are loaded: filter by status, notebook or name ` +
        'to reach older tasks.';
    } else if (pager.hasMore) {
      button = `Load ${grouped(pager.pageSize)} older tasks`;
    }
    this.node.hidden = text === '' && button === null;
    this.node.classList.toggle('cm-mod-error', pager.error !== null);
    if (this._text.textContent !== text) {
      this._text.textContent = text;
    }
    this._button.hidden = button === null;
    if (button !== null && this._button.textContent !== button) {
      this._button.textContent = button;
    }
  }

  private _text: HTMLElement;
  private _button: HTMLButtonElement;
}

/** Is the end of a scrolled list within a few rows of the viewport? */
export function nearEnd(node: HTMLElement, height: number, margin = 400): boolean {
  const viewport = node.clientHeight || 800;
  return node.scrollTop + viewport >= height - margin;
}

/**
 * The client-side picture of every task in the store, shared by the sidebar, the status
 * bar and the palette commands. It is filled by one listing and kept current by the
 * server's long-poll feed; it never runs code in a kernel.
 */
import { ISignal, Signal } from '@lumino/signaling';

import {
  APIError,
  CommandInfo,
  ITasksClient,
  ListingRow,
  tasksQuery
} from './api';
import {
  ControlVerb,
  FEED_MAX_WAIT_S,
  LIST_MAX_ROWS,
  STATUS_TONES,
  TASK_STATUSES,
  TaskStatus,
  isTerminal
} from './contract';

const UNFINISHED = TASK_STATUSES.filter(s => !isTerminal(s));
/** The statuses that count as failed (the status bar, the panel's "Failed or lost"): the
 * "bad" tone of the generated status table (failed, lost). */
export const FAILED_STATUSES: readonly TaskStatus[] = TASK_STATUSES.filter(s => STATUS_TONES[s] === 'bad');

/** What the model remembers about a command it sent. */
export interface PendingCommand {
  verb: ControlVerb;
  commandId: string | null;
  state: 'sending' | 'pending' | 'claimed' | 'done' | 'rejected' | 'error';
  message: string | null;
  /** When `state` last changed (the model's clock, ms): a done command's note fades. */
  at: number;
}

export interface ITaskModelOptions {
  client: ITasksClient;
  /** Most tasks listed at once (newest first). */
  limit?: number;
  /** How long a feed request may be held by the server, seconds. */
  feedWaitS?: number;
  /** Pause before re-connecting after a failed feed request, ms. */
  retryDelayMs?: number;
  /** Interval of command-outcome polls, ms. */
  commandPollMs?: number;
  /** Give up following a command after this long, ms. */
  commandTimeoutMs?: number;
  /** Time source (ms), injectable for tests. */
  now?: () => number;
}

export class TaskModel {
  constructor(options: ITaskModelOptions) {
    this._client = options.client;
    this._limit = options.limit ?? 2000;
    this._feedWaitS = options.feedWaitS ?? Math.min(25, FEED_MAX_WAIT_S);
    this._retryDelayMs = options.retryDelayMs ?? 2000;
    this._commandPollMs = options.commandPollMs ?? 150;
    this._commandTimeoutMs = options.commandTimeoutMs ?? 30000;
    this.now = options.now ?? (() => Date.now());
  }

  readonly now: () => number;

  /** Emitted after any change of tasks, sessions, commands or connection state. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get tasks(): ListingRow[] {
    return Array.from(this._tasks.values());
  }

  get sessions(): ReadonlyMap<string, string> {
    return this._sessions;
  }

  /** The server's clock now (ms since the epoch), estimated from its last answer. */
  serverNow(): number {
    return this.now() + this._skewMs;
  }

  get error(): string | null {
    return this._error;
  }

  /** Tasks per status in the whole store (the server's last look; null before it). */
  get storeCounts(): Readonly<Record<string, number>> | null {
    return this._storeCounts;
  }

  get loaded(): boolean {
    return this._loaded;
  }

  get cursor(): number {
    return this._cursor;
  }

  /**
   * Grows whenever the set of tasks or a field that decides filtering, grouping or order
   * (status, name, notebook, kernel, creation time) changes. A view that keeps its
   * filtered, grouped list while this stays the same only has to patch changed rows.
   */
  get layoutRevision(): number {
    return this._layoutRevision;
  }

  /** Number of tasks (without building the array that `tasks` returns). */
  get size(): number {
    return this._tasks.size;
  }

  task(taskId: string): ListingRow | undefined {
    return this._tasks.get(taskId);
  }

  pending(taskId: string): PendingCommand | undefined {
    return this._commands.get(taskId);
  }

  /** Is a command's note still on show (on its way, refused, or done a moment ago)? */
  hasNotes(): boolean {
    const now = this.now();
    for (const c of this._commands.values()) {
      if (c.state !== 'done' || now - c.at <= 5000) {
        return true;
      }
    }
    return false;
  }

  /**
   * Replace everything with a fresh listing: the newest `limit` tasks and every
   * unfinished one, however old, then every failed one too (the status bar counts them
   * for a kernel: a failure before the newest `limit` tasks counts too). The feed then
   * follows their changes. The panel is drawn as soon as the first two answer; the
   * failed ones are asked then, and join when they answer (the promise resolves after).
   */
  async refresh(): Promise<void> {
    let cleared: number | null = null;
    try {
      const [answer, live] = await Promise.all([
        this._client.listTasks(tasksQuery({ limit: this._limit })),
        this._client.listTasks(tasksQuery({ status: UNFINISHED, limit: LIST_MAX_ROWS }))
      ]);
      this._clear();
      cleared = this._clears;
      this._merge(answer.tasks);
      this._merge(live.tasks);
      this._setClock(answer.now);
      this._setSessions(answer.sessions);
      this._storeCounts = answer.totals ?? this._storeCounts;
      this._cursor = answer.cursor;
      this._error = null;
      this._loaded = true;
    } catch (error) {
      this._error = describe(error);
    }
    this._changed.emit();
    if (cleared === null) {
      return;
    }
    try {
      // asked once the panel is drawn, not beside the listings it is drawn from (on the
      // same server threads it slowed them: the Refresh benchmark's render row)
      const failed = this._client.listTasks(tasksQuery({ status: FAILED_STATUSES, limit: LIST_MAX_ROWS }));
      const rows = (await failed).tasks;
      if (cleared === this._clears) {
        // (not if a newer refresh or a feed reset replaced everything meanwhile)
        this._merge(rows);
        this._changed.emit();
      }
    } catch (error) {
      this._error = describe(error);
      this._changed.emit();
    }
  }

  /** Apply a batch of changed rows (feed or listing). */
  applyRows(rows: ListingRow[], removed: string[] = []): void {
    this._merge(rows);
    for (const id of removed) {
      this._delete(id);
    }
    this._changed.emit();
  }

  /** Follow the feed until `dispose()`: one request at a time, held by the server. */
  async run(): Promise<void> {
    if (this._running) {
      return;
    }
    this._running = true;
    if (!this._loaded) {
      await this.refresh();
    }
    while (!this._disposed) {
      try {
        const answer = await this._client.feed(this._cursor, this._feedWaitS);
        if (this._disposed) {
          break;
        }
        if (answer.reset) {
          this._clear();
        }
        this._merge(answer.tasks);
        for (const id of answer.removed ?? []) {
          this._delete(id);
        }
        this._setClock(answer.now);
        this._setSessions(answer.sessions);
        this._storeCounts = answer.counts ?? this._storeCounts;
        this._cursor = answer.cursor;
        if (this._error !== null) {
          this._error = null;
        }
        this._changed.emit();
      } catch (error) {
        if (this._disposed) {
          break;
        }
        this._error = describe(error);
        this._changed.emit();
        await delay(this._retryDelayMs);
      }
    }
    this._running = false;
  }

  /**
   * Ask the owning kernel's controller to apply `verb` to a task, through the store's
   * command queue, and follow the command until it is done or rejected.
   */
  async send(taskId: string, verb: ControlVerb): Promise<PendingCommand> {
    const entry: PendingCommand = { verb, commandId: null, state: 'sending', message: null, at: this.now() };
    this._commands.set(taskId, entry);
    this._changed.emit();
    let info: CommandInfo;
    try {
      info = await this._client.sendCommand(taskId, verb);
    } catch (error) {
      entry.state = 'error';
      entry.message = describe(error);
      this._changed.emit();
      return entry;
    }
    entry.commandId = info.command_id;
    entry.state = info.state;
    entry.at = this.now();
    this._changed.emit();
    const deadline = this.now() + this._commandTimeoutMs;
    while (
      (entry.state === 'pending' || entry.state === 'claimed') &&
      !this._disposed &&
      this.now() < deadline
    ) {
      await delay(this._commandPollMs);
      try {
        info = await this._client.command(info.command_id);
      } catch (error) {
        entry.state = 'error';
        entry.message = describe(error);
        break;
      }
      entry.state = info.state;
      if (info.state === 'rejected') {
        entry.message = outcomeReason(info.outcome) ?? 'the kernel rejected it';
      }
      this._changed.emit();
    }
    if (entry.state === 'pending') {
      entry.message = 'no controller has picked it up yet (is the kernel running?)';
    }
    // a done command stays for its note to fade (the row drops it after a few seconds)
    entry.at = this.now();
    this._changed.emit();
    return entry;
  }

  /** Send `verb` to every task of `kernelId` that allows it; returns how many were sent. */
  async sendToKernel(kernelId: string, verb: ControlVerb): Promise<number> {
    const targets = this.tasks.filter(t => t.kernel_id === kernelId && t.can[verb]);
    await Promise.all(targets.map(t => this.send(t.id, verb)));
    return targets.length;
  }

  dismiss(taskId: string): void {
    if (this._commands.delete(taskId)) {
      this._changed.emit();
    }
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    this._disposed = true;
    Signal.clearData(this);
  }

  private _merge(rows: ListingRow[]): void {
    for (const row of rows) {
      const old = this._tasks.get(row.id);
      // a stale answer never overwrites a newer status
      if (old && old.version > row.version) {
        continue;
      }
      const path = row.kernel_id ? this._sessions.get(row.kernel_id) : undefined;
      this._put(path && row.notebook !== path ? { ...row, notebook: path } : row, old);
    }
  }

  /** Store a row; bump the layout revision when it is new or moves in a listing. */
  private _put(row: ListingRow, old: ListingRow | undefined): void {
    this._tasks.set(row.id, row);
    if (
      old === undefined ||
      old.status !== row.status ||
      old.name !== row.name ||
      old.notebook !== row.notebook ||
      old.kernel_id !== row.kernel_id ||
      old.created !== row.created
    ) {
      this._layoutRevision += 1;
    }
  }

  private _delete(taskId: string): void {
    if (this._tasks.delete(taskId)) {
      this._layoutRevision += 1;
    }
  }

  private _clear(): void {
    this._tasks.clear();
    this._layoutRevision += 1;
    this._clears += 1;
  }

  private _setClock(serverTime: string | undefined): void {
    const t = serverTime ? Date.parse(serverTime) : NaN;
    if (!Number.isNaN(t)) {
      this._skewMs = t - this.now();
    }
  }

  /**
   * Merge kernel id -> notebook path pairs (from the server's answers and from
   * JupyterLab's own session manager) and re-label the tasks of those kernels.
   */
  setSessions(sessions: Record<string, string> | ReadonlyMap<string, string>): void {
    this._setSessions(sessions instanceof Map ? Object.fromEntries(sessions) : (sessions as Record<string, string>));
    this._changed.emit();
  }

  private _setSessions(sessions: Record<string, string> | undefined): void {
    if (!sessions) {
      return;
    }
    for (const [kernel, path] of Object.entries(sessions)) {
      this._sessions.set(kernel, path);
    }
    // rows carry the notebook the server resolved; refresh it for moved sessions
    for (const row of this._tasks.values()) {
      if (row.kernel_id && this._sessions.has(row.kernel_id)) {
        const path = this._sessions.get(row.kernel_id) ?? null;
        if (row.notebook !== path) {
          this._put({ ...row, notebook: path }, row);
        }
      }
    }
  }

  private _client: ITasksClient;
  private _limit: number;
  private _feedWaitS: number;
  private _retryDelayMs: number;
  private _commandPollMs: number;
  private _commandTimeoutMs: number;
  private _tasks = new Map<string, ListingRow>();
  /** How many times everything was replaced (a late answer of an older refresh is dropped). */
  private _clears = 0;
  private _layoutRevision = 0;
  private _skewMs = 0;
  private _sessions = new Map<string, string>();
  private _commands = new Map<string, PendingCommand>();
  private _cursor = 0;
  private _error: string | null = null;
  private _storeCounts: Record<string, number> | null = null;
  private _loaded = false;
  private _running = false;
  private _disposed = false;
  private _changed = new Signal<this, void>(this);
}

export function describe(error: unknown): string {
  if (error instanceof APIError) {
    return `${error.message} (HTTP ${error.status})`;
  }
  if (error instanceof Error) {
    return error.message;
  }
  return String(error);
}

function outcomeReason(outcome: Record<string, unknown> | null): string | null {
  if (!outcome) {
    return null;
  }
  const reason = outcome['reason'] ?? outcome['error'] ?? outcome['message'];
  return typeof reason === 'string' ? reason : null;
}

function delay(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

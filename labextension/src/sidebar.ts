/**
 * The left-sidebar Tasks panel: every task in the store, grouped by notebook, with
 * filters, per-row Pause / Resume / Stop / Retry buttons enabled by the server's `can`
 * flags, and a details view (attempts, traceback, logs, history).
 */
import { Widget } from '@lumino/widgets';

import { ITasksClient, TaskDetail } from './api';
import {
  ControlVerb,
  ListingRow,
  OCCUPIED_STATUSES,
  STATUS_LABELS,
  TASK_STATUSES,
  VERB_LABELS,
  isTerminal
} from './contract';
import { FAILED_STATUSES, PendingCommand, TaskModel, describe } from './model';
import { NOTE_TTL_MS, RowNote } from './row';
import {
  EMPTY_FILTER,
  RowContext,
  TaskFilter,
  TaskListView,
  filterTasks,
  groupByNotebook,
  notebookLabel,
  notebookOptions,
  renderDetails
} from './render';
import {
  CountsBar,
  ListFooter,
  NO_SERVER_FILTER,
  ServerFilter,
  TaskPager,
  listLine,
  listedRows,
  nearEnd
} from './sidebar-list';
import type { DetailExtra } from './sidebar-detail';

/** Status filter choices besides single statuses. */
const STATUS_GROUPS: Record<string, { label: string; statuses: readonly string[] }> = {
  '': { label: 'All statuses', statuses: [] },
  active: {
    label: 'Active (not finished)',
    statuses: TASK_STATUSES.filter(s => !isTerminal(s))
  },
  finished: { label: 'Finished', statuses: TASK_STATUSES.filter(s => isTerminal(s)) },
  problems: { label: 'Failed or lost', statuses: FAILED_STATUSES }
};

export class TasksPanel extends Widget {
  constructor(
    readonly model: TaskModel,
    private readonly _client: ITasksClient
  ) {
    super();
    this.id = 'chongming-tasks-panel';
    this.addClass('cm-TasksPanel');
    this.title.caption = 'Tasks (chongming_nb)';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Tasks of all kernels');

    const header = document.createElement('div');
    header.className = 'cm-TasksPanel-header';
    const title = document.createElement('h2');
    title.className = 'cm-TasksPanel-title';
    title.textContent = 'Tasks';
    const refresh = document.createElement('button');
    refresh.type = 'button';
    refresh.className = 'cm-TasksPanel-refresh';
    refresh.textContent = 'Refresh';
    refresh.setAttribute('aria-label', 'Refresh the task list');
    refresh.addEventListener('click', () => {
      // the live picture, and the loaded pages read again (the place in the list stays)
      void this.model.refresh();
      void this._pager.reload();
    });
    header.append(title, refresh);

    const filters = document.createElement('div');
    filters.className = 'cm-TasksPanel-filters';
    this._statusSelect = document.createElement('select');
    this._statusSelect.className = 'cm-Filter-status';
    this._statusSelect.setAttribute('aria-label', 'Filter tasks by status');
    for (const [value, group] of Object.entries(STATUS_GROUPS)) {
      this._statusSelect.append(option(value, group.label));
    }
    for (const status of TASK_STATUSES) {
      this._statusSelect.append(option(`status:${status}`, STATUS_LABELS[status]));
    }
    this._statusSelect.addEventListener('change', () => this._onFilterChange());

    this._notebookSelect = document.createElement('select');
    this._notebookSelect.className = 'cm-Filter-notebook';
    this._notebookSelect.setAttribute('aria-label', 'Filter tasks by notebook');
    this._notebookSelect.addEventListener('change', () => this._onFilterChange());

    this._textInput = document.createElement('input');
    this._textInput.type = 'search';
    this._textInput.className = 'cm-Filter-text';
    this._textInput.placeholder = 'Filter by name or id';
    this._textInput.maxLength = 200;
    this._textInput.setAttribute('aria-label', 'Filter tasks by name or id');
    // typing filters the loaded rows at once; the server is asked after a pause (or Enter)
    this._textInput.addEventListener('input', () => this._onFilterChange(false));
    this._textInput.addEventListener('change', () => this._onFilterChange());
    filters.append(this._statusSelect, this._notebookSelect, this._textInput);

    this._statusLine = document.createElement('div');
    this._statusLine.className = 'cm-TasksPanel-status';
    this._statusLine.setAttribute('role', 'status');
    this._statusLine.setAttribute('aria-live', 'polite');

    this._counts = new CountsBar(status => this._pickStatus(status));
    const listNode = document.createElement('div');
    this._list = new TaskListView(listNode, {
      onViewportChange: () => {
        this._scheduleRender();
        this._loadMoreAtEnd();
      }
    });
    this._footer = new ListFooter(() => void this._pager.more());
    this._pager = new TaskPager(this._client);
    this._pager.changed.connect(this._onPagerChanged, this);
    this._detailsNode = document.createElement('div');
    this._detailsNode.className = 'cm-TasksPanel-details';

    this.node.append(
      header,
      filters,
      this._counts.node,
      this._statusLine,
      listNode,
      this._footer.node,
      this._detailsNode
    );
    this.model.changed.connect(this._onModelChanged, this);
    this._updateNotebookOptions();
    void this._pager.setFilter(NO_SERVER_FILTER);
  }

  /** The loaded pages of the listing (status and text filtered by the server). */
  get pager(): TaskPager {
    return this._pager;
  }

  /** The list view (windowed: only the rows in view are in the DOM). */
  get list(): TaskListView {
    return this._list;
  }

  get filter(): TaskFilter {
    return this._filter;
  }

  /**
   * Show the tasks of one notebook key (see `notebookKey`), or of all for null, and
   * nothing else: the status and text filters are cleared, so no filter set earlier
   * hides tasks of that notebook without saying so.
   */
  setNotebookFilter(key: string | null): void {
    this._filter = { statuses: new Set(), notebook: key, text: '' };
    this._statusSelect.value = '';
    this._textInput.value = '';
    void this._pager.setFilter({ ...NO_SERVER_FILTER, notebook: key });
    this._updateNotebookOptions();
    this._notebookSelect.value = toOptionValue(key);
    this._layoutDirty = true;
    this._scheduleRender();
  }

  /** Open the details view of a task. */
  select(taskId: string | null): void {
    this._selected = taskId;
    this._detail = null;
    this._detailVersion = -1;
    if (taskId) {
      void this._loadDetail(taskId);
    }
    this._scheduleRender();
  }

  get selected(): string | null {
    return this._selected;
  }

  /** The details view's extra part (the plugin sets it: the attempts' small timeline and
   * a pipeline step's run graph link, `sidebar-detail.ts`). */
  detailExtra: DetailExtra | null = null;

  /**
   * Draw now (used by tests; otherwise once per animation frame). Filtering, grouping
   * and sorting run only when the filter changed or the model's layout revision moved
   * (tasks added, removed, or changed in status, name, notebook or creation time); a
   * feed update that only moved progress points the list at the new rows, and the
   * list patches the visible rows whose content changed.
   */
  render(): void {
    this._renderPending = false;
    const now = this.model.serverNow();
    const local = this.model.now();
    const ctx: RowContext = {
      now,
      disconnected: false,
      note: id => {
        const task = this._task(id);
        if (task?.kernel_gone) {
          const why = task.kernel_gone_reason ?? 'its kernel restarted or died';
          return { tone: 'bad', text: `kernel gone: ${why}`, at: local };
        }
        return commandNote(this.model.pending(id), local);
      },
      onVerb: (id, verb) => this._onVerb(id, verb),
      onSelect: id => this.select(this._selected === id ? null : id),
      isSelected: id => this._selected === id,
      selectLabel: 'Show details of',
      why: (row, verb) => (row as ListingRow).why[verb]
    };
    if (this._layoutDirty || this.model.layoutRevision !== this._layoutRevision) {
      this._layoutDirty = false;
      this._dataDirty = false;
      this._layoutRevision = this.model.layoutRevision;
      const tasks = listedRows(this._pager, this.model);
      this._known = tasks.length;
      // (the live picture too: a notebook filter's pages hold that notebook's rows only)
      this._updateNotebookOptions(tasks.concat(this.model.tasks));
      const rows = filterTasks(tasks, this._filter);
      this._shown = rows.length;
      this._list.setGroups(groupByNotebook(rows));
    } else if (this._dataDirty) {
      this._dataDirty = false;
      this._list.replaceRows(id => this._task(id));
    }
    this._list.draw(ctx);
    const totals = this.model.storeCounts ?? this._pager.totals;
    this._counts.update(totals, this._pager.filter.statuses);
    this._footer.update(this._pager);
    let line = listLine(this._shown, this._pager, totals, this._known);
    if (!this.model.loaded && !this._pager.loaded && this.model.error === null) {
      line = 'Loading tasks…';
    }
    if (this.model.error !== null) {
      line = `Cannot reach the task store: ${this.model.error}`;
      this._statusLine.classList.add('cm-mod-error');
    } else if (this._statusLine.classList.contains('cm-mod-error')) {
      this._statusLine.classList.remove('cm-mod-error');
    }
    if (this._statusLine.textContent !== line) {
      this._statusLine.textContent = line;
    }
    this._renderDetails();
  }

  protected onAfterShow(): void {
    this._startTicker();
    this.render();
  }

  protected onAfterAttach(): void {
    this._startTicker();
    this.render();
  }

  protected onBeforeHide(): void {
    this._stopTicker();
  }

  protected onBeforeDetach(): void {
    this._stopTicker();
  }

  protected onResize(): void {
    this._scheduleRender();
  }

  dispose(): void {
    this._stopTicker();
    window.clearTimeout(this._textTimer);
    this.model.changed.disconnect(this._onModelChanged, this);
    this._pager.changed.disconnect(this._onPagerChanged, this);
    this._list.dispose();
    super.dispose();
  }

  private _onModelChanged(): void {
    this._dataDirty = true;
    this._scheduleRender();
  }

  private _onPagerChanged(): void {
    this._layoutDirty = true;
    this._scheduleRender();
  }

  /** The row of a task: its live copy, else the loaded page's. */
  private _task(taskId: string): ListingRow | undefined {
    return this.model.task(taskId) ?? this._pager.task(taskId);
  }

  /** A status of the counts bar picked ('' for all): filter by it. */
  private _pickStatus(status: string): void {
    this._statusSelect.value = status ? `status:${status}` : '';
    this._onFilterChange();
  }

  /** Scrolled to the end of the loaded rows: ask for the next page. */
  private _loadMoreAtEnd(): void {
    const p = this._pager;
    if (p.loaded && p.hasMore && !p.loading && !p.atCap && p.error === null) {
      if (nearEnd(this._list.node, this._list.height)) {
        void p.more();
      }
    }
  }

  /** Filter the list; `toServer` false: only the loaded rows now, the server soon. */
  private _onFilterChange(toServer = true): void {
    const choice = this._statusSelect.value;
    let statuses: readonly string[] = [];
    if (choice.startsWith('status:')) {
      statuses = [choice.slice('status:'.length)];
    } else {
      statuses = STATUS_GROUPS[choice]?.statuses ?? [];
    }
    this._filter = {
      statuses: new Set(statuses),
      notebook: fromOptionValue(this._notebookSelect.value),
      text: this._textInput.value
    };
    this._layoutDirty = true;
    this._scheduleRender();
    window.clearTimeout(this._textTimer);
    const server: ServerFilter = {
      statuses,
      text: this._filter.text.trim(),
      notebook: this._filter.notebook
    };
    if (toServer) {
      void this._pager.setFilter(server);
    } else {
      this._textTimer = window.setTimeout(() => void this._pager.setFilter(server), TEXT_PAUSE_MS);
    }
  }

  private _onVerb(taskId: string, verb: ControlVerb): void {
    void this.model.send(taskId, verb).then(() => {
      if (this._selected === taskId) {
        void this._loadDetail(taskId);
      }
    });
  }

  private _updateNotebookOptions(tasks: ListingRow[] = this.model.tasks): void {
    const options = notebookOptions(tasks);
    if (this._filter.notebook !== null && !options.some(o => o.key === this._filter.notebook)) {
      options.push({ key: this._filter.notebook, label: notebookLabel(this._filter.notebook) });
    }
    const signature = options.map(o => `${o.key}\u0001${o.label}`).join('\u0002');
    if (signature === this._notebookSignature) {
      return;
    }
    this._notebookSignature = signature;
    const nodes = [option(ALL_NOTEBOOKS, 'All notebooks')];
    for (const o of options) {
      nodes.push(option(toOptionValue(o.key), o.label));
    }
    this._notebookSelect.replaceChildren(...nodes);
    this._notebookSelect.value = toOptionValue(this._filter.notebook);
  }

  private _scheduleRender(): void {
    if (this._renderPending || this.isDisposed) {
      return;
    }
    this._renderPending = true;
    requestAnimationFrame(() => {
      if (this.isDisposed) {
        return;
      }
      if (!this.isVisible) {
        // a closed sidebar draws nothing; `onAfterShow` draws what accumulated
        this._renderPending = false;
        return;
      }
      this.render();
    });
  }

  private _startTicker(): void {
    if (this._ticker !== null) {
      return;
    }
    // durations of running tasks move every second, and answers to clicks fade: redraw
    // (only the visible rows whose text changes are touched)
    this._ticker = window.setInterval(() => {
      if (this.isVisible && this.ticking()) {
        this._scheduleRender();
      }
    }, 1000);
  }

  /** Does the drawn text move with the clock? Running durations, the countdown of a
   * delayed start ("starts at 14:05 (in 3m)"), answers to clicks that fade. */
  ticking(): boolean {
    return this.model.tasks.some(t => isOccupied(t.status) || waitsToStart(t)) || this.model.hasNotes();
  }

  private _stopTicker(): void {
    if (this._ticker !== null) {
      window.clearInterval(this._ticker);
      this._ticker = null;
    }
  }

  private async _loadDetail(taskId: string): Promise<void> {
    const row = this._task(taskId);
    this._detailVersion = row ? row.version : -1;
    this._detailProgress = row ? progressKey(row) : '';
    this._detailLoadedAt = Date.now();
    try {
      const detail = await this._client.task(taskId);
      if (this._selected === taskId) {
        this._detail = detail;
        this._detailError = null;
        this._detailDrawn = null;
      }
    } catch (error) {
      if (this._selected === taskId) {
        this._detailError = describe(error);
        this._detailDrawn = null;
      }
    }
    this._scheduleRender();
  }

  private _renderDetails(): void {
    const id = this._selected;
    this.detailExtra?.follow(id, id === null ? null : (this._task(id) ?? null));
    if (id === null) {
      if (this._detailsNode.childElementCount > 0) {
        this._detailsNode.replaceChildren();
      }
      this._detailDrawn = null;
      return;
    }
    const row = this._task(id);
    // refresh the details when the task changed (status, progress: logs grow with it)
    if (
      row &&
      (row.version !== this._detailVersion || progressKey(row) !== this._detailProgress) &&
      Date.now() - this._detailLoadedAt > 500
    ) {
      void this._loadDetail(id);
    }
    if (this._detailError !== null) {
      const p = document.createElement('p');
      p.className = 'cm-Details-error';
      p.textContent = `Cannot load task ${id}: ${this._detailError}`;
      this._detailsNode.replaceChildren(p);
      return;
    }
    if (this._detail === null || this._detail === this._detailDrawn) {
      return;
    }
    // the row in the model may be newer than the detail's own copy
    const detail: TaskDetail = row ? { ...this._detail, task: row } : this._detail;
    const box = renderDetails(detail, {
      onVerb: (taskId, verb) => this._onVerb(taskId, verb),
      onClose: () => this.select(null)
    });
    this._detailsNode.replaceChildren(box);
    this.detailExtra?.mount(box);
    this._detailDrawn = this._detail;
  }

  private _filter: TaskFilter = EMPTY_FILTER;
  private _statusSelect: HTMLSelectElement;
  private _notebookSelect: HTMLSelectElement;
  private _textInput: HTMLInputElement;
  private _statusLine: HTMLElement;
  private _list: TaskListView;
  private _detailsNode: HTMLElement;
  private _selected: string | null = null;
  private _detail: TaskDetail | null = null;
  private _detailDrawn: TaskDetail | null = null;
  private _detailError: string | null = null;
  private _detailVersion = -1;
  private _detailProgress = '';
  private _detailLoadedAt = 0;
  private _notebookSignature = '';
  private _renderPending = false;
  private _layoutDirty = true;
  private _dataDirty = true;
  private _layoutRevision = -1;
  private _shown = 0;
  private _known = 0;
  private _ticker: number | null = null;
  private _pager: TaskPager;
  private _counts: CountsBar;
  private _footer: ListFooter;
  private _textTimer = 0;
}

/** Pause in typing after which the text filter is sent to the server, ms. */
const TEXT_PAUSE_MS = 300;

// the "no live kernel" group has the empty key, so "all" needs a value of its own
const ALL_NOTEBOOKS = '*';

function toOptionValue(key: string | null): string {
  return key === null ? ALL_NOTEBOOKS : `nb:${key}`;
}

function fromOptionValue(value: string): string | null {
  return value.startsWith('nb:') ? value.slice(3) : null;
}

function option(value: string, label: string): HTMLOptionElement {
  const node = document.createElement('option');
  node.value = value;
  node.textContent = label;
  return node;
}

function waitsToStart(row: ListingRow): boolean {
  return row.starts !== null && row.started === null && !isTerminal(row.status);
}

function isOccupied(status: string): boolean {
  return (OCCUPIED_STATUSES as readonly string[]).includes(status);
}

function progressKey(row: ListingRow): string {
  return `${row.done}/${row.total}/${row.message ?? ''}`;
}

/** The note a row shows for the last command sent to its task (none once faded). */
export function commandNote(p: PendingCommand | undefined, now: number): RowNote | null {
  if (!p) {
    return null;
  }
  const verb = VERB_LABELS[p.verb];
  switch (p.state) {
    case 'sending':
    case 'pending':
      return { tone: 'wait', text: p.message ?? `${verb}: requested…`, at: p.at };
    case 'claimed':
      return { tone: 'wait', text: `${verb}: the kernel is applying it…`, at: p.at };
    case 'done':
      return now - p.at > NOTE_TTL_MS ? null : { tone: 'ok', text: `${verb}: ok`, at: p.at };
    case 'rejected':
    case 'error':
      return { tone: 'bad', text: `${verb} refused: ${p.message ?? 'unknown reason'}`, at: p.at };
  }
}

/**
 * The TaskTable widget's front end (anywidget ESM). `scripts/build_labextension.sh`
 * bundles this file with the row module and the generated contract into
 * `chongming_nb/notebook/static/widget.js`, so the widget draws rows exactly as the
 * Tasks sidebar does and knows the kernel's names from the same generated file.
 *
 * The kernel computes `row.can[verb]`; a button is shown exactly when that is true (and
 * the kernel is connected). Every user string goes into the DOM as text.
 */
import {
  BOARD_RANKS,
  BULK_VERBS,
  ControlVerb,
  SCHEMA_HASH,
  STATUS_LABELS,
  TASK_STATUSES,
  TaskRow,
  VERB_LABELS,
  VERB_TIPS,
  isTerminal
} from './contract';
import { formatClock, olderText } from './format';
import { mountRunGraph } from './graph';
import {
  RowContext,
  RowNote,
  createRow,
  drawnSignature,
  elapsedSeconds,
  expireNotes,
  patchRow,
  rowSignature,
  setRowContext
} from './row';

/** The part of an anywidget model this view uses. */
interface Model {
  get(name: string): any;
  send(msg: Record<string, unknown>): void;
  on(event: string, cb: (...args: any[]) => void): void;
  off(event: string, cb: (...args: any[]) => void): void;
}

const DEFAULT_ROW_H = 46; // px, until a row is measured
const DRAWER_H = 260; // px, an open log drawer under its row
const OVERSCAN = 6; // rows drawn above/below the visible window
const VIA_SERVER_AFTER_MS = 300;

function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string | null
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined && text !== null) {
    node.textContent = String(text);
  }
  return node;
}

function recordRenderTime(ms: number): void {
  const g = globalThis as any;
  if (!g.__cnRenderTimes) {
    g.__cnRenderTimes = [];
  }
  g.__cnRenderTimes.push(ms);
  if (g.__cnRenderTimes.length > 2000) {
    g.__cnRenderTimes.shift();
  }
}

interface Pending {
  taskId?: string;
  action: string;
  bulk?: boolean;
}

interface LogLine {
  at: number | null;
  stream: string;
  level: string | null;
  line: string;
}

interface Detail {
  task_id: string;
  logs: LogLine[];
  traceback: string | null;
  failure: { kind: string; message: string } | null;
}

interface Refs {
  wrap: HTMLElement;
  row: HTMLElement;
  drawer: { node: HTMLElement; body: HTMLElement } | null;
  lastDetail: Detail | null;
}

function render({ model, el }: { model: Model; el: HTMLElement }): () => void {
  const schema = model.get('schema') || {};
  const kind: string = model.get('kind') || 'board';
  const single = kind === 'task';

  // ------------------------------------------------------------------ state
  const rows = new Map<string, TaskRow>(); // id -> row (kernel order kept by insertion)
  let seq = -1;
  let lastUpdateAt: number | null = null;
  let syncPending = false;
  let nextRequest = 1;
  const pending = new Map<number, Pending>();
  const notes = new Map<string, RowNote>();
  const open = new Set<string>();
  const details = new Map<string, Detail>();
  const detailAsked = new Map<string, number>();
  let disconnected = false;
  /** Why the kernel of this view is gone (its connection said so), or null. */
  let goneReason: string | null = null;
  let filterStatus = '';
  let search = '';
  // a board opens in the order people read it; a run or a task keeps the kernel's
  let sortKey = kind === 'board' ? 'board' : '';
  let sortDesc = false;
  let view: string[] = [];
  let viewDirty = true;
  const changed = new Set<string>();
  let rowH = DEFAULT_ROW_H;
  let offsets: number[] = [0];
  let bulkNote: RowNote | null = null;
  let frame = 0;

  // ------------------------------------------------------------------ skeleton
  el.classList.add('cn-root', 'cm-Rows');
  if (single) {
    el.classList.add('cn-single');
  }
  const root = h('div', 'cn-table');
  root.setAttribute('role', 'region');
  root.setAttribute('aria-label', model.get('title') || `chongming ${kind}`);
  el.appendChild(root);

  const banner = h('div', 'cn-banner');
  banner.setAttribute('role', 'status');
  banner.hidden = true;
  root.appendChild(banner);
  const staleFront = schema.hash !== undefined && schema.hash !== SCHEMA_HASH;

  const head = h('div', 'cn-head');
  const titleEl = h('span', 'cn-title', model.get('title') || '');
  const summaryEl = h('span', 'cn-summary');
  summaryEl.setAttribute('aria-live', 'polite');
  const bulkBtns = new Map<ControlVerb, HTMLButtonElement>();
  const bulkBox = h('span', 'cn-bulk');
  for (const verb of BULK_VERBS) {
    const b = h('button', 'cn-btn cn-bulk-btn', `${VERB_LABELS[verb]} all`);
    b.type = 'button';
    b.dataset.bulk = verb;
    b.setAttribute('aria-label', `${VERB_LABELS[verb]} every task of this table that allows it`);
    b.addEventListener('click', () => sendBulk(verb));
    bulkBtns.set(verb, b);
    bulkBox.appendChild(b);
  }
  const bulkNoteEl = h('span', 'cn-bulk-note');
  bulkNoteEl.setAttribute('role', 'status');
  // the finished tasks the board does not show (older than the newest it keeps): their
  // counts per status come from the kernel, in the `hidden` trait and in patches
  const olderEl = h('span', 'cn-older');
  head.append(titleEl, summaryEl, olderEl, bulkBox, bulkNoteEl);
  let hidden: Record<string, number> = model.get('hidden') || {};

  const toolbar = h('div', 'cn-toolbar');
  const filterSel = h('select', 'cn-filter');
  filterSel.setAttribute('aria-label', 'Filter by status');
  filterSel.title = 'Show only the tasks in a status';
  filterSel.appendChild(new Option('all statuses', ''));
  filterSel.appendChild(new Option('active (not finished)', ':active'));
  filterSel.appendChild(new Option('finished', ':terminal'));
  for (const s of TASK_STATUSES) {
    filterSel.appendChild(new Option(STATUS_LABELS[s], s));
  }
  const searchIn = h('input', 'cn-search');
  searchIn.type = 'search';
  searchIn.placeholder = 'search name, id, message';
  searchIn.setAttribute('aria-label', 'Search tasks');
  const sortSel = h('select', 'cn-sort');
  sortSel.setAttribute('aria-label', 'Sort by');
  sortSel.title = 'Order of the rows';
  const sorts: [string, string][] = [
    ['board', 'running first'],
    ['', 'kernel order'],
    ['name', 'name'],
    ['status', 'status'],
    ['progress', 'progress'],
    ['started', 'started'],
    ['duration', 'duration'],
    ['created', 'created']
  ];
  for (const [v, t] of sorts) {
    sortSel.appendChild(new Option(`sort: ${t}`, v));
  }
  sortSel.value = sortKey;
  const dirBtn = h('button', 'cn-btn cn-dir', '↑');
  dirBtn.type = 'button';
  dirBtn.setAttribute('aria-label', 'Sort direction: ascending');
  dirBtn.title = 'Reverse the order';
  toolbar.append(filterSel, searchIn, sortSel, dirBtn);

  // column titles, on the same grid as the rows (hidden where rows wrap)
  const colHead = h('div', 'cm-Row cm-Row-head');
  colHead.setAttribute('aria-hidden', 'true');
  for (const [cls, t] of [
    ['cm-Row-name', 'task'],
    ['cm-Row-status', 'status'],
    ['cm-Row-bar', 'progress'],
    ['cm-Row-pct', '%'],
    ['cm-Row-count', 'done'],
    ['cm-Row-times', 'elapsed<left'],
    ['cm-Row-rate', 'rate'],
    ['cm-Row-actions', 'actions']
  ]) {
    colHead.appendChild(h('span', cls, t));
  }

  const viewport = h('div', 'cn-viewport');
  viewport.tabIndex = -1;
  const spacer = h('div', 'cn-spacer');
  viewport.appendChild(spacer);
  const empty = h('div', 'cn-empty', 'no tasks');

  if (!single) {
    root.append(head, toolbar, colHead);
  }
  root.append(viewport, empty);
  // a run's graph above its table (src/graph.ts): a node click selects its row
  let selectedId: string | null = null;
  const graph =
    kind === 'run'
      ? mountRunGraph(model, root, toolbar, {
          row: id => rows.get(id),
          onSelect: id => selectRow(id),
          onVerb: (id, verb) => rowContext(Date.now()).onVerb(id, verb),
          disconnected: () => disconnected
        })
      : null;

  // ------------------------------------------------------------------ messages out
  function send(msg: Record<string, unknown>): number | null {
    if (disconnected) {
      return null;
    }
    const rid = nextRequest++;
    msg.request_id = rid;
    model.send(msg);
    return rid;
  }

  // A click travels over the comm. If the kernel's main thread is busy (a long cell and
  // no comm subshell), the same click also goes through the server extension and the
  // store's command queue, which the kernel's dispatcher thread serves; the shared key
  // makes the kernel apply it once, whichever copy arrives first.
  const clientKey = `w${Math.random().toString(36).slice(2, 10)}`;

  function pageConfig(): any {
    const node = document.getElementById('jupyter-config-data');
    if (!node) {
      return null;
    }
    try {
      return JSON.parse(node.textContent || '{}');
    } catch {
      return null;
    }
  }

  function viaServer(rid: number, taskId: string, action: ControlVerb, key: string): void {
    const cfg = pageConfig();
    if (!cfg || !pending.has(rid)) {
      return;
    }
    const base = String(cfg.baseUrl || '/').replace(/\/?$/, '/');
    const xsrf = (document.cookie.match(/(?:^|;\s*)_xsrf=([^;]*)/) || [])[1];
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    if (xsrf) {
      headers['X-XSRFToken'] = decodeURIComponent(xsrf);
    }
    if (cfg.token) {
      headers['Authorization'] = `token ${cfg.token}`;
    }
    fetch(`${base}chongming/api/tasks/${encodeURIComponent(taskId)}/commands`, {
      method: 'POST',
      credentials: 'same-origin',
      headers,
      body: JSON.stringify({ verb: action, request_key: key })
    })
      .then(r => {
        if (!pending.has(rid) || r.status !== 202) {
          return;
        }
        notes.set(taskId, {
          tone: 'wait',
          text: `${VERB_LABELS[action]}… (kernel busy: sent via the server)`,
          at: Date.now()
        });
        scheduleRender();
      })
      .catch(() => undefined);
  }

  function sendAction(taskId: string, action: ControlVerb): void {
    const key = `${clientKey}:${nextRequest}`;
    const rid = send({ type: 'action', action, task_id: taskId, key });
    if (rid === null) {
      return;
    }
    pending.set(rid, { taskId, action });
    notes.set(taskId, { tone: 'wait', text: `${VERB_LABELS[action]}…`, at: Date.now() });
    setTimeout(() => viaServer(rid, taskId, action, key), VIA_SERVER_AFTER_MS);
    scheduleRender();
  }

  function sendBulk(action: ControlVerb): void {
    const rid = send({ type: 'bulk', action });
    if (rid === null) {
      return;
    }
    pending.set(rid, { bulk: true, action });
    bulkNote = { tone: 'wait', text: `${VERB_LABELS[action]} all…`, at: Date.now() };
    scheduleRender();
  }

  function askDetail(taskId: string): void {
    detailAsked.set(taskId, Date.now());
    send({ type: 'detail', task_id: taskId });
  }

  function requestSync(): void {
    if (syncPending) {
      return;
    }
    syncPending = true;
    send({ type: 'sync' });
  }

  // ------------------------------------------------------------------ state in
  function replaceAll(list: TaskRow[] | null, newSeq: number, at: number | null): void {
    rows.clear();
    for (const r of list || []) {
      rows.set(r.id, r);
    }
    seq = newSeq;
    if (at) {
      lastUpdateAt = at;
    }
    viewDirty = true;
    scheduleRender();
  }

  function onHidden(): void {
    hidden = model.get('hidden') || {};
    scheduleRender();
  }

  function onTrait(): void {
    const s = model.get('rows_seq');
    if (typeof s === 'number' && s > seq) {
      replaceAll(model.get('rows'), s, model.get('rows_at'));
    }
  }

  // liveness: any message from the kernel counts, and a quiet kernel pings every
  // schema.ping_ms; silence for three pings means the kernel is gone as far as this
  // view can tell
  let lastHeard = Date.now();
  let silent = false;
  const pingMs: number = schema.ping_ms || 5000;

  function onCustom(msg: any): void {
    if (!msg || typeof msg !== 'object') {
      return;
    }
    lastHeard = Date.now();
    if (silent) {
      silent = false;
      checkLive();
    }
    if (msg.type === 'ping') {
      return;
    }
    if (msg.type === 'patch') {
      if (msg.seq <= seq) {
        return;
      }
      if (msg.base !== seq) {
        requestSync();
      }
      const touched: string[] = [];
      for (const r of msg.upsert || []) {
        rows.set(r.id, r);
        touched.push(r.id);
      }
      for (const d of msg.update || []) {
        const prev = rows.get(d.id);
        if (!prev) {
          requestSync();
          continue;
        }
        Object.assign(prev, d);
        changed.add(d.id);
        if (!viewDirty && movesInView(d)) {
          viewDirty = true;
        }
        touched.push(d.id);
      }
      for (const id of touched) {
        if (open.has(id) && Date.now() - (detailAsked.get(id) || 0) > 1000) {
          askDetail(id);
        }
      }
      for (const id of msg.remove || []) {
        rows.delete(id);
      }
      seq = msg.seq;
      if (msg.at) {
        lastUpdateAt = msg.at;
      }
      if (msg.hidden && typeof msg.hidden === 'object') {
        hidden = msg.hidden;
      }
      if ((msg.upsert || []).length || (msg.remove || []).length) {
        viewDirty = true;
      }
      scheduleRender();
    } else if (msg.type === 'full') {
      syncPending = false;
      if (msg.seq >= seq) {
        if (msg.hidden && typeof msg.hidden === 'object') {
          hidden = msg.hidden;
        }
        replaceAll(msg.rows, msg.seq, msg.at);
      }
    } else if (msg.type === 'ack') {
      const p = pending.get(msg.request_id);
      pending.delete(msg.request_id);
      const label = msg.action ? VERB_LABELS[msg.action as ControlVerb] || msg.action : 'done';
      const note: RowNote = msg.ok
        ? { tone: 'ok', text: `${label}: ok${msg.reason ? ` (${msg.reason})` : ''}`, at: Date.now() }
        : { tone: 'bad', text: `refused: ${msg.reason || 'unknown reason'}`, at: Date.now() };
      if (p && p.bulk) {
        bulkNote = note;
      } else if (p && p.taskId) {
        notes.set(p.taskId, note);
      } else if (msg.task_id) {
        notes.set(msg.task_id, note);
      }
      scheduleRender();
    } else if (msg.type === 'detail') {
      details.set(msg.task_id, msg);
      scheduleRender();
    }
  }

  // ------------------------------------------------------------------ connection
  function setDisconnected(flag: boolean): void {
    if (flag === disconnected) {
      return;
    }
    disconnected = flag;
    el.classList.toggle('cn-disconnected', flag);
    scheduleRender();
  }
  function checkLive(): void {
    setDisconnected(
      goneReason !== null || silent || el.classList.contains('jupyter-widgets-disconnected')
    );
  }
  const classWatch = new MutationObserver(checkLive);
  classWatch.observe(el, { attributes: true, attributeFilter: ['class'] });
  const onLive = () => setTimeout(checkLive, 0);
  const onClose = () => setDisconnected(true);
  model.on('comm_live_update', onLive);
  model.on('comm:close', onClose);
  // a kernel restarted or killed from JupyterLab closes no comm: the kernel connection's
  // status says it at once ('restarting', 'autorestarting', 'dead'), long before three
  // pings of silence would. The model belongs to the kernel that is gone: for good.
  const unwatchKernel = watchKernel(model, reason => {
    goneReason = reason;
    setDisconnected(true);
    scheduleRender(); // already disconnected (its comm closed first): the banner says why
  });

  // ------------------------------------------------------------------ view model
  // does a patch of these fields change which rows are shown, or their order?
  function movesInView(d: Partial<TaskRow>): boolean {
    if (filterStatus && 'status' in d) {
      return true;
    }
    if (search && ('name' in d || 'message' in d || 'failure' in d || 'tags' in d)) {
      return true;
    }
    switch (sortKey) {
      case '':
        return false;
      case 'board':
        return 'status' in d || 'created' in d;
      case 'name':
        return 'name' in d;
      case 'status':
        return 'status' in d;
      case 'progress':
        return 'done' in d || 'total' in d;
      case 'started':
        return 'started' in d;
      case 'created':
        return 'created' in d;
      default:
        return true; // duration: moves with the clock anyway
    }
  }

  function matches(r: TaskRow): boolean {
    if (filterStatus === ':active' && isTerminal(r.status)) {
      return false;
    }
    if (filterStatus === ':terminal' && !isTerminal(r.status)) {
      return false;
    }
    if (filterStatus && filterStatus[0] !== ':' && r.status !== filterStatus) {
      return false;
    }
    if (!search) {
      return true;
    }
    const q = search;
    return (
      String(r.name).toLowerCase().includes(q) ||
      String(r.id).toLowerCase().includes(q) ||
      (!!r.message && String(r.message).toLowerCase().includes(q)) ||
      (!!r.failure && String(r.failure.message).toLowerCase().includes(q)) ||
      (r.tags || []).some(t => String(t).toLowerCase().includes(q))
    );
  }

  const statusRank = new Map<string, number>(TASK_STATUSES.map((s, i) => [s, i]));

  function sortValue(r: TaskRow, now: number): number | string {
    switch (sortKey) {
      case 'name':
        return String(r.name).toLowerCase();
      case 'status':
        return statusRank.get(r.status) ?? 999;
      case 'progress':
        return r.total ? r.done / r.total : -1;
      case 'started':
        return r.started ?? -1;
      case 'created':
        return r.created ?? -1;
      case 'duration':
        return elapsedSeconds(r, now, null) ?? -1; // the time the row shows
      default:
        return 0;
    }
  }

  function rebuildView(): void {
    const ids: string[] = [];
    for (const r of rows.values()) {
      if (matches(r)) {
        ids.push(r.id);
      }
    }
    if (sortKey === 'board') {
      // one number per row (rank, then newest first; kernel order breaks ties), sorted as
      // indices: a 10,000-row board is sorted again on every full refresh
      const n = ids.length;
      const keys = new Float64Array(n);
      const order = new Uint32Array(n);
      for (let i = 0; i < n; i++) {
        const r = rows.get(ids[i]) as TaskRow;
        keys[i] = (BOARD_RANKS[r.status] ?? 9) * 1e14 + (1e14 - (r.created ?? 0));
        order[i] = i;
      }
      order.sort((a, b) => keys[a] - keys[b] || a - b);
      view = Array.from(order, i => ids[i]);
      if (sortDesc) {
        view.reverse();
      }
    } else if (sortKey) {
      const now = Date.now();
      const keyed = ids.map((id, i) => [sortValue(rows.get(id) as TaskRow, now), i, id] as const);
      keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
      if (sortDesc) {
        keyed.reverse();
      }
      view = keyed.map(k => k[2]);
    } else {
      view = sortDesc ? ids.reverse() : ids;
    }
    layout();
    viewDirty = false;
  }

  function layout(): void {
    offsets = new Array(view.length + 1);
    offsets[0] = 0;
    for (let i = 0; i < view.length; i++) {
      offsets[i + 1] = offsets[i] + rowH + (open.has(view[i]) ? DRAWER_H : 0);
    }
  }

  function firstIndexAt(y: number): number {
    let lo = 0;
    let hi = view.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (offsets[mid + 1] <= y) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  // ------------------------------------------------------------------ rows
  const rowEls = new Map<string, Refs>();

  function rowContext(now: number): RowContext {
    return {
      now,
      disconnected,
      offline: goneReason !== null ? `kernel gone (${goneReason}): no kernel to send it to` : undefined,
      note: id => notes.get(id) ?? null,
      onVerb: (id, verb) => {
        const r = rows.get(id);
        if (!r || !r.can || !r.can[verb] || disconnected) {
          return;
        }
        sendAction(id, verb);
      },
      onSelect: id => toggleDrawer(id),
      isSelected: id => open.has(id),
      selectLabel: 'Show the log and traceback of'
    };
  }

  function makeRow(id: string, ctx: RowContext): Refs {
    const wrap = h('div', 'cn-item');
    wrap.dataset.taskId = id;
    const row = createRow(id, ctx);
    row.setAttribute('role', 'row');
    wrap.appendChild(row);
    return { wrap, row, drawer: null, lastDetail: null };
  }

  function updateRow(refs: Refs, r: TaskRow, ctx: RowContext): void {
    const sig = rowSignature(r, ctx);
    if (changed.has(r.id) || drawnSignature(refs.row) !== sig) {
      patchRow(refs.row, r, ctx, sig);
    } else {
      setRowContext(refs.row, ctx);
    }
    refs.wrap.dataset.status = r.status;
    if (open.has(r.id)) {
      if (!refs.drawer) {
        refs.drawer = makeDrawer(r.id);
        refs.wrap.appendChild(refs.drawer.node);
      }
      const d = details.get(r.id) || null;
      if (refs.lastDetail !== d || d === null) {
        fillDrawer(refs.drawer, r, d);
        refs.lastDetail = d;
      }
    } else if (refs.drawer) {
      refs.drawer.node.remove();
      refs.drawer = null;
      refs.lastDetail = null;
    }
  }

  function makeDrawer(id: string): { node: HTMLElement; body: HTMLElement } {
    const node = h('div', 'cn-drawer');
    node.setAttribute('role', 'region');
    const bar = h('div', 'cn-drawer-bar');
    const refresh = h('button', 'cn-btn', 'Refresh');
    refresh.type = 'button';
    refresh.setAttribute('aria-label', 'Refresh log');
    refresh.title = 'Load the latest log lines';
    refresh.addEventListener('click', () => askDetail(id));
    const close = h('button', 'cn-btn', 'Close');
    close.type = 'button';
    close.setAttribute('aria-label', 'Close log drawer');
    close.title = 'Close the log';
    close.addEventListener('click', () => toggleDrawer(id));
    bar.append(refresh, close);
    const body = h('div', 'cn-drawer-body');
    node.append(bar, body);
    return { node, body };
  }

  function fillDrawer(drawer: { node: HTMLElement; body: HTMLElement }, r: TaskRow, d: Detail | null): void {
    drawer.node.setAttribute('aria-label', `log of ${r.name}`);
    drawer.body.replaceChildren();
    if (!d) {
      drawer.body.appendChild(h('div', 'cn-muted', disconnected ? 'no log loaded' : 'loading…'));
      return;
    }
    const failure = d.failure || r.failure;
    if (failure) {
      const det = h('details', 'cn-tb');
      det.open = true;
      det.appendChild(h('summary', 'cn-failure', `${failure.kind}: ${failure.message}`));
      if (d.traceback) {
        det.appendChild(h('pre', 'cn-pre', d.traceback));
      }
      drawer.body.appendChild(det);
    }
    const logs = d.logs || [];
    if (!logs.length) {
      drawer.body.appendChild(h('div', 'cn-muted', 'no log lines'));
    } else {
      const pre = h('pre', 'cn-pre cn-log');
      pre.textContent = logs
        .map(l => `${formatClock(l.at, true)} ${l.stream}${l.level ? ` ${l.level}` : ''}  ${l.line}`)
        .join('\n');
      drawer.body.appendChild(pre);
    }
  }

  function selectRow(id: string | null): void {
    selectedId = id;
    const i = id === null ? -1 : view.indexOf(id);
    if (i >= 0 && !single) {
      const top = viewport.scrollTop;
      const height = viewport.clientHeight || 400;
      if (offsets[i] < top || offsets[i + 1] > top + height) {
        viewport.scrollTop = Math.max(0, offsets[i] - rowH);
      }
    }
    scheduleRender();
  }

  function toggleDrawer(id: string): void {
    if (open.has(id)) {
      open.delete(id);
    } else {
      open.add(id);
      askDetail(id);
    }
    viewDirty = true;
    scheduleRender();
  }

  // ------------------------------------------------------------------ paint
  function paintHeader(now: number): void {
    const counts = new Map<string, number>();
    for (const r of rows.values()) {
      counts.set(r.status, (counts.get(r.status) || 0) + 1);
    }
    let total = rows.size;
    for (const [s, n] of Object.entries(hidden)) {
      if (Number.isFinite(n) && n > 0) {
        counts.set(s, (counts.get(s) || 0) + n);
        total += n;
      }
    }
    const parts: string[] = [];
    const limit = model.get('max_parallel');
    for (const s of TASK_STATUSES) {
      const n = counts.get(s);
      if (n) {
        parts.push(
          s === 'running' && typeof limit === 'number' && limit > 0 ? `${n} running (at most ${limit} at once)` : `${n} ${STATUS_LABELS[s]}`
        );
      }
    }
    if (!counts.get('running') && typeof limit === 'number' && limit > 0) {
      parts.push(`at most ${limit} at once`);
    }
    const shown = view.length !== rows.size ? ` (showing ${view.length})` : '';
    summaryEl.textContent = `${total} task${total === 1 ? '' : 's'}${parts.length ? `: ${parts.join(', ')}` : ''}${shown}`;
    const older = olderText(hidden, model.get('hidden_where') || '');
    if (olderEl.textContent !== older) {
      olderEl.textContent = older;
    }
    olderEl.hidden = !older;
    for (const [verb, b] of bulkBtns) {
      let n = 0;
      for (const r of rows.values()) {
        if (r.can && r.can[verb]) {
          n += 1;
        }
      }
      b.disabled = n === 0 || disconnected;
      b.title = disconnected
        ? 'disconnected: no kernel to send it to'
        : n === 0
          ? `no task of this table can ${verb} now`
          : `${VERB_TIPS[verb]} — the ${n} task${n === 1 ? '' : 's'} that allow it`;
    }
    if (bulkNote && bulkNote.tone !== 'wait' && now - bulkNote.at > 8000) {
      bulkNote = null;
    }
    bulkNoteEl.textContent = bulkNote ? bulkNote.text : '';
    bulkNoteEl.className = `cn-bulk-note${bulkNote ? ` cm-ack-${bulkNote.tone}` : ''}`;
    banner.hidden = !disconnected && !staleFront;
    banner.textContent = disconnected
      ? `${goneReason !== null ? `kernel gone (${goneReason})` : 'disconnected'} — state as of ${formatClock(lastUpdateAt ?? Date.now(), true)}`
      : staleFront
        ? "this widget's front end is older than its kernel's chongming_nb: reload the page"
        : '';
  }

  // the row height is measured (a forced layout) only on the first rows and after the
  // board's width changed (the ResizeObserver says so): never on an ordinary update
  let measureNeeded = true;

  function measureRowHeight(): boolean {
    if (!measureNeeded || rowEls.size === 0) {
      return false;
    }
    measureNeeded = false;
    for (const refs of rowEls.values()) {
      const hgt = refs.row.getBoundingClientRect().height;
      if (hgt > 0 && Math.abs(hgt - rowH) >= 0.5) {
        rowH = Math.ceil(hgt);
        return true;
      }
      if (hgt > 0) {
        return false;
      }
    }
    return false;
  }

  function paint(): void {
    frame = 0;
    const t0 = performance.now();
    const now = Date.now();
    expireNotes(notes, now);
    if (viewDirty) {
      rebuildView();
    }
    paintHeader(now);
    empty.hidden = view.length > 0;
    empty.textContent = rows.size ? 'no task matches the filter' : 'no tasks';
    const ctx = rowContext(now);
    for (let pass = 0; pass < 2; pass++) {
      spacer.style.height = `${offsets[view.length]}px`;
      let first = 0;
      let last = view.length;
      if (!single) {
        const top = viewport.scrollTop;
        const height = viewport.clientHeight || 400;
        first = Math.max(0, firstIndexAt(top) - OVERSCAN);
        last = Math.min(view.length, firstIndexAt(top + height) + 1 + OVERSCAN);
      }
      const keep = new Set<string>();
      for (let i = first; i < last; i++) {
        const id = view[i];
        const r = rows.get(id) as TaskRow;
        let refs = rowEls.get(id);
        if (!refs) {
          refs = makeRow(id, ctx);
          rowEls.set(id, refs);
        }
        updateRow(refs, r, ctx);
        refs.wrap.style.top = `${offsets[i]}px`;
        refs.wrap.style.height = `${offsets[i + 1] - offsets[i]}px`;
        refs.wrap.dataset.index = String(i);
        refs.wrap.classList.toggle('cn-selected', id === selectedId);
        if (refs.wrap.parentNode !== spacer) {
          spacer.appendChild(refs.wrap);
        }
        keep.add(id);
      }
      for (const [id, refs] of rowEls) {
        if (!keep.has(id)) {
          if (refs.wrap.contains(document.activeElement)) {
            viewport.focus();
          }
          refs.wrap.remove();
          rowEls.delete(id);
        }
      }
      el.dataset.rendered = String(keep.size);
      // rows wrap onto more lines in a narrow output: lay out again with their height
      if (!measureRowHeight()) {
        break;
      }
      layout();
    }
    changed.clear();
    graph?.update();
    el.dataset.seq = String(seq);
    recordRenderTime(performance.now() - t0);
  }

  function scheduleRender(): void {
    if (frame) {
      return;
    }
    frame = requestAnimationFrame(paint);
  }

  // ------------------------------------------------------------------ wiring
  filterSel.addEventListener('change', () => {
    filterStatus = filterSel.value;
    viewDirty = true;
    scheduleRender();
  });
  searchIn.addEventListener('input', () => {
    search = searchIn.value.trim().toLowerCase();
    viewDirty = true;
    scheduleRender();
  });
  sortSel.addEventListener('change', () => {
    sortKey = sortSel.value;
    viewDirty = true;
    scheduleRender();
  });
  dirBtn.addEventListener('click', () => {
    sortDesc = !sortDesc;
    dirBtn.textContent = sortDesc ? '↓' : '↑';
    dirBtn.setAttribute('aria-label', `Sort direction: ${sortDesc ? 'descending' : 'ascending'}`);
    viewDirty = true;
    scheduleRender();
  });
  viewport.addEventListener('scroll', scheduleRender, { passive: true });
  let observedWidth = -1;
  const resize =
    typeof ResizeObserver === 'undefined'
      ? null
      : new ResizeObserver(entries => {
          const width = entries[entries.length - 1].contentRect.width;
          if (width !== observedWidth) {
            observedWidth = width;
            measureNeeded = true;
            scheduleRender();
          }
        });
  resize?.observe(el);

  model.on('msg:custom', onCustom);
  model.on('change:rows_seq', onTrait);
  model.on('change:rows', onTrait);
  model.on('change:hidden', onHidden);
  const ticker = setInterval(() => {
    if (!silent && Date.now() - lastHeard > 3 * pingMs) {
      silent = true;
      checkLive();
    }
    if (!disconnected) {
      scheduleRender(); // running durations tick, old notes fade
    }
  }, 1000);

  replaceAll(model.get('rows'), model.get('rows_seq') ?? 0, model.get('rows_at'));
  checkLive();
  paint();
  // someone sees this kernel's widgets: its tables keep the live view in the outputs
  // they rewrite (chongming_nb/notebook/outputs.py)
  try {
    send({ type: 'view' });
  } catch {
    // a model with no kernel behind it (a page exported with its widget state)
  }

  return () => {
    clearInterval(ticker);
    graph?.dispose();
    if (frame) {
      cancelAnimationFrame(frame);
    }
    resize?.disconnect();
    classWatch.disconnect();
    model.off('msg:custom', onCustom);
    model.off('change:rows_seq', onTrait);
    model.off('change:rows', onTrait);
    model.off('change:hidden', onHidden);
    model.off('comm_live_update', onLive);
    model.off('comm:close', onClose);
    unwatchKernel();
  };
}

/** The part of a Lumino signal this view uses. */
interface SignalLike<T> {
  connect(slot: (sender: unknown, value: T) => void): boolean;
  disconnect(slot: (sender: unknown, value: T) => void): boolean;
}

/** A kernel connection or a session context: both say the kernel's status. */
interface KernelStatusSource {
  status?: string;
  statusChanged?: SignalLike<string>;
}

/** Kernel statuses after which a widget model of that kernel never lives again. */
export const KERNEL_GONE_STATUSES: Record<string, string> = {
  restarting: 'restarted',
  autorestarting: 'it died and was restarted',
  dead: 'it died',
  terminating: 'shut down'
};

/**
 * Call `gone(reason)` once, when the kernel this model lives in restarts, dies or shuts
 * down, as JupyterLab's kernel connection reports it. The widget manager (JupyterLab's,
 * reached through anywidget's `model.widget_manager`) knows the notebook's session
 * context or the kernel; outside JupyterLab there is none and nothing is watched.
 * Returns the unsubscribe function.
 */
export function watchKernel(model: unknown, gone: (reason: string) => void): () => void {
  const manager = (model as { widget_manager?: any } | null)?.widget_manager;
  let source: KernelStatusSource | null = null;
  try {
    source = manager?.context?.sessionContext ?? manager?.kernel ?? null;
  } catch {
    source = null;
  }
  if (!source || !source.statusChanged) {
    return () => undefined;
  }
  let done = false;
  const check = (status: string | undefined) => {
    const reason = status ? KERNEL_GONE_STATUSES[status] : undefined;
    if (!done && reason) {
      done = true;
      gone(reason);
    }
  };
  const onStatus = (_: unknown, status: string) => check(status);
  source.statusChanged.connect(onStatus);
  check(source.status);
  return () => {
    source?.statusChanged?.disconnect(onStatus);
  };
}

export default { render };

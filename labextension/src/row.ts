/**
 * One task row, drawn the same way in the notebook widget and in the Tasks sidebar.
 *
 * A row reads like tqdm: name, status, a bar that takes the free width, the percentage,
 * `n/total unit`, `elapsed<remaining` and the rate, then the actions allowed now. The
 * containers (`.cm-Rows`) are CSS size containers: at narrow widths the cells wrap onto
 * more lines and the actions fold into a "⋯" menu, so nothing is ever clipped. Every
 * user string goes into the DOM as text or an attribute value, never as markup.
 *
 * Invariants: a row is patched in place (no element replaced, so a focused button keeps
 * its focus); elapsed is the work of the current attempt, its pauses left out
 * (`elapsedSeconds`); a paused or waiting row's text does not move with the clock (its
 * elapsed time froze when it stopped working); a row a person stopped, cancelled or
 * skipped is drawn in the neutral tone and says who and when.
 */
import {
  BOARD_RANKS,
  CONTROL_VERBS,
  ControlVerb,
  OCCUPIED_STATUSES,
  PERSON_ENDED_STATUSES,
  STATUS_LABELS,
  STATUS_TONES,
  TaskRow,
  VERB_LABELS,
  VERB_TIPS,
  ListingRow,
  isTerminal
} from './contract';
import {
  actorPhrase,
  formatAttempt,
  formatClock,
  formatCount,
  formatDuration,
  formatPercent,
  formatRate,
  formatTimes,
  formatTimestamp,
  fraction,
  hasProgress
} from './format';

/** The verbs a row offers (skip too: it is only shown when allowed). */
export const ROW_VERBS: readonly ControlVerb[] = CONTROL_VERBS;

/** A transient note under a row: a click on its way, its answer, a refusal. */
export interface RowNote {
  text: string;
  /** 'wait' while on its way, 'ok' once applied (fades), 'bad' when refused. */
  tone: 'wait' | 'ok' | 'bad';
  /** When it was made (ms): an 'ok' note fades after `NOTE_FADE_MS`, gone at `NOTE_TTL_MS`. */
  at: number;
}

export const NOTE_FADE_MS = 2500;
export const NOTE_TTL_MS = 4000;

export interface RowContext {
  /** The clock durations are counted with (ms since the epoch). */
  now: number;
  /** No kernel/server to send to: every action is disabled, and says why. */
  disconnected: boolean;
  /** The tooltip of a disabled action while disconnected (default: no kernel to send to). */
  offline?: string;
  note(taskId: string): RowNote | null;
  onVerb(taskId: string, verb: ControlVerb): void;
  /** A click on the name: the widget opens the log drawer, the sidebar the details. */
  onSelect(taskId: string): void;
  isSelected(taskId: string): boolean;
  /** e.g. "Show the log of" / "Show details of" (the name follows). */
  selectLabel: string;
  /** Why a verb is not allowed (the sidebar's rows know), for the tooltips. */
  why?(row: TaskRow, verb: ControlVerb): string | undefined;
}

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

// setters that write only what differs: an unchanged row causes no DOM mutation at all
export function setText(node: HTMLElement, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

export function setAttr(node: HTMLElement, name: string, value: string | null): void {
  if (value === null) {
    if (node.hasAttribute(name)) {
      node.removeAttribute(name);
    }
  } else if (node.getAttribute(name) !== value) {
    node.setAttribute(name, value);
  }
}

export function setClass(node: HTMLElement, name: string, on: boolean): void {
  if (node.classList.contains(name) !== on) {
    node.classList.toggle(name, on);
  }
}

function setHidden(node: HTMLElement, hidden: boolean): void {
  if (node.hidden !== hidden) {
    node.hidden = hidden;
  }
}

/** Does this status's clock run (the task holds an executor and works)? */
export function isTicking(status: string): boolean {
  return (OCCUPIED_STATUSES as readonly string[]).includes(status);
}

export function toneOf(row: Pick<TaskRow, 'status'>): string {
  return STATUS_TONES[row.status] ?? 'idle';
}

/** Is this row's end one a person chose (stopped, cancelled, skipped)? */
export function endedByPerson(row: Pick<TaskRow, 'status'>): boolean {
  return PERSON_ENDED_STATUSES.includes(row.status);
}

/** The sentence under a finished or paused row that says what happened, from the row.
 * `live`: the view hears from the kernel. A saved or disconnected view cannot know
 * whether a delayed task has started since, so it names the start time without
 * counting down to it. */
export function statusNote(row: TaskRow, now: number = Date.now(), live = true): string {
  if (endedByPerson(row)) {
    const who = actorPhrase(row.ended_by);
    const when = row.ended !== null ? `at ${formatClock(row.ended)}` : '';
    const head = [STATUS_LABELS[row.status], who, when].filter(Boolean).join(' ');
    return row.end_reason ? `${head}: ${row.end_reason}` : head;
  }
  if (row.failure && isTerminal(row.status)) {
    return `${row.failure.kind}: ${row.failure.message}`;
  }
  if (row.status === 'succeeded' && row.ended !== null) {
    return row.message ? `${row.message}` : `finished at ${formatClock(row.ended)}`;
  }
  if (row.starts !== null && row.starts !== undefined && !isTerminal(row.status) && row.started === null) {
    // a delayed start, counted down by the clock while the view is live
    if (!live) {
      return `was to start at ${formatClock(row.starts)}`;
    }
    return `starts at ${formatClock(row.starts)} (in ${formatDuration(Math.max(0, (row.starts - now) / 1000))})`;
  }
  return row.message ?? '';
}

/**
 * Seconds of work of the current attempt at `now`: its wall time minus the time it spent
 * paused in place. The wall time runs from `row.started` to `row.ended` (finished), to
 * `row.frozen` (paused now: the instant the pause began; the clock stands still), or to
 * `now`; `row.paused` is the milliseconds of the attempt's pauses that ended, so a task
 * that ran 2 s, was paused 9 s and was stopped worked 2 s, and one resumed after the
 * pause counts on from there. PAUSING counts as work (the task runs to its next
 * checkpoint). The kernel's board and the server's listing both take `frozen` and
 * `paused` from the task's transitions (`chongming_nb/notebook/rows.py` `pause_clock`),
 * so every view shows the same elapsed time whenever it heard of the pause, and the
 * saved HTML (`elapsed_seconds` there) says the same. `frozenAt` (when this view first
 * drew it stopped) stands in only for a row without `frozen`; a row saved before rows
 * had `paused` counts no pause.
 */
export function elapsedSeconds(row: TaskRow, now: number, frozenAt: number | null): number | null {
  if (row.started === null) {
    return null;
  }
  const stopped = row.frozen ?? frozenAt;
  const end = row.ended ?? (isTicking(row.status) || stopped === null ? now : stopped);
  const paused = (row as Partial<TaskRow>).paused ?? 0;
  return Math.max(0, (end - row.started - paused) / 1000);
}

/** The default board order: running, paused, queued, finished; newest first in each. */
export function boardCompare(a: TaskRow, b: TaskRow): number {
  const ra = BOARD_RANKS[a.status] ?? 9;
  const rb = BOARD_RANKS[b.status] ?? 9;
  if (ra !== rb) {
    return ra - rb;
  }
  const ta = a.created ?? 0;
  const tb = b.created ?? 0;
  if (ta !== tb) {
    return tb - ta;
  }
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function offlineText(ctx: RowContext): string {
  return ctx.offline ?? 'disconnected: no kernel to send it to';
}

/** A row's verb buttons in `verbs` order that are allowed now. */
export function allowedVerbs(row: TaskRow, disconnected: boolean): ControlVerb[] {
  return disconnected ? [] : ROW_VERBS.filter(v => row.can[v] === true);
}

/** What a drawn row holds. */
interface RowParts {
  taskId: string;
  ctx: RowContext;
  sig: string;
  /** When the row stopped ticking (paused, queued, retry wait...); null while it ticks. */
  frozenAt: number | null;
  frozenStatus: string | null;
  name: HTMLButtonElement;
  status: HTMLElement;
  bar: HTMLElement;
  fill: HTMLElement;
  pct: HTMLElement;
  count: HTMLElement;
  times: HTMLElement;
  rate: HTMLElement;
  actions: HTMLElement;
  buttons: Map<ControlVerb, HTMLButtonElement>;
  more: HTMLButtonElement;
  menu: HTMLElement;
  menuItems: Map<ControlVerb, HTMLButtonElement>;
  note: HTMLElement;
  noteText: HTMLElement;
  ack: HTMLElement;
}

const PARTS = new WeakMap<HTMLElement, RowParts>();

/** Everything a row's drawing depends on; a row is patched only when this changes. */
export function rowSignature(row: TaskRow, ctx: RowContext): string {
  const note = ctx.note(row.id);
  const ticking = isTicking(row.status) && row.ended === null;
  return [
    row.version,
    row.status,
    row.name,
    row.done,
    row.total ?? '',
    row.unit ?? '',
    row.rate ?? '',
    row.eta ?? '',
    row.message ?? '',
    row.started ?? '',
    row.ended ?? '',
    row.attempt,
    row.max_attempts,
    row.requested ?? '',
    row.ended_by ?? '',
    row.end_reason ?? '',
    row.failure ? `${row.failure.kind}:${row.failure.message}` : '',
    ROW_VERBS.map(v => (row.can[v] ? '1' : '0')).join(''),
    ctx.disconnected ? 'd' : '',
    ctx.isSelected(row.id) ? 's' : '',
    note ? `${note.tone}:${note.text}:${note.tone === 'ok' && ctx.now - note.at > NOTE_FADE_MS ? 'f' : ''}` : '',
    // a ticking row's elapsed time (and a delayed start's countdown) moves with the
    // clock; a frozen row's does not
    ticking || (row.starts !== null && row.started === null) ? Math.floor(ctx.now / 1000) : ''
  ].join('\u0001');
}

/** A new, empty row element for a task; `patchRow` fills it and keeps it current. */
export function createRow(taskId: string, ctx: RowContext, tag: 'div' | 'li' = 'div'): HTMLElement {
  const item = el(tag, 'cm-Row');
  item.dataset.taskId = taskId;
  const name = el('button', 'cm-Row-name');
  name.type = 'button';
  const status = el('span', 'cm-Row-status');
  const bar = el('span', 'cm-Row-bar');
  bar.setAttribute('role', 'progressbar');
  const fill = el('span', 'cm-Row-fill');
  bar.append(fill);
  const pct = el('span', 'cm-Row-pct');
  const count = el('span', 'cm-Row-count');
  const times = el('span', 'cm-Row-times');
  const rate = el('span', 'cm-Row-rate');
  const actions = el('span', 'cm-Row-actions');
  const more = el('button', 'cm-Row-more', '⋯');
  more.type = 'button';
  more.setAttribute('aria-haspopup', 'menu');
  more.setAttribute('aria-expanded', 'false');
  const menu = el('div', 'cm-Row-menu');
  menu.setAttribute('role', 'menu');
  menu.hidden = true;
  const note = el('span', 'cm-Row-note');
  const noteText = el('span', 'cm-Row-noteText');
  const ack = el('span', 'cm-Row-ack');
  ack.setAttribute('role', 'status');
  note.append(noteText, ack);
  const parts: RowParts = {
    taskId,
    ctx,
    sig: '',
    frozenAt: null,
    frozenStatus: null,
    name,
    status,
    bar,
    fill,
    pct,
    count,
    times,
    rate,
    actions,
    buttons: new Map(),
    more,
    menu,
    menuItems: new Map(),
    note,
    noteText,
    ack
  };
  name.addEventListener('click', () => parts.ctx.onSelect(parts.taskId));
  for (const verb of ROW_VERBS) {
    const button = el('button', `cm-Row-verb cm-verb-${verb}`, VERB_LABELS[verb]);
    button.type = 'button';
    button.dataset.verb = verb;
    button.addEventListener('click', event => {
      event.stopPropagation();
      parts.ctx.onVerb(parts.taskId, verb);
    });
    parts.buttons.set(verb, button);
    actions.append(button);
    const entry = el('button', 'cm-Row-menuItem', VERB_LABELS[verb]);
    entry.type = 'button';
    entry.dataset.verb = verb;
    entry.setAttribute('role', 'menuitem');
    entry.addEventListener('click', event => {
      event.stopPropagation();
      closeMenu(parts);
      parts.ctx.onVerb(parts.taskId, verb);
    });
    parts.menuItems.set(verb, entry);
    menu.append(entry);
  }
  more.addEventListener('click', event => {
    event.stopPropagation();
    if (menu.hidden) {
      openMenu(parts);
    } else {
      closeMenu(parts);
    }
  });
  menu.addEventListener('keydown', event => {
    if (event.key === 'Escape') {
      closeMenu(parts);
      more.focus();
    }
  });
  const moreBox = el('span', 'cm-Row-moreBox');
  moreBox.append(more, menu);
  // count, times and rate: grid cells of their own where the row is one or two lines,
  // one flowing line of text where it is narrow (style/row.css)
  const stats = el('span', 'cm-Row-stats');
  stats.append(count, times, rate);
  item.append(name, status, bar, pct, stats, actions, moreBox, note);
  PARTS.set(item, parts);
  return item;
}

let openParts: RowParts | null = null;

function onOutside(event: Event): void {
  if (openParts && !openParts.menu.contains(event.target as Node)) {
    closeMenu(openParts);
  }
}

function openMenu(p: RowParts): void {
  if (openParts && openParts !== p) {
    closeMenu(openParts);
  }
  // the open menu lives in <body>, fixed to the window: no scrolling list or output
  // area can clip it, and no size container (which contains fixed boxes) moves it
  document.body.append(p.menu);
  p.menu.hidden = false;
  p.more.setAttribute('aria-expanded', 'true');
  const r = p.more.getBoundingClientRect();
  const width = p.menu.offsetWidth || 120;
  const height = p.menu.offsetHeight || 0;
  const left = Math.max(4, Math.min(r.right - width, window.innerWidth - width - 4));
  const below = r.bottom + 2;
  const top = below + height > window.innerHeight - 4 ? Math.max(4, r.top - height - 2) : below;
  p.menu.style.left = `${Math.round(left)}px`;
  p.menu.style.top = `${Math.round(top)}px`;
  openParts = p;
  document.addEventListener('pointerdown', onOutside, true);
  const first = Array.from(p.menuItems.values()).find(b => !b.hidden);
  first?.focus();
}

function closeMenu(p: RowParts): void {
  p.menu.hidden = true;
  p.more.setAttribute('aria-expanded', 'false');
  if (p.menu.parentNode !== p.more.parentNode) {
    p.more.after(p.menu);
  }
  if (openParts === p) {
    openParts = null;
    document.removeEventListener('pointerdown', onOutside, true);
  }
}

/** The signature a row was last patched with ('' for a row never patched). */
export function drawnSignature(item: HTMLElement): string {
  return PARTS.get(item)?.sig ?? '';
}

/** Point a drawn row at a newer context without patching it (its handlers call through it). */
export function setRowContext(item: HTMLElement, ctx: RowContext): void {
  const p = PARTS.get(item);
  if (p) {
    p.ctx = ctx;
  }
}

/**
 * Bring a row drawn by `createRow` (for the same task) up to date in place; only the
 * text and attributes that differ are written.
 */
export function patchRow(item: HTMLElement, row: TaskRow, ctx: RowContext, signature?: string): void {
  const p = PARTS.get(item);
  if (!p || p.taskId !== row.id) {
    throw new Error(`not a row of task ${row.id}`);
  }
  p.ctx = ctx;
  p.sig = signature ?? rowSignature(row, ctx);
  const terminal = isTerminal(row.status);
  const tone = toneOf(row);
  setAttr(item, 'data-status', row.status);
  setAttr(item, 'data-tone', tone);
  setClass(item, 'cm-mod-selected', ctx.isSelected(row.id));
  setClass(item, 'cm-mod-person', endedByPerson(row));

  setText(p.name, row.name);
  const tags = row.tags.length ? `\ntags: ${row.tags.join(', ')}` : '';
  setAttr(p.name, 'title', `${row.name}\n${row.id}${tags}`);
  setAttr(p.name, 'aria-label', `${ctx.selectLabel} ${row.name}`);
  setAttr(p.name, 'aria-expanded', ctx.isSelected(row.id) ? 'true' : 'false');

  const statusText =
    row.requested && !terminal ? `${STATUS_LABELS[row.status]} (${row.requested})` : STATUS_LABELS[row.status];
  setText(p.status, statusText);
  const statusClass = `cm-Row-status cm-tone-${tone}`;
  if (p.status.className !== statusClass) {
    p.status.className = statusClass;
  }
  const attempt = `attempt ${formatAttempt(row.attempt, row.max_attempts)}`;
  setAttr(
    p.status,
    'title',
    `${row.status}${row.requested && !terminal ? ` (${row.requested} requested)` : ''} · ${attempt}` +
      (row.started !== null ? ` · started ${formatTimestamp(row.started)}` : '') +
      (row.ended !== null ? ` · ended ${formatTimestamp(row.ended)}` : '')
  );

  // progress: no bar at all for a finished task that never reported any
  const progress = hasProgress(row);
  const showBar = progress || !terminal;
  const f = fraction(row);
  setHidden(p.bar, !showBar);
  setClass(p.bar, 'cm-mod-indeterminate', f === null && !terminal);
  const width = f === null ? (terminal ? '100%' : '0%') : `${(f * 100).toFixed(1)}%`;
  if (p.fill.style.width !== width) {
    p.fill.style.width = width;
  }
  setAttr(p.bar, 'aria-label', `Progress of ${row.name}`);
  setAttr(p.bar, 'aria-valuemin', f === null ? null : '0');
  setAttr(p.bar, 'aria-valuemax', f === null ? null : '100');
  setAttr(p.bar, 'aria-valuenow', f === null ? null : String(Math.floor(f * 100)));
  const pct = formatPercent(row);
  const count = formatCount(row);
  setAttr(p.bar, 'aria-valuetext', [pct, count].filter(Boolean).join(', ') || null);
  setText(p.pct, pct);
  setText(p.count, count);
  setAttr(p.count, 'title', count ? `${row.done}${row.total !== null ? ` of ${row.total}` : ''}${row.unit ? ` ${row.unit}` : ''}` : null);

  // time: a ticking row counts with the clock; a paused or waiting one froze when it stopped
  if (isTicking(row.status) || terminal) {
    p.frozenAt = null;
    p.frozenStatus = null;
  } else if (p.frozenAt === null || p.frozenStatus !== row.status) {
    p.frozenAt = p.frozenAt ?? ctx.now;
    p.frozenStatus = row.status;
  }
  const elapsed = elapsedSeconds(row, ctx.now, p.frozenAt);
  const open = !terminal && row.total !== null;
  setText(p.times, formatTimes(elapsed, row.eta, open));
  setAttr(
    p.times,
    'title',
    elapsed === null
      ? null
      : `elapsed ${formatDuration(elapsed)}${open ? `, remaining ${formatDuration(row.eta) || 'unknown'}` : ''}` +
          (!terminal && !isTicking(row.status) ? ` (${STATUS_LABELS[row.status]}: the clock is stopped)` : '')
  );
  setText(p.rate, terminal && !progress ? '' : formatRate(row.rate, row.unit));

  // actions: the allowed ones, inline when there is room, in the ⋯ menu when narrow
  const allowed = new Set(allowedVerbs(row, ctx.disconnected));
  for (const verb of ROW_VERBS) {
    const on = allowed.has(verb);
    const button = p.buttons.get(verb) as HTMLButtonElement;
    const entry = p.menuItems.get(verb) as HTMLButtonElement;
    if (!on && (document.activeElement === button || document.activeElement === entry)) {
      // the focused action is no longer allowed: keep the focus in the row
      p.name.focus({ preventScroll: true });
    }
    setHidden(button, !on);
    setHidden(entry, !on);
    const tip = on
      ? `${VERB_TIPS[verb]} — ${row.name}`
      : ctx.disconnected
        ? offlineText(ctx)
        : (ctx.why?.(row, verb) ?? `${VERB_LABELS[verb]} is not possible while ${STATUS_LABELS[row.status]}`);
    setAttr(button, 'title', tip);
    setAttr(entry, 'title', tip);
    setAttr(button, 'aria-label', `${VERB_LABELS[verb]} ${row.name}`);
    setAttr(entry, 'aria-label', `${VERB_LABELS[verb]} ${row.name}`);
  }
  setClass(item, 'cm-mod-noActions', allowed.size === 0);
  setAttr(p.more, 'aria-label', `Actions for ${row.name}`);
  setAttr(
    p.more,
    'title',
    allowed.size
      ? `Actions: ${Array.from(allowed, v => VERB_LABELS[v]).join(', ')}`
      : ctx.disconnected
        ? offlineText(ctx)
        : 'no action is possible now'
  );
  p.more.disabled = allowed.size === 0;
  if (allowed.size === 0 && !p.menu.hidden) {
    closeMenu(p);
  }

  // the note: what happened (who and when), the last message, the answer to a click;
  // a row of a kernel that is gone (the sidebar's listing says so) will not start either
  const gone = (row as Partial<ListingRow>).kernel_gone === true;
  const text = statusNote(row, ctx.now, !ctx.disconnected && !gone);
  setText(p.noteText, text);
  setAttr(p.noteText, 'title', text || null);
  setClass(p.noteText, 'cm-mod-failure', tone === 'bad' && !!row.failure);
  const note = ctx.note(row.id);
  setText(p.ack, note ? note.text : '');
  const ackClass =
    'cm-Row-ack' +
    (note ? ` cm-ack-${note.tone}` : '') +
    (note && note.tone === 'ok' && ctx.now - note.at > NOTE_FADE_MS ? ' cm-mod-fading' : '');
  if (p.ack.className !== ackClass) {
    p.ack.className = ackClass;
  }
}

/** A row element for `row`, drawn. */
export function renderRow(row: TaskRow, ctx: RowContext, tag: 'div' | 'li' = 'div'): HTMLElement {
  const item = createRow(row.id, ctx, tag);
  patchRow(item, row, ctx);
  return item;
}

/** Drop the notes that have faded out; true when one was dropped. */
export function expireNotes(notes: Map<string, RowNote>, now: number): boolean {
  let dropped = false;
  for (const [id, n] of notes) {
    if (n.tone === 'ok' && now - n.at > NOTE_TTL_MS) {
      notes.delete(id);
      dropped = true;
    }
  }
  return dropped;
}

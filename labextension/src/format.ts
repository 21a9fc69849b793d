/**
 * How numbers, times and attempts read in a task row: one place for the widget, the
 * sidebar and the details view. tqdm's habits: `1.2k rows/s`, `3m12s`, `1m02s<3m12s`.
 * Times of day are 24-hour, in the browser's time zone.
 */
import { ACTOR_SOURCE_LABELS, ActorSource, TaskRow } from './contract';

/** A count for people: exact below 10,000, then 12.3k, 4.56M, 7.8G. */
export function humanCount(x: number | null | undefined): string {
  if (x === null || x === undefined || !Number.isFinite(x)) {
    return '';
  }
  const a = Math.abs(x);
  if (a < 10000) {
    return Number.isInteger(x) ? String(x) : a >= 100 ? x.toFixed(0) : x.toFixed(1);
  }
  for (const [scale, suffix] of [
    [1e12, 'T'],
    [1e9, 'G'],
    [1e6, 'M'],
    [1e3, 'k']
  ] as const) {
    if (a >= scale) {
      const v = x / scale;
      return `${Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2)}${suffix}`;
    }
  }
  return String(x);
}

/** 1.2k, 12.3k, 123k, 4.6M: one decimal below 100 of the unit. */
function scaled(x: number): string {
  for (const [scale, suffix] of [
    [1e9, 'G'],
    [1e6, 'M'],
    [1e3, 'k']
  ] as const) {
    if (x >= scale) {
      const v = x / scale;
      return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)}${suffix}`;
    }
  }
  return x.toFixed(0);
}

/** A rate like tqdm: `1.2k rows/s`, `3.50 rows/s`, or `2.5 s/row` when below one a second. */
export function formatRate(rate: number | null | undefined, unit: string | null | undefined): string {
  if (rate === null || rate === undefined || !Number.isFinite(rate) || rate <= 0) {
    return '';
  }
  const u = unit || 'it';
  if (rate >= 1) {
    const text = rate >= 1000 ? scaled(rate) : rate >= 100 ? rate.toFixed(0) : rate.toFixed(rate >= 10 ? 1 : 2);
    return `${text} ${u}/s`;
  }
  const per = 1 / rate;
  return `${per >= 100 ? per.toFixed(0) : per.toFixed(1)} s/${u}`;
}

/** A duration: `45s`, `3m12s`, `1h02m`, `2d03h`; '' when unknown. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) {
    return '';
  }
  const s = Math.floor(seconds);
  if (s < 60) {
    return `${s}s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m}m${String(s % 60).padStart(2, '0')}s`;
  }
  const h = Math.floor(m / 60);
  if (h < 24) {
    return `${h}h${String(m % 60).padStart(2, '0')}m`;
  }
  return `${Math.floor(h / 24)}d${String(h % 24).padStart(2, '0')}h`;
}

function pad2(n: number): string {
  return String(n).padStart(2, '0');
}

/** A time of day, 24-hour: `14:03` (`14:03:27` with seconds); '' when unknown. */
export function formatClock(ms: number | null | undefined, seconds = false): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) {
    return '';
  }
  const d = new Date(ms);
  const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  return seconds ? `${hm}:${pad2(d.getSeconds())}` : hm;
}

/** A full timestamp for tooltips: `2026-12-01 14:03:27`, 24-hour, local time. */
export function formatTimestamp(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) {
    return '';
  }
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${formatClock(ms, true)}`;
}

/** Milliseconds since the epoch of an ISO 8601 text (null when absent or unreadable). */
export function epochMs(iso: string | null | undefined): number | null {
  if (!iso) {
    return null;
  }
  const t = Date.parse(iso);
  return Number.isNaN(t) ? null : t;
}

/** The one attempt format: `attempt 2/3` (`0/3` before the first one starts). */
export function formatAttempt(attempt: number, maxAttempts: number): string {
  return `${attempt}/${maxAttempts}`;
}

/** Fraction done in [0, 1], or null when the total is unknown. */
export function fraction(row: Pick<TaskRow, 'done' | 'total'>): number | null {
  if (row.total === null || row.total === undefined || !(row.total > 0)) {
    return null;
  }
  return Math.min(1, Math.max(0, row.done / row.total));
}

/** The percentage, rounded down like tqdm (99.6% is not yet 100%): `42%`. */
export function formatPercent(row: Pick<TaskRow, 'done' | 'total'>): string {
  const f = fraction(row);
  return f === null ? '' : `${Math.floor(f * 100 + 1e-9)}%`;
}

/** `n/total unit` (`n unit` when the total is unknown); '' when there is no progress. */
export function formatCount(row: Pick<TaskRow, 'done' | 'total' | 'unit'>): string {
  const unit = row.unit ? ` ${row.unit}` : '';
  if (row.total !== null && row.total !== undefined) {
    return `${humanCount(row.done)}/${humanCount(row.total)}${unit}`;
  }
  return row.done ? `${humanCount(row.done)}${unit}` : '';
}

/** Did the task ever report progress? (A finished task without any draws no bar.) */
export function hasProgress(row: Pick<TaskRow, 'done' | 'total'>): boolean {
  return (row.total !== null && row.total !== undefined) || row.done > 0;
}

/** `elapsed<remaining` like tqdm (`1m02s<3m12s`, `1m02s<?` while unknown), or just the
 * elapsed time when nothing remains to guess. */
export function formatTimes(elapsed: number | null, remaining: number | null, open: boolean): string {
  const e = formatDuration(elapsed);
  if (!e) {
    return '';
  }
  if (!open) {
    return e;
  }
  const r = formatDuration(remaining);
  return `${e}<${r || '?'}`;
}

/** Words for where a verb came from: `from the sidebar`, `by its pipeline`. */
export function actorPhrase(source: ActorSource | null | undefined): string {
  return source ? (ACTOR_SOURCE_LABELS[source] ?? `by ${source}`) : '';
}

/** A count with thousands separators: `10,000`. */
export function groupDigits(n: number): string {
  return String(Math.trunc(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/**
 * The line under a board's summary when it does not show every finished task (it keeps
 * the newest, as many as its kernel keeps in memory; the kernel counts the older ones per
 * status in `hidden`): `10,000 older finished tasks not shown — <where>`; '' when none.
 * The kernel's saved snapshot says the same (`chongming_nb/notebook/older.py`).
 */
export function olderText(hidden: Record<string, number> | null | undefined, where: string): string {
  let n = 0;
  for (const v of Object.values(hidden || {})) {
    n += Number.isFinite(v) ? v : 0;
  }
  if (!n) {
    return '';
  }
  return `${groupDigits(n)} older finished task${n === 1 ? '' : 's'} not shown${where ? ` — ${where}` : ''}`;
}

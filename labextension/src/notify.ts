/**
 * Word when long work ends: a JupyterLab notification (its own Notification API) when a
 * task, a pipeline run or a tracked loop that ran at least `notifyAfterSeconds` ends,
 * naming it, how it ended and how long it took, with an action that opens its notebook.
 * Optionally a desktop notification too, when the tab is hidden.
 *
 * The decision is a pure class (`EndWatcher`) fed with the rows the Tasks model already
 * holds; nothing here polls on its own or runs code in a kernel.
 */
import { ListingRow as TaskRow, STATUS_TONES, TaskStatus, isTerminal } from './contract';
import { formatDuration } from './format';
import { elapsedSeconds } from './row';

export interface INotifySettings {
  /** Work that ran at least this long is announced when it ends (seconds). */
  notifyAfterSeconds: number;
  /** Also a desktop notification when the JupyterLab tab is hidden. */
  desktopNotifications: boolean;
}

export const DEFAULT_NOTIFY_SETTINGS: INotifySettings = {
  notifyAfterSeconds: 30,
  desktopNotifications: false
};

/** One end to announce. */
export interface IEnded {
  /** The task id, or `run:<id>` for a pipeline run (at most one announcement each). */
  key: string;
  title: string;
  outcome: string;
  seconds: number;
  notebook: string | null;
  kind: 'success' | 'error' | 'info';
}

/** The notification's kind follows the status's tone (the generated contract's). */
const KIND_OF_TONE: Record<string, IEnded['kind']> = { ok: 'success', bad: 'error' };

function kindOf(status: string): IEnded['kind'] {
  return KIND_OF_TONE[STATUS_TONES[status as TaskStatus]] ?? 'info';
}

/** The one duration format of the rows (`2m05s`). */
export function formatSeconds(seconds: number): string {
  return formatDuration(Math.round(seconds));
}

export function describeEnd(end: IEnded): string {
  return `${end.title} ${end.outcome} after ${formatSeconds(end.seconds)}`;
}

function runOutcome(statuses: string[]): string {
  if (statuses.every(s => s === 'succeeded' || s === 'skipped')) {
    return 'succeeded';
  }
  if (statuses.some(s => s === 'failed' || s === 'lost')) {
    return 'failed';
  }
  return 'stopped';
}

/**
 * Decides which ends to announce. Only work seen running (or waiting) by this page is
 * announced — what had ended before the page opened is history, not news — and each
 * task or run at most once, whatever the feed repeats.
 */
export class EndWatcher {
  /** Rows of a changed model; returns the ends to announce now. */
  update(rows: Iterable<TaskRow>, settings: INotifySettings): IEnded[] {
    const all = Array.isArray(rows) ? (rows as TaskRow[]) : Array.from(rows);
    const out: IEnded[] = [];
    const after = Math.max(0, settings.notifyAfterSeconds);
    for (const row of all) {
      if (!isTerminal(row.status)) {
        this._open.add(row.id);
        const run = row.run;
        if (run !== null && !this._done.has(`run:${run}`)) {
          this._openRuns.add(run);
        }
      }
    }
    const runs = new Map<string, TaskRow[]>();
    for (const row of all) {
      const id = row.id;
      const run = row.run;
      if (run !== null && this._openRuns.has(run)) {
        let list = runs.get(run);
        if (list === undefined) {
          runs.set(run, (list = []));
        }
        list.push(row);
      }
      if (!isTerminal(row.status) || !this._open.has(id) || this._done.has(id)) {
        continue;
      }
      this._done.add(id); // decided once, announced or not
      this._open.delete(id);
      if (run !== null) {
        continue; // its run is announced as a whole
      }
      // the elapsed time its row shows: the attempt's work, its pauses left out
      const seconds = row.ended !== null ? (elapsedSeconds(row, row.ended, null) ?? 0) : 0;
      if (seconds >= after) {
        out.push({
          key: id,
          title: row.name,
          outcome: row.status,
          seconds,
          notebook: row.notebook,
          kind: kindOf(row.status)
        });
      }
    }
    for (const [run, list] of runs) {
      if (!list.every(r => isTerminal(r.status))) {
        continue;
      }
      const key = `run:${run}`;
      this._done.add(key);
      this._openRuns.delete(run);
      const starts = list.map(r => r.started ?? r.created ?? NaN).filter(isFinite);
      const ends = list.map(r => r.ended ?? NaN).filter(isFinite);
      const seconds =
        starts.length && ends.length ? (Math.max(...ends) - Math.min(...starts)) / 1000 : 0;
      if (seconds >= after) {
        const outcome = runOutcome(list.map(r => r.status));
        out.push({
          key,
          title: `pipeline run ${run}`,
          outcome,
          seconds,
          notebook: list.find(r => r.notebook)?.notebook ?? null,
          kind: kindOf(outcome)
        });
      }
    }
    return out;
  }

  private _open = new Set<string>();
  private _openRuns = new Set<string>();
  private _done = new Set<string>();
}

/** What the announcer needs from JupyterLab (injected: tests pass fakes). */
export interface IAnnounceTarget {
  notify(message: string, kind: IEnded['kind'], open: (() => void) | null): void;
  openNotebook(path: string): void;
  /** True when the page is hidden (another tab is in front). */
  hidden(): boolean;
  /** A desktop notification, if the browser allows it. */
  desktop(title: string, body: string): void;
}

export function announce(end: IEnded, settings: INotifySettings, target: IAnnounceTarget): void {
  const message = describeEnd(end);
  const path = end.notebook;
  target.notify(message, end.kind, path ? () => target.openNotebook(path) : null);
  if (settings.desktopNotifications && target.hidden()) {
    target.desktop('JupyterLab: work ended', message);
  }
}

/** `settings.composite` -> settings, with the defaults for what is missing or bad. */
export function readSettings(composite: Record<string, unknown> | null): INotifySettings {
  const after = composite?.notifyAfterSeconds;
  const desktop = composite?.desktopNotifications;
  return {
    notifyAfterSeconds:
      typeof after === 'number' && isFinite(after) && after >= 0
        ? after
        : DEFAULT_NOTIFY_SETTINGS.notifyAfterSeconds,
    desktopNotifications:
      typeof desktop === 'boolean' ? desktop : DEFAULT_NOTIFY_SETTINGS.desktopNotifications
  };
}

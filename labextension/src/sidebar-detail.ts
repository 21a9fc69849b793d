/**
 * The pictures of the Tasks sidebar's details view: the selected task's attempts as a
 * small timeline below the verbs (the canvas renderer of `timeline.ts`, one lane, sized
 * for the sidebar) and, for a pipeline step, a "run graph" link that opens its run's
 * graph in the main area (`run-graph.ts`).
 *
 * The data comes from the store through the server extension (`GET tasks/{id}/timeline`,
 * `GET runs/{id}/graph`), never from a kernel. The timeline is fetched again when the
 * listing brings a new version or progress of the task, and, while the task is not
 * finished, at most every `LIVE_REFRESH_MS` as the panel redraws (a running attempt's
 * bar, a retry wait or a pause grow with the clock). Every string is drawn as text.
 */
import { ListingRow, requestAPI } from './api';
import { isTerminal } from './contract';
import type { GraphSpec } from './graph';
import { describe } from './model';
import { TimelineData, TimelineView, humanSeconds } from './timeline';

/** `GET runs/{id}/graph`: the run's graph from the store, and its node tasks' rows. */
export interface RunGraphResponse extends GraphSpec {
  id: string;
  name: string;
  /** The run's status as its record says (running, paused, succeeded, failed, ...). */
  status: string;
  finished: boolean;
  /** The listing rows of the tasks standing for the nodes (statuses, `can`). */
  tasks: ListingRow[];
}

/** The routes the pictures read, as an interface so tests can fake them. */
export interface IPicturesClient {
  timeline(taskId: string): Promise<TimelineData>;
  runGraph(runId: string): Promise<RunGraphResponse>;
}

export class PicturesClient implements IPicturesClient {
  timeline(taskId: string): Promise<TimelineData> {
    return requestAPI<TimelineData>(`tasks/${encodeURIComponent(taskId)}/timeline`);
  }

  runGraph(runId: string): Promise<RunGraphResponse> {
    return requestAPI<RunGraphResponse>(`runs/${encodeURIComponent(runId)}/graph`);
  }
}

/** What the Tasks panel asks of the extra part of its details view (`TasksPanel.detailExtra`). */
export interface DetailExtra {
  /** The selected task (null: none) and its row now; called on every redraw of the panel. */
  follow(taskId: string | null, row: ListingRow | null): void;
  /** Put the extra part into a freshly drawn details box. */
  mount(details: HTMLElement): void;
}

/** While the selected task is not finished, its timeline is read again at most this often. */
export const LIVE_REFRESH_MS = 2000;

export interface TaskPicturesOptions {
  client: IPicturesClient;
  /** The "run graph" link of a pipeline step was clicked. */
  onOpenRun?: (runId: string, taskId: string) => void;
  /** Epoch ms (tests pass a fixed clock). */
  now?: () => number;
}

/** The heading of the small timeline: attempts and the span they cover. */
export function attemptsHeading(data: TimelineData): string {
  const n = data.bars.lane.length;
  if (n === 0) {
    return 'Attempts over time: none yet';
  }
  const running = data.bars.running.some(r => r === 1) ? ', one running' : '';
  return `Attempts over time: ${n} in ${humanSeconds(data.span)}${running}`;
}

/** The key of a row's changes that can change its timeline. */
function rowKey(row: ListingRow): string {
  return `${row.version}/${row.attempt}/${row.done}/${row.ended ?? ''}`;
}

export class TaskPictures implements DetailExtra {
  readonly el: HTMLElement;
  readonly view: TimelineView;
  private readonly _note: HTMLElement;
  private readonly _link: HTMLButtonElement;
  private readonly _client: IPicturesClient;
  private readonly _now: () => number;
  private readonly _onOpenRun: ((runId: string, taskId: string) => void) | null;
  private _taskId: string | null = null;
  private _run: string | null = null;
  /** The row key the timeline was read for (null: not read yet). */
  private _key: string | null = null;
  private _fetchedAt = -Infinity;
  private _inFlight = false;
  private _again = false;
  private _paintedWidth = -1;
  private _loads = 0;

  constructor(options: TaskPicturesOptions) {
    this._client = options.client;
    this._now = options.now ?? Date.now;
    this._onOpenRun = options.onOpenRun ?? null;
    this.el = document.createElement('div');
    this.el.className = 'cm-Details-pictures';
    this.el.setAttribute('role', 'group');
    this.el.setAttribute('aria-label', 'Attempts over time');
    this._link = document.createElement('button');
    this._link.type = 'button';
    this._link.className = 'cm-Details-runGraph';
    this._link.textContent = 'run graph';
    this._link.hidden = true;
    this._link.addEventListener('click', () => {
      if (this._run !== null && this._taskId !== null && this._onOpenRun) {
        this._onOpenRun(this._run, this._taskId);
      }
    });
    this.view = new TimelineView({
      labelWidth: 0,
      laneHeight: 22,
      minPlotWidth: 160,
      strip: false,
      heading: attemptsHeading
    });
    this.view.el.classList.add('cm-MiniTimeline');
    this._note = document.createElement('p');
    this._note.className = 'cm-Details-picturesNote';
    this._note.hidden = true;
    this.el.append(this._link, this.view.el, this._note);
    this.el.hidden = true;
  }

  /** How many timelines were asked for (tests). */
  get loads(): number {
    return this._loads;
  }

  follow(taskId: string | null, row: ListingRow | null): void {
    if (taskId !== this._taskId) {
      this._taskId = taskId;
      this._key = null;
      this._fetchedAt = -Infinity;
      this._again = false;
      this._paintedWidth = -1;
      this.el.hidden = true;
      this.view.el.hidden = true;
      this._note.hidden = true;
    }
    if (taskId === null) {
      this._run = null;
      return;
    }
    this._run = row?.run ?? null;
    const showLink = this._run !== null && this._onOpenRun !== null;
    this._link.hidden = !showLink;
    if (showLink) {
      this._link.setAttribute('aria-label', `Open the graph of the pipeline run of ${row?.name ?? taskId}`);
      this._link.title = `Open the graph of pipeline run ${this._run}`;
    }
    const key = row ? rowKey(row) : '';
    const live = row !== null && !isTerminal(row.status) && (row.attempt > 0 || row.started !== null);
    if (
      key !== this._key ||
      (live && this._now() - this._fetchedAt >= LIVE_REFRESH_MS)
    ) {
      this._key = key;
      this._load(taskId);
    }
    this._fit();
  }

  /** Called with the details box in the page: put below the verbs (in view with the
   * task's essentials, above a failure's traceback), drawn at its width. */
  mount(details: HTMLElement): void {
    const actions = details.querySelector('.cm-Details-actions');
    if (actions) {
      actions.after(this.el);
    } else {
      details.append(this.el);
    }
    this._fit();
  }

  /** Drawn while out of the page or at another width (the sidebar resized): draw again. */
  private _fit(): void {
    const width = this.el.clientWidth;
    if (this.view.data !== null && width > 0 && width !== this._paintedWidth) {
      this._paintedWidth = width;
      this.view.paint();
    }
  }

  private _load(taskId: string): void {
    if (this._inFlight) {
      this._again = true; // one more read once this one is in
      return;
    }
    this._inFlight = true;
    this._fetchedAt = this._now();
    this._loads += 1;
    this._client.timeline(taskId).then(
      data => this._done(taskId, data, null),
      error => this._done(taskId, null, describe(error))
    );
  }

  private _done(taskId: string, data: TimelineData | null, error: string | null): void {
    this._inFlight = false;
    if (taskId !== this._taskId) {
      if (this._taskId !== null) {
        this._load(this._taskId); // another task was selected meanwhile
      }
      return;
    }
    this.el.hidden = false;
    if (data !== null) {
      this.view.el.hidden = false;
      this._note.hidden = true;
      this.view.setData(data);
      this._paintedWidth = this.el.clientWidth;
    } else {
      this._note.hidden = false;
      this._note.textContent = `Cannot load the attempts' timeline: ${error}`;
    }
    if (this._again) {
      this._again = false;
      this._load(taskId);
    }
  }
}

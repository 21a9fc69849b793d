/**
 * A pipeline run's graph in JupyterLab's main area, opened from the Tasks sidebar (a
 * step's "run graph" link): the graph renderer of the run tables (`graph.ts`, dagre
 * layout, zoom and pan), drawn from the store (`GET runs/{id}/graph`: the run's nodes
 * and dependency edges from its record, each node's task) with the statuses of the
 * sidebar's listing rows, so it is live with the sidebar's feed. While the run is not
 * finished its structure is read again (a node's task created, a map's items known) at
 * most every `GRAPH_REFRESH_MS`. A node click selects its task in the sidebar; the
 * node's allowed verbs go through the sidebar's command path. The drawing fills the
 * tab and is fitted again when the tab is resized (`GraphView`'s `fill`). The plugin
 * wraps it in a `MainAreaWidget` (`index.ts`), tracked so a page reload reopens it by
 * run id; a run the store no longer has (404) is said so in the tab.
 */
import { Widget } from '@lumino/widgets';

import { APIError, ListingRow } from './api';
import { ControlVerb, TaskRow } from './contract';
import { GraphView } from './graph';
import { TaskModel, describe } from './model';
import { IPicturesClient, RunGraphResponse } from './sidebar-detail';

/** While the run is not finished, its graph is read again at most this often. */
export const GRAPH_REFRESH_MS = 2000;

export interface RunGraphPanelOptions {
  runId: string;
  client: IPicturesClient;
  model: TaskModel;
  /** A node was clicked: select its task in the sidebar. */
  onSelect: (taskId: string) => void;
  onVerb?: (taskId: string, verb: ControlVerb) => void;
  /** Epoch ms (tests pass a fixed clock). */
  now?: () => number;
}

/** The heading of a tab whose run the store does not have (any more). */
export function goneMessage(runId: string): string {
  return `Pipeline run ${runId} is no longer in the task store: its graph cannot be shown.`;
}

/** The main-area content: a heading line and the run's graph. */
export class RunGraphPanel extends Widget {
  readonly runId: string;
  readonly view: GraphView;
  private readonly _head: HTMLElement;
  private readonly _client: IPicturesClient;
  private readonly _model: TaskModel;
  private readonly _now: () => number;
  private _graph: RunGraphResponse | null = null;
  private _rows = new Map<string, ListingRow>();
  private _fetchedAt = -Infinity;
  private _inFlight: Promise<void> | null = null;
  private _timer: ReturnType<typeof setTimeout> | null = null;
  private _loads = 0;
  private _fittedShown = false;

  constructor(options: RunGraphPanelOptions) {
    super();
    this.runId = options.runId;
    this._client = options.client;
    this._model = options.model;
    this._now = options.now ?? Date.now;
    this.addClass('cm-RunGraph');
    this.node.dataset.run = options.runId;
    this._head = document.createElement('div');
    this._head.className = 'cm-RunGraph-head';
    this._head.setAttribute('role', 'status');
    this._head.textContent = `Loading the graph of run ${options.runId}…`;
    this.view = new GraphView({
      row: (id: string): TaskRow | undefined => this._model.task(id) ?? this._rows.get(id),
      onSelect: (taskId: string | null) => {
        if (taskId !== null) {
          options.onSelect(taskId);
        }
      },
      onVerb: options.onVerb
    }, true, { fill: true });
    this.node.append(this._head, this.view.el);
    this.title.label = 'Run graph';
    this.title.caption = `The graph of pipeline run ${options.runId}`;
    this._model.changed.connect(this._onModelChanged, this);
  }

  /** The last answer of the server (null before the first). */
  get graph(): RunGraphResponse | null {
    return this._graph;
  }

  /** How many times the graph was read (tests). */
  get loads(): number {
    return this._loads;
  }

  /** Read the run's graph from the server now (one read at a time). */
  load(): Promise<void> {
    if (this._inFlight) {
      return this._inFlight;
    }
    this._fetchedAt = this._now();
    this._loads += 1;
    this._inFlight = this._client.runGraph(this.runId).then(
      graph => this._show(graph, null),
      error => this._show(null, error)
    );
    return this._inFlight;
  }

  /** Select the node standing for `taskId` (the step the sidebar opened it from). */
  selectTask(taskId: string): void {
    const node = this._graph?.nodes.find(n => n.task === taskId || (n.children ?? []).includes(taskId));
    this.view.select(node ? node.name : null);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._onModelChanged, this);
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
    super.dispose();
  }

  protected onAfterShow(): void {
    // laid out while its tab was hidden (no width yet): fit once it shows; later shows
    // keep the user's zoom and pan
    if (!this._fittedShown && this._graph !== null) {
      this._fittedShown = true;
      this.view.fit(false);
    }
  }

  private _show(graph: RunGraphResponse | null, error: unknown): void {
    this._inFlight = null;
    if (this.isDisposed) {
      return;
    }
    if (graph === null) {
      const gone = error instanceof APIError && error.status === 404;
      this._head.textContent = gone
        ? goneMessage(this.runId)
        : `Cannot load the graph of run ${this.runId}: ${describe(error)}`;
      this._head.classList.add('cm-mod-error');
      this._head.classList.toggle('cm-mod-gone', gone);
      if (gone) {
        // what was drawn before is of a run that is gone
        this.title.label = `Run graph: ${this.runId}`;
        this._graph = null;
        this.view.setSpec(null);
      }
      return;
    }
    this._head.classList.remove('cm-mod-error', 'cm-mod-gone');
    this._graph = graph;
    this._rows = new Map(graph.tasks.map(r => [r.id, r]));
    const n = graph.nodes.length;
    this._head.textContent = `${graph.title ?? `run ${graph.name}`} · ${graph.status} · ${n} step${n === 1 ? '' : 's'}`;
    this.title.label = `Run graph: ${graph.name}`;
    this.view.setSpec(graph);
    if (this.isVisible) {
      this._fittedShown = true; // setSpec fitted it at its width
    }
  }

  private _onModelChanged(): void {
    if (this._graph === null) {
      return;
    }
    this.view.update(); // the statuses of the rows the sidebar holds
    if (this._graph.finished) {
      return;
    }
    const wait = GRAPH_REFRESH_MS - (this._now() - this._fetchedAt);
    if (wait <= 0) {
      void this.load();
    } else if (this._timer === null) {
      this._timer = setTimeout(() => {
        this._timer = null;
        void this.load();
      }, wait);
    }
  }
}

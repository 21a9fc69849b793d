/**
 * The saved snapshot of a task table in a notebook output.
 *
 * Every table the kernel displays carries, beside the widget view, the snapshot json
 * (`SNAPSHOT_MIME`: rows as data) and keeps it current: the kernel updates the output
 * when a row changes status. This renderer is preferred over the widget view's (it is
 * registered at a lower rank): it draws the snapshot at once, then asks the notebook's
 * own widget renderer for the live view and shows that instead as soon as it appears.
 * When the widget's model is gone (the notebook was reopened without its kernel, or the
 * kernel restarted) the live view never appears and the snapshot stays: final status,
 * progress and duration, never "Error displaying widget: model not found".
 *
 * Every string of a row goes into the DOM with textContent.
 */
import type { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Message } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';

import { ROW_FIELDS, SNAPSHOT_MIME, TaskRow, WIDGET_MIME } from './contract';
import { formatClock } from './format';
import { GraphSpec, renderStaticGraph } from './graph';
import { RowContext, renderRow } from './row';

export interface SnapshotData {
  version: number;
  kind: string;
  title: string;
  model_id: string;
  /** Rows of the widget's row shape, drawn by the same row module as the live view. */
  rows: TaskRow[];
  total_rows: number;
  summary: Record<string, number>;
  at: number | null;
  /** A pipeline run's graph, each node with its status (src/graph.ts draws it). */
  graph?: GraphSpec;
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

const ROW_DEFAULTS: Partial<Record<(typeof ROW_FIELDS)[number], unknown>> = {
  version: 0,
  attempt: 0,
  max_attempts: 1,
  done: 0,
  has_tb: false,
  tags: [],
  can: {}
};

/** A saved row with every field of the row shape (a notebook saved by an older version
 * may lack the newer ones): absent fields read as unknown. */
export function savedRow(raw: Partial<TaskRow>): TaskRow {
  const row: Record<string, unknown> = { ...raw };
  for (const key of ROW_FIELDS) {
    if (row[key] === undefined) {
      row[key] = key in ROW_DEFAULTS ? ROW_DEFAULTS[key] : null;
    }
  }
  return row as unknown as TaskRow;
}

/** A saved row offers no action: the state is not live. Its clock is the snapshot's. */
function savedContext(at: number | null): RowContext {
  return {
    now: at ?? Date.now(),
    disconnected: true,
    offline: 'saved state, not live: no kernel to send it to',
    note: () => null,
    onVerb: () => undefined,
    onSelect: () => undefined,
    isSelected: () => false,
    selectLabel: 'Saved state of'
  };
}

/** Draw the snapshot into `node` (replacing what is there), one row as in the live view;
 * with its run's graph unless `graph` is false (the renderer leaves it out while the live
 * view, which draws its own, hides the snapshot). */
export function renderSnapshot(node: HTMLElement, data: SnapshotData, graph = true): void {
  node.replaceChildren();
  const rows = Array.isArray(data.rows) ? data.rows : [];
  const head = el('div', 'cn-saved-head');
  head.appendChild(el('strong', 'cn-saved-title', data.title || 'tasks'));
  const counts = Object.entries(data.summary || {})
    .map(([s, n]) => `${n} ${s}`)
    .join(', ');
  const total = data.total_rows ?? rows.length;
  head.appendChild(
    el('span', 'cn-saved-summary', ` — ${total} task${total === 1 ? '' : 's'}${counts ? `: ${counts}` : ''}`)
  );
  head.appendChild(
    el('span', 'cn-saved-note', ` · saved state as of ${formatClock(data.at, true)}, not live`)
  );
  node.appendChild(head);
  if (graph && data.graph && Array.isArray(data.graph.nodes) && data.graph.nodes.length) {
    renderStaticGraph(node, data.graph, new Map());
  }
  const list = el('div', 'cm-Rows cn-saved-rows');
  const ctx = savedContext(data.at);
  for (const row of rows) {
    const item = renderRow(savedRow(row), ctx);
    item.classList.add('cn-saved-row');
    list.appendChild(item);
  }
  node.appendChild(list);
  if (total > rows.length) {
    node.appendChild(el('div', 'cn-saved-more', `… ${total - rows.length} more tasks not shown`));
  }
}

/** Finds the rendermime of the notebook a node is in (to ask it for the live widget view). */
export type NotebookLookup = (node: HTMLElement) => {
  rendermime: IRenderMimeRegistry;
  ready: Promise<void>;
} | null;

/** The renderer: the snapshot, replaced by the live widget view while its model lives. */
export class SnapshotRenderer extends Panel implements IRenderMime.IRenderer {
  constructor(
    private readonly _lookup: NotebookLookup,
    private readonly _mimeType: string = SNAPSHOT_MIME
  ) {
    super();
    this.addClass('cn-saved');
    this._static.addClass('cn-saved-static');
    this.addWidget(this._static);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    // JupyterLab calls this again on the same renderer when the kernel updates the
    // output (update_display_data): the snapshot is redrawn, the live view kept
    const data = model.data[this._mimeType] as unknown as SnapshotData;
    // while the live view shows, the kernel's updates of the output (every few seconds in
    // a live run) leave the hidden snapshot's graph out: a 300-node drawing is not free
    this._data = data;
    this._graphDrawn = !this._isLive;
    renderSnapshot(this._static.node, data, this._graphDrawn);
    const view = model.trusted ? (model.data[WIDGET_MIME] as { model_id?: string } | undefined) : undefined;
    const modelId = view?.model_id ?? null;
    if (modelId !== null && modelId === this._modelId) {
      return; // the same widget model: its live view (if any) stays
    }
    this._dropView();
    this._modelId = modelId;
    this._pending = modelId !== null ? model : null;
    if (this.isAttached) {
      void this._goLive();
    }
  }

  /** True while the live widget view is shown instead of the snapshot. */
  get live(): boolean {
    return this._isLive;
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this._goLive();
  }

  dispose(): void {
    this._dropView();
    super.dispose();
  }

  private _dropView(): void {
    this._observer?.disconnect();
    this._observer = null;
    if (this._view) {
      this._view.dispose();
      this._view = null;
    }
    this._isLive = false;
    this._showStatic();
  }

  private _showStatic(): void {
    if (!this._graphDrawn && this._data) {
      this._graphDrawn = true;
      renderSnapshot(this._static.node, this._data);
    }
    this._static.show();
  }

  private async _goLive(): Promise<void> {
    const model = this._pending;
    this._pending = null;
    if (!model || this.isDisposed) {
      return;
    }
    const notebook = this._lookup(this.node);
    if (!notebook) {
      return;
    }
    await notebook.ready;
    // the widget manager binds the notebook's widget renderer once the session is ready
    await new Promise(resolve => setTimeout(resolve, 0));
    if (this.isDisposed || !notebook.rendermime.mimeTypes.includes(WIDGET_MIME)) {
      return;
    }
    if (this._modelId !== (model.data[WIDGET_MIME] as { model_id?: string }).model_id) {
      return; // a newer model came while waiting
    }
    const view = notebook.rendermime.createRenderer(WIDGET_MIME);
    this._view = view;
    view.addClass('cn-saved-live');
    view.hide();
    this.addWidget(view);
    // the view is live when the widget renderer has put the view's element in; while it
    // only holds text ("Loading widget...", "model not found") the snapshot stays
    const update = () => {
      const isLive = !view.isDisposed && view.node.firstElementChild !== null;
      if (isLive === this._isLive) {
        return;
      }
      this._isLive = isLive;
      if (isLive) {
        view.show();
        this._static.hide();
      } else {
        view.hide();
        this._showStatic();
      }
    };
    this._observer = new MutationObserver(update);
    this._observer.observe(view.node, { childList: true });
    const viewModel: IRenderMime.IMimeModel = {
      trusted: model.trusted,
      data: { [WIDGET_MIME]: model.data[WIDGET_MIME] },
      metadata: model.metadata,
      setData: () => undefined // the kernel updates the output; nothing to write back
    };
    await view.renderModel(viewModel);
    update();
  }

  private readonly _static = new Widget();
  private _data: SnapshotData | null = null;
  private _graphDrawn = false;
  private _view: IRenderMime.IRenderer | null = null;
  private _modelId: string | null = null;
  private _pending: IRenderMime.IMimeModel | null = null;
  private _observer: MutationObserver | null = null;
  private _isLive = false;
}

/** The factory, ranked before the widget view's (-10) so outputs with both come here. */
export const SNAPSHOT_RANK = -20;

export function snapshotFactory(lookup: NotebookLookup): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [SNAPSHOT_MIME],
    defaultRank: SNAPSHOT_RANK,
    createRenderer: options => new SnapshotRenderer(lookup, options.mimeType)
  };
}

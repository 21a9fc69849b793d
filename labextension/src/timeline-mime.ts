/**
 * The JupyterLab renderer of the attempt timeline's mime type: the canvas timeline of
 * `timeline.ts`, from the data the output carries. It needs no kernel, so a saved
 * notebook reopened without one draws the same picture; the kernel redraws a live
 * timeline by updating the output (`update_display_data`), which renders the new data
 * into the same renderer.
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { TIMELINE_MIME, TimelineData, TimelineView } from './timeline';

class TimelineRenderer extends Widget implements IRenderMime.IRenderer {
  private readonly _view = new TimelineView();

  constructor(private readonly _mimeType: string) {
    super();
    this.addClass('cn-timeline-output');
    this.node.appendChild(this._view.el);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._view.setData(model.data[this._mimeType] as unknown as TimelineData);
  }

  protected onResize(): void {
    this._view.paint();
  }
}

/** Before text/html (and the image): JupyterLab draws the canvas, other viewers the SVG. */
export const TIMELINE_RANK = -15;

export const timelineFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [TIMELINE_MIME],
  defaultRank: TIMELINE_RANK,
  createRenderer: options => new TimelineRenderer(options.mimeType)
};

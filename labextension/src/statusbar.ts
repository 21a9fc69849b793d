/**
 * The status bar item "N running · M paused · K failed" for the kernel of the current
 * notebook. Hidden when no notebook is current.
 */
import { Widget } from '@lumino/widgets';

import { TaskModel } from './model';
import { countStatuses, statusBarText } from './render';

export class TaskStatusItem extends Widget {
  constructor(
    readonly model: TaskModel,
    private readonly _onClick: () => void
  ) {
    super({ node: document.createElement('button') });
    this.addClass('cm-StatusItem');
    this.node.setAttribute('type', 'button');
    this.node.addEventListener('click', () => this._onClick());
    this.model.changed.connect(this.refresh, this);
    this.refresh();
  }

  /** The kernel whose tasks are counted (the current notebook's), or null. */
  get kernelId(): string | null {
    return this._kernelId;
  }

  set kernelId(value: string | null) {
    if (value !== this._kernelId) {
      this._kernelId = value;
      this.refresh();
    }
  }

  get text(): string {
    return this.node.textContent ?? '';
  }

  refresh(): void {
    const counts = countStatuses(this.model.tasks, this._kernelId);
    const text = statusBarText(counts);
    if (this.node.textContent !== text) {
      this.node.textContent = text;
    }
    const label = `Tasks of this notebook's kernel: ${text}. Open the Tasks panel.`;
    this.node.setAttribute('aria-label', label);
    this.node.title = label;
    this.node.classList.toggle('cm-mod-failed', counts.failed > 0);
  }

  dispose(): void {
    this.model.changed.disconnect(this.refresh, this);
    super.dispose();
  }

  private _kernelId: string | null = null;
}

/**
 * The JupyterLab extension's run graphs (the saved snapshot's, the sidebar's) are laid
 * out in a layout worker too: here it is the extension bundle's own chunk (rspack bundles
 * `new Worker(new URL(...))`), where the widget bundle carries the worker's source
 * (`build-widget.mjs`). `index.ts` calls this once.
 */
import { setLayoutWorker } from './graph';

export function useLabLayoutWorker(): void {
  setLayoutWorker(() => new Worker(new URL('./layout-worker.js', import.meta.url)));
}

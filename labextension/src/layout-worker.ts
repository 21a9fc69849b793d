/**
 * The layout worker: lays run graphs out off the page's main thread, so a large graph
 * never freezes the notebook (`graph.ts` posts `{ id, spec }`, gets `{ id, layout }` or
 * `{ id, error }` back). `build-widget.mjs` bundles this file with dagre into a string
 * that the widget and pictures bundles start as a Blob worker.
 */
import { LayoutInput, layoutGraph } from './layout';

interface Request {
  id: number;
  spec: LayoutInput;
}

const scope = self as unknown as {
  onmessage: ((ev: MessageEvent<Request>) => void) | null;
  postMessage(msg: unknown): void;
};

scope.onmessage = ev => {
  const { id, spec } = ev.data;
  try {
    scope.postMessage({ id, layout: layoutGraph(spec) });
  } catch (err) {
    scope.postMessage({ id, error: String((err as Error)?.message ?? err) });
  }
};

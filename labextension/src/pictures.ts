/**
 * The pictures on their own, for pages without JupyterLab (bundled by build-widget.mjs
 * into chongming_nb/notebook/static/pictures.js; benchmarks/bench_pictures.py times
 * them in Chromium): the canvas timeline and the run graph with its dagre layout.
 */
export { TIMELINE_MIME, TimelineView, renderTimeline } from './timeline';
export { GraphView, clearLayoutCache, layoutCount, layoutGraph, renderStaticGraph } from './graph';

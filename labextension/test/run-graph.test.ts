import { Widget } from '@lumino/widgets';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { GraphNodeSpec } from '../src/graph';
import { TaskModel } from '../src/model';
import { APIError } from '../src/api';
import { GRAPH_REFRESH_MS, RunGraphPanel, goneMessage } from '../src/run-graph';
import { IPicturesClient, RunGraphResponse } from '../src/sidebar-detail';
import { TimelineData } from '../src/timeline';
import { listingClient, row } from './fixtures';

function node(name: string, deps: string[], task: string | null, status: string | null): GraphNodeSpec {
  return { name, deps, join: 'all_succeeded', condition: false, compensate: false, is_map: false, task, children: [], status };
}

function graph(finished: boolean, statuses: Record<string, string | null>): RunGraphResponse {
  return {
    id: 'run-1',
    name: 'nightly <b>etl</b>',
    status: finished ? 'succeeded' : 'running',
    finished,
    title: 'run nightly <b>etl</b>',
    nodes: [
      node('extract', [], 't-extract', statuses.extract),
      node('flaky', ['extract'], 't-flaky', statuses.flaky),
      node('report', ['flaky'], statuses.report === null ? null : 't-report', statuses.report)
    ],
    tasks: [row({ id: 't-extract', name: 'extract', status: 'succeeded', run: 'run-1' })]
  };
}

class FakePictures implements IPicturesClient {
  answers: RunGraphResponse[] = [];
  reads = 0;
  async timeline(): Promise<TimelineData> {
    throw new Error('not used');
  }
  async runGraph(runId: string): Promise<RunGraphResponse> {
    expect(runId).toBe('run-1');
    this.reads += 1;
    return this.answers.length > 1 ? this.answers.shift()! : this.answers[0];
  }
}

/** A client whose every read of a run graph fails with `error`. */
function failing(error: Error): IPicturesClient {
  return {
    timeline: async () => {
      throw new Error('not used');
    },
    runGraph: async () => {
      throw error;
    }
  };
}

function statuses(panel: RunGraphPanel): Record<string, string | undefined> {
  return Object.fromEntries(
    [...panel.node.querySelectorAll<SVGGElement>('.cn-graph-node')].map(g => [g.dataset.node, g.dataset.status])
  );
}

describe('a run graph in the main area', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('draws the run from the store with the sidebar rows statuses, live, and selects a task on click', async () => {
    const fake = new FakePictures();
    fake.answers = [graph(false, { extract: 'succeeded', flaky: 'retry_wait', report: null })];
    let now = Date.parse('2026-01-01T00:00:00Z');
    const flaky = row({ id: 't-flaky', name: 'flaky', status: 'retry_wait', attempt: 1, run: 'run-1', version: 4 });
    const model = new TaskModel({ client: listingClient([flaky]), now: () => now });
    await model.refresh();
    const selected: string[] = [];
    const panel = new RunGraphPanel({ runId: 'run-1', client: fake, model, now: () => now, onSelect: id => selected.push(id) });
    Widget.attach(panel, document.body);
    await panel.load();

    expect(panel.node.querySelectorAll('.cn-graph-node').length).toBe(3);
    expect(panel.node.querySelectorAll('.cn-graph-edge').length).toBe(2);
    // from the listing row (flaky), the answer's own row (extract), the node's (report)
    expect(statuses(panel)).toEqual({ extract: 'succeeded', flaky: 'retry_wait', report: 'planned' });
    const head = panel.node.querySelector('.cm-RunGraph-head')!;
    expect(head.textContent).toBe('run nightly <b>etl</b> · running · 3 steps');
    expect(panel.node.querySelector('b')).toBeNull();
    expect(panel.title.label).toBe('Run graph: nightly <b>etl</b>');

    // the sidebar's feed moves a step: the node follows at once, no read needed
    model.applyRows([{ ...flaky, status: 'running', attempt: 2, version: 6 }]);
    expect(statuses(panel).flaky).toBe('running');
    expect(panel.node.querySelector('.cn-graph-node[data-node="flaky"] .cn-graph-detail')?.textContent).toContain('attempt 2');
    // ... and the structure is read again once GRAPH_REFRESH_MS passed since the last read
    expect(fake.reads).toBe(1);
    fake.answers = [graph(true, { extract: 'succeeded', flaky: 'succeeded', report: 'succeeded' })];
    now += GRAPH_REFRESH_MS;
    await vi.advanceTimersByTimeAsync(GRAPH_REFRESH_MS);
    expect(fake.reads).toBe(2);
    model.applyRows([{ ...flaky, status: 'succeeded', attempt: 2, version: 9, ended: now }]);
    await vi.advanceTimersByTimeAsync(0);
    expect(statuses(panel)).toEqual({ extract: 'succeeded', flaky: 'succeeded', report: 'succeeded' });
    // a finished run is not read again
    now += 10 * GRAPH_REFRESH_MS;
    model.applyRows([{ ...flaky, status: 'succeeded', attempt: 2, version: 10, ended: now }]);
    await vi.advanceTimersByTimeAsync(10 * GRAPH_REFRESH_MS);
    expect(fake.reads).toBe(2);

    // a node click selects its task in the sidebar
    panel.node.querySelector<SVGGElement>('.cn-graph-node[data-node="flaky"]')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(selected).toEqual(['t-flaky']);
    // opened from a step: that step's node is selected
    panel.selectTask('t-report');
    expect(panel.view.selected).toBe('report');
    panel.dispose();
    model.dispose();
  });

  it('says why when the run cannot be read', async () => {
    const model = new TaskModel({ client: listingClient([]) });
    const client = failing(new Error('unknown pipeline run <i>r</i>'));
    const panel = new RunGraphPanel({ runId: 'run-1', client, model, onSelect: () => undefined });
    Widget.attach(panel, document.body);
    await panel.load();
    const head = panel.node.querySelector('.cm-RunGraph-head')!;
    expect(head.textContent).toBe('Cannot load the graph of run run-1: unknown pipeline run <i>r</i>');
    expect(head.classList.contains('cm-mod-error')).toBe(true);
    expect(panel.node.querySelector('i')).toBeNull();
    panel.dispose();
    model.dispose();
  });

  it('says so in the tab when the store does not have the run (a tab restored after it went)', async () => {
    const model = new TaskModel({ client: listingClient([]) });
    const client = failing(new APIError(404, "unknown pipeline run 'gone'"));
    const panel = new RunGraphPanel({ runId: 'gone <b>1</b>', client, model, onSelect: () => undefined });
    Widget.attach(panel, document.body);
    await panel.load();
    const head = panel.node.querySelector('.cm-RunGraph-head')!;
    expect(head.textContent).toBe(goneMessage('gone <b>1</b>'));
    expect(head.textContent).toBe('Pipeline run gone <b>1</b> is no longer in the task store: its graph cannot be shown.');
    expect(head.classList.contains('cm-mod-gone')).toBe(true);
    expect(panel.node.querySelector('b')).toBeNull();
    expect(panel.view.el.hidden).toBe(true);
    panel.dispose();
    model.dispose();
  });

  it('fills its tab: the graph view is told to take the height it is given', () => {
    const model = new TaskModel({ client: listingClient([]) });
    const panel = new RunGraphPanel({ runId: 'run-1', client: new FakePictures(), model, onSelect: () => undefined });
    expect(panel.view.el.classList.contains('cn-graph-fill-view')).toBe(true);
    panel.dispose();
    model.dispose();
  });
});

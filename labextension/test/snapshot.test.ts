import { Widget } from '@lumino/widgets';
import { describe, expect, it } from 'vitest';

import { SNAPSHOT_MIME, TaskRow, WIDGET_MIME } from '../src/contract';
import { renderRow } from '../src/row';
import { SnapshotData, SnapshotRenderer, renderSnapshot } from '../src/snapshot';
import { context, row } from './fixtures';

const XSS = '<img src=x onerror=window.__xss=1>';

function srow(overrides: Partial<TaskRow> = {}): TaskRow {
  return row({
    status: 'succeeded',
    attempt: 1,
    max_attempts: 1,
    done: 200,
    total: 200,
    unit: 'item',
    started: Date.parse('2026-01-01T10:00:00Z'),
    ended: Date.parse('2026-01-01T10:03:12Z'),
    ...overrides
  });
}

function data(rows: TaskRow[]): SnapshotData {
  return {
    version: 1,
    kind: 'task',
    title: 'job',
    model_id: 'm1',
    rows,
    total_rows: rows.length,
    summary: { succeeded: rows.length },
    at: Date.parse('2026-01-01T10:05:00Z')
  };
}

function drawn(rows: TaskRow[], ctx = context({ disconnected: true })): HTMLElement {
  const node = document.createElement('div');
  node.append(...rows.map(r => renderRow(r, ctx)));
  return node;
}

describe('the saved snapshot', () => {
  it('draws each row with the row module, as the live view does, with no action', () => {
    const node = document.createElement('div');
    renderSnapshot(node, data([srow()]));
    const r = node.querySelector('.cm-Rows > .cm-Row.cn-saved-row') as HTMLElement;
    expect(r.dataset.tone).toBe('ok');
    expect(r.querySelector('.cm-Row-status')!.textContent).toBe('succeeded');
    expect(r.querySelector('.cm-Row-pct')!.textContent).toBe('100%');
    expect(r.querySelector('.cm-Row-count')!.textContent).toBe('200/200 item');
    expect(r.querySelector('.cm-Row-times')!.textContent).toBe('3m12s');
    expect([...r.querySelectorAll('button[data-verb]')].every(b => (b as HTMLElement).hidden)).toBe(true);
    expect(r.querySelector('.cm-Row-more')!.getAttribute('title')).toContain('saved state, not live');
    expect(node.textContent).toMatch(/saved state as of \d\d:\d\d:\d\d, not live/);
    // the same cells as the live row (one row, one source)
    const live = drawn([srow()]).firstElementChild as HTMLElement;
    for (const cell of ['.cm-Row-status', '.cm-Row-pct', '.cm-Row-count', '.cm-Row-times', '.cm-Row-noteText']) {
      expect(r.querySelector(cell)!.textContent).toBe(live.querySelector(cell)!.textContent);
    }
  });

  it("a running row's clock stops at the snapshot's time", () => {
    const node = document.createElement('div');
    renderSnapshot(node, data([srow({ status: 'running', ended: null, done: 50 })]));
    expect(node.querySelector('.cm-Row-times')!.textContent).toBe('5m00s<?');
  });

  it('names a delayed start without counting down to it', () => {
    const node = document.createElement('div');
    const starts = Date.parse('2026-01-01T10:15:00Z');
    renderSnapshot(node, data([srow({ status: 'blocked', started: null, ended: null, starts })]));
    const note = node.querySelector('.cm-Row-noteText')!.textContent!;
    expect(note).toMatch(/^was to start at \d\d:\d\d$/);
  });

  it('draws a row saved without the newer fields', () => {
    const node = document.createElement('div');
    const old = { id: 't1', name: 'old', status: 'succeeded', done: 3, total: 3 } as unknown as TaskRow;
    renderSnapshot(node, data([old]));
    expect(node.querySelector('.cm-Row-count')!.textContent).toBe('3/3');
    expect(node.querySelector('.cm-Row-times')!.textContent).toBe('');
  });

  it('says who stopped a task, in a neutral tone, and escapes every string', () => {
    const node = document.createElement('div');
    const stopped = srow({
      name: XSS,
      status: 'stopped',
      ended_by: 'sidebar',
      end_reason: XSS,
      done: 50
    });
    renderSnapshot(node, data([stopped]));
    expect(node.querySelector('img')).toBeNull();
    const r = node.querySelector('.cn-saved-row') as HTMLElement;
    expect(r.dataset.tone).toBe('muted');
    expect(r.querySelector('.cm-Row-name')!.textContent).toBe(XSS);
    const msg = r.querySelector('.cm-Row-noteText')!;
    expect(msg.textContent).toMatch(/^stopped from the sidebar at \d\d:\d\d: </);
    expect(msg.classList.contains('cm-mod-failure')).toBe(false);
  });
});

class FakeView extends Widget {
  rendered: unknown[] = [];
  async renderModel(model: { data: Record<string, unknown> }): Promise<void> {
    this.rendered.push(model.data[WIDGET_MIME]);
  }
}

describe('the renderer', () => {
  it('keeps the snapshot until the live view has an element, then shows the view', async () => {
    const view = new FakeView();
    const rendermime = {
      mimeTypes: [WIDGET_MIME, SNAPSHOT_MIME],
      createRenderer: () => view
    };
    const r = new SnapshotRenderer(() => ({ rendermime: rendermime as never, ready: Promise.resolve() }));
    Widget.attach(r, document.body);
    await r.renderModel({
      data: { [SNAPSHOT_MIME]: data([srow()]) as never, [WIDGET_MIME]: { model_id: 'm1' } },
      metadata: {},
      trusted: true,
      setData: () => undefined
    } as never);
    await new Promise(resolve => setTimeout(resolve, 5));
    expect(view.rendered).toEqual([{ model_id: 'm1' }]);
    expect(r.live).toBe(false);
    // "model not found" is text only: the snapshot stays
    view.node.textContent = 'Error displaying widget: model not found';
    await new Promise(resolve => setTimeout(resolve, 5));
    expect(r.live).toBe(false);
    expect(r.node.querySelector('.cn-saved-static')!.classList.contains('lm-mod-hidden')).toBe(false);
    // the widget view appears: it replaces the snapshot
    view.node.textContent = '';
    view.node.appendChild(document.createElement('div'));
    await new Promise(resolve => setTimeout(resolve, 5));
    expect(r.live).toBe(true);
    expect(r.node.querySelector('.cn-saved-static')!.classList.contains('lm-mod-hidden')).toBe(true);
    // the kernel updates the output: same renderer, same model, one view, still live
    let created = 0;
    rendermime.createRenderer = () => {
      created++;
      return new FakeView();
    };
    const finalRows = data([srow({ status: 'failed' })]);
    await r.renderModel({
      data: { [SNAPSHOT_MIME]: finalRows as never, [WIDGET_MIME]: { model_id: 'm1' } },
      metadata: {},
      trusted: true,
      setData: () => undefined
    } as never);
    await new Promise(resolve => setTimeout(resolve, 5));
    expect(created).toBe(0);
    expect(r.live).toBe(true);
    expect(r.node.querySelectorAll('.cn-saved-live').length).toBe(1);
    expect(r.node.querySelector('.cn-saved-row .cm-Row-status')!.textContent).toBe('failed');
    Widget.detach(r);
    r.dispose();
  });

  it("leaves the hidden snapshot's graph out while the live view shows, and draws it when the snapshot shows again", async () => {
    const view = new FakeView();
    const rendermime = { mimeTypes: [WIDGET_MIME, SNAPSHOT_MIME], createRenderer: () => view };
    const r = new SnapshotRenderer(() => ({ rendermime: rendermime as never, ready: Promise.resolve() }));
    Widget.attach(r, document.body);
    const withGraph = (status: string) => ({
      data: {
        [SNAPSHOT_MIME]: {
          ...data([srow()]),
          graph: { nodes: [{ name: 'load', deps: [], join: 'all_succeeded', condition: false, compensate: false, is_map: false, task: null, status }] }
        } as never,
        [WIDGET_MIME]: { model_id: 'm1' }
      },
      metadata: {},
      trusted: true,
      setData: () => undefined
    });
    const drawn = () => [...r.node.querySelectorAll<SVGGElement>('.cn-saved-static .cn-graph-node')].map(g => g.dataset.status);
    await r.renderModel(withGraph('running') as never);
    expect(drawn()).toEqual(['running']); // the snapshot shows until the view has an element
    view.node.appendChild(document.createElement('div'));
    await new Promise(resolve => setTimeout(resolve, 5));
    expect(r.live).toBe(true);
    await r.renderModel(withGraph('succeeded') as never); // the kernel updates the output
    expect(drawn()).toEqual([]);
    expect(r.node.querySelector('.cn-saved-row')).not.toBeNull(); // the rows are kept current
    view.node.replaceChildren(); // the view loses its element: the snapshot, with its graph
    await new Promise(resolve => setTimeout(resolve, 5));
    expect(r.live).toBe(false);
    expect(drawn()).toEqual(['succeeded']);
    Widget.detach(r);
    r.dispose();
  });

  it('never asks for a live view of an untrusted output', async () => {
    let asked = 0;
    const rendermime = {
      mimeTypes: [WIDGET_MIME],
      createRenderer: () => {
        asked++;
        return new FakeView();
      }
    };
    const r = new SnapshotRenderer(() => ({ rendermime: rendermime as never, ready: Promise.resolve() }));
    Widget.attach(r, document.body);
    await r.renderModel({
      data: { [SNAPSHOT_MIME]: data([srow()]) as never, [WIDGET_MIME]: { model_id: 'm1' } },
      metadata: {},
      trusted: false,
      setData: () => undefined
    } as never);
    await new Promise(resolve => setTimeout(resolve, 5));
    expect(asked).toBe(0);
    expect(r.node.querySelector('.cn-saved-row')).not.toBeNull();
    r.dispose();
  });
});

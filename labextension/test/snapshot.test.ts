import { Widget } from '@lumino/widgets';
import { describe, expect, it } from 'vitest';

import { SNAPSHOT_MIME, WIDGET_MIME } from '../src/contract';
import { SnapshotData, SnapshotRenderer, SnapshotRow, messageText, renderSnapshot } from '../src/snapshot';

const XSS = '<img src=x onerror=window.__xss=1>';

function srow(overrides: Partial<SnapshotRow> = {}): SnapshotRow {
  return {
    id: 't1',
    name: 'extract',
    status: 'succeeded',
    attempt: 1,
    max_attempts: 1,
    done: 200,
    total: 200,
    unit: 'item',
    message: null,
    started: Date.parse('2026-01-01T10:00:00Z'),
    ended: Date.parse('2026-01-01T10:03:12Z'),
    failure: null,
    ended_by: null,
    end_reason: null,
    ...overrides
  };
}

function data(rows: SnapshotRow[]): SnapshotData {
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

describe('the saved snapshot', () => {
  it('shows final status, progress with percentage and duration', () => {
    const node = document.createElement('div');
    renderSnapshot(node, data([srow()]));
    const tr = node.querySelector('tr.cn-saved-row') as HTMLElement;
    expect(tr.dataset.tone).toBe('ok');
    expect(tr.querySelector('.cn-saved-badge')!.textContent).toBe('succeeded');
    expect(tr.querySelector('.cn-saved-progtext')!.textContent).toBe('200/200 item (100%)');
    expect(tr.querySelector('.cn-saved-duration')!.textContent).toBe('3:12');
    expect(node.textContent).toContain('saved state as of');
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
    const tr = node.querySelector('tr.cn-saved-row') as HTMLElement;
    expect(tr.dataset.tone).toBe('muted');
    expect(tr.querySelector('.cn-saved-name')!.textContent).toBe(XSS);
    const msg = tr.querySelector('.cn-saved-message')!;
    expect(msg.textContent).toMatch(/^stopped from the sidebar at \d\d:\d\d:\d\d: </);
    expect(msg.classList.contains('cn-saved-failure')).toBe(false);
    expect(messageText(srow({ status: 'failed', failure: { kind: 'exception', message: 'boom' } }))).toBe(
      'exception: boom'
    );
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
    expect(r.node.querySelector('.cn-saved-badge')!.textContent).toBe('failed');
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

import { describe, expect, it } from 'vitest';

import { CommandInfo, FeedResponse, ITasksClient, TaskDetail, TasksResponse } from '../src/api';
import { ListingRow as TaskRow } from '../src/contract';
import { TaskModel } from '../src/model';
import { TasksPanel } from '../src/sidebar';
import { row } from './fixtures';

class StaticClient implements ITasksClient {
  constructor(readonly rows: TaskRow[]) {}
  async listTasks(): Promise<TasksResponse> {
    return { tasks: this.rows, counts: {}, cursor: 1, sessions: {}, now: '2026-01-01T00:01:00Z' };
  }
  async feed(): Promise<FeedResponse> {
    throw new Error('not used');
  }
  async task(): Promise<TaskDetail> {
    throw new Error('not used');
  }
  async sendCommand(): Promise<CommandInfo> {
    throw new Error('not used');
  }
  async command(): Promise<CommandInfo> {
    throw new Error('not used');
  }
}

function tasks(n: number): TaskRow[] {
  return Array.from({ length: n }, (_, i) =>
    row({
      id: `t${String(i).padStart(5, '0')}`,
      name: `task ${i}`,
      status: i % 2 ? 'paused' : 'running',
      created_at: `2026-01-01T00:00:00.${String(99999 - i).padStart(5, '0')}Z`
    })
  );
}

describe('TasksPanel with many tasks', () => {
  it('draws a bounded window, patches a progress update in place, re-filters only when needed', async () => {
    const rows = tasks(2000);
    // a fixed clock: a running row's elapsed time moves with the second, and a second
    // passing between two renders would redraw every running row in view
    const model = new TaskModel({ client: new StaticClient(rows), now: () => Date.parse('2026-01-01T00:01:00Z') });
    await model.refresh();
    const panel = new TasksPanel(model, new StaticClient([]));
    document.body.append(panel.node);
    panel.render();
    const status = () => panel.node.querySelector('.cm-TasksPanel-status')?.textContent;
    const drawn = () => panel.node.querySelectorAll('li.cm-Row');
    expect(status()).toBe('2,000 of 2,000 tasks');
    expect(panel.list.rowCount).toBe(2000);
    expect(drawn().length).toBeGreaterThan(3);
    expect(drawn().length).toBeLessThan(30);
    const first = panel.node.querySelector<HTMLElement>('li[data-task-id="t00000"]')!;
    expect(first).not.toBeNull();

    // progress of a visible task: same element, new text, one row touched
    const revision = model.layoutRevision;
    model.applyRows([
      { ...rows[0], done: 7, total: 10, unit: 'rows', message: 'chunk <7>' }
    ]);
    expect(model.layoutRevision).toBe(revision);
    panel.render();
    expect(panel.list.redrawn).toBe(1);
    expect(panel.node.querySelector('li[data-task-id="t00000"]')).toBe(first);
    expect(first.querySelector('.cm-Row-pct')?.textContent).toBe('70%');
    expect(first.querySelector('.cm-Row-count')?.textContent).toBe('7/10 rows');
    expect(first.querySelector('.cm-Row-noteText')?.textContent).toBe('chunk <7>');

    // a status change moves the task in and out of filters
    model.applyRows([{ ...rows[0], status: 'paused', version: 9 }]);
    panel.render();
    // the board order puts it behind every running task
    expect(panel.list.scrollToTask('t00000')).toBe(true);
    panel.render();
    const moved = panel.node.querySelector<HTMLElement>('li[data-task-id="t00000"]')!;
    expect(moved.dataset.status).toBe('paused');
    panel.list.node.scrollTop = 0;
    const select = panel.node.querySelector<HTMLSelectElement>('.cm-Filter-status')!;
    select.value = 'status:running';
    select.dispatchEvent(new Event('change'));
    panel.render();
    expect(status()).toBe('999 of 2,000 tasks');
    expect(panel.node.querySelector('li[data-task-id="t00000"]')).toBeNull();
    expect(panel.node.querySelector('li[data-task-id="t00002"]')).not.toBeNull();
    select.value = 'status:blocked';
    select.dispatchEvent(new Event('change'));
    panel.render();
    expect(drawn().length).toBe(0);
    expect(panel.node.querySelector('.cm-TaskList-empty')?.textContent).toBe('No tasks match.');
    panel.dispose();
    model.dispose();
  });
});

describe('a delayed task in the sidebar', () => {
  it('says when it starts, counted down by the server clock', async () => {
    // the listing's clock (now) is 00:01:00; the task may start at 00:04:00
    const starts = Date.parse('2026-01-01T00:04:00Z');
    const later = row({ id: 'd1', name: 'later', status: 'blocked', started: null, starts });
    const model = new TaskModel({ client: new StaticClient([later]), now: () => Date.parse('2026-01-01T00:01:00Z') });
    await model.refresh();
    const panel = new TasksPanel(model, new StaticClient([]));
    document.body.append(panel.node);
    panel.render();
    const note = panel.node.querySelector('li[data-task-id="d1"] .cm-Row-noteText')!;
    expect(note.textContent).toMatch(/^starts at \d\d:\d\d \(in 3m00s\)$/);
    expect(panel.ticking()).toBe(true); // the countdown moves with the clock
    panel.dispose();
  });
});

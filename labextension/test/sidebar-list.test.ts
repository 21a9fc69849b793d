import { describe, expect, it } from 'vitest';

import { CommandInfo, FeedResponse, ITasksClient, TaskDetail, TasksResponse } from '../src/api';
import { ListingRow } from '../src/contract';
import { TaskModel } from '../src/model';
import { TasksPanel } from '../src/sidebar';
import { ListFooter, TaskPager, grouped, listedRows } from '../src/sidebar-list';
import { T0, row } from './fixtures';

/** A fixed clock: nothing drawn depends on when the test runs. */
const NOW = () => T0 + 3_600_000;

/**
 * A store of finished tasks behind a fake REST list that pages like the server: newest
 * first, `after=` a cursor, status and text filters, counts of the filter and totals.
 */
class PagingClient implements ITasksClient {
  constructor(readonly rows: ListingRow[]) {}
  queries: URLSearchParams[] = [];

  async listTasks(query = ''): Promise<TasksResponse> {
    const q = new URLSearchParams(query.replace(/^\?/, ''));
    this.queries.push(q);
    const statuses = (q.get('status') ?? '').split(',').filter(Boolean);
    const text = (q.get('text') ?? '').toLowerCase();
    const notebook = q.get('notebook');
    const kernel = q.get('kernel');
    const match = this.rows.filter(
      r =>
        (statuses.length === 0 || statuses.includes(r.status)) &&
        (!text || r.name.toLowerCase().includes(text) || r.id.toLowerCase().includes(text)) &&
        (notebook === null || r.notebook === notebook) &&
        (kernel === null || r.kernel_id === kernel)
    );
    const start = q.get('after') ? Number(q.get('after')) : 0;
    const limit = Number(q.get('limit') ?? 500);
    const tasks = match.slice(start, start + limit);
    const next = start + limit < match.length ? String(start + limit) : null;
    // as the server: the matches of a text or an owner are counted only when one page
    // holds them all
    const counted = (!text && notebook === null && kernel === null) || (start === 0 && next === null);
    return {
      tasks,
      next,
      counts: counted ? countOf(match) : null,
      totals: countOf(this.rows),
      cursor: 1,
      sessions: {},
      now: new Date(NOW()).toISOString()
    };
  }
  async feed(): Promise<FeedResponse> {
    throw new Error('not used');
  }
  async task(taskId: string): Promise<TaskDetail> {
    const found = this.rows.find(r => r.id === taskId)!;
    return { task: found, attempts: [], history: [], logs: [] };
  }
  async sendCommand(): Promise<CommandInfo> {
    throw new Error('not used');
  }
  async command(): Promise<CommandInfo> {
    throw new Error('not used');
  }
}

/** The same, but its answers wait until `open()`. */
class GatedClient extends PagingClient {
  private _release: () => void = () => undefined;
  private _gate: Promise<void> = new Promise(resolve => (this._release = resolve));
  private _waiters: (() => void)[] = [];

  open(): void {
    this._release();
  }

  /** Resolves once `n` requests were sent. */
  asked(n: number): Promise<void> {
    return new Promise(resolve => {
      const check = (): void => (this.queries.length >= n ? resolve() : void this._waiters.push(check));
      check();
    });
  }

  async listTasks(query = ''): Promise<TasksResponse> {
    const answer = super.listTasks(query);
    this._waiters.splice(0).forEach(w => w());
    await this._gate;
    return answer;
  }
}

function countOf(rows: ListingRow[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of rows) {
    out[r.status] = (out[r.status] ?? 0) + 1;
  }
  return out;
}

/** `n` finished tasks, newest first: h0000 is the newest, one in ten failed. */
function history(n: number): ListingRow[] {
  return Array.from({ length: n }, (_, i) =>
    row({
      id: `h${String(i).padStart(4, '0')}`,
      name: i % 3 === 2 ? 'load' : 'extract',
      status: i % 10 === 9 ? 'failed' : 'succeeded',
      created: T0 - i * 1000,
      started: T0 - i * 1000,
      ended: T0 - i * 1000 + 500,
      kernel_id: null,
      notebook: null,
      owner: null
    })
  );
}

/** Let the panel's listing answer what it asked (and the model's listing arrive). */
async function settle(panel: TasksPanel): Promise<void> {
  await panel.pager.idle();
}

describe('TaskPager', () => {
  it('walks the pages with the cursor, stops at the cap, re-reads what is loaded', async () => {
    const client = new PagingClient(history(1000));
    const pager = new TaskPager(client, { pageSize: 200, maxRows: 500 });
    await pager.setFilter({ statuses: [], text: '' });
    expect(pager.size).toBe(200);
    expect(pager.rows[0].id).toBe('h0000');
    expect(pager.hasMore).toBe(true);
    expect(pager.matching).toBe(1000);
    await pager.more();
    expect(pager.size).toBe(400);
    expect(client.queries[1].get('after')).toBe('200');
    expect(pager.task('h0399')).toBeDefined();
    await pager.more(); // 100 more: the cap is 500
    expect(pager.size).toBe(500);
    expect(client.queries[2].get('limit')).toBe('100');
    expect(pager.atCap).toBe(true);
    await pager.more();
    expect(client.queries.length).toBe(3); // nothing asked past the cap
    await pager.reload();
    expect(client.queries[3].get('limit')).toBe('500');
    expect(client.queries[3].get('after')).toBeNull();
    expect(pager.size).toBe(500);
  });

  it('asks the server for a filter, one request at a time, never sending a superseded one', async () => {
    const client = new GatedClient(history(1000));
    const pager = new TaskPager(client, { pageSize: 50 });
    const first = pager.setFilter({ statuses: [], text: '' });
    await client.asked(1); // on its way: the next filters wait for it
    const typed = pager.setFilter({ statuses: ['failed'], text: 'LO' });
    const failed = pager.setFilter({ statuses: ['failed'], text: ' LOAD ' });
    expect(client.queries.length).toBe(1);
    client.open();
    await Promise.all([first, typed, failed]);
    expect(client.queries.length).toBe(2); // 'LO' was superseded before its turn
    const q = client.queries[1];
    expect(q.get('status')).toBe('failed');
    expect(q.get('text')).toBe('LOAD');
    expect(pager.rows.every(r => r.status === 'failed' && r.name === 'load')).toBe(true);
    expect(pager.matching).toBe(history(1000).filter(r => r.status === 'failed' && r.name === 'load').length);
    expect(pager.totals).toEqual({ succeeded: 900, failed: 100 });
  });
});

describe('the live picture of a long history', () => {
  it('holds the newest tasks and every unfinished and failed one, however old', async () => {
    const rows = history(1000);
    rows[900] = { ...rows[900], id: 'old-queued', status: 'queued' };
    const model = new TaskModel({ client: new PagingClient(rows), limit: 10, now: NOW });
    await model.refresh();
    // the newest 10 (one of them failed), the old queued one, the 99 older failures
    expect(model.size).toBe(10 + 1 + 99);
    expect(model.task('old-queued')?.status).toBe('queued');
    expect(rows.filter(r => r.status === 'failed').every(r => model.task(r.id) !== undefined)).toBe(true);
    expect(model.storeCounts).toEqual({ succeeded: 899, failed: 100, queued: 1 });
  });
});

describe('listedRows', () => {
  it('joins the loaded pages with the live tasks inside their range, and every unfinished one', async () => {
    const client = new PagingClient(history(1000));
    const pager = new TaskPager(client, { pageSize: 10 });
    await pager.setFilter({ statuses: [], text: '' });
    const live = new Map<string, ListingRow>();
    const newer = row({ id: 'new', status: 'succeeded', created: T0 + 1000 });
    const oldRunning = row({ id: 'old-run', status: 'running', created: T0 - 999_999 });
    const oldDone = row({ id: 'old-done', status: 'succeeded', created: T0 - 500_000 });
    const retried = { ...pager.rows[3], status: 'running' as const, version: 9 };
    for (const r of [newer, oldRunning, oldDone, retried]) {
      live.set(r.id, r);
    }
    const source = { tasks: Array.from(live.values()), task: (id: string) => live.get(id) };
    const ids = listedRows(pager, source).map(r => r.id);
    expect(ids.slice(0, 10)).toEqual(pager.rows.map(r => r.id));
    expect(ids).toContain('new');
    expect(ids).toContain('old-run');
    expect(ids).not.toContain('old-done'); // older than the loaded pages: on a later page
    expect(listedRows(pager, source).find(r => r.id === retried.id)?.status).toBe('running');
  });
});

describe('the Tasks panel over a long history', () => {
  it('lists the first page, pages on, filters on the server and keeps the selection on refresh', async () => {
    const client = new PagingClient(history(1000));
    // the live picture holds the newest 1,000 (its own listing): the list still shows
    // only the loaded range, so each page adds what it says
    const model = new TaskModel({ client, now: NOW });
    await model.refresh();
    const panel = new TasksPanel(model, client);
    document.body.append(panel.node);
    await settle(panel);
    panel.render();
    const status = () => panel.node.querySelector('.cm-TasksPanel-status')?.textContent;
    expect(status()).toBe('200 of 1,000 tasks');
    expect(panel.list.rowCount).toBe(200);
    expect(panel.list.drawnCount).toBeLessThan(30); // windowed: the DOM holds the view
    const counts = Array.from(panel.node.querySelectorAll<HTMLButtonElement>('.cm-Count'));
    expect(counts.map(b => b.textContent)).toEqual(['succeeded 900', 'failed 100']);

    // the next page: the footer's button (the list also asks when scrolled to its end)
    const more = panel.node.querySelector<HTMLButtonElement>('.cm-TasksPanel-moreButton')!;
    expect(more.hidden).toBe(false);
    expect(more.textContent).toBe('Load 200 older tasks');
    more.click();
    await settle(panel);
    panel.render();
    expect(client.queries.at(-1)?.get('after')).toBe('200');
    expect(status()).toBe('400 of 1,000 tasks');
    expect(panel.list.scrollToTask('h0399')).toBe(true);
    panel.render();
    expect(panel.node.querySelector('li[data-task-id="h0399"]')).not.toBeNull();

    // select a task of page 2, refresh: the loaded range is read again, all of it
    panel.select('h0399');
    const refresh = panel.node.querySelector<HTMLButtonElement>('.cm-TasksPanel-refresh')!;
    refresh.click();
    await settle(panel);
    panel.render();
    // (the panel's own listing: the model asks for the failed tasks after its refresh)
    expect(client.queries.filter(q => !q.has('status')).at(-1)?.get('limit')).toBe('400');
    expect(panel.selected).toBe('h0399');
    expect(panel.list.rowCount).toBe(400);

    // the Failed count filters on the server: the newest failed tasks, counted as such
    counts[1].click();
    await settle(panel);
    panel.render();
    expect(client.queries.at(-1)?.get('status')).toBe('failed');
    expect(status()).toBe('100 of 100 matching tasks (1,000 in the store)');
    expect(panel.node.querySelector<HTMLElement>('.cm-TasksPanel-more')!.hidden).toBe(true);
    expect(panel.node.querySelector('.cm-Count[aria-pressed="true"]')?.textContent).toBe('failed 100');

    // text (after a pause in typing, or at once on Enter): sent to the server too
    const text = panel.node.querySelector<HTMLInputElement>('.cm-Filter-text')!;
    text.value = 'h098';
    text.dispatchEvent(new Event('change'));
    await settle(panel);
    panel.render();
    const q = client.queries.at(-1)!;
    expect([q.get('status'), q.get('text')]).toEqual(['failed', 'h098']);
    expect(panel.list.rowCount).toBe(1); // h0989
    expect(panel.selected).toBe('h0399'); // a filter never drops the selection
    expect(status()).toBe('1 of 1 matching tasks (1,000 in the store)');

    // a text over more than a page: its matches are not counted until all are loaded
    panel.node.querySelector<HTMLButtonElement>('.cm-Count[aria-pressed="true"]')!.click(); // again: every status
    text.value = 'load';
    text.dispatchEvent(new Event('change'));
    await settle(panel);
    panel.render();
    expect(status()).toBe('200 of 200+ matching tasks (1,000 in the store)');
    more.click();
    await settle(panel);
    panel.render();
    expect(status()).toBe('333 of 333 matching tasks (1,000 in the store)');
    panel.dispose();
    model.dispose();
  });

  it("shows a notebook's tasks however old they are: the server picks them, a page at a time", async () => {
    const rows = history(1000);
    for (let i = 300; i < 550; i++) {
      rows[i] = { ...rows[i], kernel_id: 'k-etl', notebook: 'etl.ipynb' };
    }
    for (let i = 800; i < 810; i++) {
      rows[i] = { ...rows[i], kernel_id: 'k-gone' };
    }
    const client = new PagingClient(rows);
    const model = new TaskModel({ client, limit: 10, now: NOW });
    await model.refresh();
    const panel = new TasksPanel(model, client);
    document.body.append(panel.node);
    await settle(panel);
    const status = () => panel.node.querySelector('.cm-TasksPanel-status')?.textContent;

    // the status bar's click: every task of that notebook, none of them on the first page
    panel.setNotebookFilter('etl.ipynb');
    await settle(panel);
    panel.render();
    expect(client.queries.at(-1)?.get('notebook')).toBe('etl.ipynb');
    expect(client.queries.at(-1)?.has('kernel')).toBe(false);
    expect(panel.list.rowCount).toBe(200);
    expect(panel.list.scrollToTask('h0300')).toBe(true);
    expect(panel.list.scrollToTask('h0299')).toBe(false);
    expect(status()).toBe('200 of 200+ matching tasks (1,000 in the store)');
    // the menu still offers the other notebooks (from the live picture)
    const options = Array.from(
      panel.node.querySelectorAll<HTMLOptionElement>('.cm-Filter-notebook option')
    ).map(o => o.textContent);
    expect(options).toEqual(['All notebooks', 'etl.ipynb', 'A kernel with no notebook', 'No live kernel']);
    panel.node.querySelector<HTMLButtonElement>('.cm-TasksPanel-moreButton')!.click();
    await settle(panel);
    panel.render();
    expect(client.queries.at(-1)?.get('after')).toBe('200');
    expect(panel.list.rowCount).toBe(250);
    expect(panel.list.scrollToTask('h0549')).toBe(true);
    expect(status()).toBe('250 of 250 matching tasks (1,000 in the store)');

    // a kernel no session knows: by its id
    panel.setNotebookFilter('kernel:k-gone');
    await settle(panel);
    panel.render();
    expect(client.queries.at(-1)?.get('kernel')).toBe('k-gone');
    expect(panel.list.rowCount).toBe(10);

    // every notebook again: no owner asked for
    panel.setNotebookFilter(null);
    await settle(panel);
    panel.render();
    const last = client.queries.filter(q => !q.has('status')).at(-1)!;
    expect([last.has('notebook'), last.has('kernel')]).toEqual([false, false]);
    expect(status()).toBe('200 of 1,000 tasks');
    panel.dispose();
    model.dispose();
  });

  it('says when the loaded rows reach the cap and how to reach older tasks', async () => {
    const pager = new TaskPager(new PagingClient(history(30)), { pageSize: 10, maxRows: 20 });
    await pager.setFilter({ statuses: [], text: '' });
    await pager.more();
    expect(pager.atCap).toBe(true);
    const footer = new ListFooter(() => undefined);
    footer.update(pager);
    expect(footer.node.textContent).toBe(
      'The newest 20 are loaded: filter by status, notebook or name to reach older tasks.'
    );
    expect(grouped(1234567)).toBe('1,234,567');
  });
});

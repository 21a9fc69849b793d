import { describe, expect, it } from 'vitest';

import { CommandInfo, FeedResponse, ITasksClient, TaskDetail, TasksResponse } from '../src/api';
import { ControlVerb } from '../src/contract';
import { ListingRow } from '../src/contract';
import { TaskModel } from '../src/model';
import { countStatuses } from '../src/render';
import { row, T0 } from './fixtures';

class FakeClient implements ITasksClient {
  listing: TasksResponse = { tasks: [], counts: {}, cursor: 1, sessions: {}, now: '2026-01-01T00:00:00Z' };
  feeds: FeedResponse[] = [];
  sent: [string, ControlVerb][] = [];
  states: CommandInfo['state'][] = [];

  async listTasks(): Promise<TasksResponse> {
    return this.listing;
  }
  async feed(): Promise<FeedResponse> {
    const next = this.feeds.shift();
    if (!next) {
      throw new Error('feed closed');
    }
    return next;
  }
  async task(): Promise<TaskDetail> {
    throw new Error('not used');
  }
  async sendCommand(taskId: string, verb: ControlVerb): Promise<CommandInfo> {
    this.sent.push([taskId, verb]);
    return this.info(taskId, verb, 'pending', null);
  }
  async command(): Promise<CommandInfo> {
    const state = this.states.shift() ?? 'done';
    return this.info('t1', 'stop', state, state === 'rejected' ? { ok: false, reason: 'it already ended' } : { ok: true });
  }
  info(taskId: string, verb: ControlVerb, state: CommandInfo['state'], outcome: Record<string, unknown> | null): CommandInfo {
    return {
      command_id: 'c1',
      id: taskId,
      verb,
      state,
      actor: 'sidebar:me',
      created_at: null,
      completed_at: null,
      claimed_by: null,
      outcome
    };
  }
}

/** Answers a listing as the server does: the rows of the asked statuses, newest first, at most `limit`. */
class StoreClient extends FakeClient {
  rows: ListingRow[] = [];
  async listTasks(query?: string): Promise<TasksResponse> {
    const params = new URLSearchParams(query ?? '');
    const statuses = params.get('status')?.split(',') ?? null;
    const limit = Number(params.get('limit') ?? 500);
    const rows = this.rows
      .filter(r => statuses === null || statuses.includes(r.status))
      .sort((a, b) => (b.created ?? 0) - (a.created ?? 0))
      .slice(0, limit);
    return { ...this.listing, tasks: rows };
  }
}

/** A StoreClient whose listings of failed tasks wait until `release()`. */
class SlowFailuresClient extends StoreClient {
  private _held: (() => void)[] = [];
  async listTasks(query?: string): Promise<TasksResponse> {
    const answer = await super.listTasks(query); // (the store as it was when asked)
    if ((query ?? '').includes('status=failed')) {
      await new Promise<void>(resolve => this._held.push(resolve));
    }
    return answer;
  }
  release(): void {
    for (const go of this._held.splice(0)) {
      go();
    }
  }
  get holding(): number {
    return this._held.length;
  }
}

describe('TaskModel', () => {
  it('draws a refresh before its failed tasks answer, and drops a stale answer', async () => {
    const client = new SlowFailuresClient();
    client.rows = [
      row({ id: 'old-failure', status: 'failed', kernel_id: 'k1', created: T0 }),
      row({ id: 'new', status: 'succeeded', kernel_id: 'k1', created: T0 + 1 })
    ];
    const model = new TaskModel({ client, retryDelayMs: 1, limit: 1 });
    const seen: string[][] = [];
    model.changed.connect(() => seen.push(model.tasks.map(t => t.id).sort()));
    const first = model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(seen).toEqual([['new']]); // drawn without waiting for the failures
    client.release();
    await first;
    expect(seen[seen.length - 1]).toEqual(['new', 'old-failure']);
    // a refresh whose failures answer after a newer refresh replaced everything
    const older = model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    client.rows = client.rows.filter(r => r.id !== 'old-failure'); // (retried meanwhile)
    const newer = model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(client.holding).toBe(2);
    client.release();
    await Promise.all([older, newer]);
    expect(model.task('old-failure')).toBeUndefined();
  });


  it("counts a kernel's failures older than the newest tasks listed", async () => {
    // a 3,000-item map of this kernel in which the first items failed: the newest 2,000
    // tasks listed held none of them, and the status bar said "0 failed"
    const client = new StoreClient();
    const old = (i: number, status: ListingRow['status']) =>
      row({ id: `f${i}`, status, kernel_id: 'k1', created: T0 + i });
    client.rows = [old(0, 'failed'), old(1, 'lost')];
    for (let i = 0; i < 3000; i++) {
      client.rows.push(row({ id: `s${i}`, status: 'succeeded', kernel_id: 'k1', created: T0 + 100 + i }));
    }
    const model = new TaskModel({ client, retryDelayMs: 1 });
    await model.refresh();
    expect(countStatuses(model.tasks, 'k1')).toEqual({ running: 0, paused: 0, failed: 2 });
  });


  it('loads, applies feed changes and ignores stale rows', async () => {
    const client = new FakeClient();
    client.listing.tasks = [row({ id: 'a', version: 5 }), row({ id: 'b' })];
    const model = new TaskModel({ client, retryDelayMs: 1 });
    await model.refresh();
    expect(model.tasks.map(t => t.id).sort()).toEqual(['a', 'b']);
    model.applyRows([row({ id: 'a', version: 4, status: 'queued' })]);
    expect(model.task('a')?.status).toBe('running');
    model.applyRows([row({ id: 'a', version: 6, status: 'paused' })], ['b']);
    expect(model.task('a')?.status).toBe('paused');
    expect(model.task('b')).toBeUndefined();
  });

  it('follows the feed, resets on request and labels tasks with session paths', async () => {
    const client = new FakeClient();
    client.listing.tasks = [row({ id: 'a', notebook: null, kernel_id: 'k9' })];
    client.feeds = [
      { cursor: 2, reset: false, tasks: [row({ id: 'n', kernel_id: 'k9', notebook: null })], removed: [], sessions: { k9: 'x.ipynb' }, now: '2026-01-01T00:00:00Z' },
      { cursor: 3, reset: true, tasks: [row({ id: 'z' })], removed: [], sessions: {}, now: '2026-01-01T00:00:01Z' }
    ];
    const model = new TaskModel({ client, retryDelayMs: 1 });
    let changes = 0;
    model.changed.connect(() => {
      changes += 1;
      if (client.feeds.length === 0 && model.cursor === 3) {
        model.dispose();
      }
    });
    await model.run();
    expect(changes).toBeGreaterThan(1);
    expect(model.tasks.map(t => t.id)).toEqual(['z']);
    expect(model.cursor).toBe(3);
    model.setSessions(new Map([['k1', 'renamed.ipynb']]));
    expect(model.task('z')?.notebook).toBe('renamed.ipynb');
  });

  it('sends a command and follows it until done', async () => {
    const client = new FakeClient();
    client.listing.tasks = [row()];
    client.states = ['claimed', 'done'];
    const model = new TaskModel({ client, commandPollMs: 1 });
    await model.refresh();
    const result = await model.send('t1', 'stop');
    expect(client.sent).toEqual([['t1', 'stop']]);
    expect(result.state).toBe('done');
    // a done command stays, for its note to fade in the row
    expect(model.pending('t1')?.state).toBe('done');
  });

  it('keeps the reason of a rejected command', async () => {
    const client = new FakeClient();
    client.states = ['rejected'];
    const model = new TaskModel({ client, commandPollMs: 1 });
    const result = await model.send('t1', 'stop');
    expect(result.state).toBe('rejected');
    expect(model.pending('t1')?.message).toBe('it already ended');
  });

  it('sends to every task of a kernel that allows the verb', async () => {
    const client = new FakeClient();
    client.listing.tasks = [
      row({ id: 'a' }),
      row({ id: 'b', can: { pause: false, resume: true, stop: true, retry: false, skip: false } }),
      row({ id: 'c', kernel_id: 'other' })
    ];
    const model = new TaskModel({ client, commandPollMs: 1 });
    await model.refresh();
    expect(await model.sendToKernel('k1', 'pause')).toBe(1);
    expect(client.sent).toEqual([['a', 'pause']]);
  });
  it('moves the layout revision only when a listing would change order or membership', async () => {
    const client = new FakeClient();
    client.listing.tasks = [row({ id: 'a' }), row({ id: 'b', notebook: 'b.ipynb' })];
    const model = new TaskModel({ client });
    await model.refresh();
    expect(model.size).toBe(2);
    let rev = model.layoutRevision;
    // progress, duration, can flags: the same rows in the same places
    model.applyRows([
      row({ id: 'a', version: 3, done: 5, total: 10, message: 'x' }),
      row({ id: 'b', notebook: 'b.ipynb', can: { pause: false, resume: true, stop: true, retry: false, skip: false } })
    ]);
    expect(model.layoutRevision).toBe(rev);
    for (const change of [
      () => model.applyRows([row({ id: 'a', version: 4, status: 'paused' })]),
      () => model.applyRows([row({ id: 'a', version: 5, status: 'paused', name: 'other' })]),
      () => model.applyRows([row({ id: 'c' })]),
      () => model.applyRows([], ['c']),
      () => model.setSessions(new Map([['k1', 'moved.ipynb']])),
      () => model.refresh()
    ]) {
      await change();
      expect(model.layoutRevision).toBeGreaterThan(rev);
      rev = model.layoutRevision;
    }
    // a stale row and an unknown removal change nothing
    model.applyRows([row({ id: 'a', version: 1, status: 'queued' })], ['nope']);
    expect(model.layoutRevision).toBe(rev);
  });
});

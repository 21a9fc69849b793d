import { describe, expect, it } from 'vitest';

import { ListingRow } from '../src/contract';
import { TaskModel } from '../src/model';
import { TasksPanel } from '../src/sidebar';
import { IPicturesClient, LIVE_REFRESH_MS, RunGraphResponse, TaskPictures, attemptsHeading } from '../src/sidebar-detail';
import { TimelineData } from '../src/timeline';
import { T0, listingClient, row } from './fixtures';

/** Two attempts of one task: the first failed, a retry wait, the second succeeded. */
export function retriedTimeline(name = 'flaky <b>x</b>'): TimelineData {
  return {
    version: 1,
    title: name,
    t0: T0,
    span: 3,
    lanes: [name],
    lane_ids: ['t1'],
    bars: { lane: [0, 0], start: [0, 2], end: [1, 3], tone: ['bad', 'ok'], attempt: [1, 2], running: [0, 0] },
    keys: ['name', 'attempt', 'outcome', 'failure_message'],
    details: [
      [name, '1', 'failed', 'boom <script>'],
      [name, '2', 'succeeded', '']
    ],
    marks: { lane: [0], kind: ['retry_wait'], tone: ['warn'], start: [1], end: [2], label: ['retry wait'] },
    slots: [
      [0, 1],
      [1, 0],
      [2, 1],
      [3, 0]
    ],
    max_slots: 1
  };
}

class FakePictures implements IPicturesClient {
  timelines: string[] = [];
  data: TimelineData = retriedTimeline();
  fail: string | null = null;
  async timeline(taskId: string): Promise<TimelineData> {
    this.timelines.push(taskId);
    if (this.fail) {
      throw new Error(this.fail);
    }
    return this.data;
  }
  async runGraph(): Promise<RunGraphResponse> {
    throw new Error('not used');
  }
}

/** Let the fakes' promises settle (no timers involved). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) {
    await Promise.resolve();
  }
}

async function panelWith(rows: ListingRow[], pictures: TaskPictures): Promise<TasksPanel> {
  const client = listingClient(rows, id => ({ task: rows.find(r => r.id === id)!, attempts: [], history: [], logs: [] }));
  const model = new TaskModel({ client, now: () => Date.parse('2026-01-01T00:01:00Z') });
  await model.refresh();
  const panel = new TasksPanel(model, client);
  panel.detailExtra = pictures;
  document.body.replaceChildren(panel.node);
  panel.render();
  return panel;
}

describe('the sidebar details: attempts as a small timeline', () => {
  it('shows the selected task attempts below its verbs, with the run graph link of a step', async () => {
    const fake = new FakePictures();
    const opened: [string, string][] = [];
    let now = T0;
    const pictures = new TaskPictures({ client: fake, now: () => now, onOpenRun: (run, task) => opened.push([run, task]) });
    const step = row({ id: 't1', name: 'flaky <b>x</b>', status: 'succeeded', ended: T0 + 3000, attempt: 2, run: 'run-1' });
    const panel = await panelWith([step], pictures);

    panel.select('t1');
    await settle();
    panel.render();
    await settle();
    panel.render();
    const details = panel.node.querySelector('.cm-Details')!;
    const box = details.querySelector<HTMLElement>('.cm-Details-pictures')!;
    expect(box).not.toBeNull();
    expect(box.hidden).toBe(false);
    // below the verbs, with the essentials; the ids and times come after it
    expect(box.previousElementSibling?.classList.contains('cm-Details-actions')).toBe(true);
    expect(box.nextElementSibling?.classList.contains('cm-Details-where')).toBe(true);
    const view = box.querySelector<HTMLElement>('.cm-MiniTimeline')!;
    expect(view.dataset.attempts).toBe('2');
    expect(view.dataset.lanes).toBe('1');
    expect(box.querySelector('.cn-timeline-head')?.textContent).toBe('Attempts over time: 2 in 3.0s');
    // one renderer: the notebook's canvas timeline, without its label column and strip
    expect(box.querySelector('canvas.cn-timeline-canvas')).not.toBeNull();
    expect(box.querySelector<HTMLElement>('canvas.cn-timeline-strip')!.hidden).toBe(true);
    expect(details.querySelector('b')).toBeNull(); // names and messages are text
    expect(fake.timelines).toEqual(['t1']);

    // hovering: the bar under the pointer and its attempt row (the view is 800 px wide
    // here: happy-dom lays nothing out; no label column, a 12 px margin)
    const plot = 800 - 12;
    expect(pictures.view.barAt(plot * (0.5 / 3), 10)).toBe(0);
    expect(pictures.view.barAt(plot * (2.5 / 3), 10)).toBe(1);
    expect(pictures.view.barAt(plot * (1.5 / 3), 10)).toBe(-1); // the retry wait
    expect(pictures.view.details(0)).toContainEqual(['failure_message', 'boom <script>']);
    expect(pictures.view.details(1)).toContainEqual(['outcome', 'succeeded']);

    // a finished task is not read again as the panel redraws
    now += 10 * LIVE_REFRESH_MS;
    panel.render();
    await settle();
    expect(fake.timelines).toEqual(['t1']);

    // the link opens the run's graph from this step
    const link = box.querySelector<HTMLButtonElement>('.cm-Details-runGraph')!;
    expect(link.hidden).toBe(false);
    expect(link.textContent).toBe('run graph');
    link.click();
    expect(opened).toEqual([['run-1', 't1']]);

    // closing the details empties them
    panel.select(null);
    panel.render();
    expect(panel.node.querySelector('.cm-Details-pictures')).toBeNull();
    panel.dispose();
  });

  it('a task outside a pipeline run has no run graph link', async () => {
    const pictures = new TaskPictures({ client: new FakePictures(), onOpenRun: () => undefined });
    const panel = await panelWith([row({ id: 't1', status: 'succeeded', ended: T0 + 1000 })], pictures);
    panel.select('t1');
    await settle();
    panel.render();
    expect(panel.node.querySelector<HTMLElement>('.cm-Details-runGraph')!.hidden).toBe(true);
    panel.dispose();
  });

  it('is live while the task runs: a new version, or the clock while it is not finished', async () => {
    const fake = new FakePictures();
    let now = T0;
    const pictures = new TaskPictures({ client: fake, now: () => now });
    const running = row({ id: 't1', status: 'running', attempt: 1, version: 3 });
    pictures.follow('t1', running);
    await settle();
    expect(fake.timelines.length).toBe(1);
    // the same row, no time passed: nothing read
    pictures.follow('t1', running);
    await settle();
    expect(fake.timelines.length).toBe(1);
    // the listing brought a new version (a retry wait began): read again at once
    const waiting = { ...running, status: 'retry_wait' as const, version: 5 };
    pictures.follow('t1', waiting);
    await settle();
    expect(fake.timelines.length).toBe(2);
    // not finished: read again once LIVE_REFRESH_MS passed, not before
    now += LIVE_REFRESH_MS - 1;
    pictures.follow('t1', waiting);
    await settle();
    expect(fake.timelines.length).toBe(2);
    now += 1;
    pictures.follow('t1', waiting);
    await settle();
    expect(fake.timelines.length).toBe(3);
    // changes while a read is on its way make one more read, not one each
    fake.data = { ...retriedTimeline(), bars: { ...retriedTimeline().bars, running: [0, 1] } };
    pictures.follow('t1', { ...waiting, version: 6, status: 'running', attempt: 2 });
    pictures.follow('t1', { ...waiting, version: 7, status: 'running', attempt: 2 });
    pictures.follow('t1', { ...waiting, version: 8, status: 'running', attempt: 2 });
    await settle();
    expect(fake.timelines.length).toBe(5);
    expect(pictures.el.querySelector('.cn-timeline-head')?.textContent).toBe('Attempts over time: 2 in 3.0s, one running');
  });

  it('says why when the timeline cannot be read, escaped', async () => {
    const fake = new FakePictures();
    fake.fail = 'unknown task <b>t9</b>';
    const pictures = new TaskPictures({ client: fake });
    pictures.follow('t9', null);
    await settle();
    const note = pictures.el.querySelector<HTMLElement>('.cm-Details-picturesNote')!;
    expect(note.hidden).toBe(false);
    expect(note.textContent).toContain('unknown task <b>t9</b>');
    expect(pictures.el.querySelector('b')).toBeNull();
  });

  it('a heading for no attempts yet', () => {
    const empty = { ...retriedTimeline(), lanes: [], lane_ids: [], bars: { lane: [], start: [], end: [], tone: [], attempt: [], running: [] } };
    expect(attemptsHeading(empty)).toBe('Attempts over time: none yet');
  });
});

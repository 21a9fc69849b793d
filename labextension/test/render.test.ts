import { describe, expect, it, vi } from 'vitest';

import {
  TaskListView,
  countStatuses,
  filterTasks,
  groupByNotebook,
  renderDetails,
  statusBarText
} from '../src/render';
import { ListingRow as TaskRow } from '../src/contract';
import { context as ctx, row } from './fixtures';

describe('status bar counts', () => {
  const rows = [
    row({ id: 'a', status: 'running' }),
    row({ id: 'b', status: 'stopping' }),
    row({ id: 'c', status: 'paused' }),
    row({ id: 'd', status: 'failed' }),
    row({ id: 'e', status: 'lost' }),
    row({ id: 'f', status: 'succeeded' }),
    row({ id: 'g', status: 'running', kernel_id: 'other' })
  ];

  it('counts only the given kernel: occupied as running, lost as failed', () => {
    const counts = countStatuses(rows, 'k1');
    expect(counts).toEqual({ running: 2, paused: 1, failed: 2 });
    expect(statusBarText(counts)).toBe('2 running · 1 paused · 2 failed');
  });

  it('counts nothing without a kernel', () => {
    expect(statusBarText(countStatuses(rows, null))).toBe('0 running · 0 paused · 0 failed');
  });
});

describe('filtering and grouping', () => {
  const rows = [
    row({ id: 'a', name: 'extract', notebook: 'b.ipynb', created: Date.parse('2026-01-01T00:00:01Z') }),
    row({ id: 'b', name: 'clean', notebook: 'a.ipynb', status: 'paused' }),
    row({ id: 'c', name: 'load', notebook: 'b.ipynb', created: Date.parse('2026-01-01T00:00:09Z') }),
    row({ id: 'd', name: 'orphan', notebook: null, kernel_id: null }),
    row({ id: 'e', name: 'headless', notebook: null, kernel_id: 'abcdef1234567' })
  ];

  it('groups by notebook, newest first, kernels without notebooks and orphans last', () => {
    const groups = groupByNotebook(rows);
    expect(groups.map(g => g.label)).toEqual([
      'a.ipynb',
      'b.ipynb',
      'A kernel with no notebook',
      'No live kernel'
    ]);
    expect(groups[1].rows.map(r => r.id)).toEqual(['c', 'a']);
  });

  it('names a gone kernel for people: what became of it and when it started, never its id', () => {
    const started = Date.parse('2026-01-01T14:05:00');
    const owner = `host:77:abcdef1234567:${started / 10}-n0nce`;
    const gone = [
      row({ id: 'g1', notebook: null, kernel_id: 'abcdef1234567', owner, status: 'lost', kernel_gone_reason: 'pid 77 is not running' })
    ];
    const [group] = groupByNotebook(gone);
    expect(group.label).toBe('A kernel that is gone, started 14:05');
    expect(group.label).not.toContain('abcdef');
  });

  it('filters by status set, notebook and text', () => {
    expect(filterTasks(rows, { statuses: new Set(['paused']), notebook: null, text: '' }).map(r => r.id)).toEqual([
      'b'
    ]);
    expect(filterTasks(rows, { statuses: new Set(), notebook: 'b.ipynb', text: '' }).map(r => r.id)).toEqual([
      'a',
      'c'
    ]);
    expect(filterTasks(rows, { statuses: new Set(), notebook: null, text: 'LOA' }).map(r => r.id)).toEqual(['c']);
    expect(filterTasks(rows, { statuses: new Set(), notebook: '', text: '' }).map(r => r.id)).toEqual(['d']);
  });
});

describe('TaskListView (windowed)', () => {
  // no layout in happy-dom: every height is the estimate, the viewport the fallback
  const ROW = 50;
  const HEADER = 20;
  const VIEWPORT = 500;
  const OVERSCAN = 3;

  function many(n: number, notebook = 'a.ipynb', prefix = 't'): TaskRow[] {
    return Array.from({ length: n }, (_, i) =>
      row({
        id: `${prefix}${String(i).padStart(5, '0')}`,
        name: `task ${i}`,
        status: 'paused',
        notebook
      })
    );
  }

  function setup(rows: TaskRow[]) {
    const host = document.createElement('div');
    document.body.append(host);
    const view = new TaskListView(host, {
      rowHeight: ROW,
      headerHeight: HEADER,
      fallbackViewport: VIEWPORT,
      overscan: OVERSCAN
    });
    view.update(groupByNotebook(rows), ctx());
    const drawn = () =>
      Array.from(host.querySelectorAll<HTMLElement>('li.cm-Row')).map(li => li.dataset.taskId);
    return { host, view, drawn };
  }

  it('draws only the rows in view plus the overscan, however long the list', () => {
    const bound = Math.ceil(VIEWPORT / ROW) + 1 + 2 * OVERSCAN;
    for (const n of [50, 2000, 10000]) {
      const { host, view, drawn } = setup(many(n));
      expect(view.rowCount).toBe(n);
      expect(drawn().length).toBeLessThanOrEqual(bound);
      expect(view.drawnCount).toBe(drawn().length);
      expect(drawn()[0]).toBe('t00000');
      // the sizer is as tall as the whole list, so the scrollbar is honest
      const sizer = host.querySelector<HTMLElement>('.cm-TaskList-sizer')!;
      expect(sizer.style.height).toBe(`${HEADER + n * ROW}px`);
      host.remove();
    }
  });

  it('scrolling shows the right rows, at their offset, with their position in the group', () => {
    const { host, view, drawn } = setup(many(2000));
    host.scrollTop = HEADER + 1000 * ROW;
    view.draw(ctx());
    const ids = drawn();
    // row 1000 is at the top of the viewport; overscan above, the viewport below
    expect(ids[0]).toBe(`t${String(1000 - OVERSCAN).padStart(5, '0')}`);
    expect(ids).toContain('t01000');
    expect(ids).toContain(`t${String(1000 + VIEWPORT / ROW - 1).padStart(5, '0')}`);
    expect(ids).not.toContain('t00000');
    expect(ids.length).toBeLessThanOrEqual(Math.ceil(VIEWPORT / ROW) + 1 + 2 * OVERSCAN);
    // contiguous and in order
    const numbers = ids.map(id => Number(id!.slice(1)));
    expect(numbers).toEqual(numbers.map((_, k) => numbers[0] + k));
    const win = host.querySelector<HTMLElement>('.cm-TaskList-window')!;
    expect(win.style.top).toBe(`${HEADER + (1000 - OVERSCAN) * ROW}px`);
    const li = host.querySelector<HTMLElement>('li[data-task-id="t01000"]')!;
    expect(li.getAttribute('aria-posinset')).toBe('1001');
    expect(li.getAttribute('aria-setsize')).toBe('2000');
    // the group title scrolled away; the list keeps its label
    const section = host.querySelector('section[data-notebook="a.ipynb"]')!;
    expect(section.querySelector('h3')).toBeNull();
    expect(section.querySelector('ul')?.getAttribute('aria-label')).toBe('Tasks of a.ipynb');
    // ... and holds only rows (the title's text went nowhere else)
    const drawAgain = () => view.draw(ctx({ now: Date.parse('2026-01-01T00:09:00Z') }));
    drawAgain();
    expect(Array.from(section.querySelector('ul')!.childNodes).map(n => n.nodeName)).toEqual(
      ids.map(() => 'LI')
    );
    expect(Array.from(section.childNodes).map(n => n.nodeName)).toEqual(['UL']);
    // to the end
    host.scrollTop = HEADER + 2000 * ROW - VIEWPORT;
    view.draw(ctx());
    expect(drawn().at(-1)).toBe('t01999');
    host.remove();
  });

  it('crosses group boundaries: each drawn group in its own section, titles when in view', () => {
    const rows = [...many(30, 'a.ipynb', 'a'), ...many(30, 'b.ipynb', 'b')];
    const { host, view } = setup(rows);
    // the end of group a and the start of group b
    host.scrollTop = HEADER + 25 * ROW;
    view.draw(ctx());
    const a = host.querySelector('section[data-notebook="a.ipynb"]')!;
    const b = host.querySelector('section[data-notebook="b.ipynb"]')!;
    expect(a.querySelector('h3')).toBeNull();
    expect(a.querySelector('li[data-task-id="a00029"]')).not.toBeNull();
    expect(b.querySelector('h3')?.textContent).toBe('b.ipynb (30)');
    expect(b.querySelector('li[data-task-id="b00000"]')).not.toBeNull();
    expect(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
    expect(view.scrollToTask('b00029')).toBe(true);
    view.draw(ctx());
    expect(host.querySelector('li[data-task-id="b00029"]')).not.toBeNull();
    expect(host.querySelector('section[data-notebook="a.ipynb"]')).toBeNull();
    expect(view.scrollToTask('nope')).toBe(false);
    host.remove();
  });

  it('patches a changed row in place and leaves the others untouched', () => {
    const rows = many(2000);
    const { host, view } = setup(rows);
    const li = host.querySelector<HTMLElement>('li[data-task-id="t00002"]')!;
    const stop = li.querySelector<HTMLButtonElement>('button[data-verb="stop"]')!;
    const resume = li.querySelector<HTMLButtonElement>('button[data-verb="resume"]')!;
    stop.focus();
    expect(document.activeElement).toBe(stop);
    expect(resume.hidden).toBe(true);
    const observer = new MutationObserver(() => undefined);
    observer.observe(host, { subtree: true, childList: true, attributes: true, characterData: true });
    const changed = {
      ...rows[2],
      status: 'failed',
      version: 9,
      name: '<b>renamed</b>',
      failure: { kind: 'exception', message: '<i>boom</i>', exception_type: 'ValueError' },
      can: { ...rows[2].can, stop: false, resume: true },
      why: { stop: 'it already ended' }
    } as TaskRow;
    view.replaceRows(id => (id === 't00002' ? changed : undefined));
    view.draw(ctx());
    expect(view.redrawn).toBe(1);
    const records = observer.takeRecords();
    observer.disconnect();
    const touched = new Set(
      records.map(r => {
        const n = r.target instanceof HTMLElement ? r.target : r.target.parentElement;
        return n?.closest('li')?.dataset.taskId;
      })
    );
    expect(touched).toEqual(new Set(['t00002']));
    // the same elements, updated
    expect(host.querySelector('li[data-task-id="t00002"]')).toBe(li);
    expect(li.querySelector('button[data-verb="stop"]')).toBe(stop);
    // Stop is no longer allowed: it is gone, and the focus moved to the row's name
    expect(document.activeElement).toBe(li.querySelector('.cm-Row-name'));
    expect(li.dataset.status).toBe('failed');
    expect(stop.hidden).toBe(true);
    expect(stop.title).toBe('it already ended');
    expect(resume.hidden).toBe(false);
    expect(li.querySelector('.cm-Row-name')?.textContent).toBe('<b>renamed</b>');
    expect(li.querySelector('.cm-Row-noteText')?.textContent).toBe('exception: <i>boom</i>');
    expect(li.querySelector('b, i')).toBeNull();
    // nothing changed: nothing drawn, no mutation
    view.draw(ctx());
    expect(view.redrawn).toBe(0);
    host.remove();
  });

  it('keeps the focus in the list when the focused row leaves the window', () => {
    const { host, view } = setup(many(2000));
    host.querySelector<HTMLButtonElement>('li[data-task-id="t00001"] button[data-verb="stop"]')!.focus();
    host.scrollTop = HEADER + 1000 * ROW;
    view.draw(ctx());
    expect(host.querySelector('li[data-task-id="t00001"]')).toBeNull();
    expect(document.activeElement).toBe(host);
    host.remove();
  });

  it('draws a row that changed while out of view as it is now', () => {
    const rows = many(2000);
    const { host, view } = setup(rows);
    const later = { ...rows[1500], status: 'queued', version: 8 } as TaskRow;
    view.replaceRows(id => (id === later.id ? later : undefined));
    view.draw(ctx());
    expect(host.querySelector(`li[data-task-id="${later.id}"]`)).toBeNull();
    expect(view.scrollToTask(later.id)).toBe(true);
    view.draw(ctx());
    const li = host.querySelector<HTMLElement>(`li[data-task-id="${later.id}"]`)!;
    expect(li.dataset.status).toBe('queued');
    expect(li.querySelector('.cm-Row-status')?.textContent).toBe('queued');
    host.remove();
  });

  it('runs button clicks of a patched row with the latest context', () => {
    const rows = many(10);
    const { host, view } = setup(rows);
    const onVerb = vi.fn();
    view.replaceRows(id => (id === 't00001' ? { ...rows[1], version: 7 } : undefined));
    view.draw(ctx({ onVerb }));
    host.querySelector<HTMLButtonElement>('li[data-task-id="t00001"] button[data-verb="pause"]')!.click();
    expect(onVerb).toHaveBeenCalledWith('t00001', 'pause');
    host.remove();
  });

  it('says so when nothing matches, and draws again when rows come back', () => {
    const { host, view, drawn } = setup(many(20));
    view.update([], ctx());
    expect(drawn()).toEqual([]);
    expect(host.querySelector('.cm-TaskList-empty')?.textContent).toBe('No tasks match.');
    view.update(groupByNotebook(many(20)), ctx());
    expect(drawn().length).toBeGreaterThan(0);
    expect(host.querySelector('.cm-TaskList-empty')).toBeNull();
    host.remove();
  });
});

describe('details', () => {
  it('renders attempts, traceback, logs and history as text', () => {
    const evil = '<script>alert(1)</script>';
    const node = renderDetails(
      {
        task: row({
          status: 'failed',
            name: evil,
          failure: { kind: 'exception', message: evil, exception_type: 'ValueError', traceback: `Traceback\n${evil}` }
        }),
        attempts: [
          {
            attempt: 1,
            started_at: '2026-01-01T00:00:00Z',
            ended_at: '2026-01-01T00:00:04Z',
            duration_s: 4,
            outcome: 'failed',
            failure_kind: 'exception',
            failure_message: 'boom',
            traceback: 'Traceback: boom',
            executor: 'thread',
            abandoned: false,
            exit_code: null
          }
        ],
        history: [
          {
            from_status: 'running',
            to_status: 'failed',
            trigger: 'runtime:failed',
            actor: 'runtime',
            reason: null,
            at: '2026-01-01T00:00:04Z',
            version: 4,
            override: false
          }
        ],
        logs: [{ at: null, stream: 'stderr', level: null, line: evil }]
      },
      { onVerb: () => undefined, onClose: () => undefined }
    );
    expect(node.querySelector('script')).toBeNull();
    expect(node.querySelector('.cm-Details-title')?.textContent).toBe(evil);
    expect(node.querySelector('.cm-Details-tracebackText')?.textContent).toContain(evil);
    expect(node.querySelector('.cm-Details-logText')?.textContent).toBe(`[stderr] ${evil}`);
    expect(node.textContent).toContain('Attempts (1)');
    expect(node.textContent).toContain('running → failed');
    expect(node.querySelector('button[data-verb="skip"]')).not.toBeNull();
  });

  it('puts the essentials first and the ids on one line each, whole in a tooltip and behind a copy button', async () => {
    const owner = 'host-<b>x</b>:4242:3f2a9c1e-1111-2222-3333-444455556666:1764650000-deadbeef';
    const node = renderDetails(
      { task: row({ owner, kernel_id: '3f2a9c1e-1111-2222-3333-444455556666', notebook: null }), attempts: [], history: [], logs: [] },
      { onVerb: () => undefined, onClose: () => undefined }
    );
    const lists = [...node.querySelectorAll('dl.cm-Details-facts')];
    const keys = (dl: Element) => [...dl.querySelectorAll('dt')].map(dt => dt.textContent);
    expect(keys(lists[0]).filter(k => k !== 'what happened')).toEqual(['status', 'attempt', 'progress']);
    expect(lists[0].nextElementSibling?.classList.contains('cm-Details-actions')).toBe(true);
    expect(keys(lists[1])).toEqual(['id', 'started', 'ended', 'notebook', 'kernel', 'owner', 'tags']);
    const dd = node.querySelector<HTMLElement>('dd[data-fact="owner"]')!;
    expect(dd.classList.contains('cm-Details-id')).toBe(true);
    const value = dd.querySelector<HTMLElement>('.cm-Details-value')!;
    expect(value.textContent).toBe(owner);
    expect(value.title).toBe(owner);
    expect(node.querySelector('b')).toBeNull();
    // no copy button for a missing value, nor for a fact that is not an id
    expect(node.querySelector('dd[data-fact="notebook"] button')).toBeNull();
    expect(node.querySelector('dd[data-fact="status"] button')).toBeNull();

    const copy = dd.querySelector<HTMLButtonElement>('button.cm-Details-copy')!;
    expect(copy.getAttribute('aria-label')).toBe('Copy the owner');
    const written: string[] = [];
    const clipboard = { writeText: async (text: string) => void written.push(text) };
    Object.defineProperty(navigator, 'clipboard', { value: clipboard, configurable: true });
    try {
      copy.click();
      await Promise.resolve();
      await Promise.resolve();
      expect(written).toEqual([owner]);
      expect(copy.textContent).toBe('copied');
      // a page that may not write the clipboard: the id is selected for the user's Ctrl+C
      Object.defineProperty(navigator, 'clipboard', {
        value: { writeText: () => Promise.reject(new Error('denied')) },
        configurable: true
      });
      document.body.append(node);
      const kernel = node.querySelector<HTMLButtonElement>('dd[data-fact="kernel"] button')!;
      kernel.click();
      for (let i = 0; i < 5; i++) {
        await Promise.resolve();
      }
      expect(kernel.textContent).toBe('selected');
      expect(window.getSelection()?.toString()).toBe('3f2a9c1e-1111-2222-3333-444455556666');
    } finally {
      Reflect.deleteProperty(navigator, 'clipboard');
      node.remove();
    }
  });
});

import { describe, expect, it, vi } from 'vitest';

import {
  TaskListView,
  countStatuses,
  filterTasks,
  formatDuration,
  formatProgress,
  groupByNotebook,
  liveDuration,
  renderDetails,
  renderTaskRow,
  statusBarText,
  RowContext
} from '../src/render';
import { TaskRow } from '../src/api';
import { row } from './fixtures';

function ctx(overrides: Partial<RowContext> = {}): RowContext {
  return {
    now: Date.parse('2026-01-01T00:01:05Z'),
    pending: () => undefined,
    onVerb: () => undefined,
    onSelect: () => undefined,
    selected: null,
    ...overrides
  };
}

describe('formatting', () => {
  it('formats durations', () => {
    expect(formatDuration(null)).toBe('—');
    expect(formatDuration(42.7)).toBe('42s');
    expect(formatDuration(185)).toBe('3m 05s');
    expect(formatDuration(3720)).toBe('1h 02m');
  });

  it('formats progress with and without a total', () => {
    expect(formatProgress(row({ progress: { done: 30, total: 120, unit: 'rows', message: null, fraction: 0.25 } }))).toBe(
      '25% (30/120 rows)'
    );
    expect(formatProgress(row({ progress: { done: 7, total: null, unit: null, message: null, fraction: null } }))).toBe('7');
    expect(formatProgress(row())).toBe('');
  });

  it('runs the duration of a running task on the server clock, freezes a finished one', () => {
    const now = Date.parse('2026-01-01T00:01:05Z');
    expect(liveDuration(row(), now)).toBe(65);
    const ended = row({ status: 'succeeded', terminal: true, ended_at: '2026-01-01T00:00:10+00:00' });
    expect(liveDuration(ended, now)).toBe(10);
    expect(liveDuration(row({ started_at: null, duration_s: null }), now)).toBeNull();
  });
});

describe('status bar counts', () => {
  const rows = [
    row({ task_id: 'a', status: 'running' }),
    row({ task_id: 'b', status: 'stopping' }),
    row({ task_id: 'c', status: 'paused' }),
    row({ task_id: 'd', status: 'failed' }),
    row({ task_id: 'e', status: 'lost' }),
    row({ task_id: 'f', status: 'succeeded' }),
    row({ task_id: 'g', status: 'running', kernel_id: 'other' })
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
    row({ task_id: 'a', name: 'extract', notebook: 'b.ipynb', created_at: '2026-01-01T00:00:01Z' }),
    row({ task_id: 'b', name: 'clean', notebook: 'a.ipynb', status: 'paused' }),
    row({ task_id: 'c', name: 'load', notebook: 'b.ipynb', created_at: '2026-01-01T00:00:09Z' }),
    row({ task_id: 'd', name: 'orphan', notebook: null, kernel_id: null }),
    row({ task_id: 'e', name: 'headless', notebook: null, kernel_id: 'abcdef1234567' })
  ];

  it('groups by notebook, newest first, kernels without notebooks and orphans last', () => {
    const groups = groupByNotebook(rows);
    expect(groups.map(g => g.label)).toEqual([
      'a.ipynb',
      'b.ipynb',
      'Kernel abcdef12 (no notebook)',
      'No live kernel'
    ]);
    expect(groups[1].rows.map(r => r.task_id)).toEqual(['c', 'a']);
  });

  it('filters by status set, notebook and text', () => {
    expect(filterTasks(rows, { statuses: new Set(['paused']), notebook: null, text: '' }).map(r => r.task_id)).toEqual([
      'b'
    ]);
    expect(filterTasks(rows, { statuses: new Set(), notebook: 'b.ipynb', text: '' }).map(r => r.task_id)).toEqual([
      'a',
      'c'
    ]);
    expect(filterTasks(rows, { statuses: new Set(), notebook: null, text: 'LOA' }).map(r => r.task_id)).toEqual(['c']);
    expect(filterTasks(rows, { statuses: new Set(), notebook: '', text: '' }).map(r => r.task_id)).toEqual(['d']);
  });
});

describe('rows', () => {
  it('escapes names and messages (text, never markup)', () => {
    const evil = '<img src=x onerror="window.pwned=1">';
    const node = renderTaskRow(
      row({
        name: evil,
        progress: { done: 1, total: 2, unit: null, message: evil, fraction: 0.5 },
        status: 'failed',
        terminal: true,
        failure: { kind: 'exception', message: evil, exception_type: 'ValueError' }
      }),
      ctx()
    );
    expect(node.querySelector('img')).toBeNull();
    expect(node.querySelector('.cm-TaskRow-name')?.textContent).toBe(evil);
    expect(node.textContent).toContain(evil);
  });

  it('enables exactly the buttons the server allows, with aria-labels and reasons', () => {
    const onVerb = vi.fn();
    const node = renderTaskRow(row(), ctx({ onVerb }));
    const buttons = Array.from(node.querySelectorAll<HTMLButtonElement>('button.cm-VerbButton'));
    const state = Object.fromEntries(buttons.map(b => [b.dataset.verb, b.disabled]));
    expect(state).toEqual({ pause: false, resume: true, stop: false, retry: true });
    const resume = buttons.find(b => b.dataset.verb === 'resume')!;
    expect(resume.title).toBe('not paused');
    const stop = buttons.find(b => b.dataset.verb === 'stop')!;
    expect(stop.getAttribute('aria-label')).toBe('Stop task extract');
    stop.click();
    expect(onVerb).toHaveBeenCalledWith('t1', 'stop');
  });

  it('disables the buttons while a command is in flight and shows a refusal', () => {
    const busy = renderTaskRow(
      row(),
      ctx({ pending: () => ({ verb: 'stop', commandId: 'c', state: 'pending', message: null }) })
    );
    expect(Array.from(busy.querySelectorAll('button.cm-VerbButton')).every(b => (b as HTMLButtonElement).disabled)).toBe(
      true
    );
    expect(busy.textContent).toContain('stop requested');
    const refused = renderTaskRow(
      row(),
      ctx({ pending: () => ({ verb: 'pause', commandId: 'c', state: 'rejected', message: 'already done' }) })
    );
    expect(refused.textContent).toContain('pause refused: already done');
  });

  it('shows a progress bar with ARIA values', () => {
    const node = renderTaskRow(
      row({ progress: { done: 30, total: 120, unit: 'rows', message: 'chunk 3', fraction: 0.25 } }),
      ctx()
    );
    const bar = node.querySelector('[role="progressbar"]')!;
    expect(bar.getAttribute('aria-valuenow')).toBe('25');
    expect(node.textContent).toContain('chunk 3');
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
        task_id: `${prefix}${String(i).padStart(5, '0')}`,
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
      Array.from(host.querySelectorAll<HTMLElement>('li.cm-TaskRow')).map(li => li.dataset.taskId);
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
    expect(resume.disabled).toBe(true);
    const observer = new MutationObserver(() => undefined);
    observer.observe(host, { subtree: true, childList: true, attributes: true, characterData: true });
    const changed = {
      ...rows[2],
      status: 'failed',
      terminal: true,
      status_version: 9,
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
    expect(document.activeElement).toBe(stop);
    expect(li.dataset.status).toBe('failed');
    expect(stop.disabled).toBe(true);
    expect(stop.title).toBe('it already ended');
    expect(resume.disabled).toBe(false);
    expect(li.querySelector('.cm-TaskRow-name')?.textContent).toBe('<b>renamed</b>');
    expect(li.querySelector('.cm-TaskRow-failure')?.textContent).toBe('exception: <i>boom</i>');
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
    const later = { ...rows[1500], status: 'queued', status_version: 8 } as TaskRow;
    view.replaceRows(id => (id === later.task_id ? later : undefined));
    view.draw(ctx());
    expect(host.querySelector(`li[data-task-id="${later.task_id}"]`)).toBeNull();
    expect(view.scrollToTask(later.task_id)).toBe(true);
    view.draw(ctx());
    const li = host.querySelector<HTMLElement>(`li[data-task-id="${later.task_id}"]`)!;
    expect(li.dataset.status).toBe('queued');
    expect(li.querySelector('.cm-StatusBadge')?.textContent).toBe('queued');
    host.remove();
  });

  it('runs button clicks of a patched row with the latest context', () => {
    const rows = many(10);
    const { host, view } = setup(rows);
    const onVerb = vi.fn();
    view.replaceRows(id => (id === 't00001' ? { ...rows[1], status_version: 7 } : undefined));
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
          terminal: true,
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
});

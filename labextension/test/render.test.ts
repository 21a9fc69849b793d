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

describe('TaskListView', () => {
  it('redraws only rows whose content changed', () => {
    const host = document.createElement('div');
    const view = new TaskListView(host);
    const rows = Array.from({ length: 50 }, (_, i) => row({ task_id: `t${i}`, name: `task ${i}`, status: 'paused' }));
    view.update(groupByNotebook(rows), ctx());
    expect(view.redrawn).toBe(50);
    expect(host.querySelectorAll('li.cm-TaskRow')).toHaveLength(50);
    rows[7] = { ...rows[7], status: 'queued', status_version: 9 };
    view.update(groupByNotebook(rows), ctx());
    expect(view.redrawn).toBe(1);
    expect(host.querySelector('li[data-task-id="t7"]')?.getAttribute('data-status')).toBe('queued');
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

import { TaskRow } from '../src/api';
import { CONTROL_VERBS, ControlVerb } from '../src/contract';

export function row(overrides: Partial<TaskRow> = {}): TaskRow {
  const can = Object.fromEntries(CONTROL_VERBS.map(v => [v, false])) as Record<ControlVerb, boolean>;
  return {
    task_id: 't1',
    name: 'extract',
    status: 'running',
    status_version: 3,
    terminal: false,
    requested_action: null,
    attempt: 1,
    max_attempts: 3,
    progress: null,
    created_at: '2026-01-01T00:00:00+00:00',
    started_at: '2026-01-01T00:00:00+00:00',
    ended_at: null,
    duration_s: 5,
    failure: null,
    ended_by: null,
    end_reason: null,
    tags: [],
    pipeline_run_id: null,
    owner: 'h:1:k1',
    host: 'h',
    pid: 1,
    kernel_id: 'k1',
    notebook: 'a.ipynb',
    kernel_gone: false,
    kernel_gone_reason: null,
    can: { ...can, pause: true, stop: true },
    why: { resume: 'not paused' },
    ...overrides
  };
}

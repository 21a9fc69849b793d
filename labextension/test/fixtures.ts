import { ITasksClient, TaskDetail } from '../src/api';
import { CONTROL_VERBS, ControlVerb, ListingRow } from '../src/contract';
import { RowContext } from '../src/row';

export const T0 = Date.parse('2026-01-01T00:00:00+00:00');

export function row(overrides: Partial<ListingRow> = {}): ListingRow {
  const can = Object.fromEntries(CONTROL_VERBS.map(v => [v, false])) as Record<ControlVerb, boolean>;
  return {
    id: 't1',
    name: 'extract',
    status: 'running',
    version: 3,
    attempt: 1,
    max_attempts: 3,
    done: 0,
    total: null,
    unit: null,
    message: null,
    rate: null,
    eta: null,
    created: T0,
    started: T0,
    ended: null,
    failure: null,
    ended_by: null,
    end_reason: null,
    has_tb: false,
    tags: [],
    run: null,
    starts: null,
    requested: null,
    frozen: null,
    paused: 0,
    can: { ...can, pause: true, stop: true },
    why: { resume: 'not paused' },
    owner: 'h:1:k1',
    host: 'h',
    pid: 1,
    kernel_id: 'k1',
    notebook: 'a.ipynb',
    kernel_gone: false,
    kernel_gone_reason: null,
    ...overrides
  };
}

export function context(overrides: Partial<RowContext> = {}): RowContext {
  return {
    now: T0 + 5000,
    disconnected: false,
    note: () => null,
    onVerb: () => undefined,
    onSelect: () => undefined,
    isSelected: () => false,
    selectLabel: 'Show details of',
    why: (r, v) => (r as ListingRow).why[v],
    ...overrides
  };
}

/** A client whose listing is `rows` (at 00:01:00 by the server's clock) and whose task
 * details come from `detail`; every other call fails. */
export function listingClient(rows: ListingRow[], detail?: (taskId: string) => TaskDetail): ITasksClient {
  const unused = async (): Promise<never> => {
    throw new Error('not used');
  };
  return {
    listTasks: async () => ({ tasks: rows, counts: {}, cursor: 1, sessions: {}, now: '2026-01-01T00:01:00Z' }),
    feed: unused,
    task: detail ? async (taskId: string) => detail(taskId) : unused,
    sendCommand: unused,
    command: unused
  };
}

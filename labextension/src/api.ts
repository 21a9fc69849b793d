/**
 * The REST client of the chongming_nb server extension: one `requestAPI` helper and the
 * shapes the server answers with. Authentication (token, XSRF cookie) and the base URL
 * come from JupyterLab's `ServerConnection`, so nothing here handles credentials.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_NAMESPACE, ControlVerb, ListingRow } from './contract';

/** One task as the server lists it: the generated row shape (`ListingRow`, from
 * `chongming_nb.notebook.schema`); `can`/`why` are computed server-side. */
export type { ListingRow } from './contract';

export interface TasksResponse {
  tasks: ListingRow[];
  /** The cursor of the next page (`after=` it), null after the last. */
  next?: string | null;
  /** Tasks per status among those the filter matches (every page, not this one); null
   * with a text or name filter whose matches span more than this page (no index counts
   * them). */
  counts: Record<string, number> | null;
  /** Tasks per status in the whole store. */
  totals?: Record<string, number>;
  cursor: number;
  /** kernel id -> session path of every session the server knows. */
  sessions: Record<string, string>;
  /** The server's clock when it answered (ISO 8601), for live durations. */
  now: string;
}

export interface FeedResponse {
  cursor: number;
  /** True when the client's cursor was too old: `tasks` is then the full list. */
  reset: boolean;
  tasks: ListingRow[];
  removed: string[];
  /** Tasks per status in the whole store at the server's last look. */
  counts?: Record<string, number>;
  sessions: Record<string, string>;
  now: string;
}

export interface AttemptRow {
  attempt: number;
  started_at: string | null;
  ended_at: string | null;
  duration_s: number | null;
  outcome: string | null;
  failure_kind: string | null;
  failure_message: string | null;
  traceback: string | null;
  executor: string | null;
  abandoned: boolean;
  exit_code: number | null;
}

export interface TransitionRow {
  from_status: string;
  to_status: string;
  trigger: string;
  actor: string;
  reason: string | null;
  at: string | null;
  version: number;
  override: boolean;
}

export interface LogRow {
  at: string | null;
  stream: string | null;
  level: string | null;
  line: string;
}

export interface TaskDetail {
  task: ListingRow;
  attempts: AttemptRow[];
  history: TransitionRow[];
  logs: LogRow[];
}

export type CommandState = 'pending' | 'claimed' | 'done' | 'rejected';

export interface CommandInfo {
  command_id: string;
  task_id: string;
  verb: ControlVerb;
  state: CommandState;
  actor: string;
  created_at: string | null;
  completed_at: string | null;
  claimed_by: string | null;
  outcome: Record<string, unknown> | null;
}

/** An error answer of the server extension (4xx/5xx), with its JSON `message`. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
    this.name = 'APIError';
  }
}

/**
 * Call a route of the server extension and decode its JSON answer.
 *
 * @param endpoint path below `/chongming/api/`, e.g. `tasks?status=running`
 */
export async function requestAPI<T>(
  endpoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endpoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: unknown = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (!response.ok) {
    const message =
      data && typeof data === 'object' && 'message' in data
        ? String((data as { message: unknown }).message)
        : response.statusText;
    throw new APIError(response.status, message);
  }
  return data as T;
}

/** Query string of a task listing; empty values are left out. */
export function tasksQuery(params: {
  status?: readonly string[];
  kernel?: string | null;
  /** A notebook's path: the tasks of its kernel. */
  notebook?: string | null;
  name?: string | null;
  /** Name or id contains it (any case). */
  text?: string | null;
  limit?: number | null;
  /** The `next` cursor of the previous page. */
  after?: string | null;
}): string {
  const parts: string[] = [];
  if (params.status && params.status.length > 0) {
    parts.push(`status=${encodeURIComponent(params.status.join(','))}`);
  }
  if (params.kernel) {
    parts.push(`kernel=${encodeURIComponent(params.kernel)}`);
  }
  if (params.notebook) {
    parts.push(`notebook=${encodeURIComponent(params.notebook)}`);
  }
  if (params.name) {
    parts.push(`name=${encodeURIComponent(params.name)}`);
  }
  if (params.text) {
    parts.push(`text=${encodeURIComponent(params.text)}`);
  }
  if (params.limit !== undefined && params.limit !== null) {
    parts.push(`limit=${params.limit}`);
  }
  if (params.after) {
    parts.push(`after=${encodeURIComponent(params.after)}`);
  }
  return parts.length > 0 ? `?${parts.join('&')}` : '';
}

/** The client side of the API, as an interface so tests can fake it. */
export interface ITasksClient {
  listTasks(query?: string): Promise<TasksResponse>;
  feed(since: number, timeoutS: number): Promise<FeedResponse>;
  task(taskId: string): Promise<TaskDetail>;
  sendCommand(taskId: string, verb: ControlVerb): Promise<CommandInfo>;
  command(commandId: string): Promise<CommandInfo>;
}

export class TasksClient implements ITasksClient {
  listTasks(query = ''): Promise<TasksResponse> {
    return requestAPI<TasksResponse>(`tasks${query}`);
  }

  feed(since: number, timeoutS: number): Promise<FeedResponse> {
    return requestAPI<FeedResponse>(`feed?since=${since}&timeout=${timeoutS}`);
  }

  task(taskId: string): Promise<TaskDetail> {
    return requestAPI<TaskDetail>(`tasks/${encodeURIComponent(taskId)}`);
  }

  sendCommand(taskId: string, verb: ControlVerb): Promise<CommandInfo> {
    return requestAPI<CommandInfo>(`tasks/${encodeURIComponent(taskId)}/commands`, {
      method: 'POST',
      body: JSON.stringify({ verb })
    });
  }

  command(commandId: string): Promise<CommandInfo> {
    return requestAPI<CommandInfo>(`commands/${encodeURIComponent(commandId)}`);
  }
}

import { describe, expect, it } from 'vitest';

import { TaskRow } from '../src/api';
import {
  DEFAULT_NOTIFY_SETTINGS,
  EndWatcher,
  IAnnounceTarget,
  announce,
  describeEnd,
  readSettings
} from '../src/notify';
import { row } from './fixtures';

const ended = (r: Partial<TaskRow>): Partial<TaskRow> => ({
  terminal: true,
  ended_at: '2026-01-01T00:01:00+00:00',
  ...r
});

describe('EndWatcher', () => {
  it('announces long work once, with the default threshold of 30 s', () => {
    const w = new EndWatcher();
    const s = DEFAULT_NOTIFY_SETTINGS;
    expect(s.notifyAfterSeconds).toBe(30);
    expect(w.update([row({ task_id: 'a' }), row({ task_id: 'b' })], s)).toEqual([]);
    const out = w.update(
      [
        row({ task_id: 'a', name: 'convert', ...ended({ status: 'stopped', duration_s: 35 }) }),
        row({ task_id: 'b', ...ended({ status: 'succeeded', duration_s: 29.9 }) })
      ],
      s
    );
    expect(out.map(e => [e.key, e.outcome, e.kind])).toEqual([['a', 'stopped', 'info']]);
    expect(describeEnd(out[0])).toBe('convert stopped after 35s');
    expect(out[0].notebook).toBe('a.ipynb');
    // the feed repeats rows: never a second word for the same task
    const again = w.update([row({ task_id: 'a', ...ended({ status: 'stopped', duration_s: 35 }) })], s);
    expect(again).toEqual([]);
  });

  it('says nothing of work that had ended before the page saw it running', () => {
    const w = new EndWatcher();
    const out = w.update([row({ task_id: 'old', ...ended({ status: 'failed', duration_s: 999 }) })], {
      notifyAfterSeconds: 0,
      desktopNotifications: false
    });
    expect(out).toEqual([]);
  });

  it('follows the threshold setting and names failures as errors', () => {
    const w = new EndWatcher();
    const s = { notifyAfterSeconds: 2, desktopNotifications: false };
    w.update([row({ task_id: 'f' })], s);
    const out = w.update([row({ task_id: 'f', ...ended({ status: 'failed', duration_s: 2.5 }) })], s);
    expect(out.map(e => e.kind)).toEqual(['error']);
  });

  it('announces a pipeline run as a whole, when its last task ends', () => {
    const w = new EndWatcher();
    const s = { notifyAfterSeconds: 10, desktopNotifications: false };
    const run = { pipeline_run_id: 'r1' };
    w.update([row({ task_id: 'x', ...run }), row({ task_id: 'y', ...run })], s);
    const half = w.update(
      [
        row({ task_id: 'x', ...run, ...ended({ status: 'succeeded', duration_s: 30 }) }),
        row({ task_id: 'y', ...run })
      ],
      s
    );
    expect(half).toEqual([]);
    const out = w.update(
      [
        row({ task_id: 'x', ...run, ...ended({ status: 'succeeded', duration_s: 30 }) }),
        row({
          task_id: 'y',
          ...run,
          ...ended({ status: 'failed', duration_s: 30, ended_at: '2026-01-01T00:01:30+00:00' })
        })
      ],
      s
    );
    expect(out.map(e => [e.key, e.outcome, Math.round(e.seconds)])).toEqual([['run:r1', 'failed', 90]]);
  });
});

describe('announce', () => {
  const fake = (hidden: boolean) => {
    const calls: string[] = [];
    const target: IAnnounceTarget = {
      notify: (m, k, open) => {
        calls.push(`notify:${k}:${m}:${open ? 'action' : 'none'}`);
        open?.();
      },
      openNotebook: p => calls.push(`open:${p}`),
      hidden: () => hidden,
      desktop: (t, b) => calls.push(`desktop:${b}`)
    };
    return { calls, target };
  };
  const end = { key: 'a', title: 'etl', outcome: 'succeeded', seconds: 125, notebook: 'n.ipynb', kind: 'success' as const };

  it('opens the notebook from its action; desktop only when asked and hidden', () => {
    const shown = fake(false);
    announce(end, { notifyAfterSeconds: 30, desktopNotifications: true }, shown.target);
    expect(shown.calls).toEqual(['notify:success:etl succeeded after 2m05s:action', 'open:n.ipynb']);
    const hidden = fake(true);
    announce(end, { notifyAfterSeconds: 30, desktopNotifications: true }, hidden.target);
    expect(hidden.calls.at(-1)).toBe('desktop:etl succeeded after 2m05s');
    const off = fake(true);
    announce(end, DEFAULT_NOTIFY_SETTINGS, off.target);
    expect(off.calls.some(c => c.startsWith('desktop'))).toBe(false);
  });
});

describe('readSettings', () => {
  it('falls back to the defaults for missing or bad values', () => {
    expect(readSettings(null)).toEqual(DEFAULT_NOTIFY_SETTINGS);
    expect(readSettings({ notifyAfterSeconds: -1, desktopNotifications: 'yes' })).toEqual(
      DEFAULT_NOTIFY_SETTINGS
    );
    expect(readSettings({ notifyAfterSeconds: 3, desktopNotifications: true })).toEqual({
      notifyAfterSeconds: 3,
      desktopNotifications: true
    });
  });
});

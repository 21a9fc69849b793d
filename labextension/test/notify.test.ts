import { describe, expect, it } from 'vitest';

import { ListingRow as TaskRow } from '../src/contract';
import {
  DEFAULT_NOTIFY_SETTINGS,
  EndWatcher,
  IAnnounceTarget,
  announce,
  describeEnd,
  readSettings
} from '../src/notify';
import { T0, row } from './fixtures';

/** A finished row that ran `seconds` from its start (T0). */
const ended = (r: Partial<TaskRow> & { seconds: number }): Partial<TaskRow> => {
  const { seconds, ...rest } = r;
  return { ended: T0 + seconds * 1000, ...rest };
};

describe('EndWatcher', () => {
  it('announces long work once, with the default threshold of 30 s', () => {
    const w = new EndWatcher();
    const s = DEFAULT_NOTIFY_SETTINGS;
    expect(s.notifyAfterSeconds).toBe(30);
    expect(w.update([row({ id: 'a' }), row({ id: 'b' })], s)).toEqual([]);
    const out = w.update(
      [
        row({ id: 'a', name: 'convert', ...ended({ status: 'stopped', seconds: 35 }) }),
        row({ id: 'b', ...ended({ status: 'succeeded', seconds: 29.9 }) })
      ],
      s
    );
    expect(out.map(e => [e.key, e.outcome, e.kind])).toEqual([['a', 'stopped', 'info']]);
    expect(describeEnd(out[0])).toBe('convert stopped after 35s');
    expect(out[0].notebook).toBe('a.ipynb');
    // the feed repeats rows: never a second word for the same task
    const again = w.update([row({ id: 'a', ...ended({ status: 'stopped', seconds: 35 }) })], s);
    expect(again).toEqual([]);
  });

  it('says nothing of work that had ended before the page saw it running', () => {
    const w = new EndWatcher();
    const out = w.update([row({ id: 'old', ...ended({ status: 'failed', seconds: 999 }) })], {
      notifyAfterSeconds: 0,
      desktopNotifications: false
    });
    expect(out).toEqual([]);
  });

  it('follows the threshold setting and names failures as errors', () => {
    const w = new EndWatcher();
    const s = { notifyAfterSeconds: 2, desktopNotifications: false };
    w.update([row({ id: 'f' })], s);
    const out = w.update([row({ id: 'f', ...ended({ status: 'failed', seconds: 2.5 }) })], s);
    expect(out.map(e => e.kind)).toEqual(['error']);
  });

  it('announces a pipeline run as a whole, when its last task ends', () => {
    const w = new EndWatcher();
    const s = { notifyAfterSeconds: 10, desktopNotifications: false };
    const run = { run: 'r1' };
    w.update([row({ id: 'x', ...run }), row({ id: 'y', ...run })], s);
    const half = w.update(
      [
        row({ id: 'x', ...run, ...ended({ status: 'succeeded', seconds: 30 }) }),
        row({ id: 'y', ...run })
      ],
      s
    );
    expect(half).toEqual([]);
    const out = w.update(
      [
        row({ id: 'x', ...run, ...ended({ status: 'succeeded', seconds: 30 }) }),
        row({
          id: 'y',
          ...run,
          ...ended({ status: 'failed', seconds: 90 })
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

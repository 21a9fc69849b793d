import { describe, expect, it } from 'vitest';

import { formatTimes, groupDigits, olderText } from '../src/format';
import { createRow, elapsedSeconds, patchRow } from '../src/row';
import { ListingRow } from '../src/contract';
import { T0, context, row } from './fixtures';

describe('the older finished tasks a board does not show', () => {
  it('says how many and where they are, as the saved snapshot does (notebook/older.py)', () => {
    const where = 'ctl.snapshots_df() and the Tasks sidebar list them';
    // the same words tests/notebook/test_nb_board_counts.py asserts of the kernel's text
    expect(olderText({ succeeded: 9_000, failed: 1_000 }, where)).toBe(
      '10,000 older finished tasks not shown — ctl.snapshots_df() and the Tasks sidebar list them'
    );
    expect(olderText({ stopped: 1 }, '')).toBe('1 older finished task not shown');
    expect(olderText({}, where)).toBe('');
    expect(olderText(null, where)).toBe('');
  });

  it('groups digits by thousands', () => {
    expect(groupDigits(0)).toBe('0');
    expect(groupDigits(999)).toBe('999');
    expect(groupDigits(1000)).toBe('1,000');
    expect(groupDigits(1234567)).toBe('1,234,567');
  });
});

describe("a paused row's elapsed time", () => {
  it('is the same in every view, whenever each heard of the pause (row.frozen)', () => {
    // paused 62.4 s after it started: the board hears it 0.1 s later, the sidebar (store,
    // feed poll, long poll) 0.9 s later; both once drew it at their own notice time
    // (62.5 s and 63.3 s: "1m02s" against "1m03s")
    const r = row({ status: 'paused', started: T0, frozen: T0 + 62_400, done: 5, total: 10 });
    const board = createRow(r.id, context());
    const sidebar = createRow(r.id, context());
    patchRow(board, r, context({ now: T0 + 62_500 }));
    patchRow(sidebar, r, context({ now: T0 + 63_300 }));
    const times = (n: HTMLElement) => n.querySelector('.cm-Row-times')!.textContent;
    expect(times(board)).toBe('1m02s<?');
    expect(times(sidebar)).toBe(times(board));
    // a row drawn again later (scrolled back into view, regrouped) still says the same
    const again = createRow(r.id, context());
    patchRow(again, r, context({ now: T0 + 600_000 }));
    expect(times(again)).toBe(times(board));
    expect(elapsedSeconds(r, T0 + 999_000, T0 + 63_300)).toBeCloseTo(62.4);
    expect(formatTimes(elapsedSeconds(r, 0, null), null, false)).toBe('1m02s');
  });

  it('without frozen (an older kernel) falls back to when this view drew it stopped', () => {
    const r = row({ status: 'paused', started: T0, frozen: null });
    expect(elapsedSeconds(r, T0 + 90_000, T0 + 63_300)).toBeCloseTo(63.3);
  });
});

describe("a row's elapsed time is the work of its current attempt (row.paused)", () => {
  const times = (n: HTMLElement) => n.querySelector('.cm-Row-times')!.textContent;
  const drawn = (r: ListingRow, now: number) => {
    const item = createRow(r.id, context());
    patchRow(item, r, context({ now }));
    return times(item);
  };

  it('ran 2 s, paused 9 s, then stopped: 2s in every view, whenever each drew it', () => {
    // the lead's case: the board read "2s", the sidebar "11s" (ended - started)
    const r = row({ status: 'stopped', started: T0, ended: T0 + 11_000, paused: 9_000 });
    expect(elapsedSeconds(r, T0 + 11_100, null)).toBe(2);
    expect(drawn(r, T0 + 11_100)).toBe('2s');
    expect(drawn(r, T0 + 600_000)).toBe('2s');
  });

  it('paused, resumed and running again: the clock moves without the pause', () => {
    const r = row({ status: 'running', started: T0, paused: 9_000 });
    expect(elapsedSeconds(r, T0 + 14_000, null)).toBe(5);
    expect(drawn(r, T0 + 14_000)).toBe('5s');
  });

  it('paused a second time: frozen at the second pause, the first one left out', () => {
    const r = row({ status: 'paused', started: T0, frozen: T0 + 20_000, paused: 9_000 });
    expect(drawn(r, T0 + 21_000)).toBe('11s');
    expect(drawn(r, T0 + 900_000)).toBe('11s');
  });

  it('a row saved before rows had it (no paused field) still reads ended - started', () => {
    const r = row({ status: 'succeeded', started: T0, ended: T0 + 7_000 });
    delete (r as Partial<ListingRow>).paused;
    expect(elapsedSeconds(r, T0 + 9_000, null)).toBe(7);
    expect(drawn(r, T0 + 9_000)).toBe('7s');
  });
});

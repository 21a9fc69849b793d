import { describe, expect, it } from 'vitest';

import { formatTimes, groupDigits, olderText } from '../src/format';
import { createRow, elapsedSeconds, patchRow } from '../src/row';
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

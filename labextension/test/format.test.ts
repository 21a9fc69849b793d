import { describe, expect, it } from 'vitest';

import { groupDigits, olderText } from '../src/format';

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

import { describe, expect, it, vi } from 'vitest';

import { TASK_STATUSES, VERB_TIPS } from '../src/contract';
import {
  formatAttempt,
  formatClock,
  formatCount,
  formatDuration,
  formatPercent,
  formatRate,
  formatTimes,
  humanCount
} from '../src/format';
import { NOTE_FADE_MS, boardCompare, createRow, patchRow, renderRow, statusNote } from '../src/row';
import { T0, context, row } from './fixtures';

const text = (node: HTMLElement, sel: string) => node.querySelector<HTMLElement>(sel)?.textContent ?? null;

describe('numbers and times read like tqdm', () => {
  it('counts, rates and durations for people', () => {
    expect(humanCount(200)).toBe('200');
    expect(humanCount(9999)).toBe('9999');
    expect(humanCount(12345)).toBe('12.3k');
    expect(humanCount(4_560_000)).toBe('4.56M');
    expect(formatRate(1234, 'rows')).toBe('1.2k rows/s');
    expect(formatRate(456, 'rows')).toBe('456 rows/s');
    expect(formatRate(12_345, 'rows')).toBe('12.3k rows/s');
    expect(formatRate(3.5, null)).toBe('3.50 it/s');
    expect(formatRate(0.4, 'files')).toBe('2.5 s/files');
    expect(formatRate(null, 'rows')).toBe('');
    expect(formatDuration(42.7)).toBe('42s');
    expect(formatDuration(192)).toBe('3m12s');
    expect(formatDuration(3720)).toBe('1h02m');
    expect(formatDuration(null)).toBe('');
    expect(formatTimes(62, 192, true)).toBe('1m02s<3m12s');
    expect(formatTimes(62, null, true)).toBe('1m02s<?');
    expect(formatTimes(62, null, false)).toBe('1m02s');
  });

  it('one attempt format, one 24-hour time format', () => {
    expect(formatAttempt(0, 3)).toBe('0/3');
    expect(formatAttempt(2, 3)).toBe('2/3');
    const at = new Date(2026, 0, 1, 14, 3, 27).getTime();
    expect(formatClock(at)).toBe('14:03');
    expect(formatClock(at, true)).toBe('14:03:27');
  });

  it('percentage rounds down, the count says n/total unit', () => {
    expect(formatPercent({ done: 199, total: 200 })).toBe('99%');
    expect(formatPercent({ done: 200, total: 200 })).toBe('100%');
    expect(formatPercent({ done: 5, total: null })).toBe('');
    expect(formatCount({ done: 84, total: 200, unit: 'rows' })).toBe('84/200 rows');
    expect(formatCount({ done: 12_000, total: null, unit: 'rows' })).toBe('12.0k rows');
  });
});

describe('a row', () => {
  it('shows name, status, bar, percentage, count, elapsed<remaining, rate and the allowed actions', () => {
    const node = renderRow(
      row({ done: 84, total: 200, unit: 'rows', rate: 1234.5, eta: 94, started: T0 - 60_000 }),
      context({ now: T0 + 2000 })
    );
    expect(text(node, '.cm-Row-name')).toBe('extract');
    expect(text(node, '.cm-Row-status')).toBe('running');
    expect(text(node, '.cm-Row-pct')).toBe('42%');
    expect(text(node, '.cm-Row-count')).toBe('84/200 rows');
    expect(text(node, '.cm-Row-times')).toBe('1m02s<1m34s');
    expect(text(node, '.cm-Row-rate')).toBe('1.2k rows/s');
    const shown = Array.from(node.querySelectorAll<HTMLButtonElement>('.cm-Row-actions button'))
      .filter(b => !b.hidden)
      .map(b => b.dataset.verb);
    expect(shown).toEqual(['pause', 'stop']);
    const menu = Array.from(node.querySelectorAll<HTMLButtonElement>('.cm-Row-menu button'))
      .filter(b => !b.hidden)
      .map(b => b.dataset.verb);
    expect(menu).toEqual(['pause', 'stop']);
    const pause = node.querySelector<HTMLButtonElement>('.cm-Row-actions [data-verb="pause"]')!;
    expect(pause.title).toContain(VERB_TIPS.pause);
    const resume = node.querySelector<HTMLButtonElement>('.cm-Row-actions [data-verb="resume"]')!;
    expect(resume.title).toBe('not paused');
  });

  it('sends the verb from the button and from the overflow menu', () => {
    const onVerb = vi.fn();
    const node = renderRow(row(), context({ onVerb }));
    document.body.append(node);
    node.querySelector<HTMLButtonElement>('.cm-Row-actions [data-verb="stop"]')!.click();
    const more = node.querySelector<HTMLButtonElement>('.cm-Row-more')!;
    more.click();
    expect(more.getAttribute('aria-expanded')).toBe('true');
    // open, the menu is drawn over the page (in <body>) so no list can clip it
    const open = document.querySelector<HTMLElement>('body > .cm-Row-menu')!;
    expect(open.hidden).toBe(false);
    open.querySelector<HTMLButtonElement>('[data-verb="pause"]')!.click();
    expect(onVerb.mock.calls).toEqual([
      ['t1', 'stop'],
      ['t1', 'pause']
    ]);
    expect(node.querySelector<HTMLElement>('.cm-Row-menu')!.hidden).toBe(true);
    node.remove();
  });

  it('a user stop is neutral and says who and when', () => {
    const ended = new Date(2026, 0, 1, 14, 3, 0).getTime();
    const r = row({
      status: 'stopped',
      ended,
      ended_by: 'sidebar',
      failure: null,
      can: { pause: false, resume: false, stop: false, retry: true, skip: false }
    });
    const node = renderRow(r, context());
    expect(node.dataset.tone).toBe('muted');
    expect(node.querySelector('.cm-Row-status')!.className).toContain('cm-tone-muted');
    expect(text(node, '.cm-Row-noteText')).toBe('stopped from the sidebar at 14:03');
    expect(node.querySelector('.cm-Row-noteText')!.classList.contains('cm-mod-failure')).toBe(false);
    expect(statusNote({ ...r, ended_by: 'widget', end_reason: 'enough rows' })).toBe(
      'stopped from the widget at 14:03: enough rows'
    );
    expect(statusNote({ ...r, status: 'skipped', ended_by: null, failure: null })).toBe('skipped at 14:03');
    // a real failure is drawn as one
    const failed = renderRow(
      row({ status: 'failed', ended, failure: { kind: 'exception', message: 'boom', exception_type: 'ValueError' } }),
      context()
    );
    expect(failed.dataset.tone).toBe('bad');
    expect(failed.querySelector('.cm-Row-noteText')!.classList.contains('cm-mod-failure')).toBe(true);
  });

  it('a paused row freezes its elapsed time, rate and ETA', () => {
    const r = row({ status: 'paused', done: 50, total: 100, rate: 10, eta: 5, started: T0 - 30_000 });
    const node = createRow(r.id, context());
    patchRow(node, r, context({ now: T0 }));
    const before = node.textContent;
    patchRow(node, r, context({ now: T0 + 3000 }));
    patchRow(node, r, context({ now: T0 + 60_000 }));
    expect(node.textContent).toBe(before);
    expect(text(node, '.cm-Row-times')).toBe('30s<5s');
    // running again: the clock moves
    patchRow(node, { ...r, status: 'running' }, context({ now: T0 + 61_000 }));
    expect(text(node, '.cm-Row-times')).toBe('1m31s<5s');
  });

  it('a delayed start says when, counted down', () => {
    const starts = new Date(2026, 0, 1, 14, 5, 0).getTime();
    const r = row({ status: 'queued', started: null, starts });
    expect(statusNote(r, starts - 180_000)).toBe('starts at 14:05 (in 3m00s)');
  });

  it('a view that no longer hears the kernel names the start without counting down', () => {
    const starts = new Date(2026, 0, 1, 14, 5, 0).getTime();
    const r = row({ status: 'blocked', started: null, starts });
    // a notebook reopened after the kernel went away, an hour after the start time
    const node = renderRow(r, context({ disconnected: true, now: starts + 3_600_000 }));
    expect(text(node, '.cm-Row-noteText')).toBe('was to start at 14:05');
    expect(statusNote(r, starts - 180_000, false)).toBe('was to start at 14:05');
  });

  it("a gone kernel's delayed row names the start without counting down", () => {
    const starts = new Date(2026, 0, 1, 14, 5, 0).getTime();
    // the sidebar's listing row of a script or kernel that has gone away meanwhile
    const gone = row({ status: 'blocked', started: null, starts, kernel_gone: true });
    const node = renderRow(gone, context({ now: starts - 180_000 }));
    expect(text(node, '.cm-Row-noteText')).toBe('was to start at 14:05');
    const alive = renderRow({ ...gone, kernel_gone: false }, context({ now: starts - 180_000 }));
    expect(text(alive, '.cm-Row-noteText')).toBe('starts at 14:05 (in 3m00s)');
  });

  it('a finished task without progress draws no bar', () => {
    const node = renderRow(row({ status: 'succeeded', ended: T0 + 4000, can: { pause: false, resume: false, stop: false, retry: false, skip: false } }), context());
    expect(node.querySelector<HTMLElement>('.cm-Row-bar')!.hidden).toBe(true);
    expect(text(node, '.cm-Row-pct')).toBe('');
    expect(text(node, '.cm-Row-times')).toBe('4s');
    const running = renderRow(row(), context());
    expect(running.querySelector<HTMLElement>('.cm-Row-bar')!.hidden).toBe(false);
  });

  it('an ok answer fades, a refusal stays', () => {
    const ok = { tone: 'ok' as const, text: 'Pause: ok', at: T0 };
    const node = renderRow(row(), context({ now: T0 + 100, note: () => ok }));
    expect(text(node, '.cm-Row-ack')).toBe('Pause: ok');
    expect(node.querySelector('.cm-Row-ack')!.classList.contains('cm-mod-fading')).toBe(false);
    patchRow(node, row(), context({ now: T0 + NOTE_FADE_MS + 1, note: () => ok }));
    expect(node.querySelector('.cm-Row-ack')!.classList.contains('cm-mod-fading')).toBe(true);
  });

  it('escapes names and messages (text, never markup)', () => {
    const evil = '<img src=x onerror="window.pwned=1">';
    const node = renderRow(
      row({ name: evil, message: evil, status: 'failed', failure: { kind: 'exception', message: evil, exception_type: null } }),
      context()
    );
    expect(node.querySelector('img')).toBeNull();
    expect(text(node, '.cm-Row-name')).toBe(evil);
  });

  it('disconnected: no action is offered, and the menu says why', () => {
    const node = renderRow(row(), context({ disconnected: true }));
    expect(Array.from(node.querySelectorAll<HTMLButtonElement>('.cm-Row-actions button')).every(b => b.hidden)).toBe(true);
    expect(node.querySelector<HTMLButtonElement>('.cm-Row-more')!.disabled).toBe(true);
    expect(node.querySelector<HTMLButtonElement>('.cm-Row-more')!.title).toContain('disconnected');
  });
});

describe('board order', () => {
  it('running, paused, queued, finished; newest first in each', () => {
    const statuses = ['succeeded', 'queued', 'paused', 'running', 'queued', 'running'] as const;
    const rows = statuses.map((status, i) => row({ id: `t${i}`, status, created: T0 + i * 1000 }));
    expect(rows.sort(boardCompare).map(r => `${r.status}:${r.id}`)).toEqual([
      'running:t5',
      'running:t3',
      'paused:t2',
      'queued:t4',
      'queued:t1',
      'succeeded:t0'
    ]);
    expect(TASK_STATUSES.length).toBe(15);
  });
});

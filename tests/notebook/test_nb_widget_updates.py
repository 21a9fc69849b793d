"""The board's update path: progress-only rows, rows patched in place (and never shared),
one flush request per flush, the full-state trait's first refresh, quiet-only pings, the
rate limit counted from the end of a send, and the rate tracker."""

from __future__ import annotations

import random
from typing import Any

import pytest
from _board import patches, rec

from chongming_nb.core.state_machine import CONTROL_VERBS
from chongming_nb.notebook import schema as S
from chongming_nb.notebook import widget as W
from chongming_nb.notebook.rows import PROGRESS_FIELDS, RateTracker, progress_fields
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing import FakeClock
from chongming_nb.testing.widgets import FakeController


def board(fctl: FakeController, clock: FakeClock, **kw: Any) -> TaskTable:
    kw.setdefault("autoflush", False)
    return TaskTable(fctl, clock=clock, **kw)


def replay(initial: list[dict[str, Any]], sent: list[dict[str, Any]]) -> dict[str, Any]:
    """What the front end holds after applying ``sent`` patches to ``initial`` rows
    (the same rule as ``widget.js``: upsert whole rows, merge updates, drop removes)."""
    rows = {r["id"]: dict(r) for r in initial}
    for p in sent:
        for r in p["upsert"]:
            rows[r["id"]] = dict(r)
        for d in p["update"]:
            rows[d["id"]] = {**rows[d["id"]], **d}
        for tid in p["remove"]:
            rows.pop(tid, None)
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_patched_rows_equal_rows_built_from_scratch(fctl, clock, comms, seed: int) -> None:
    """Progress, log lines, verbs, failures and new tasks in a random order: the rows the
    widget keeps, and the rows its patches rebuild in the browser, equal rows built
    from the controller's snapshots (rate and eta aside: they depend on history)."""
    rnd = random.Random(seed)
    ids = [fctl.add(f"t{i}", status="running", total=50).task_id for i in range(8)]
    t = board(fctl, clock)
    initial = [dict(r) for r in t.rows]
    for _ in range(300):
        tid = rnd.choice(ids)
        op = rnd.random()
        if op < 0.55:
            fctl.bump(tid, rnd.choice([1.0, 2.5]), message=rnd.choice([None, "<b>x</b>"]))
        elif op < 0.65:
            fctl.log_line(tid, rnd.choice(["line", "a <script> line\n"]))
        elif op < 0.8:
            fctl.apply(tid, rnd.choice(CONTROL_VERBS))
        elif op < 0.85:
            fctl.settle(tid)
        elif op < 0.88:
            if fctl.get(tid).status.value in {"running", "pausing", "stopping"}:
                fctl.fail(tid, "boom <i>", traceback=rnd.choice([None, "tb"]))
        elif op < 0.9:
            ids.append(fctl.add(f"new{len(ids)}", status="queued", total=10).task_id)
        clock.advance(rnd.choice([0.01, 0.05, 0.2]))
        if rnd.random() < 0.3:
            t.flush()
    clock.advance(1.0)
    t.flush(force=True)
    fresh = board(fctl, clock)
    want = {r["id"]: r for r in fresh.current_rows()}
    kept = {r["id"]: r for r in t.current_rows()}
    shown = replay(initial, patches(t))
    assert set(kept) == set(want) == set(shown)
    ignore = {"rate", "eta", "message"}  # a fresh board has seen no log line
    for tid, row in want.items():
        for k in S.ROW_FIELDS:
            if k not in ignore:
                assert kept[tid][k] == row[k], (tid, k)
        assert shown[tid] == kept[tid]
        prog = fctl.get(tid).progress
        logs = fctl.logs(tid)
        last_line = logs[-1].line.rstrip("\n") if logs else None
        assert kept[tid]["message"] == ((prog.message if prog else None) or last_line)
    assert list(kept[ids[0]]) == list(S.ROW_FIELDS)
    assert list(progress_fields(fctl.get(ids[0]), 1.0, None)) == list(PROGRESS_FIELDS)
    assert set(PROGRESS_FIELDS) <= set(S.ROW_FIELDS)


def test_a_progress_update_patches_the_row_in_place_and_nothing_shared_changes(
    fctl, clock, comms
) -> None:
    a = fctl.add("a", status="running", total=100).task_id
    t = board(fctl, clock)
    trait_row = t.rows[0]
    kept = t._rows[a]
    fctl.bump(a, 5)
    clock.advance(1)
    assert t.flush()
    assert t._rows[a] is kept  # no new dict per progress update
    assert kept["done"] == 5.0
    assert trait_row["done"] == 0.0  # the trait holds copies
    b = fctl.add("b", status="running", total=100).task_id
    clock.advance(1)
    assert t.flush()
    (upserted,) = patches(t)[-1]["upsert"]
    handed_out = t.current_rows()
    fctl.bump(b, 7)
    fctl.bump(a, 1)
    clock.advance(1)
    assert t.flush()
    assert upserted["id"] == b and upserted["done"] == 0.0  # the sent message is intact
    assert [r["done"] for r in handed_out] == [5.0, 0.0]
    assert {d["id"]: d["done"] for d in patches(t)[-1]["update"]} == {a: 6.0, b: 7.0}


def test_a_status_change_rebuilds_the_row_and_the_summary(fctl, clock, comms) -> None:
    ids = [fctl.add(f"t{i}", status="running", total=10).task_id for i in range(3)]
    t = board(fctl, clock)
    fctl.bump(ids[0], 1)
    clock.advance(1)
    t.flush()
    assert patches(t)[-1]["summary"] == {"running": 3}
    fctl.apply(ids[1], "pause")
    clock.advance(1)
    t.flush()
    (delta,) = patches(t)[-1]["update"]
    assert delta["status"] == "pausing" and delta["requested"] == "pause"
    assert delta["can"] == {v: fctl.can(ids[1], v)[0] for v in CONTROL_VERBS}
    assert patches(t)[-1]["summary"] == {"running": 2, "pausing": 1}


class _Schedule:
    def __init__(self) -> None:
        self.calls: list[tuple[TaskTable, float]] = []

    def schedule(self, table: TaskTable, due: float) -> None:
        self.calls.append((table, due))


def test_events_ask_for_one_flush_until_it_starts(fctl, comms, monkeypatch) -> None:
    sched = _Schedule()
    monkeypatch.setattr(W, "_SCHEDULER", sched)
    ids = [fctl.add(f"t{i}", status="running", total=1e6).task_id for i in range(50)]
    t = TaskTable(fctl, autoflush=True)
    for i in range(500):
        fctl.bump(ids[i % 50], 1)
    assert len(sched.calls) == 1
    t._scheduled_flush()  # what the flush thread does when it is due
    assert all(r["done"] == 10.0 for r in t.current_rows())
    asked = len(sched.calls)  # (the flush may book the full-state refresh for later)
    fctl.bump(ids[0], 1)
    fctl.bump(ids[1], 1)
    assert len(sched.calls) == asked + 1  # the next event asks again, once
    t.close()


def test_a_failed_flush_request_is_asked_again(fctl, comms, monkeypatch, caplog) -> None:
    sched = _Schedule()
    fail = [True]

    def schedule(table: TaskTable, due: float) -> None:
        if fail.pop() if fail else False:
            raise RuntimeError("no thread")
        sched.schedule(table, due)

    monkeypatch.setattr(W, "_SCHEDULER", type("S", (), {"schedule": staticmethod(schedule)}))
    tid = fctl.add("a", status="running", total=10).task_id
    t = TaskTable(fctl, autoflush=True)
    fctl.bump(tid, 1)  # the request fails (logged, never raised into the controller)
    assert sched.calls == [] and "could not take an event" in caplog.text
    fctl.bump(tid, 1)
    assert len(sched.calls) == 1
    t.close()


def test_the_full_state_is_not_resent_right_after_opening(fctl, clock, comms) -> None:
    tid = fctl.add("a", status="running", total=1000).task_id
    t = board(fctl, clock, full_state_interval=2.0)
    for _ in range(19):  # 1.9 simulated seconds of patches
        fctl.bump(tid, 1)
        clock.advance(0.1)
        t.flush()
    assert [u for u in rec(t).state_updates() if "rows" in u] == []
    clock.advance(0.2)
    fctl.bump(tid, 1)
    t.flush()
    (update,) = [u for u in rec(t).state_updates() if "rows" in u]
    assert update["rows"][0]["done"] == 20.0 and update["rows_seq"] == t.seq


def test_pings_go_only_to_quiet_tables(fctl, clock, comms) -> None:
    fctl.add("a", status="running", total=10)
    t = board(fctl, clock)
    pinger = W._Pinger()
    pinger._tables.add(t)  # no thread: the test calls the ping round itself
    t._send_custom({"type": "ping", "at": 0})  # anything the view hears counts
    now = t._last_sent
    assert pinger.ping_quiet(now + S.PING_SECONDS / 2) == 0
    assert pinger.ping_quiet(now + S.PING_SECONDS) == 1
    pings = [m for m in rec(t).custom_messages() if m["type"] == "ping"]
    assert len(pings) == 2
    t.close()
    assert pinger.ping_quiet(now + 10 * S.PING_SECONDS) == 0


def test_the_rate_limit_counts_from_the_end_of_a_send(fctl, clock, comms) -> None:
    """A slow send (here 50 ms of the fake clock) does not eat into the quiet interval,
    so a busy board stays below max_rate whatever its flushes cost."""
    tid = fctl.add("a", status="running", total=1e6).task_id
    t = board(fctl, clock, max_rate=10.0)
    send = t._send_custom

    def slow_send(msg: dict[str, Any]) -> None:
        clock.advance(0.05)
        send(msg)

    t._send_custom = slow_send  # type: ignore[method-assign]
    fctl.bump(tid, 1)
    assert t.flush()  # sent at 0.05
    fctl.bump(tid, 1)
    clock.advance(0.08)  # 0.13: 0.13 after the flush began, 0.08 after its send ended
    assert not t.flush()
    clock.advance(0.03)
    assert t.flush()


def test_rate_tracker_observe_returns_the_windowed_rate() -> None:
    r = RateTracker(window=3)
    assert r.observe("a", 0.0, 0.0) is None
    assert r.observe("a", 1.0, 10.0) == pytest.approx(10.0)
    assert r.observe("a", 1.0, 50.0) == pytest.approx(10.0)  # not newer: ignored
    assert r.observe("a", 2.0, 30.0) == pytest.approx(15.0)
    assert r.observe("a", 3.0, 33.0) == pytest.approx(11.5)  # window: samples 1..3 s
    assert r.rate("a") == pytest.approx(11.5)
    assert r.observe("a", 4.0, 1.0) is None  # went back (a retry): starts over
    assert r.rate("a") is None
    assert r.observe("a", 5.0, 3.0) == pytest.approx(2.0)
    r.forget("a")
    assert r.rate("a") is None


def _counting(
    fctl: FakeController,
    clock: FakeClock,
    t: TaskTable,
    tid: str,
    *,
    ticks: int,
    step: int,
    seconds: float = 1.0,
) -> list[float | None]:
    """Advance ``tid`` by ``step`` units every ``seconds``, ``ticks`` times, flushing the
    table after each; the row's rate after each flush."""
    rates = []
    for _ in range(ticks):
        clock.advance(seconds)
        fctl.bump(tid, step)
        t.flush(force=True)
        rates.append(t.get_state()["rows"][0]["rate"])
    return rates


def test_a_paused_row_keeps_its_rate_and_eta(fctl: FakeController, clock: FakeClock) -> None:
    # the controller saves a paused loop's progress with the status change (the count it
    # reached, stamped with the time of the pause); the clock of a paused row is stopped,
    # so that later stamp must not read as "no progress for a while" and slow the rate
    tid = fctl.add("a", status="running", total=1000).task_id
    t = board(fctl, clock)
    assert _counting(fctl, clock, t, tid, ticks=5, step=100)[-1] == pytest.approx(100.0)
    running = {k: t.get_state()["rows"][0][k] for k in ("done", "rate", "eta")}
    assert fctl.apply(tid, "pause")[0]
    fctl.settle(tid)
    # the paused loop's progress, stamped later, count unchanged
    _counting(fctl, clock, t, tid, ticks=3, step=0, seconds=2.0)
    row = t.get_state()["rows"][0]
    assert row["status"] == "paused"
    assert {k: row[k] for k in ("done", "rate", "eta")} == running


def test_a_resumed_row_reads_its_rate_from_after_the_pause(
    fctl: FakeController, clock: FakeClock
) -> None:
    # 100 units/s before a 60 s pause and after it: the first samples after the resume
    # must not be measured across the pause (that read ~15/s and an ETA of a minute)
    tid = fctl.add("a", status="running", total=10_000).task_id
    t = board(fctl, clock)
    assert _counting(fctl, clock, t, tid, ticks=5, step=100)[-1] == pytest.approx(100.0)
    assert fctl.apply(tid, "pause")[0]
    fctl.settle(tid)
    t.flush(force=True)
    clock.advance(60.0)
    assert fctl.apply(tid, "resume")[0]
    rates = _counting(fctl, clock, t, tid, ticks=3, step=100)
    assert rates == [pytest.approx(100.0)] * 3


def test_rate_tracker_starts_a_new_window_after_a_pause() -> None:
    r = RateTracker(window=4)
    for s in range(4):
        r.observe("a", float(s), 10.0 * s)
    assert r.pause("a") == pytest.approx(10.0)
    assert r.rate("a") == pytest.approx(10.0)  # kept while paused
    assert r.observe("a", 100.0, 30.0) == pytest.approx(10.0)  # one sample: the old rate
    assert r.observe("a", 101.0, 50.0) == pytest.approx(20.0)  # from after the pause only
    assert r.pause("b") is None  # a task never seen: nothing to keep
    assert r.rate("b") is None

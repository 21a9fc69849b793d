"""TaskTable with a fake comm: can-binding, acks, coalescing, patches, thread safety."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from _board import patches, rec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chongming_nb.core.state_machine import CONTROL_VERBS
from chongming_nb.notebook import schema as S
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing import FakeClock
from chongming_nb.testing.widgets import FakeController, measure_update_traffic, recording_comms


def acks(table: TaskTable) -> list[dict[str, Any]]:
    return [m for m in rec(table).custom_messages() if m["type"] == "ack"]


def table(fctl: FakeController, clock: FakeClock, **kw: Any) -> TaskTable:
    kw.setdefault("autoflush", False)
    return TaskTable(fctl, clock=clock, **kw)


def act(t: TaskTable, action: str, task_id: str, rid: int) -> None:
    t._on_custom_msg(t, {"type": "action", "action": action, "task_id": task_id, "request_id": rid})


STATUSES_TO_TRY = ["queued", "running", "paused", "succeeded", "failed", "stopped"]


def test_rows_can_flags_equal_ctl_can_in_every_state(fctl, clock, comms) -> None:
    ids = {s: fctl.add(f"t-{s}", status="queued").task_id for s in STATUSES_TO_TRY}
    # drive each task into its state through the real state machine
    fctl.apply(ids["paused"], "pause")
    run = fctl.add("t-running2", status="running").task_id
    fctl.fail(run, "boom")
    fin = fctl.add("t-fin", status="succeeded").task_id
    stop = fctl.add("t-stop", status="queued").task_id
    fctl.apply(stop, "stop")
    t = table(fctl, clock)
    rows = {r["id"]: r for r in t.rows}
    assert len(rows) == len(fctl.list_tasks())
    seen_states = {r["status"] for r in rows.values()}
    assert {"queued", "paused", "failed", "succeeded", "stopped"} <= seen_states
    for tid, row in rows.items():
        for verb in CONTROL_VERBS:
            assert row["can"][verb] == fctl.can(tid, verb)[0], (row["status"], verb)
    # after a change, the patched row follows ctl.can again
    act(t, "retry", run, 1)
    clock.advance(1)
    t.flush()
    row = next(r for r in t.current_rows() if r["id"] == run)
    assert row["status"] == "queued"
    assert row["can"] == {v: fctl.can(run, v)[0] for v in CONTROL_VERBS}
    assert fin in rows


def test_click_is_applied_with_actor_widget_and_acknowledged(fctl, clock, comms) -> None:
    tid = fctl.add("job", status="running", total=10).task_id
    t = table(fctl, clock)
    act(t, "pause", tid, 41)
    assert fctl.applied == [(tid, "pause", "widget")]
    assert fctl.get(tid).status.value == "pausing"
    assert acks(t)[-1] == S.ack(41, True, None, task_id=tid, action="pause")
    # an illegal verb for the state is refused with the controller's reason
    act(t, "resume", tid, 42)
    last = acks(t)[-1]
    assert last["request_id"] == 42 and last["ok"] is False
    assert "resume" in last["reason"]
    assert fctl.get(tid).status.value == "pausing"


def test_action_on_a_task_outside_the_table_is_refused(fctl, clock, comms) -> None:
    mine = fctl.add("mine", status="running").task_id
    other = fctl.add("other", status="running").task_id
    t = table(fctl, clock, kind="task", task_ids=[mine])
    act(t, "stop", other, 1)
    assert acks(t)[-1]["ok"] is False
    assert "not in this table" in acks(t)[-1]["reason"]
    assert fctl.get(other).status.value == "running"


def test_malformed_messages_are_ignored_and_logged(fctl, clock, comms, caplog) -> None:
    tid = fctl.add("job", status="running").task_id
    t = table(fctl, clock)
    before = len(rec(t).custom_messages())
    with caplog.at_level(logging.WARNING, logger="chongming_nb.notebook"):
        t._on_custom_msg(t, {"type": "action", "action": "exec", "task_id": tid, "request_id": 1})
        t._on_custom_msg(t, "not a dict")
        t._on_custom_msg(t, {"type": "action", "action": "stop", "task_id": tid})
    assert len(rec(t).custom_messages()) == before
    assert fctl.applied == []
    assert sum("ignored malformed widget message" in r.message for r in caplog.records) == 3


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner),
        max_leaves=10,
    )
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["action", "bulk", "detail", "sync", "zzz"])},
        optional={
            "action": st.sampled_from(["pause", "stop", "retry", "nope"]) | st.integers(),
            "task_id": st.text(max_size=6),
            "request_id": st.integers() | st.text(max_size=3),
        },
    )
)
def test_fuzzed_messages_never_raise_in_the_handler(msg: object) -> None:
    clock = FakeClock()
    fctl = FakeController(clock)
    fctl.add("a", status="running")
    with recording_comms():
        t = TaskTable(fctl, clock=clock, autoflush=False)
        t._on_custom_msg(t, msg, [])  # must not raise, whatever it is
        for m in rec(t).custom_messages():
            assert m["type"] in S.SERVER_TYPES
        t.close()


def test_bulk_pause_applies_only_where_can_says(fctl, clock, comms) -> None:
    a = fctl.add("a", status="running").task_id
    b = fctl.add("b", status="queued").task_id
    c = fctl.add("c", status="succeeded").task_id
    t = table(fctl, clock)
    t._on_custom_msg(t, {"type": "bulk", "action": "pause", "request_id": 9})
    assert {tid for tid, verb, _ in fctl.applied} == {a, b}
    assert fctl.get(c).status.value == "succeeded"
    ack = acks(t)[-1]
    assert ack["ok"] is True and ack["reason"] == "paused 2 tasks"


def test_bulk_resume_applies_only_where_can_says(fctl, clock, comms) -> None:
    a = fctl.add("a", status="paused").task_id
    fctl.add("b", status="running")
    t = table(fctl, clock)
    t._on_custom_msg(t, {"type": "bulk", "action": "resume", "request_id": 3})
    assert [(tid, verb) for tid, verb, _ in fctl.applied] == [(a, "resume")]
    ack = acks(t)[-1]
    assert ack["ok"] is True and ack["reason"] == "resumed 1 task"


def test_the_concurrency_limit_goes_to_the_front_end(clock, comms) -> None:
    import chongming_nb as cn

    ctl = cn.Controller(concurrency=cn.ConcurrencyPolicy(max_parallel=3))
    try:
        t = TaskTable(ctl, clock=clock, autoflush=False)
        assert t.max_parallel == 3
        # and the front end can tell whether its bundled contract is the kernel's
        assert t.schema["hash"] == S.schema_hash()
        t.close()
    finally:
        ctl.close()
    assert table(FakeController(clock), clock).max_parallel is None  # no policy: not shown


def test_detail_returns_logs_and_traceback(fctl, clock, comms) -> None:
    tid = fctl.add("job", status="running").task_id
    fctl.log_line(tid, "hello <b>world</b>")
    fctl.fail(tid, "ValueError: bad", traceback="Traceback...\nValueError: bad")
    t = table(fctl, clock)
    t._on_custom_msg(t, {"type": "detail", "task_id": tid, "request_id": 5})
    detail = rec(t).custom_messages()[-1]
    assert detail["type"] == "detail" and detail["request_id"] == 5
    assert [entry["line"] for entry in detail["logs"]] == ["hello <b>world</b>"]
    assert detail["traceback"].endswith("ValueError: bad")
    assert detail["failure"]["kind"] == "exception"
    row = t.current_rows()[0]
    assert row["has_tb"] is True


def test_patches_carry_only_changed_rows_and_fields(fctl, clock, comms) -> None:
    ids = [fctl.add(f"t{i}", status="running", total=100).task_id for i in range(50)]
    t = table(fctl, clock)
    fctl.bump(ids[3], 5)
    clock.advance(1)
    assert t.flush() is True
    (p,) = patches(t)
    assert p["upsert"] == [] and p["remove"] == []
    assert [u["id"] for u in p["update"]] == [ids[3]]
    assert set(p["update"][0]) <= {"id", "done", "rate", "eta", "message"}
    assert p["update"][0]["done"] == 5.0
    assert (p["seq"], p["base"]) == (1, 0)
    # nothing changed -> nothing sent
    clock.advance(1)
    assert t.flush() is False
    assert len(patches(t)) == 1


def test_new_tasks_join_a_board_and_patches_chain(fctl, clock, comms) -> None:
    fctl.add("first", status="running")
    t = table(fctl, clock)
    new = fctl.add("second", status="queued").task_id
    clock.advance(1)
    t.flush()
    fctl.apply(new, "pause")
    clock.advance(1)
    t.flush()
    ps = patches(t)
    assert [p["upsert"][0]["id"] for p in ps[:1]] == [new]
    assert [(p["base"], p["seq"]) for p in ps] == [(0, 1), (1, 2)]
    assert ps[-1]["summary"] == {"running": 1, "paused": 1}


def test_a_task_table_ignores_other_tasks(fctl, clock, comms) -> None:
    mine = fctl.add("mine", status="running").task_id
    t = table(fctl, clock, kind="task", task_ids=[mine])
    other = fctl.add("other", status="running").task_id
    fctl.bump(other, 1)
    clock.advance(1)
    assert t.flush() is False
    assert t.task_ids == [mine]


def test_coalescing_keeps_at_most_ten_messages_per_second(fctl, clock, comms) -> None:
    ids = [fctl.add(f"t{i}", status="running", total=1e6).task_id for i in range(20)]
    t = table(fctl, clock, max_rate=10.0)
    sent = 0
    # 5 simulated seconds, an update every millisecond, a flush attempt every ms
    for step in range(5000):
        fctl.bump(ids[step % len(ids)], 1)
        clock.advance(0.001)
        sent += t.flush()
    n = len(patches(t))
    assert n == sent
    assert 45 <= n <= 51, n  # <= 10/s, and it does keep sending while things change
    # windows of one second never hold more than 10 patches
    ats = [p["at"] for p in patches(t)]
    for i in range(len(ats) - 10):
        assert ats[i + 10] - ats[i] >= 1000 - 1e-6
    # and no update is lost: once the window passes, the rows hold the final progress
    clock.advance(0.1)
    assert t.flush() is True
    final = {r["id"]: r["done"] for r in t.current_rows()}
    assert final == {tid: fctl.get(tid).progress.done for tid in ids}


def test_force_flush_ignores_the_rate(fctl, clock, comms) -> None:
    tid = fctl.add("a", status="running", total=10).task_id
    t = table(fctl, clock, max_rate=1.0)
    for _ in range(3):
        fctl.bump(tid, 1)
        assert t.flush(force=True) is True
    assert len(patches(t)) == 3


def test_full_state_trait_is_refreshed_at_a_lower_rate(fctl, clock, comms) -> None:
    tid = fctl.add("a", status="running", total=1000).task_id
    t = table(fctl, clock, max_rate=10.0, full_state_interval=2.0)
    for _ in range(100):  # 10 simulated seconds
        fctl.bump(tid, 1)
        clock.advance(0.1)
        t.flush()
    updates = [u for u in rec(t).state_updates() if "rows" in u]
    assert 4 <= len(updates) <= 6, len(updates)
    assert len(patches(t)) >= 90
    # the trait always carries a seq consistent with its rows
    last = updates[-1]
    assert last["rows_seq"] <= t.seq
    # a state request (page reload) gets the rows as they are now
    state = t.get_state()
    assert state["rows_seq"] == t.seq
    assert state["rows"][0]["done"] == fctl.get(tid).progress.done


def test_sync_request_sends_full_state(fctl, clock, comms) -> None:
    fctl.add("a", status="running")
    t = table(fctl, clock)
    t._on_custom_msg(t, {"type": "sync", "request_id": 2})
    full = rec(t).custom_messages()[-1]
    assert full["type"] == "full" and full["seq"] == t.seq and len(full["rows"]) == 1


def test_rate_and_eta_from_progress(fctl, clock, comms) -> None:
    tid = fctl.add("a", status="running", total=100).task_id
    t = table(fctl, clock)
    for _ in range(4):
        clock.advance(1)
        fctl.bump(tid, 10)
        t.flush()
    row = t.current_rows()[0]
    assert row["rate"] == pytest.approx(10.0)
    assert row["eta"] == pytest.approx(6.0)


def test_close_unsubscribes_and_stops_sending(fctl, clock, comms) -> None:
    tid = fctl.add("a", status="running", total=10).task_id
    t = table(fctl, clock)
    assert fctl.watcher_count == 1
    c = rec(t)
    t.close()
    assert fctl.watcher_count == 0
    assert c.is_closed
    n = len(c.custom_messages())
    fctl.bump(tid, 1)
    clock.advance(1)
    t.flush()
    assert len(c.custom_messages()) == n


def test_concurrent_clicks_events_and_flushes(fctl, clock, comms) -> None:
    """Comm messages arrive on a subshell thread while task threads emit events and the
    flush thread sends: nothing raises, every request gets exactly one ack, and the
    final rows match the controller."""
    ids = [fctl.add(f"t{i}", status="running", total=1e9).task_id for i in range(40)]
    t = TaskTable(fctl, clock=clock, autoflush=True)
    errors: list[BaseException] = []
    start = threading.Barrier(6)
    rid_lock = threading.Lock()
    rids = iter(range(1, 10**6))

    def clicker(seed: int) -> None:
        try:
            start.wait()
            for i in range(200):
                tid = ids[(seed * 7 + i) % len(ids)]
                verb = CONTROL_VERBS[(seed + i) % len(CONTROL_VERBS)]
                with rid_lock:
                    rid = next(rids)
                act(t, verb, tid, rid)
                if i % 5 == 0:
                    fctl.settle(tid)
        except BaseException as exc:
            errors.append(exc)

    def producer(seed: int) -> None:
        try:
            start.wait()
            for i in range(500):
                fctl.bump(ids[(seed + i) % len(ids)], 1)
                if i % 50 == 0:
                    clock.advance(0.2)
        except BaseException as exc:
            errors.append(exc)

    def flusher() -> None:
        try:
            start.wait()
            for _ in range(300):
                clock.advance(0.05)
                t.flush()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=clicker, args=(s,)) for s in range(3)]
    threads += [threading.Thread(target=producer, args=(s,)) for s in range(2)]
    threads.append(threading.Thread(target=flusher))
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
        assert not th.is_alive()
    assert errors == []
    got = [a["request_id"] for a in acks(t)]
    assert sorted(got) == list(range(1, 601))
    t.flush(force=True)
    rows = {r["id"]: r for r in t.current_rows()}
    for tid in ids:
        snap = fctl.get(tid)
        assert rows[tid]["status"] == snap.status.value
        # a retry clears progress (a new attempt starts from nothing)
        assert rows[tid]["done"] == (snap.progress.done if snap.progress else 0.0)
        assert rows[tid]["can"] == {v: fctl.can(tid, v)[0] for v in CONTROL_VERBS}
    seqs = [(p["base"], p["seq"]) for p in patches(t)]
    assert all(b + 1 == s for b, s in seqs)
    assert [s for _, s in seqs] == sorted(s for _, s in seqs)
    t.close()


def test_autoflush_thread_delivers_without_manual_flush(fctl, comms) -> None:
    tid = fctl.add("a", status="running", total=10).task_id
    done = threading.Event()
    t = TaskTable(fctl, autoflush=True)
    original = t._send_custom

    def spy(msg: dict[str, Any]) -> None:
        original(msg)
        if msg["type"] == "patch":
            done.set()

    t._send_custom = spy  # type: ignore[method-assign]
    fctl.bump(tid, 3)
    assert done.wait(10), "the flush thread never sent the patch"
    assert t.current_rows()[0]["done"] == 3.0
    t.close()


def test_bad_constructor_arguments_are_named(fctl) -> None:
    with pytest.raises(ValueError, match="kind"):
        TaskTable(fctl, kind="grid")
    with pytest.raises(ValueError, match="max_rate"):
        TaskTable(fctl, max_rate=0)
    with pytest.raises(ValueError, match="unknown filter keys: colour"):
        TaskTable(fctl, filter={"colour": "red"})
    assert fctl.watcher_count == 0


def test_benchmark_hook_reports_rates() -> None:
    out = measure_update_traffic(300, seconds=1.0, tick=0.02)
    assert out["messages_per_s"] <= 10.0 + 1e-9
    assert out["messages_per_s"] >= 9.0
    assert out["bytes_per_s"] > 0
    # payload proportional to what changed: far below resending every full row
    assert out["mean_patch_bytes"] < 300 * 120

"""The recorder's write path: ``writes.write_batch`` and the SQL backends'
``record_batch`` (one transaction per batch), on every backend."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone

import pytest

from chongming_nb.control.messages import (
    AppendLog,
    ClearAttempts,
    CreateTask,
    Outgoing,
    SaveAttempt,
    SaveSnapshot,
    TouchHeartbeat,
    TouchProgress,
)
from chongming_nb.control.writes import write_batch
from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import AttemptRecord, Progress
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import TaskStore
from chongming_nb.stores._codec import dt_to_micros, dt_to_text, text_to_dt
from chongming_nb.stores._sql import micros_times, same_time, text_micros, touch_rows
from chongming_nb.stores.protocol import LogRecord, Touch
from chongming_nb.testing.store_contract import T0, at, full_snapshot, snap, transition

S = TaskStatus


def test_a_save_that_changes_indexed_creation_columns_lands(store: TaskStore) -> None:
    """The SQLite update leaves pipeline run, created_at, bucket and lease owner out of
    SET when they are unchanged; a save that changes them must still write them."""
    store.save_many([(snap("k"), None), (snap("same"), None)])
    changed = snap(
        "k",
        status=S.QUEUED,
        status_version=1,
        pipeline_run_id="run-9",
        created_at=at(5),
        bucket=3,
        lease_owner="host:1:k",
    )
    same = snap("same", status=S.QUEUED, status_version=1)
    store.save_many([(changed, 0), (same, 0)], [transition("k", 1), transition("same", 1)])
    assert store.get("k") == changed
    assert store.get("same") == same
    back = changed.evolve(status=S.STARTING, status_version=2, pipeline_run_id=None, bucket=None)
    store.save(back, expect_version=1)
    assert store.get("k") == back


def test_a_conflict_is_named_when_another_update_changes_creation_columns(
    store: TaskStore,
) -> None:
    store.save_many([(snap("a"), None), (snap("b"), None)])
    a1 = snap("a", status=S.QUEUED, status_version=1, bucket=7)  # a kept column changes
    b1 = snap("b", status=S.QUEUED, status_version=1)
    with pytest.raises(ConcurrencyConflict) as info:
        store.save_many([(a1, 0), (b1, 4)], [transition("a", 1), transition("b", 1)])
    assert (info.value.task_id, info.value.expected, info.value.actual) == ("b", 4, 0)
    assert store.get("a") == snap("a")
    assert store.history("a") == []


def test_a_full_snapshot_round_trips_through_create_and_save(store: TaskStore) -> None:
    full = full_snapshot("f")
    store.create(full.evolve(status=S.PENDING, status_version=0))
    store.save(full, expect_version=0)
    assert store.get("f") == full


def test_a_clear_deletes_attempts_recorded_before_it_not_after(store: TaskStore) -> None:
    """reset() then a new run in one recorder batch: the new attempt 1 survives."""
    old = AttemptRecord("r", 1, at(1), at(2), outcome=S.FAILED, executor="thread")
    assert write_batch(store, [CreateTask(snap("r")), SaveAttempt(old)]) == 0
    fresh = AttemptRecord("r", 1, at(10), executor="thread")
    again = AttemptRecord("r", 1, at(3), executor="old")
    batch: list[Outgoing] = [SaveAttempt(again), ClearAttempts("r"), SaveAttempt(fresh)]
    assert write_batch(store, batch) == 0
    assert store.attempts("r") == [fresh]


def test_write_batch_lands_every_kind_of_item(store: TaskStore) -> None:
    s0 = snap("w")
    s1 = s0.evolve(status=S.QUEUED, status_version=1)
    line = LogRecord(at(1), "stdout", "hello")
    p = Progress(done=2, total=4, updated_at=at(2))
    batch: list[Outgoing] = [
        CreateTask(s0),
        SaveSnapshot(s1, 0, transition("w", 1)),
        SaveAttempt(AttemptRecord("w", 1, at(1))),
        AppendLog("w", line),
        TouchProgress("w", p),
        TouchHeartbeat("w", at(3)),
    ]
    assert write_batch(store, batch) == 0
    got = store.get("w")
    assert got is not None
    assert got.status is S.QUEUED and got.progress == p and got.last_heartbeat_at == at(3)
    assert [t.version for t in store.history("w")] == [1]
    assert store.logs("w") == [line]
    assert store.attempts("w") == [AttemptRecord("w", 1, at(1))]


def test_touches_apply_in_order(store: TaskStore) -> None:
    store.create(snap("t"))
    p1 = Progress(done=1, updated_at=at(1))
    p2 = Progress(done=2, updated_at=at(2))
    store.touch_many(
        [
            Touch("t", progress=p1),
            Touch("t", heartbeat_at=at(5)),
            Touch("t", progress=p2, pid=42),
            Touch("t", lease_owner="h:1:k", lease_until=at(9)),
            Touch("ghost", progress=p1),  # unknown task: ignored
        ]
    )
    got = store.get("t")
    assert got is not None
    assert (got.progress, got.last_heartbeat_at, got.pid) == (p2, at(5), 42)
    assert (got.lease_owner, got.lease_until, got.status_version) == ("h:1:k", at(9), 0)


def test_merged_touches_keep_the_last_value_of_each_field() -> None:
    rows = touch_rows(
        [
            Touch("a", pid=1),
            Touch("b", heartbeat_at=at(1)),
            Touch("a", heartbeat_at=at(2)),
            Touch("a", pid=3),
        ],
        same_time,
        same_time,
    )
    assert rows == [(None, at(2), None, None, 3, "a"), (None, at(1), None, None, None, "b")]


def test_a_naive_time_in_a_touch_is_named(store: TaskStore) -> None:
    store.create(snap("n"))
    with pytest.raises(StoreError, match="task n: heartbeat_at"):
        store.touch_many([Touch("n", heartbeat_at=datetime(2026, 1, 1))])
    with pytest.raises(StoreError, match=r"task n: progress\.updated_at"):
        store.touch_many([Touch("n", progress=Progress(updated_at=datetime(2026, 1, 1)))])


def test_other_zones_are_stored_as_the_same_instant(store: TaskStore) -> None:
    plus2 = timezone(timedelta(hours=2))
    store.create(snap("z"))
    store.touch_many([Touch("z", heartbeat_at=at(1).astimezone(plus2))])
    line = LogRecord(at(2).astimezone(plus2), "stdout", "x")
    store.append_logs("z", [line])
    got = store.get("z")
    assert got is not None and got.last_heartbeat_at == at(1)
    assert [r.at for r in store.logs("z")] == [at(2)]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])  # the SQL backends have it
def test_record_batch_is_one_transaction(store: TaskStore) -> None:
    record = store.record_batch  # type: ignore[attr-defined]
    store.create(snap("x"))
    store.save_attempt(AttemptRecord("x", 1, at(1)))
    bad = snap("x", status=S.QUEUED, status_version=1)
    with pytest.raises(ConcurrencyConflict):
        record(
            [(bad, 5)],
            [transition("x", 1)],
            clears=["x"],
            logs=[("x", [LogRecord(at(1), "stdout", "lost")])],
            touches=[Touch("x", pid=7)],
        )
    assert store.attempts("x") == [AttemptRecord("x", 1, at(1))]
    assert store.logs("x") == []
    got = store.get("x")
    assert got is not None and got.pid is None and got.status_version == 0


def test_micros_times_match_the_codec_and_the_version_1_text() -> None:
    """A time's stored value is the codec's, reads back exactly, and is what the
    migration from version 1 makes of the text that version wrote."""
    tx = micros_times()
    samples = [
        T0,
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        datetime(2026, 7, 4, 5, 6, 7, 0, tzinfo=UTC),
        datetime(9999, 12, 31, 0, 0, 0, 10, tzinfo=UTC),
    ]
    conn = sqlite3.connect(":memory:")
    for value in samples:
        assert tx(value) == dt_to_micros(value)
        assert tx(value) == dt_to_micros(value)  # from the memo
        assert text_to_dt(tx(value)) == value
        (migrated,) = conn.execute(f"SELECT {text_micros('?')}", [dt_to_text(value)] * 2).fetchone()
        assert migrated == tx(value), value
    assert tx(None) is None

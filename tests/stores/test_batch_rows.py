"""Big mixed batches land exactly, on every backend.

The SQLite backend writes a batch in few statements (up to 256 rows each), binds only
the unusual columns of a usual row (the usual values are literals in its statements)
and gives each kind of transition statements of its own; rows that are not usual take
the checking builders and bind every column. These tests mix both kinds of rows in
batches large enough for every statement size, and compare what comes back with what
went in, on every backend alike.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import AttemptRecord, FailureKind, Progress, TaskSnapshot
from chongming_nb.core.states import RequestedAction, TaskStatus
from chongming_nb.stores import EventRecord, SqliteStore, TaskQuery, TaskStore
from chongming_nb.stores import sqlite as sqlite_mod
from chongming_nb.stores._codec import dt_to_micros, text_to_dt
from chongming_nb.stores._sql import micros_times
from chongming_nb.testing.store_contract import T0, at, full_snapshot, snap, transition

S = TaskStatus

#: More rows than one full statement, and a remainder that takes every smaller size.
N = 256 + 64 + 16 + 4 + 3


def _unusual(i: int, s: TaskSnapshot) -> TaskSnapshot:
    """Every seventh task has some column off its usual value (a different one each)."""
    if i % 7:
        return s
    changes: list[dict[str, object]] = [
        {"pipeline_run_id": f"run-{i}"},
        {"requested_action": RequestedAction.PAUSE},
        {"progress": Progress(done=i, total=N, unit="rows", updated_at=at(i))},
        {"pid": 4000 + i},
        {"idempotency_key": f"key-{i}"},
        {"bucket": i % 5, "bucket_key": f"b{i}"},
        {"lease_owner": "host:1:k", "lease_until": at(60)},
        {"overridden": True},
        {"tags": frozenset({"io", f"t{i}"}), "deps": (f"dep-{i}",)},
        {"outcome": {"type": "builtins.int", "value": i}, "retry_at": at(i)},
    ]
    return s.evolve(**changes[(i // 7) % len(changes)])


def _created(i: int) -> TaskSnapshot:
    # one created_at for all: the order of creation is the only tie-breaker
    return _unusual(i, snap(f"t{i:04d}", status=S.QUEUED, queued_at=at(1)))


def test_a_big_mixed_batch_of_creates_lands_in_order(store: TaskStore) -> None:
    tasks = [_created(i) for i in range(N)]
    store.save_many([(s, None) for s in tasks])
    assert [store.get(s.task_id) for s in tasks] == tasks
    oldest_first = store.query(TaskQuery(order="oldest"))
    assert [s.task_id for s in oldest_first] == [s.task_id for s in tasks]


def test_a_big_mixed_batch_of_saves_lands(store: TaskStore) -> None:
    tasks = [_created(i) for i in range(N)]
    store.save_many([(s, None) for s in tasks])
    done = []
    for i, s in enumerate(tasks):
        new = s.evolve(
            status=S.SUCCEEDED,
            status_version=1,
            attempt=1,
            started_at=at(2),
            ended_at=at(3 + i / 1000),
            last_heartbeat_at=at(2.5),
            executor="thread",
        )
        done.append(_unusual(i + 3, new))  # other tasks are unusual now
    store.save_many([(s, 0) for s in done], [transition(s.task_id, 1, S.SUCCEEDED) for s in done])
    assert [store.get(s.task_id) for s in done] == done


def test_a_missed_version_in_a_big_batch_changes_nothing(store: TaskStore) -> None:
    tasks = [_created(i) for i in range(N)]
    store.save_many([(s, None) for s in tasks])
    saves = [(s.evolve(status=S.STARTING, status_version=1), 0) for s in tasks]
    saves[N - 2] = (saves[N - 2][0], 5)
    with pytest.raises(ConcurrencyConflict) as info:
        store.save_many(saves, [transition(s.task_id, 1, S.STARTING) for s, _ in saves])
    assert (info.value.task_id, info.value.expected) == (tasks[N - 2].task_id, 5)
    assert [store.get(s.task_id) for s in tasks] == tasks
    assert store.history(tasks[0].task_id) == []


def test_transitions_of_many_kinds_land_exactly(store: TaskStore) -> None:
    """More kinds than get statements of their own, a quote in an actor, reasons and
    overrides, each kind with more rows than one statement takes."""
    ids = [f"k{i}" for i in range(N)]
    store.save_many([(snap(t), None) for t in ids])
    kinds = [(S.PENDING, S.QUEUED, "scheduler:ready", "scheduler")]
    kinds += [(S.QUEUED, S.STARTING, f"trigger-{k}", "o'brien") for k in range(20)]
    written = []
    for version in range(1, 4):
        for i, t in enumerate(ids):
            frm, to, trigger, actor = kinds[(i + version) % len(kinds)]
            kw: dict[str, object] = {}
            if i % 11 == 0:
                kw["reason"] = f"why {i}"
            if i % 13 == 0:
                kw["override"] = True
            tr = transition(
                t,
                version,
                to,
                from_status=frm,
                trigger=trigger,
                actor=actor,
                at=at(version + i / 1000),
                **kw,
            )
            written.append(tr)
    store.save_many([], written)
    for t in ids:
        assert store.history(t) == [tr for tr in written if tr.task_id == t]


def test_attempts_with_and_without_failures_land(store: TaskStore) -> None:
    ids = [f"a{i}" for i in range(N)]
    store.save_many([(snap(t), None) for t in ids])
    attempts = []
    for i, t in enumerate(ids):
        rec = AttemptRecord(t, 1, at(1), at(2 + i / 1000), S.SUCCEEDED, executor="thread")
        if i % 5 == 0:
            rec = AttemptRecord(
                t,
                1,
                at(1),
                at(3),
                S.FAILED,
                failure_kind=FailureKind.EXCEPTION,
                failure_message="boom",
                traceback="Traceback ...",
                executor="process",
                exit_code=1,
            )
        elif i % 5 == 1:
            rec = AttemptRecord(t, 1, at(1), executor="thread")  # still running
        elif i % 5 == 2:
            rec = AttemptRecord(t, 1, at(1), at(4), S.LOST, abandoned=True)
        attempts.append(rec)
    store.save_many([], attempts=attempts)
    for rec in attempts:
        assert store.attempts(rec.task_id) == [rec]


def test_a_full_snapshot_and_a_usual_one_in_one_batch(store: TaskStore) -> None:
    full = full_snapshot("f")
    plain = snap("p", status=S.QUEUED, queued_at=at(1))
    store.save_many([(full.evolve(status=S.PENDING, status_version=0), None), (plain, None)])
    later = plain.evolve(status=S.STARTING, status_version=1, started_at=at(2))
    store.save_many([(full, 0), (later, 0)], [transition("f", 7, S.STOPPING), transition("p", 1)])
    assert store.get("f") == full
    assert store.get("p") == later


def test_a_nul_in_a_kind_is_bound_not_written_into_sql(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "nul.db")
    try:
        store.create(snap("n"))
        tr = transition("n", 1, actor="a\x00b", trigger="it's")
        store.append(tr)
        assert store.history("n") == [tr]
    finally:
        store.close()


def test_usual_rows_bind_only_their_unusual_columns(tmp_path: Path) -> None:
    """What the SQLite backend binds for usual tasks (queued, then running), a
    transition and an attempt: no None and no bool (sqlite3 adapts those one by one),
    only the columns off their usual values."""
    bound: list[object] = []
    store = SqliteStore(tmp_path / "bind.db")
    try:
        conn = store._conn
        store._conn = _Spy(conn, bound)  # type: ignore[assignment]
        t0 = snap("u", status=S.QUEUED, queued_at=at(1), executor="thread")
        store.save_many([(t0, None)])
        t1 = t0.evolve(
            status=S.RUNNING,
            status_version=1,
            attempt=1,
            started_at=at(2),
            ended_at=at(3),
            last_heartbeat_at=at(2),
            outcome={"type": "builtins.int", "value": 1},
        )
        store.save_many(
            [(t1, 0)],
            [transition("u", 1, S.RUNNING, from_status=S.QUEUED)],
            attempts=[AttemptRecord("u", 1, at(2), at(3), S.SUCCEEDED, executor="thread")],
        )
        store._conn = conn
        assert store.get("u") == t1
    finally:
        store.close()
    assert not [v for v in bound if v is None or isinstance(v, bool)]
    # queued task: 12 values; running: 16 and the expected version; a transition (of
    # a kind too rare in its batch for statements of its own): all but reason and
    # override; an attempt: all but its 5 failure columns
    assert len(bound) == 12 + 17 + 7 + 6


class _Spy:
    """A connection that records the values bound by the batch statements."""

    def __init__(self, conn: sqlite3.Connection, bound: list[object]) -> None:
        self._conn, self._bound = conn, bound

    def execute(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        if params and ("INSERT" in sql or "UPDATE" in sql):
            self._bound.extend(params)
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: list[tuple[object, ...]]) -> sqlite3.Cursor:
        rows = list(rows)
        for row in rows:
            self._bound.extend(row)
        return self._conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


def test_kinds_past_the_limit_still_land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_mod, "_KINDS", {})
    monkeypatch.setattr(sqlite_mod, "_MAX_KINDS", 2)
    store = SqliteStore(tmp_path / "kinds.db")
    try:
        ids = [f"x{i}" for i in range(10)]
        store.save_many([(snap(t), None) for t in ids])
        for version in range(1, 6):  # a new kind each batch, 10 rows of it
            trs = [transition(t, version, trigger=f"kind-{version}") for t in ids]
            store.save_many([], trs)
            assert len(sqlite_mod._KINDS) <= 2
        few = [transition(t, 6, trigger="rare") for t in ids[:3]]  # too few for a kind
        store.save_many([], few)
        assert ("pending", "queued", "rare", "tester") not in sqlite_mod._KINDS
        for t in ids:
            assert [tr.trigger for tr in store.history(t)] == [
                *(f"kind-{v}" for v in range(1, 6)),
                *(["rare"] if t in ids[:3] else []),
            ]
    finally:
        store.close()


def test_micros_times_over_many_days_match_the_codec() -> None:
    """Times of many days, forward and back: each value is the codec's, and reads back
    as the very time."""
    tx = micros_times()
    start = datetime(1999, 12, 31, 23, 59, 58, tzinfo=UTC)
    for k in range(6000):  # forward over days, backward before them, microsecond 0
        for value in (
            start + timedelta(seconds=k * 61, microseconds=k * 7919 % 1_000_000),
            start - timedelta(seconds=k * 13, microseconds=k * 7919 % 1_000_000),
            start + timedelta(seconds=k),
        ):
            assert tx(value) == dt_to_micros(value)
            assert text_to_dt(tx(value)) == value
    assert tx(T0) == dt_to_micros(T0)


@pytest.mark.parametrize("missing", ["transition 1 at", "attempt 1 started_at", "event e1 at"])
def test_a_required_time_missing_in_a_batch_is_named_and_nothing_lands(
    store: TaskStore, missing: str
) -> None:
    """Among rows that take the fast builders, one record without its required time:
    a StoreError naming the record and the field, and none of the batch is written."""
    ids = [f"m{i}" for i in range(8)]
    store.save_many([(snap(t), None) for t in ids])
    trs = [transition(t, 1, S.QUEUED, at=at(1)) for t in ids]
    recs = [AttemptRecord(t, 1, at(1), executor="thread") for t in ids]
    evs = [EventRecord(f"e{i}", t, at(1), "x") for i, t in enumerate(ids)]
    if missing.startswith("transition"):
        trs[1] = replace(trs[1], at=None)  # type: ignore[arg-type]
    elif missing.startswith("attempt"):
        recs[1] = replace(recs[1], started_at=None)  # type: ignore[arg-type]
    else:
        evs[1] = replace(evs[1], at=None)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match=missing):
        store.save_many([], trs, attempts=recs, events=evs)
    assert all(store.history(t) == [] and store.attempts(t) == [] for t in ids)
    assert all(store.events(t) == [] for t in ids)

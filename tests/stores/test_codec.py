"""Full-fidelity round trips of snapshots and records (property tests)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import (
    AttemptRecord,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import RequestedAction, TaskStatus
from chongming_nb.stores import InMemoryStore, SqliteStore, TaskStore, _sql
from chongming_nb.stores import _codec as codec

#: How each SQL backend keeps a time: SQLite integer microseconds, PostgreSQL the datetime.
TIME_KINDS = {"sqlite": _sql.micros_times, "postgres": lambda: _sql.same_time}


def _row(build: Any, columns: tuple[str, ...], record: Any, kind: str = "sqlite") -> dict[str, Any]:
    """``record`` as the batch writer writes it (``_sql``), read back as a row dict."""
    tx = TIME_KINDS[kind]()
    return dict(zip(columns, build(record, tx, tx), strict=True))


# PostgreSQL text cannot hold NUL; everything else is fair game
text = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=40)
opt_text = st.none() | text
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]
)
times = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=zones
)
opt_times = st.none() | times
ints = st.integers(min_value=-(2**53), max_value=2**53)
finite = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | ints | finite | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
progress = st.builds(
    Progress,
    done=finite | ints,
    total=st.none() | finite,
    unit=opt_text,
    message=opt_text,
    updated_at=opt_times,
)
failure = st.builds(
    Failure,
    kind=st.sampled_from(FailureKind),
    message=text,
    traceback=opt_text,
    retryable=st.booleans(),
    exit_code=st.none() | st.integers(-255, 255),
    exception_type=opt_text,
)
snapshots = st.builds(
    TaskSnapshot,
    task_id=text.filter(bool),
    name=text,
    pipeline_run_id=opt_text,
    tags=st.frozensets(text, max_size=4),
    status=st.sampled_from(list(TaskStatus)),
    status_version=st.integers(0, 2**40),
    requested_action=st.none() | st.sampled_from(RequestedAction),
    attempt=st.integers(0, 1000),
    max_attempts=st.integers(0, 1000),
    created_at=opt_times,
    queued_at=opt_times,
    started_at=opt_times,
    ended_at=opt_times,
    last_heartbeat_at=opt_times,
    retry_at=opt_times,
    progress=st.none() | progress,
    failure=st.none() | failure,
    outcome=st.none() | st.dictionaries(text, json_values, max_size=4),
    executor=opt_text,
    pid=st.none() | st.integers(0, 2**31),
    priority=ints,
    deps=st.lists(text, max_size=4).map(tuple),
    idempotency_key=opt_text,
    bucket=st.none() | st.integers(-(2**31), 2**31),
    bucket_key=opt_text,
    lease_owner=opt_text,
    lease_until=opt_times,
    overridden=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(snapshots)
def test_codec_roundtrip(s: TaskSnapshot) -> None:
    for kind in TIME_KINDS:
        assert codec.row_to_snapshot(_row(_sql.task_row, codec.TASK_COLUMNS, s, kind)) == s
    row = _row(_sql.task_row, codec.TASK_COLUMNS, s, "postgres")
    text_row = {  # schema version 1 of SQLite: times as fixed-width text
        k: codec.dt_to_text(v) if k in codec.TASK_TIME_COLUMNS else v for k, v in row.items()
    }
    back = codec.row_to_snapshot(text_row)
    assert back == s
    for name in codec.TASK_TIME_COLUMNS:
        value = getattr(back, name)
        assert value is None or value.utcoffset() == timedelta(0)


@given(times, times)
def test_time_text_sorts_like_time(a: datetime, b: datetime) -> None:
    ta, tb = codec.dt_to_text(a), codec.dt_to_text(b)
    assert ta is not None and tb is not None
    assert (ta < tb) == (a < b) and (ta == tb) == (a == b)
    assert codec.text_to_dt(ta) == a


@given(
    st.builds(
        Transition,
        task_id=text,
        from_status=st.sampled_from(list(TaskStatus)),
        to_status=st.sampled_from(list(TaskStatus)),
        trigger=text,
        actor=text,
        reason=opt_text,
        at=times,
        version=st.integers(0, 2**40),
        override=st.booleans(),
    )
)
def test_transition_roundtrip(t: Transition) -> None:
    for kind in TIME_KINDS:
        row = _row(_sql.transition_row, codec.TRANSITION_COLUMNS, t, kind)
        assert codec.row_to_transition(row) == t


@given(
    st.builds(
        AttemptRecord,
        task_id=text,
        attempt=st.integers(0, 1000),
        started_at=times,
        ended_at=opt_times,
        outcome=st.none() | st.sampled_from(list(TaskStatus)),
        failure_kind=st.none() | st.sampled_from(FailureKind),
        failure_message=opt_text,
        traceback=opt_text,
        executor=opt_text,
        abandoned=st.booleans(),
        exit_code=st.none() | st.integers(-255, 255),
    )
)
def test_attempt_roundtrip(a: AttemptRecord) -> None:
    for kind in TIME_KINDS:
        assert codec.row_to_attempt(_row(_sql.attempt_row, codec.ATTEMPT_COLUMNS, a, kind)) == a


def test_naive_datetime_named_in_error() -> None:
    s = TaskSnapshot(task_id="x", name="n", started_at=datetime(2026, 1, 1))
    with pytest.raises(StoreError, match="task x: started_at is a naive datetime"):
        _row(_sql.task_row, codec.TASK_COLUMNS, s)


def test_non_json_outcome_is_kept_as_text() -> None:
    s = TaskSnapshot(
        task_id="x",
        name="n",
        outcome={"obj": object(), "when": datetime(2026, 1, 1, tzinfo=UTC), "t": (1, 2)},
    )
    back = codec.row_to_snapshot(_row(_sql.task_row, codec.TASK_COLUMNS, s))
    assert back.outcome is not None
    assert back.outcome["obj"].startswith("<object object")
    assert back.outcome["when"] == "2026-01-01T00:00:00+00:00"
    assert back.outcome["t"] == [1, 2]


def test_nan_progress_survives() -> None:
    s = TaskSnapshot(task_id="x", name="n", progress=Progress(done=math.nan))
    back = codec.row_to_snapshot(_row(_sql.task_row, codec.TASK_COLUMNS, s))
    assert back.progress is not None and math.isnan(back.progress.done)


def _through(store: TaskStore, s: TaskSnapshot) -> TaskSnapshot | None:
    store.create(s)
    return store.get(s.task_id)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(s=snapshots)
def test_roundtrip_through_backends(s: TaskSnapshot, store_factory: Any) -> None:
    store = store_factory()
    try:
        assert _through(store, s) == s
    finally:
        store.close()


def test_memory_and_sqlite_are_stores(tmp_path: Any) -> None:
    for store in (InMemoryStore(), SqliteStore(tmp_path / "s.db")):
        assert isinstance(store, TaskStore)
        store.close()


def test_row_follows_column_order() -> None:
    row = _row(_sql.task_row, codec.TASK_COLUMNS, TaskSnapshot(task_id="x", name="n"))
    assert (row["task_id"], row["name"], row["status"]) == ("x", "n", "pending")


def test_batch_chain_must_link(tmp_path: Any) -> None:
    """Group commit collapses a task's chain to one write, but a broken chain conflicts."""
    from chongming_nb.core.errors import ConcurrencyConflict

    store = SqliteStore(tmp_path / "s.db")
    s0 = TaskSnapshot(task_id="x", name="n")
    s1 = s0.evolve(status=TaskStatus.QUEUED, status_version=1)
    s2 = s1.evolve(status=TaskStatus.STARTING, status_version=2)
    with pytest.raises(ConcurrencyConflict) as info:
        store.save_many([(s0, None), (s2, 1)])
    assert (info.value.expected, info.value.actual) == (1, 0)
    assert store.get("x") is None
    with pytest.raises(StoreError, match="created twice"):
        store.save_many([(s0, None), (s0, None)])
    store.save_many([(s0, None), (s1, 0), (s2, 1)])
    assert store.get("x") == s2
    store.close()

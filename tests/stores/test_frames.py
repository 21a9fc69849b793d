"""DataFrames built in the store: one SQL query per frame, typed columns, filters in WHERE.

Each frame a SQL store builds from ``frame_columns`` must equal, column for column and
dtype for dtype, the frame built from the store's records one by one (the path any
other store takes), on every backend; the filters must select exactly the rows the
generated history says they select.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest

from chongming_nb import frames
from chongming_nb.control.reader import StoreReader
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.models import AttemptRecord, Failure, FailureKind, Progress
from chongming_nb.core.states import TaskStatus
from chongming_nb.frames import FAILURE_DTYPE, STATUS_DTYPE
from chongming_nb.stores import SqliteStore, TaskStore
from chongming_nb.testing.history import HISTORY_START, generate_history, generated_status
from chongming_nb.testing.store_contract import at, snap

S = TaskStatus
N = 240
STEP = timedelta(milliseconds=10)


def _by_records(store: TaskStore, kind: str) -> pd.DataFrame:
    """The frame built from the store's records, one task at a time."""
    snaps = store.query()
    names = {s.task_id: s.name for s in snaps}
    if kind == "tasks":
        return frames.snapshots_frame(snaps)
    if kind == "attempts":
        recs = [r for s in reversed(snaps) for r in store.attempts(s.task_id)]
        return frames.attempts_frame(recs, names)
    trs = [t for s in reversed(snaps) for t in store.history(s.task_id)]
    return frames.transitions_frame(trs, names)


def _odd_rows(store: TaskStore) -> None:
    """Rows off the generated pattern: NaN and inf in a progress (not strict JSON), a
    task without created_at, tags and deps, an attempt with an exit code, unicode."""
    store.create(
        snap(
            "odd-nan",
            name="naïve <b>",
            status=S.RUNNING,
            progress=Progress(done=math.nan, total=math.inf, unit="€", message="hälf"),
            tags=frozenset({"z", "a"}),
            deps=("g00000001",),
        )
    )
    store.create(snap("odd-undated", status=S.PENDING).evolve(created_at=None))
    store.create(
        snap(
            "odd-failed",
            status=S.FAILED,
            failure=Failure(FailureKind.NONZERO_EXIT, "exit 3", exit_code=3),
        )
    )
    store.save_attempt(
        AttemptRecord(
            "odd-failed",
            1,
            at(1),
            at(2),
            S.FAILED,
            FailureKind.NONZERO_EXIT,
            "exit 3",
            "Traceback ...",
            "process",
            abandoned=True,
            exit_code=3,
        )
    )


@pytest.fixture
def history(store: TaskStore) -> TaskStore:
    generate_history(store, N, step=STEP)
    _odd_rows(store)
    return store


@pytest.mark.parametrize("kind", ["tasks", "attempts", "transitions"])
def test_a_frame_from_the_store_equals_the_frame_of_its_records(
    history: TaskStore, kind: str
) -> None:
    method = {"tasks": "snapshots_df", "attempts": "attempts_df", "transitions": "transitions_df"}
    got = getattr(StoreReader(history), method[kind])()
    expect = _by_records(history, kind)
    pd.testing.assert_frame_equal(got, expect)
    assert len(got) > N - 1
    if kind == "tasks":
        assert got["status"].dtype == STATUS_DTYPE
        assert got["failure_kind"].dtype == FAILURE_DTYPE
        assert str(got["created_at"].dtype) == "datetime64[us, UTC]"
        odd = got.set_index("task_id").loc["odd-nan"]
        assert pd.isna(odd["progress_done"]) and odd["progress_total"] == math.inf
        assert odd["tags"] == ["a", "z"] and odd["progress_unit"] == "€"
    if kind == "attempts":
        assert str(got["exit_code"].dtype) == "Int64"
        assert got.set_index("task_id").loc["odd-failed", "exit_code"] == 3


def test_empty_frames_keep_their_dtypes(store: TaskStore) -> None:
    r = StoreReader(store)
    for df, col, dtype in (
        (r.snapshots_df(), "status", STATUS_DTYPE),
        (r.attempts_df(), "outcome", STATUS_DTYPE),
        (r.transitions_df(), "to_status", STATUS_DTYPE),
    ):
        assert len(df) == 0 and df[col].dtype == dtype
    pd.testing.assert_frame_equal(r.snapshots_df(), frames.snapshots_frame([]))
    pd.testing.assert_frame_equal(r.attempts_df(), frames.attempts_frame([]))


def _ids(df: pd.DataFrame) -> set[str]:
    return set(df["task_id"])


def _expected(pred: Callable[[int], bool]) -> set[str]:
    return {f"g{i:08x}" for i in range(N) if pred(i)}


def test_filters_select_the_tasks_the_history_says(history: TaskStore) -> None:
    r = StoreReader(history)
    failed = r.snapshots_df(status="failed")
    assert _ids(failed) == _expected(lambda i: generated_status(i) is S.FAILED) | {"odd-failed"}
    assert _ids(r.snapshots_df(tag="io")) == _expected(lambda i: i % 5 == 0)
    assert _ids(r.snapshots_df(name_prefix="trans")) == _expected(lambda i: i % 3 == 1)
    assert _ids(r.attempts_df(pipeline_run_id="run-1")) == _expected(
        lambda i: i % 3 == 0 and i // 100 == 1
    )
    both = r.transitions_df(status=["failed"], name_prefix="extract")
    assert _ids(both) == _expected(lambda i: i % 3 == 0 and i % 10 == 9) != set()
    assert _ids(r.snapshots_df(status="failed", tag="io")) == set()  # i % 10 == 9: no tag
    # limit: the newest tasks (created last), in each frame
    newest = _expected(lambda i: i >= N - 7)
    assert _ids(r.snapshots_df(limit=7, name_prefix="")) <= newest | {"odd-nan", "odd-failed"}
    assert len(r.snapshots_df(limit=7)) == 7
    # the 3 newest: the two odd tasks created last (odd-nan has no attempt) and task N-1
    assert _ids(r.snapshots_df(limit=3)) == {"odd-failed", "odd-nan", f"g{N - 1:08x}"}
    assert _ids(r.attempts_df(limit=3)) == {"odd-failed", f"g{N - 1:08x}"}
    assert len(r.snapshots_df(limit=0)) == 0 and len(r.attempts_df(limit=0)) == 0
    some = {"g00000003", "g00000009", "odd-nan"}
    assert _ids(r.snapshots_df(ids=some)) == some
    assert _ids(r.transitions_df(ids=some, status="failed")) == {"g00000009"}


def test_since_and_until_select_rows_by_their_own_time(history: TaskStore) -> None:
    r = StoreReader(history)
    since, until = HISTORY_START + 50 * STEP, HISTORY_START + 60 * STEP
    tasks = r.snapshots_df(since=since, until=until)
    assert _ids(tasks) == _expected(lambda i: 50 <= i < 60)
    atts = r.attempts_df(since=since, until=until)
    assert len(atts) and (atts["started_at"] >= since).all() and (atts["started_at"] < until).all()
    expect = _by_records(history, "attempts")
    keep = (expect["started_at"] >= since) & (expect["started_at"] < until)
    pd.testing.assert_frame_equal(atts, expect[keep].reset_index(drop=True))
    trs = r.transitions_df(since=since, status="failed")
    assert len(trs) and (trs["at"] >= since).all() and set(trs["to_status"]) >= {"failed"}


def test_bad_filters_are_refused_by_name(history: TaskStore) -> None:
    r = StoreReader(history)
    with pytest.raises(TypeError, match="colour"):
        r.snapshots_df(colour="red")
    with pytest.raises(ConfigurationError, match="sucess"):
        r.attempts_df(status="sucess")
    with pytest.raises(ConfigurationError, match="limit"):
        r.transitions_df(limit=-1)


def test_each_frame_is_one_sql_query(tmp_path: Any) -> None:
    store = SqliteStore(tmp_path / "one.db")
    generate_history(store, 50)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    r = StoreReader(store)
    for name in ("snapshots_df", "attempts_df", "transitions_df", "events_df"):
        statements.clear()
        df = getattr(r, name)(status="failed", name_prefix="ex", limit=20, since=HISTORY_START)
        assert [s.split()[0] for s in statements] == ["SELECT"], (name, statements)
        assert "WHERE" in statements[0] and len(df) > 0
    store.close()

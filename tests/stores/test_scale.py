"""A generated store of 100,000 tasks: frames, pages and retention give what the
generator's formula says, at that size (no timings: counts and order only)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import timedelta

import pytest

from chongming_nb.cli.main import main
from chongming_nb.control.reader import StoreReader
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore, TaskQuery
from chongming_nb.testing.history import HISTORY_START, generate_history

N = 100_000
STEP = timedelta(milliseconds=10)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path_factory.mktemp("scale") / "big.db")
    attempts = generate_history(store, N, step=STEP)
    assert attempts == N + 2 * (N // 10)  # one in ten failed after 3 attempts
    yield store
    store.close()


def test_frames_of_a_100k_store(big: SqliteStore) -> None:
    r = StoreReader(big)
    tasks = r.snapshots_df()
    assert len(tasks) == N and tasks["task_id"].iloc[0] == f"g{N - 1:08x}"
    assert (tasks["status"] == "failed").sum() == N // 10
    atts = r.attempts_df(status="failed", name_prefix="load")
    assert len(atts) == 3 * sum(1 for i in range(N) if i % 10 == 9 and i % 3 == 2)
    window = r.transitions_df(since=HISTORY_START + 500 * STEP, until=HISTORY_START + 510 * STEP)
    assert set(window["task_id"]) <= {f"g{i:08x}" for i in range(499, 510)}
    assert len(r.snapshots_df(tag="io", limit=25)) == 25


def test_pages_of_a_100k_store(big: SqliteStore) -> None:
    rows, cursor = big.page(TaskQuery(limit=20))
    assert [s.task_id for s in rows] == [f"g{i:08x}" for i in range(N - 1, N - 21, -1)]
    deep, _ = big.page(TaskQuery(limit=20), after=cursor)
    assert deep[0].task_id == f"g{N - 21:08x}"
    out = io.StringIO()
    code = main(["--store", str(big.path), "ps", "--limit", "20"], out=out, err=io.StringIO())
    lines = out.getvalue().splitlines()
    assert code == 0 and len(lines) == 22 and lines[-1].startswith("(more: --after ")


def test_retention_dry_run_on_a_100k_store(big: SqliteStore) -> None:
    cut = HISTORY_START + 1000 * STEP
    got = big.purge(older_than=cut, dry_run=True)
    # tasks 0..999 ended before the cutoff (task i ends at start + (i + 0.5) * STEP)
    assert got["tasks"] == 1000 and got["events"] == 1000
    assert len(big.query(TaskQuery(status=frozenset({TaskStatus.SUCCEEDED}), limit=1))) == 1

"""What the faster store write path must keep (issue 5, benchmarks of item 8).

* Write-ahead order: the recorder commits a batch before it publishes the batch's events,
  so a subscriber that reads the store (through another connection) when it receives a
  TaskStatusChanged finds that version there — also when group commit collapses a task's
  whole chain into one row write.
* Group commit with one executemany per kind of row: a stale version anywhere in the
  batch is a ConcurrencyConflict naming that task and the version it really has, and
  nothing of the batch lands; a create of an existing task names it.
* SQLite: a second store on the same file in this process never drops the WAL locks of
  the first, so another process that opens and closes the file cannot delete the WAL
  under us (commits after that were lost, and CLI commands went unseen).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import chongming_nb as cn
from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import AttemptRecord, TaskSnapshot, Transition
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore, TaskStore

S = TaskStatus
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def store_pair(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[TaskStore, Callable[[], TaskStore]]]:
    """(the store under test, a factory of other connections to the same data)."""
    made: list[Any] = []
    if request.param == "sqlite":
        path = tmp_path / "tasks.db"

        def other() -> TaskStore:
            s = SqliteStore(path)
            made.append(s)
            return s

        main: Any = SqliteStore(path)
    else:
        url: str = request.getfixturevalue("postgres_url")
        from chongming_nb.stores.postgres import PostgresStore

        schema = f"wa_{uuid.uuid4().hex[:12]}"

        def other() -> TaskStore:
            s = PostgresStore(url, schema=schema)
            made.append(s)
            return s

        main = PostgresStore(url, schema=schema)
    yield main, other
    for s in made:
        s.close()
    if request.param == "postgres":
        main.drop_schema()
    main.close()


def _noop() -> None:
    return None


def test_subscriber_finds_every_published_version_in_the_store(
    store_pair: tuple[TaskStore, Callable[[], TaskStore]],
) -> None:
    store, other = store_pair
    reader = other()
    seen: list[tuple[str, int, str]] = []
    problems: list[str] = []
    lock = threading.Lock()

    def on_event(ev: Any) -> None:
        snap = reader.get(ev.task_id)
        if snap is None:
            problems.append(f"{ev.task_id} v{ev.version}: not in the store yet")
            return
        if snap.status_version < ev.version:
            problems.append(
                f"{ev.task_id}: event v{ev.version} published, store has v{snap.status_version}"
            )
            return
        stored = {tr.version: tr.to_status for tr in reader.history(ev.task_id)}
        if stored.get(ev.version) is not ev.to_status:
            problems.append(
                f"{ev.task_id}: transition v{ev.version} -> {ev.to_status.value} "
                f"not in the stored history {stored}"
            )
        with lock:
            seen.append((ev.task_id, ev.version, ev.to_status.value))

    ctl = cn.Controller(store=store)
    try:
        ctl.watch(on_event, [cn.TaskStatusChanged])
        # enough tasks that batches hold several links of one task's chain
        handles = [ctl.submit(_noop) for _ in range(300)]
        for h in handles:
            assert h.wait(60), f"task {h.id} did not finish"
        assert ctl.flush(60)
    finally:
        ctl.close()
    assert problems == []
    assert ctl.persist_failures == 0
    # every task published queued, starting, running, succeeded (v1..v4), all checked
    assert len(seen) == 4 * len(handles)
    assert {(tid, v) for tid, v, _ in seen} == {(h.id, v) for h in handles for v in range(1, 5)}


def _snap(tid: str, version: int, status: TaskStatus = S.PENDING) -> TaskSnapshot:
    return TaskSnapshot(task_id=tid, name="t", status=status, status_version=version, created_at=T0)


def _tr(tid: str, version: int, to: TaskStatus) -> Transition:
    return Transition(
        task_id=tid,
        from_status=S.PENDING,
        to_status=to,
        trigger="test",
        actor="tester",
        reason=None,
        at=T0 + timedelta(seconds=version),
        version=version,
    )


def test_stale_version_in_the_middle_of_a_group_commit(
    store_pair: tuple[TaskStore, Callable[[], TaskStore]],
) -> None:
    store, _ = store_pair
    for tid in ("a", "b", "c"):
        store.create(_snap(tid, 0))
    # someone else moved b to v1 already
    store.save(_snap("b", 1, S.QUEUED), expect_version=0)
    before = {tid: store.get(tid) for tid in ("a", "b", "c")}
    batch = [
        (_snap("a", 1, S.QUEUED), 0),
        # stale: expects v0, and writes v1 — the version b has now (same row count
        # as a success would leave, so it must be told apart by the expectation)
        (_snap("b", 1, S.SKIPPED), 0),
        (_snap("c", 1, S.QUEUED), 0),
        (_snap("d", 0), None),
    ]
    with pytest.raises(ConcurrencyConflict) as info:
        store.save_many(
            batch,
            [_tr("a", 1, S.QUEUED), _tr("b", 1, S.SKIPPED), _tr("c", 1, S.QUEUED)],
            attempts=[AttemptRecord("a", 1, T0)],
        )
    assert (info.value.task_id, info.value.expected, info.value.actual) == ("b", 0, 1)
    # nothing of the batch landed
    assert {tid: store.get(tid) for tid in ("a", "b", "c")} == before
    assert store.get("d") is None
    assert store.history("a") == [] and store.history("c") == []
    assert store.attempts("a") == []


def test_unknown_task_in_a_group_commit_is_a_conflict(
    store_pair: tuple[TaskStore, Callable[[], TaskStore]],
) -> None:
    store, _ = store_pair
    store.create(_snap("a", 0))
    with pytest.raises(ConcurrencyConflict) as info:
        store.save_many([(_snap("a", 1, S.QUEUED), 0), (_snap("ghost", 1, S.QUEUED), 0)])
    assert (info.value.task_id, info.value.actual) == ("ghost", None)
    got = store.get("a")
    assert got is not None and got.status_version == 0


def test_duplicate_create_in_a_group_commit_names_the_task(
    store_pair: tuple[TaskStore, Callable[[], TaskStore]],
) -> None:
    store, _ = store_pair
    store.create(_snap("old", 0))
    with pytest.raises(StoreError, match="task old already exists"):
        store.save_many(
            [(_snap("new1", 0), None), (_snap("old", 0), None), (_snap("new2", 0), None)]
        )
    assert store.get("new1") is None and store.get("new2") is None
    assert store.get("old") == _snap("old", 0)


def test_big_group_commit_round_trips(
    store_pair: tuple[TaskStore, Callable[[], TaskStore]],
) -> None:
    store, other = store_pair
    n = 500
    store.save_many([(_snap(f"t{i}", 0), None) for i in range(n)])
    store.save_many(
        [(_snap(f"t{i}", 1, S.QUEUED), 0) for i in range(n)],
        [_tr(f"t{i}", 1, S.QUEUED) for i in range(n)],
    )
    reader = other()
    assert reader.counts()[S.QUEUED] == n
    assert reader.history("t7") == [_tr("t7", 1, S.QUEUED)]


_READ_AND_CLOSE = """
import sys
from chongming_nb.stores import SqliteStore
s = SqliteStore(sys.argv[1])
print(len(s.query()))
s.close()
"""


def _count_in_another_process(path: Path) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _READ_AND_CLOSE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(out.stdout.strip())


def test_second_sqlite_store_in_one_process_keeps_commits_visible(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    first = SqliteStore(path)
    try:
        first.create(_snap("a", 0))
        second = SqliteStore(path)  # e.g. cn.open_store() next to the kernel's controller
        second.close()
        assert _count_in_another_process(path) == 1
        # another process opened and closed the file: it must not have taken itself for
        # the last connection (and deleted the WAL we still write to)
        first.create(_snap("b", 0))
        assert Path(f"{path}-wal").exists()
        assert _count_in_another_process(path) == 2
    finally:
        first.close()
    reopened = SqliteStore(path)
    try:
        assert {s.task_id for s in reopened.query()} == {"a", "b"}
    finally:
        reopened.close()

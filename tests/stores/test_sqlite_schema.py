"""SQLite schema version 2: integer times, a file of version 1 migrated in place and
read back exactly, kept status counts, the indexes the lists read, bytes per task."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from chongming_nb.control.ownership import OwnerId
from chongming_nb.core.models import Command, TaskSnapshot
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore, TaskQuery
from chongming_nb.stores import sqlite as sqlite_mod
from chongming_nb.stores._codec import dt_to_text
from chongming_nb.stores._schema import table_columns
from chongming_nb.stores.protocol import SCHEMA_VERSION, LogRecord, OwnerRecord, RunRecord
from chongming_nb.testing.history import HISTORY_START, generate_history
from chongming_nb.testing.store_size import bytes_per_noop_task

T0 = datetime(2026, 3, 1, 8, 30, 0, 123456, tzinfo=UTC)


def _fill(store: SqliteStore) -> None:
    """A little of everything a store holds."""
    generate_history(store, 60, step=timedelta(seconds=1, microseconds=7))
    store.create(TaskSnapshot(task_id="undated", name="u"))  # no created_at at all
    store.append_logs(
        "g00000010", [LogRecord(T0, "stdout", "hello"), LogRecord(T0, "log", "w", "WARNING")]
    )
    store.submit_command(Command("c1", "g00000011", "stop", {"why": "x"}, "cli", created_at=T0))
    store.claim_commands(owner="o1", now=T0, lease_seconds=30)
    store.submit_command(Command("c2", "g00000012", "pause", created_at=T0))
    store.upsert_owner(OwnerRecord("o1", "host", 42, None, T0, T0 + timedelta(seconds=3)))
    store.save_run(RunRecord("r1", "daily", "running", T0, T0, {"nodes": [1, 2]}))
    store.purge(older_than=HISTORY_START + timedelta(seconds=3))  # seq numbers handed out


def _everything(store: SqliteStore) -> dict[str, Any]:
    snaps = store.query(TaskQuery(order="oldest"))
    ids = [s.task_id for s in snaps]
    return {
        "snapshots": snaps,
        "history": {t: store.history(t) for t in ids},
        "attempts": {t: store.attempts(t) for t in ids},
        "events": store.events(),
        "logs": store.logs("g00000010"),
        "commands": store.commands(),
        "owners": store.owners(),
        "runs": store.list_runs(),
        "counts": store.counts(),
        "pages": store.page(TaskQuery(limit=7)),
    }


def _as_version_1(source: Path, target: Path) -> None:
    """``target``: the rows of ``source`` in a file of schema version 1 (its tables and
    indexes, times as the fixed-width text that version wrote)."""
    target.touch(mode=0o600)
    old = sqlite3.connect(target)
    for stmt in sqlite_mod.MIGRATIONS[1]:
        old.execute(stmt)
    old.execute("INSERT INTO chongming_schema (version) VALUES (1)")
    new = sqlite3.connect(source)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for table, cols in table_columns().items():
        if table == "chongming_schema":
            continue
        names = [c for c, _ in cols]
        timed = [t for _, t in cols]
        for row in new.execute(f"SELECT {', '.join(names)} FROM {table}"):
            values = [
                dt_to_text(epoch + timedelta(microseconds=v)) if t and v is not None else v
                for v, t in zip(row, timed, strict=True)
            ]
            assert all(not isinstance(v, int) for v, t in zip(values, timed, strict=True) if t)
            marks = ", ".join("?" for _ in names)
            old.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})", values)
    for name, seq in new.execute("SELECT name, seq FROM sqlite_sequence"):
        old.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (seq, name))
    old.commit()
    old.close()
    new.close()


def _shape(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        objects = conn.execute(
            "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "ORDER BY type, name"
        ).fetchall()
        columns = {
            name: conn.execute(f"PRAGMA table_info({name})").fetchall()
            for kind, name, _ in objects
            if kind == "table"
        }
        return {"objects": objects, "columns": columns}
    finally:
        conn.close()


def test_a_version_1_file_migrates_and_reads_back_exactly(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    store = SqliteStore(fresh)
    _fill(store)
    want = _everything(store)
    store.close()
    assert len(want["snapshots"]) == 58 and want["commands"] and want["logs"]

    v1 = tmp_path / "v1.db"
    _as_version_1(fresh, v1)
    assert _time_type(v1) == "text"

    migrated = SqliteStore(v1)
    assert migrated.schema_version == SCHEMA_VERSION == 2
    assert _everything(migrated) == want
    assert migrated.integrity_check() == "ok"
    # numbers handed out before are not handed out again
    migrated.create(TaskSnapshot(task_id="new", name="n", created_at=T0))
    migrated.close()
    raw = sqlite3.connect(v1)
    try:
        (seq,) = raw.execute("SELECT seq FROM tasks WHERE task_id = 'new'").fetchone()
        assert seq == 62  # 60 generated + 1 undated, then this one (3 were purged)
    finally:
        raw.close()
    assert _shape(v1) == _shape(fresh) and _time_type(v1) == "integer"


def _time_type(path: Path) -> str:
    raw = sqlite3.connect(path)
    try:
        sql = "SELECT typeof(created_at) FROM tasks WHERE task_id = 'g00000010'"
        return str(raw.execute(sql).fetchone()[0])
    finally:
        raw.close()


def test_kept_counts_follow_every_write(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    generate_history(store, 50)

    def grouped() -> dict[TaskStatus, int]:
        out = dict.fromkeys(TaskStatus, 0)
        for s in store.query():
            out[s.status] += 1
        return out

    assert store.counts() == grouped() and store.counts()[TaskStatus.FAILED] == 5
    snap = store.get("g00000000")
    assert snap is not None
    store.save(
        snap.evolve(status=TaskStatus.STOPPED, status_version=snap.status_version + 1),
        expect_version=snap.status_version,
    )
    store.purge(older_than=HISTORY_START + timedelta(milliseconds=105))
    store.prune(keep_terminal=30)
    assert store.counts() == grouped() and sum(store.counts().values()) == 30
    only = frozenset({TaskStatus.FAILED})
    assert store.counts(TaskQuery(status=only)) == {
        s: n if s in only else 0 for s, n in grouped().items()
    }
    store.close()


def _plan(store: SqliteStore, sql: str, params: list[Any]) -> str:
    with store._read() as conn:
        return " | ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def test_lists_and_counts_read_indexes_not_every_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first page (filtered by one status or not) walks an index in its order and
    stops after a page; the counts read the kept counts: neither sorts nor scans the
    tasks, so their cost does not grow with the store."""
    store = SqliteStore(tmp_path / "s.db")
    generate_history(store, 200)
    plans: list[str] = []
    fetch = store._fetch

    def spy(sql: str, params: Any = ()) -> list[dict[str, Any]]:
        plans.append(_plan(store, sql, list(params)))
        return fetch(sql, params)

    monkeypatch.setattr(store, "_fetch", spy)
    store.page(TaskQuery(limit=20))
    store.page(TaskQuery(limit=20, status=frozenset({TaskStatus.SUCCEEDED})))
    store.query(TaskQuery(limit=20))
    store.counts()
    assert len(plans) >= 4
    for plan in plans:
        assert "TEMP B-TREE" not in plan and "SCAN tasks" not in plan.replace(
            "SCAN tasks USING", "(index)"
        ), plan
    assert any("tasks_status_created" in p for p in plans)
    assert "task_counts" in plans[-1]
    store.close()


def test_bytes_per_finished_no_op_task() -> None:
    """A finished no-op task, run by a controller, costs at most 800 bytes of store
    (``bytes_per_noop_task``: the file's growth over the empty store's after a
    checkpoint and a VACUUM, over 2,000 tasks). The owner id is a fixed one of a usual
    length: the real one holds the host name, and every task row keeps its owner."""
    owner = OwnerId(host="notebook-host", pid=123456, started=179616506351, nonce="3c704c3c")
    per_task, _ = bytes_per_noop_task(2000, owner=str(owner))
    assert per_task <= 800


@pytest.mark.parametrize(
    "options",
    [
        {},
        {
            "attempts": 2,
            "fail_every": 4,
            "names": ("a", "b"),
            "step": timedelta(milliseconds=7, microseconds=3),
            "prefix": "x",
            "first": 17,
            "start": datetime(1999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        },
        {"attempts": 1, "fail_every": 0, "step": timedelta(microseconds=3)},
    ],
)
def test_the_sql_generator_writes_what_the_python_one_does(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    py, sql = SqliteStore(tmp_path / "py.db"), SqliteStore(tmp_path / "sql.db")
    made = generate_history(py, 230, batch=40, **options)
    assert generate_history(sql, 230, batch=100, sql=True, **options) == made
    for table, order in (
        ("tasks", "seq"),
        ("transitions", "task_id, version"),
        ("attempts", "task_id, attempt"),
        ("events", "seq"),
        ("task_counts", "status"),
    ):
        rows = [_rows(s, f"SELECT * FROM {table} ORDER BY {order}") for s in (py, sql)]
        assert rows[0] == rows[1] and rows[0], table
    py.close()
    sql.close()


def _rows(store: SqliteStore, sql: str) -> list[Any]:
    with store._read() as conn:
        return list(conn.execute(sql).fetchall())

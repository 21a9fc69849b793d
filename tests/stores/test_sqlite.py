"""SQLite specifics: file safety, failure behaviour, schema versions, several processes."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import Command, TaskSnapshot
from chongming_nb.stores import InMemoryStore, SqliteStore, open_store
from chongming_nb.stores import sqlite as sqlite_mod
from chongming_nb.stores.protocol import SCHEMA_VERSION

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_new_file_is_private_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "tasks.db"
    store = SqliteStore(path)
    store.create(TaskSnapshot(task_id="a", name="a", created_at=T0))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0
    store.close()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"tasks_status_created", "tasks_run", "tasks_created", "tasks_bucket"} <= indexes
    assert raw.execute("SELECT version FROM chongming_schema").fetchone()[0] == SCHEMA_VERSION
    raw.close()
    reopened = SqliteStore(path)
    assert reopened.get("a") is not None and reopened.schema_version == SCHEMA_VERSION
    assert reopened.integrity_check() == "ok"
    reopened.close()


def test_corrupt_file_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    junk = b"\x00garbage that is not a database\n" * 100
    path.write_bytes(junk)
    with pytest.raises(StoreError, match=str(path)) as info:
        SqliteStore(path)
    assert "not a SQLite database" in str(info.value)
    assert path.read_bytes() == junk
    assert not Path(str(path) + "-wal").exists()


def test_truncated_database_is_store_error(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    store = SqliteStore(path)
    for i in range(200):
        store.create(TaskSnapshot(task_id=f"t{i}", name="x" * 200, created_at=T0))
    store.close()
    data = path.read_bytes()
    # keep a valid header, damage the schema page
    damaged = data[:100] + b"\xff" * 3000 + data[3100:]
    path.write_bytes(damaged)
    with pytest.raises(StoreError, match=str(path)):
        s = SqliteStore(path)
        s.query()
    assert path.read_bytes() == damaged


def test_unwritable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = blocker / "sub" / "tasks.db"
    with pytest.raises(StoreError, match=str(target)):
        SqliteStore(target)
    assert blocker.read_text() == "x"
    with pytest.raises(StoreError, match="/proc"):
        SqliteStore("/proc/chongming-test/tasks.db")


def test_directory_as_path(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        SqliteStore(tmp_path)


def test_newer_schema_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    SqliteStore(path).close()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE chongming_schema SET version = ?", (SCHEMA_VERSION + 1,))
    raw.commit()
    raw.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match=rf"{path}.*schema version {SCHEMA_VERSION + 1}"):
        SqliteStore(path)
    assert path.read_bytes() == before


def test_foreign_sqlite_database_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE invoices (id INTEGER)")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match=r"something else.*invoices"):
        SqliteStore(path)
    raw = sqlite3.connect(path)
    tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    raw.close()
    assert tables == ["invoices"]


def test_migration_runs_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tasks.db"
    store = SqliteStore(path)
    store.create(TaskSnapshot(task_id="keep", name="k", created_at=T0))
    store.close()
    migrations = dict(sqlite_mod.MIGRATIONS)
    migrations[SCHEMA_VERSION + 1] = ["CREATE TABLE extra_v2 (x INTEGER)"]
    monkeypatch.setattr(sqlite_mod, "MIGRATIONS", migrations)
    monkeypatch.setattr(sqlite_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    upgraded = SqliteStore(path)
    assert upgraded.schema_version == SCHEMA_VERSION + 1
    assert upgraded.get("keep") is not None
    upgraded.close()
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM chongming_schema").fetchone()[0] == SCHEMA_VERSION + 1
    raw.execute("SELECT x FROM extra_v2").fetchall()
    raw.close()


def test_failed_migration_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tasks.db"
    SqliteStore(path).close()
    migrations = dict(sqlite_mod.MIGRATIONS)
    migrations[SCHEMA_VERSION + 1] = ["CREATE TABLE ok_table (x INTEGER)", "THIS IS NOT SQL"]
    monkeypatch.setattr(sqlite_mod, "MIGRATIONS", migrations)
    monkeypatch.setattr(sqlite_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=str(path)):
        SqliteStore(path)
    raw = sqlite3.connect(path)
    names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    assert "ok_table" not in names
    assert raw.execute("SELECT version FROM chongming_schema").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_open_store_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = open_store("memory:")
    assert isinstance(mem, InMemoryStore)
    p = tmp_path / "a.db"
    s1 = open_store(f"sqlite://{p}")
    assert isinstance(s1, SqliteStore) and s1.path == p and s1.url == f"sqlite://{p}"
    assert s1.url.startswith("sqlite:///")
    s1.close()
    s1b = open_store(f"sqlite:///{p}")
    assert isinstance(s1b, SqliteStore) and s1b.path == p
    s1b.close()
    s2 = open_store(p)
    assert isinstance(s2, SqliteStore) and s2.path == p
    s2.close()
    monkeypatch.chdir(tmp_path)
    s3 = open_store("sqlite:rel.db")
    assert isinstance(s3, SqliteStore) and s3.path == tmp_path / "rel.db"
    s3.close()
    monkeypatch.setenv("CHONGMING_STORE", str(tmp_path / "env.db"))
    s4 = open_store()
    assert isinstance(s4, SqliteStore) and s4.path == tmp_path / "env.db"
    s4.close()
    for bad in ("", "  ", "mysql://x/y", "sqlite://host/x"):
        with pytest.raises(StoreError):
            open_store(bad)


# ------------------------------------------------------------ several processes


def _claimer(path: str, owner: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    store = SqliteStore(path)
    got: list[str] = []
    now = datetime(2026, 1, 1, tzinfo=UTC)
    while True:
        batch = store.claim_commands(owner=owner, now=now, lease_seconds=600, limit=3)
        if not batch:
            break
        got += [c.command_id for c in batch]
    store.close()
    out.put((owner, got))


def test_claims_exclusive_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "tasks.db")
    store = SqliteStore(path)
    for i in range(300):
        store.submit_command(Command(f"c{i:04d}", "t", "stop", created_at=T0))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(path, f"p{i}", out)) for i in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    claimed = [cid for _, ids in results for cid in ids]
    assert sorted(claimed) == [f"c{i:04d}" for i in range(300)]
    assert len(set(claimed)) == len(claimed)
    assert all(c.claimed_by in {"p0", "p1", "p2"} for c in store.commands())
    store.close()


def _writer(path: str, k: int) -> None:
    store = SqliteStore(path)
    for i in range(100):
        tid = f"p{k}-{i}"
        s = TaskSnapshot(task_id=tid, name=tid, created_at=T0 + timedelta(seconds=i))
        store.create(s)
        store.save(s.evolve(status_version=1), expect_version=0)
        store.touch(tid, heartbeat_at=T0)
    store.close()


def test_writers_in_several_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "tasks.db")
    SqliteStore(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = SqliteStore(path)
    assert len(store.query()) == 300
    assert all(s.status_version == 1 for s in store.query())
    assert store.integrity_check() == "ok"
    store.close()


def test_forked_child_uses_its_own_connection(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "tasks.db")
    store.create(TaskSnapshot(task_id="parent", name="p", created_at=T0))
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_fork_child, args=(store,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert store.get("child") is not None and store.get("parent") is not None
    store.close()


def _fork_child(store: SqliteStore) -> None:
    store.create(TaskSnapshot(task_id="child", name="c", created_at=T0))
    assert store.get("parent") is not None


def test_locked_file_is_said_locked_not_corrupt(tmp_path: Path) -> None:
    """Another process holding the file's write lock past ``timeout``: the error says
    the database is locked and for how long it was waited on, not "(corrupt?)" (a user
    told their store may be corrupt goes looking for damage that is not there)."""
    path = tmp_path / "tasks.db"
    SqliteStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match=str(path)) as info:
            SqliteStore(path, timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    text = str(info.value)
    assert "corrupt" not in text
    assert "locked by another connection or process" in text and "0.05s" in text
    reopened = SqliteStore(path)  # nothing was changed: it opens once the lock is gone
    assert reopened.integrity_check() == "ok"
    reopened.close()

"""Retention: ``ctl.prune``, ``RetentionPolicy`` and ``chongming prune`` delete old finished
tasks with all their history in one transaction, never a live task or one the
controller holds, and the SQLite file gives the space back."""

from __future__ import annotations

import io
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import chongming_nb as cn
from chongming_nb.cli.main import main
from chongming_nb.core.errors import ConfigurationError, StoreError
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore, TaskQuery
from chongming_nb.testing.history import generate_history, generated_status
from chongming_nb.testing.store_contract import snap

S = TaskStatus
OLD = datetime(2020, 1, 1, tzinfo=UTC)  # generated tasks years before the wall clock's now


def _old_store(path: Path, tasks: int = 300) -> SqliteStore:
    store = SqliteStore(path)
    generate_history(store, tasks, start=OLD)
    store.create(snap("old-but-running", status=S.RUNNING, created_at=OLD))
    return store


def _noop() -> int:
    return 1


def test_ctl_prune_deletes_old_finished_history_and_keeps_its_own_and_live_tasks(
    tmp_path: Path,
) -> None:
    store = _old_store(tmp_path / "t.db")
    ctl = cn.Controller(store=store, executor="inline")
    try:
        mine = ctl.submit(_noop)
        assert mine.wait(10)
        ctl.flush()
        dry = ctl.prune(timedelta(days=30), dry_run=True)
        assert dry["tasks"] == 300 and len(store.query()) == 302
        failed_only = ctl.prune(timedelta(days=30), status="failed")
        assert failed_only["tasks"] == sum(generated_status(i) is S.FAILED for i in range(300))
        got = ctl.prune(timedelta(days=30))
        assert got["tasks"] == 300 - failed_only["tasks"]
        assert got["transitions"] > got["tasks"] and got["events"] == got["tasks"]
        left = {s.task_id for s in store.query()}
        assert left == {mine.id, "old-but-running"}
        assert not store.history("g00000001") and not store.attempts("g00000001")
        assert mine.status is S.SUCCEEDED and store.history(mine.id)  # its own: kept
        with pytest.raises(StoreError, match="running is not finished"):
            ctl.prune(timedelta(days=30), status="running")
        with pytest.raises(ConfigurationError, match="positive age"):
            ctl.prune(timedelta(0))
        with pytest.raises(ConfigurationError, match="aware datetime"):
            ctl.prune(datetime(2020, 1, 1))  # naive
    finally:
        ctl.close()
        store.close()
    with pytest.raises(ConfigurationError, match="needs a controller with a store"):
        cn.Controller(executor="inline").prune(timedelta(days=1))


def test_retention_policy_prunes_when_the_controller_starts(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    _old_store(path, tasks=120).close()
    ctl = cn.Controller(store=str(path), retention=cn.RetentionPolicy(days=30, status={"failed"}))
    try:
        statuses = {s.status for s in ctl.store.query(TaskQuery())}
        assert S.FAILED not in statuses and S.SUCCEEDED in statuses
    finally:
        ctl.close()
    with pytest.raises(ConfigurationError, match="days"):
        cn.RetentionPolicy(days=0)
    with pytest.raises(ConfigurationError, match="retention"):
        cn.Controller(retention=30)  # type: ignore[arg-type]


def test_a_purge_gives_the_pages_back(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = _old_store(path, tasks=3000)
    raw = sqlite3.connect(path)
    before = raw.execute("PRAGMA page_count").fetchone()[0]
    assert raw.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental, from birth
    got = store.purge(older_than=datetime(2021, 1, 1, tzinfo=UTC))
    assert got["tasks"] == 3000
    after = raw.execute("PRAGMA page_count").fetchone()[0]
    assert raw.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert after < before / 5, (before, after)
    raw.close()
    store.close()


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_cli_prune(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    _old_store(path, tasks=50).close()
    db = str(path)
    code, out, _ = _cli("--store", db, "prune", "--older-than", "30d", "--dry-run")
    assert code == 0 and out.startswith("would delete 50 finished tasks") and "events" in out
    code, out, _ = _cli(
        "--store", db, "--json", "prune", "--older-than", "4w", "--status", "failed"
    )
    report = json.loads(out)
    assert code == 0 and report["tasks"] == 5 and report["dry_run"] is False
    code, out, _ = _cli("--store", db, "prune", "--older-than", "12h")
    assert code == 0 and out.startswith("deleted 45 finished tasks")
    code, out, _ = _cli("--store", db, "ps", "--limit", "0")
    assert "old-but-running" in out and "g000000" not in out
    for bad, needle in (
        (["--older-than", "30"], "age like 30d"),
        (["--older-than=-3d"], "an age must be positive"),
        (["--older-than", "0d"], "an age must be positive"),
        (["--older-than", "1d", "--status", "running"], "only finished tasks"),
        (["--older-than", "1d", "--status", "nope"], "finished statuses"),
        ([], "--older-than"),
    ):
        code, out, err = _cli("--store", db, "prune", *bad)
        assert code == 2 and needle in err, (bad, err)
    code, _, err = _cli("--store", str(tmp_path / "none.db"), "prune", "--older-than", "1d")
    assert code == 4 and "no store at" in err and not (tmp_path / "none.db").exists()

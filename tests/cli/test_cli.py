"""The ``chongming`` CLI, run in-process (``main(argv)``) and once as a real subprocess.

A small fake owner stands in for the kernel's controller: it claims commands from the
store's leased queue, applies them with the state machine and completes them, exactly
what the controller's dispatcher does.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from chongming_nb.cli.common import (
    EXIT_ILLEGAL,
    EXIT_OK,
    EXIT_STORE,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    clean,
)
from chongming_nb.cli.main import main
from chongming_nb.core.models import (
    AttemptRecord,
    CommandState,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import EventRecord, LogRecord, SqliteStore
from chongming_nb.testing.clock import FakeClock

S = TaskStatus
T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


class FakeOwner:
    """Claims commands for its tasks and applies them like the controller would."""

    def __init__(self, store: SqliteStore, owner: str = "host:1:kernel") -> None:
        self.store = store
        self.owner = owner
        self.sm = StateMachine(FakeClock(T0))
        self.stop_flag = threading.Event()
        self.applied: list[str] = []
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop_flag.is_set():
            for cmd in self.store.claim_commands(
                owner=self.owner, now=datetime.now(UTC), lease_seconds=10
            ):
                snap = self.store.get(cmd.task_id)
                assert snap is not None
                try:
                    new, tr = self.apply(snap, cmd.verb, dict(cmd.args), cmd.actor)
                except Exception as exc:
                    self.store.complete_command(
                        cmd.command_id,
                        now=datetime.now(UTC),
                        outcome={"error": str(exc)},
                        state=CommandState.REJECTED,
                    )
                    continue
                self.store.save_many([(new, snap.status_version)], [tr])
                self.applied.append(cmd.verb)
                self.store.complete_command(
                    cmd.command_id,
                    now=datetime.now(UTC),
                    outcome={"message": f"now {new.status.value}", "status": new.status.value},
                )
            self.stop_flag.wait(0.01)

    def apply(
        self, s: TaskSnapshot, verb: str, args: dict[str, Any], actor: str
    ) -> tuple[TaskSnapshot, Transition]:
        if verb == "stop":
            return self.sm.request_stop(s, actor=actor)
        if verb == "pause":
            return self.sm.request_pause(s, actor=actor)
        if verb == "resume":
            return self.sm.resume(s, actor=actor)
        if verb == "retry":
            return self.sm.retry(s, force=bool(args.get("force")), actor=actor)
        if verb == "skip":
            return self.sm.skip(s, actor=actor, reason=args.get("reason"))
        raise ValueError(verb)

    def __enter__(self) -> FakeOwner:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_flag.set()
        self.thread.join(5)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[str, SqliteStore]]:
    path = tmp_path / "tasks.db"
    store = SqliteStore(path)
    store.create(
        TaskSnapshot(
            task_id="q1",
            name="extract",
            status=S.QUEUED,
            status_version=2,
            created_at=T0,
            lease_owner="host:1:kernel",
            tags=frozenset({"io"}),
            progress=Progress(done=5, total=10, unit="rows"),
        )
    )
    store.create(
        TaskSnapshot(
            task_id="f1",
            name="clean\x1b[31mred",
            status=S.FAILED,
            status_version=5,
            attempt=1,
            max_attempts=1,
            created_at=T0 + timedelta(seconds=1),
            started_at=T0,
            ended_at=T0 + timedelta(seconds=3),
            failure=Failure(FailureKind.EXCEPTION, "boom"),
        )
    )
    store.append(Transition("f1", S.PENDING, S.QUEUED, "user:start", "me", None, T0, 1))
    store.save_attempt(
        AttemptRecord(
            "f1",
            1,
            T0,
            ended_at=T0 + timedelta(seconds=3),
            outcome=S.FAILED,
            failure_kind=FailureKind.EXCEPTION,
            failure_message="boom",
        )
    )
    store.append_logs(
        "f1",
        [
            LogRecord(T0, "stdout", "hello"),
            LogRecord(T0 + timedelta(seconds=1), "log", "careful", level="WARNING"),
        ],
    )
    store.append_events([EventRecord("e1", "f1", T0, "attempt_failed", {"attempt": 1})])
    yield str(path), store
    store.close()


def test_ps_lists_newest_first_and_escapes(db: tuple[str, SqliteStore]) -> None:
    url, _ = db
    code, out, err = run("--store", url, "ps")
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "NAME", "STATUS"]
    assert lines[1].startswith("f1") and lines[2].startswith("q1")
    assert "\x1b" not in out and "clean\\x1b[31mred" in out
    assert "5/10 rows (50%)" in out


def test_ps_filters_and_json(db: tuple[str, SqliteStore]) -> None:
    url, _ = db
    code, out, _ = run("--store", url, "--json", "ps", "--status", "queued")
    assert code == EXIT_OK
    rows = json.loads(out)
    assert [r["task_id"] for r in rows] == ["q1"]
    # times: UTC with every digit, also when they fall on a whole second (isoformat()
    # drops a zero fraction: a script reading a fixed format broke on those)
    assert rows[0]["tags"] == ["io"] and rows[0]["created_at"] == "2026-02-01T09:00:00.000000+00:00"
    code, out, _ = run("--store", url, "--json", "attempts", "f1")
    (attempt,) = json.loads(out)
    assert attempt["started_at"] == "2026-02-01T09:00:00.000000+00:00"
    assert attempt["ended_at"] == "2026-02-01T09:00:03.000000+00:00"
    code, out, _ = run("--store", url, "--json", "ps", "--active")
    assert [r["task_id"] for r in json.loads(out)] == ["q1"]
    code, _, err = run("--store", url, "ps", "--status", "bogus")
    assert code == EXIT_USAGE and "bogus" in err


def test_status_detail_and_unknown_id(db: tuple[str, SqliteStore]) -> None:
    url, _ = db
    code, out, _ = run("--store", url, "status", "f1")
    assert code == EXIT_OK
    assert "failed" in out and "exception: boom" in out
    code, out, _ = run("--store", url, "--json", "status", "f1")
    assert json.loads(out)["failure"]["kind"] == "exception"
    code, _, err = run("--store", url, "status", "nope")
    assert code == EXIT_USAGE and "'nope'" in err


def test_logs_events_attempts(db: tuple[str, SqliteStore]) -> None:
    url, _ = db
    code, out, _ = run("--store", url, "logs", "f1")
    assert code == EXIT_OK
    assert out.splitlines()[0].endswith("[stdout] hello")
    assert "[log WARNING] careful" in out
    code, out, _ = run("--store", url, "logs", "f1", "--limit", "1")
    assert "hello" not in out and "careful" in out
    code, out, _ = run("--store", url, "--json", "events", "f1")
    data = json.loads(out)
    assert data["transitions"][0]["to_status"] == "queued"
    assert data["events"][0]["payload"] == {"attempt": 1}
    code, out, _ = run("--store", url, "attempts", "f1")
    assert code == EXIT_OK and "boom" in out and "3.000s" in out
    for cmd in ("logs", "events", "attempts"):
        code, _, err = run("--store", url, cmd, "missing")
        assert code == EXIT_USAGE and "missing" in err


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export(db: tuple[str, SqliteStore], tmp_path: Path, fmt: str) -> None:
    url, _ = db
    out_path = tmp_path / f"tasks.{fmt}"
    code, out, err = run("--store", url, "export", "--format", fmt, "--out", str(out_path))
    assert code == EXIT_OK, err
    df = {"csv": pd.read_csv, "json": pd.read_json, "parquet": pd.read_parquet}[fmt](out_path)
    assert sorted(df["task_id"]) == ["f1", "q1"]
    assert "wrote 2 tasks rows" in out
    att = tmp_path / "att.parquet"
    code, _, _ = run(
        "--store", url, "export", "--format", "parquet", "--out", str(att), "--what", "attempts"
    )
    assert code == EXIT_OK
    frame = pd.read_parquet(att)
    assert list(frame["failure_message"]) == ["boom"]
    assert str(frame["started_at"].dt.tz) == "UTC"


def test_export_bad_destination(db: tuple[str, SqliteStore], tmp_path: Path) -> None:
    url, _ = db
    code, _, err = run(
        "--store", url, "export", "--format", "csv", "--out", str(tmp_path / "no" / "x.csv")
    )
    assert code == EXIT_USAGE and "does not exist" in err


def test_control_verb_applied_by_owner(db: tuple[str, SqliteStore]) -> None:
    url, store = db
    with FakeOwner(store) as owner:
        code, out, err = run("--store", url, "pause", "q1", "--wait", "10")
    assert code == EXIT_OK, err
    assert "pause q1: done (status now paused)\n" in out
    assert owner.applied == ["pause"]
    cmd = store.commands("q1")[0]
    assert cmd.actor.startswith("cli:") and cmd.state is CommandState.DONE
    snap = store.get("q1")
    assert snap is not None and snap.status is S.PAUSED


def test_control_json_and_retry_force(db: tuple[str, SqliteStore]) -> None:
    url, store = db
    code, _, err = run("--store", url, "retry", "f1")
    assert code == EXIT_ILLEGAL and "attempts exhausted" in err
    # the way out is named in the CLI's words, not the Python API's
    assert "--force grants one more" in err and "retry(force=True)" not in err
    assert store.commands() == [], "an illegal verb writes nothing"
    with FakeOwner(store):
        code, out, _ = run("--store", url, "--json", "retry", "f1", "--force")
    assert code == EXIT_OK
    data = json.loads(out)
    assert data["result"] == "done" and data["status"] == "queued"
    assert store.commands("f1")[0].args == {"force": True}


def test_illegal_verb_exit_3_names_reason(db: tuple[str, SqliteStore]) -> None:
    url, store = db
    code, _, err = run("--store", url, "resume", "q1")
    assert code == EXIT_ILLEGAL
    assert "cannot resume task q1" in err and "queued" in err
    assert store.commands() == []


def test_unknown_id_exit_2(db: tuple[str, SqliteStore]) -> None:
    url, store = db
    code, _, err = run("--store", url, "stop", "ghost")
    assert code == EXIT_USAGE and "ghost" in err
    assert store.commands() == []


def test_rejected_by_owner_exit_3(db: tuple[str, SqliteStore]) -> None:
    url, store = db
    with FakeOwner(store) as owner:
        owner.sm = StateMachine(FakeClock(T0))
        # the owner sees a different state than the CLI validated against: it rejects
        owner.apply = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("task moved on"))  # type: ignore[method-assign]
        code, _, err = run("--store", url, "stop", "q1")
    assert code == EXIT_ILLEGAL and "rejected: task moved on" in err


def test_no_wait_and_timeout(db: tuple[str, SqliteStore]) -> None:
    url, store = db
    code, out, _ = run("--store", url, "stop", "q1", "--no-wait")
    assert code == EXIT_OK and "queued" in out
    assert store.commands("q1")[0].state is CommandState.PENDING
    code, _, err = run("--store", url, "skip", "q1", "--wait", "0.1", "--reason", "not today")
    assert code == EXIT_TIMEOUT
    assert "not applied within --wait 0.1s" in err and "host:1:kernel" in err
    assert store.commands("q1")[1].args == {"reason": "not today"}


def test_status_shows_the_commands_its_owner_has_not_applied(
    db: tuple[str, SqliteStore],
) -> None:
    url, store = db
    code, out, _ = run("--store", url, "status", "q1")
    assert code == EXIT_OK and not any(ln.startswith("command ") for ln in out.splitlines())
    code, _, err = run("--store", url, "pause", "q1", "--wait", "0.1")
    assert code == EXIT_TIMEOUT and "stays queued" in err
    code, out, _ = run("--store", url, "status", "q1")
    assert code == EXIT_OK
    line = next(ln for ln in out.splitlines() if ln.startswith("command "))
    assert "pause from cli:" in line and "queued, not claimed by its owner yet" in line
    code, out, _ = run("--store", url, "--json", "status", "q1")
    (waiting,) = json.loads(out)["commands_waiting"]
    assert waiting["verb"] == "pause" and waiting["state"] == "pending"
    # claimed by the owner, not applied yet: said so; once applied, gone from the list
    (cmd,) = store.claim_commands(owner="host:1:kernel", now=T0, lease_seconds=30)
    code, out, _ = run("--store", url, "status", "q1")
    assert "claimed by host:1:kernel, not applied yet" in out
    store.complete_command(cmd.command_id, now=T0, outcome={"status": "paused"})
    code, out, _ = run("--store", url, "--json", "status", "q1")
    assert json.loads(out)["commands_waiting"] == []


def test_store_errors_exit_4(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite at all" * 10)
    code, _, err = run("--store", str(bad), "ps")
    assert code == EXIT_STORE and str(bad) in err
    assert bad.read_bytes() == b"this is not sqlite at all" * 10
    # a --store that names no store is a usage error (exit 2), found before opening
    code, _, err = run("--store", "ftp://x/y", "ps")
    assert code == EXIT_USAGE and "unknown store scheme" in err


def test_usage_errors_exit_2() -> None:
    code, _, err = run("frobnicate")
    assert code == EXIT_USAGE and "frobnicate" in err
    code, _, err = run("export", "--format", "xml", "--out", "x")
    assert code == EXIT_USAGE and "xml" in err


def test_default_store_from_env(
    db: tuple[str, SqliteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = db
    monkeypatch.setenv("CHONGMING_STORE", url)
    code, out, _ = run("--json", "ps")
    assert code == EXIT_OK and len(json.loads(out)) == 2


def test_default_store_in_jupyter_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHONGMING_STORE", raising=False)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jdata"))
    db_file = tmp_path / "jdata" / "chongming" / "tasks.db"
    code, _, err = run("ps")
    assert code == EXIT_STORE and err == f"chongming: no store at {db_file}\n"
    assert not (tmp_path / "jdata").exists(), "a read-only command created the store"
    SqliteStore(db_file).close()  # what the kernel's controller does on first use
    code, out, err = run("ps")
    assert code == EXIT_OK, err
    assert out == "ID  NAME  STATUS  ATTEMPT  PROGRESS  CREATED  OWNER\n(no tasks)\n"
    assert (db_file.stat().st_mode & 0o777) == 0o600


def test_clean_escapes_control_characters() -> None:
    assert clean("ok text") == "ok text"
    assert clean("a\x1b[2Jb\rc\x00") == "a\\x1b[2Jb\\rc\\x00"
    assert clean(None) == ""


def test_real_subprocess(db: tuple[str, SqliteStore]) -> None:
    """The console script as a separate process, against a store a live owner serves."""
    url, store = db
    env = {**os.environ, "CHONGMING_STORE": url}
    exe = Path(sys.executable).with_name("chongming")
    with FakeOwner(store):
        proc = subprocess.run(
            [str(exe), "--json", "stop", "q1", "--wait", "20"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(proc.stdout)["status"] == "stopped"
    proc = subprocess.run(
        [str(exe), "status", "nope"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == EXIT_USAGE and "nope" in proc.stderr

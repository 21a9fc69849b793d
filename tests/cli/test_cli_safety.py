"""A CLI that is safe in scripts: read-only commands create nothing, passwords never
reach the terminal, bad options are one-line usage errors, and every documented exit
code is reachable (issue 20)."""

from __future__ import annotations

import io
import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chongming_nb.cli import common as cli_common
from chongming_nb.cli import control as cli_control
from chongming_nb.cli import main as cli_main
from chongming_nb.cli.common import (
    EXIT_ILLEGAL,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_STORE,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    EXIT_VERIFY,
)
from chongming_nb.cli.main import main
from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.stores import SqliteStore, open_store
from chongming_nb.stores._target import parse_target, redact
from chongming_nb.testing.clock import FakeClock

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
READ_VERBS = (
    ["ps"],
    ["status", "x"],
    ["logs", "x"],
    ["events", "x"],
    ["attempts", "x"],
    ["export", "--format", "csv", "--out", "o.csv"],
    ["verify"],
)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (a file created in it by mistake is seen)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("CHONGMING_STORE", raising=False)
    return work


def _store_with_a_clean_task(path: Path) -> SqliteStore:
    """One task whose history rebuilds it (pending -> queued)."""
    store = SqliteStore(path)
    sm = StateMachine(FakeClock(T0))
    snap = TaskSnapshot(task_id="ok1", name="fine", created_at=T0)
    store.create(snap)
    new, tr = sm.start(snap, actor="me")
    store.save_many([(new, snap.status_version)], [tr])
    return store


# ------------------------------------------------------------- read-only opening


@pytest.mark.parametrize("argv", READ_VERBS, ids=lambda a: a[0])
def test_a_read_only_command_on_a_missing_store_creates_nothing(cwd: Path, argv: list[str]) -> None:
    target = cwd / "no" / "such" / "dir" / "tasks.db"
    code, out, err = run("--store", str(target), *argv)
    assert (code, out, err) == (EXIT_STORE, "", f"chongming: no store at {target}\n")
    assert _files(cwd) == []


def test_a_control_verb_on_a_missing_store_creates_nothing(cwd: Path) -> None:
    target = cwd / "missing.db"
    code, _, err = run("--store", str(target), "stop", "x", "--no-wait")
    assert (code, err) == (EXIT_STORE, f"chongming: no store at {target}\n")
    assert _files(cwd) == []


def test_an_empty_file_is_no_store_and_is_left_alone(cwd: Path) -> None:
    empty = cwd / "empty.db"
    empty.touch()
    code, _, err = run("--store", str(empty), "ps")
    assert code == EXIT_STORE and err == f"chongming: no store at {empty} (the file is empty)\n"
    assert _files(cwd) == ["empty.db"] and empty.stat().st_size == 0


def test_read_only_commands_work_on_a_store_they_cannot_write(tmp_path: Path) -> None:
    """The proof they open it read-only: a 0400 file in a 0500 directory (as a
    non-root user sees it) still lists; and the store refuses writes."""
    db = tmp_path / "ro" / "tasks.db"
    db.parent.mkdir()
    _store_with_a_clean_task(db).close()
    ro = open_store(str(db), readonly=True)
    try:
        assert [s.task_id for s in ro.query()] == ["ok1"]
        with pytest.raises(StoreError, match="readonly"):
            ro.create(TaskSnapshot(task_id="new", name="n", created_at=T0))
    finally:
        ro.close()
    before = db.read_bytes()
    code, out, err = run("--store", str(db), "--json", "ps")
    assert code == EXIT_OK, err
    assert [s["task_id"] for s in json.loads(out)] == ["ok1"]
    assert db.read_bytes() == before


def test_read_only_open_refuses_an_older_schema_instead_of_migrating(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    _store_with_a_clean_task(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE chongming_schema SET version = 0")
    con.commit()
    con.close()
    code, _, err = run("--store", str(db), "ps")
    assert code == EXIT_STORE and "older than this release" in err
    con = sqlite3.connect(db)
    assert con.execute("SELECT version FROM chongming_schema").fetchone() == (0,)
    con.close()


# ------------------------------------------------------------------- secrets


def test_redact_masks_every_form_of_password() -> None:
    secret = "s3cr%40t"
    t = parse_target(f"postgresql://me:{secret}@db.example:5432/tasks?schema=x")
    assert (
        t.kind == "postgres" and t.display == "postgresql://me:***@db.example:5432/tasks?schema=x"
    )
    assert set(t.secrets) == {"s3cr%40t", "s3cr@t"}
    t = parse_target("postgres://db/tasks?sslmode=require&password=hunter22&schema=x")
    assert t.display == "postgres://db/tasks?sslmode=require&password=***&schema=x"
    t = parse_target("host=db dbname=tasks user=me password='two words'")
    assert t.kind == "postgres" and t.display == "host=db dbname=tasks user=me password=***"
    assert redact("driver said: bad 'two words' here", t.secrets) == "driver said: bad *** here"
    # a file name with "=" but no connection keyword stays a file name
    assert parse_target("run=3.db").kind == "sqlite"
    with pytest.raises(ValueError, match="holds a password"):
        parse_target("not a conninfo password=hunter22")


def test_postgres_password_never_printed(cwd: Path) -> None:
    for store in (
        "postgresql://me:hunter22secret@127.0.0.1:1/db",
        "postgresql://me@127.0.0.1:1/db?password=hunter22secret",
        "host=127.0.0.1 port=1 dbname=db user=me password=hunter22secret",
    ):
        for json_flag in ([], ["--json"]):
            code, out, err = run("--store", store, *json_flag, "ps")
            assert code == EXIT_STORE, err
            assert "hunter22secret" not in out + err and "***" in err
            assert "postgres store" in err, "a keyword string was not taken as PostgreSQL"
            assert err.count("\n") == 1 and err.startswith("chongming: cannot open store: ")
    assert _files(cwd) == [], "a connection string became a file"


def test_password_from_the_environment_never_printed(
    cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHONGMING_STORE", "host=127.0.0.1 port=1 password=hunter22secret")
    code, _, err = run("status", "x")
    assert code == EXIT_STORE and "hunter22secret" not in err and "password=***" in err
    assert _files(cwd) == []


def test_a_keyword_string_is_never_a_sqlite_file(cwd: Path) -> None:
    with pytest.raises(StoreError, match="postgres store"):
        open_store("host=127.0.0.1 port=1 password=hunter22secret")
    with pytest.raises(StoreError, match="holds a password") as info:
        open_store("weird password=hunter22secret")
    assert "hunter22secret" not in str(info.value)
    assert _files(cwd) == []


@pytest.fixture
def pg_store_url(postgres_url: str) -> Iterator[str]:
    """A fresh schema on the test server, addressed by a URL carrying its password."""
    from tests.stores.conftest import drop_pg_schema

    schema = f"t_{uuid.uuid4().hex[:16]}"
    sep = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{sep}schema={schema}"
    try:
        yield url
    finally:
        drop_pg_schema(postgres_url, schema)


def test_real_postgres_reads_masked_and_read_only(pg_store_url: str) -> None:
    from urllib.parse import urlsplit

    password = urlsplit(pg_store_url).password
    assert password, "the test server's URL carries a password"
    # read-only on a schema that does not exist: no store, and no schema created
    code, _, err = run("--store", pg_store_url, "ps")
    assert code == EXIT_STORE and "no store at" in err and password not in err
    import psycopg

    base = pg_store_url.split("?")[0]
    schema = pg_store_url.rsplit("schema=", 1)[1]
    with psycopg.connect(base) as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
            is None
        )
    writer = open_store(pg_store_url)
    try:
        writer.create(TaskSnapshot(task_id="p1", name="pg", created_at=T0))
    finally:
        writer.close()
    for argv in (["--json", "ps"], ["status", "p1", "--json"], ["status", "nope"], ["verify"]):
        code, out, err = run("--store", pg_store_url, *argv)
        assert code in (EXIT_OK, EXIT_USAGE), err
        assert password not in out + err, argv
    code, _, err = run("--store", pg_store_url, "status", "nope")
    assert code == EXIT_USAGE and "***" in err
    ro = open_store(pg_store_url, readonly=True)
    try:
        with pytest.raises(StoreError, match="read-only"):
            ro.create(TaskSnapshot(task_id="p2", name="pg", created_at=T0))
    finally:
        ro.close()


# -------------------------------------------------------------- option parsing


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ps", "--limit", str(10**30)], "ps: argument --limit: must be between 0 and"),
        (["ps", "--limit", "-1"], "ps: argument --limit: must be between 0 and"),
        (["logs", "x", "--limit", "1e3"], "logs: argument --limit: expected a whole number"),
        (["stop", "x", "--wait", "-3"], "stop: argument --wait: must be a finite number >= 0"),
        (["pause", "x", "--wait", "nan"], "pause: argument --wait: must be a finite number"),
        (["stop", "x", "--timeout", "-1"], "stop: argument --timeout: must be a finite"),
        (["--store", "", "ps"], "argument --store: must be a path or URL, got an empty string"),
        (["--store", "  ", "ps"], "argument --store: must be a path or URL"),
        (["--store", "ftp://h/x", "ps"], "argument --store: unknown store scheme 'ftp'"),
    ],
)
def test_bad_options_are_one_line_usage_errors(cwd: Path, argv: list[str], message: str) -> None:
    code, out, err = run(*argv)
    assert code == EXIT_USAGE and out == ""
    assert err.startswith(f"chongming: {message}"), err
    assert err.count("\n") == 1 and "chongming: chongming" not in err
    assert _files(cwd) == []


def test_json_before_or_after_the_subcommand(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _store_with_a_clean_task(db).close()
    outs = []
    for argv in (["--json", "ps"], ["ps", "--json"], ["--json", "ps", "--json"]):
        code, out, err = run("--store", str(db), *argv)
        assert code == EXIT_OK, err
        outs.append(json.loads(out))
    assert outs[0] == outs[1] == outs[2] and outs[0][0]["task_id"] == "ok1"
    code, out, _ = run("--store", str(db), "status", "ok1", "--json")
    assert code == EXIT_OK and json.loads(out)["status"] == "queued"
    code, out, _ = run("--store", str(db), "ps")
    assert code == EXIT_OK and not out.startswith("[")


def test_ps_json_writes_nothing_to_stdout_when_the_store_cannot_be_opened(
    tmp_path: Path,
) -> None:
    code, out, err = run("ps", "--store", str(tmp_path / "missing.db"), "--json")
    assert (code, out) == (EXIT_STORE, "")
    assert err.startswith("chongming: no store at")


def test_store_before_or_after_the_subcommand(tmp_path: Path) -> None:
    db, other = tmp_path / "t.db", tmp_path / "other.db"
    _store_with_a_clean_task(db).close()
    code, out, err = run("ps", "--store", str(db), "--json")
    assert code == EXIT_OK, err
    assert json.loads(out)[0]["task_id"] == "ok1"
    # given twice, the one after the subcommand wins (it is nearer the command it names)
    code, out, err = run("--store", str(other), "status", "ok1", "--store", str(db), "--json")
    assert code == EXIT_OK and json.loads(out)["status"] == "queued", err
    code, _, err = run("ps", "--store", "")
    assert code == EXIT_USAGE and "argument --store: must be a path or URL" in err
    assert not other.exists()


# ---------------------------------------------------------------- exit codes


def _documented_exit_codes(repo_root: Path) -> dict[int, str]:
    text = (repo_root / "docs" / "cli.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| (.+?) \|$", section, re.M)}


def test_every_documented_exit_code_is_a_constant(repo_root: Path) -> None:
    documented = _documented_exit_codes(repo_root)
    constants = {
        v: k for k, v in vars(cli_common).items() if k.startswith("EXIT_") and isinstance(v, int)
    }
    assert sorted(documented) == sorted(constants) == [0, 1, 2, 3, 4, 5, 6]


def test_exit_1_internal_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "t.db"
    _store_with_a_clean_task(db).close()

    def broken(cli: object) -> int:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setitem(cli_main._HANDLERS, "ps", broken)
    code, _, err = run("--store", str(db), "ps")
    assert (code, err) == (
        EXIT_INTERNAL,
        "chongming: internal error: RuntimeError: a bug over two lines\n",
    )


def test_exit_codes_0_2_3_5_on_one_store(tmp_path: Path) -> None:
    """(4 and 1 above; 6 below.) No owner serves this store: the legal verb times out."""
    db = tmp_path / "t.db"
    _store_with_a_clean_task(db).close()
    assert run("--store", str(db), "status", "ok1")[0] == EXIT_OK
    assert run("--store", str(db), "status", "nope")[0] == EXIT_USAGE
    assert run("--store", str(db), "resume", "ok1")[0] == EXIT_ILLEGAL  # not paused
    code, _, err = run("--store", str(db), "pause", "ok1", "--wait", "0")
    assert code == EXIT_TIMEOUT and "not applied within --wait 0s" in err
    # --timeout is the task's grace window, not how long the command waits: the message
    # names the flag that timed out (it said "within 5s" to a user who gave --timeout 3)
    code, _, err = run("--store", str(db), "pause", "ok1", "--timeout", "3", "--wait", "0")
    assert code == EXIT_TIMEOUT and "not applied within --wait 0s" in err


def test_exit_6_verify_reports_gaps(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = _store_with_a_clean_task(db)
    try:
        assert run("--store", str(db), "verify")[0] == EXIT_OK
        # a snapshot that moved on without its transition reaching the store
        snap = store.get("ok1")
        assert snap is not None
        sm = StateMachine(FakeClock(T0))
        new, _tr = sm.skip(snap, actor="me", reason="gap")
        store.save_many([(new, snap.status_version)], [])
    finally:
        store.close()
    code, out, err = run("--store", str(db), "verify")
    assert code == EXIT_VERIFY, err
    assert out.splitlines() == [
        "GAP ok1 fine: history leads to queued v1, snapshot says skipped v2",
        "1 tasks checked: 0 ok, 1 with gaps",
    ]
    code, out, _ = run("--store", str(db), "verify", "ok1", "--json")
    assert code == EXIT_VERIFY and json.loads(out)["ok"] is False
    assert run("--store", str(db), "verify", "nope")[0] == EXIT_USAGE


def test_wait_re_reads_the_command_before_reporting_a_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race behind a flaky ``stop --wait``: the CLI reads the command (still
    claimed), the owner completes it, then the CLI finds its deadline passed. It must
    report the completion (exit 0), not a timeout."""
    from types import SimpleNamespace

    from chongming_nb.core.models import CommandState

    db = tmp_path / "t.db"
    _store_with_a_clean_task(db).close()
    owner = SqliteStore(db)
    readings = iter([0.0, 10.0])  # the deadline's start, then: past it

    def monotonic() -> float:
        now = next(readings)
        if now > 0:  # the owner completes the command just before the deadline check
            for cmd in owner.claim_commands(owner="o", now=datetime.now(UTC), lease_seconds=10):
                owner.complete_command(
                    cmd.command_id, now=datetime.now(UTC), outcome={"message": "applied"}
                )
        return now

    monkeypatch.setattr(cli_control, "time", SimpleNamespace(monotonic=monotonic, sleep=None))
    try:
        code, out, err = run("--store", str(db), "pause", "ok1", "--wait", "1")
        assert code == EXIT_OK, err
        assert out == "pause ok1: done (status now queued)\n"
        (cmd,) = owner.commands("ok1")
        assert cmd.state is CommandState.DONE
    finally:
        owner.close()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_export_onto_the_store_itself_is_refused_and_the_store_kept(
    tmp_path: Path, fmt: str, suffix: str
) -> None:
    """`export --out` naming the store's own file (or its -wal / -shm beside it) is a
    usage error, written nothing: it truncated the store to 0 bytes, every task lost."""
    path = tmp_path / "tasks.db"
    _store_with_a_clean_task(path).close()
    before = path.read_bytes()
    target = tmp_path / ".." / tmp_path.name / (path.name + suffix)  # another spelling
    if suffix:
        target.write_bytes(b"")  # as the store's side file is when the store is open
    code, out, err = run("--store", str(path), "export", "--format", fmt, "--out", str(target))
    assert code == EXIT_USAGE, (code, err)
    assert err.count("\n") == 1 and "--out" in err and "the store's own file" in err, err
    assert out == ""
    assert path.read_bytes() == before
    code, out, _ = run("--store", str(path), "ps")
    assert code == 0 and "ok1" in out


def test_a_masked_cell_keeps_the_table_columns_aligned(tmp_path: Path) -> None:
    # a task named after a connection URL: its password is masked before the columns are
    # measured, so the row below it is not pushed out of line
    store = SqliteStore(tmp_path / "t.db")
    for tid, name in (("m1", "load postgresql://bob:hunter2hunter2@db/x"), ("m2", "plain")):
        store.create(TaskSnapshot(task_id=tid, name=name, created_at=T0))
    store.close()
    code, out, _ = run("--store", str(tmp_path / "t.db"), "ps")
    assert code == 0 and "hunter2" not in out and "postgresql://bob:***@db/x" in out
    lines = out.splitlines()
    assert len(lines) == 3
    # every line has its STATUS column where the header has it
    at = lines[0].index("STATUS")
    assert all(line[at:].startswith("pending") for line in lines[1:]), out


@pytest.mark.parametrize("argv", [["ps"], ["status", "c1"]])
def test_json_escapes_the_characters_a_terminal_acts_on(tmp_path: Path, argv: list[str]) -> None:
    """A task named with a C1 control (U+009B is a terminal's CSI) or a line separator:
    JSON lets them through raw, and ``--json`` in a terminal would act on them. They are
    escaped; the name reads back the same."""
    db = tmp_path / "t.db"
    name = "extract\x9b31mred\u2028rows, é"
    store = SqliteStore(db)
    store.create(TaskSnapshot(task_id="c1", name=name, created_at=datetime(2026, 2, 1, tzinfo=UTC)))
    store.close()
    code, text, err = run("--store", str(db), "--json", *argv)
    assert code == 0, err
    assert "\x9b" not in text and "\u2028" not in text and "é" in text
    shown = json.loads(text)
    assert (shown[0] if isinstance(shown, list) else shown)["name"] == name

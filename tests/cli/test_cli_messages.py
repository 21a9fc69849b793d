"""What the CLI says about a user's string: a task id or an option's value is quoted
once-escaped (as ``ps`` shows it), no control character a user typed reaches the
terminal raw, and an option's value that starts with "-" (``--older-than -5d``) reaches
the option's own check, which names it, and changes nothing."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chongming_nb.cli.common import EXIT_USAGE, quoted
from chongming_nb.cli.main import main
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
#: "ab", ESC, "c": an id a user pasted with a terminal escape in it.
ESC_ID = "ab\x1bc"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "tasks.db"
    store = SqliteStore(path)
    store.create(TaskSnapshot(task_id="t1", name="one", created_at=T0))
    store.close()
    return str(path)


def test_quoted_escapes_once() -> None:
    assert quoted(ESC_ID) == "'ab\\x1bc'"  # the four characters \x1b, not \\x1b
    assert quoted("plain") == "'plain'"
    assert quoted("a\\b") == "'a\\b'"  # a backslash the user typed is shown as typed


@pytest.mark.parametrize(
    "argv",
    [
        ["status", ESC_ID],
        ["logs", ESC_ID],
        ["events", ESC_ID],
        ["attempts", ESC_ID],
        ["verify", ESC_ID],
        ["stop", ESC_ID, "--no-wait"],
    ],
)
def test_an_unknown_id_with_a_control_character_is_shown_escaped_once(
    db: str, argv: list[str]
) -> None:
    code, out, err = run("--store", db, *argv)
    assert code == EXIT_USAGE and out == ""
    assert "\x1b" not in err
    assert "no task with id 'ab\\x1bc' in " in err, err
    assert "\\\\" not in err, err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["ps", "--limit", "\x1b[2J"], "got '\\x1b[2J'"),
        (["stop", "t1", "--wait", "\x1b[2J"], "got '\\x1b[2J'"),
        (["logs", "t1", "--since", "\x1b[2J"], "--since '\\x1b[2J' is not"),
    ],
)
def test_a_bad_value_with_a_control_character_is_shown_escaped_once(
    db: str, argv: list[str], shown: str
) -> None:
    code, _, err = run("--store", db, *argv)
    assert code == EXIT_USAGE
    assert "\x1b" not in err and shown in err, err


def test_an_unrecognized_argument_never_reaches_the_terminal_raw(db: str) -> None:
    """argparse echoes an unrecognized argument as typed: the line is cleaned as a whole."""
    code, _, err = run("--store", db, "ps", "\x1b[31mred")
    assert code == EXIT_USAGE
    assert "\x1b" not in err and "unrecognized arguments: \\x1b[31mred" in err, err


# ------------------------------------------- option values that start with "-"


def _finished_store(path: Path) -> bytes:
    """A store holding one task that failed long ago (any prune would delete it);
    returns the file's bytes."""
    store = SqliteStore(path)
    store.create(
        TaskSnapshot(
            task_id="old",
            name="old",
            status=TaskStatus.FAILED,
            status_version=3,
            created_at=T0,
            started_at=T0,
            ended_at=T0,
        )
    )
    store.close()
    return path.read_bytes()


@pytest.mark.parametrize("age", ["-5d", "-5", "-0.5h", "0d", "-d"])
def test_a_negative_age_is_named_and_prunes_nothing(tmp_path: Path, age: str) -> None:
    db = tmp_path / "tasks.db"
    before = _finished_store(db)
    for argv in (["prune", "--older-than", age], ["prune", f"--older-than={age}"]):
        code, out, err = run("--store", str(db), *argv, "--dry-run")
        assert (code, out) == (EXIT_USAGE, "")
        assert err == (
            "chongming: prune: argument --older-than: an age must be positive, "
            f"like 30d, 12h, 90m or 2w; got '{age}'\n"
        )
        code, out, err = run("--store", str(db), *argv)
        assert (code, out) == (EXIT_USAGE, ""), err
    assert db.read_bytes() == before
    store = SqliteStore(db)
    try:
        assert store.get("old") is not None
    finally:
        store.close()


def test_a_too_large_age_is_named(db: str) -> None:
    code, _, err = run("--store", db, "prune", "--older-than", "101000d")
    assert code == EXIT_USAGE
    assert "argument --older-than: an age must be at most 100 years; got '101000d'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["stop", "t1", "--wait", "-1s"], "stop: argument --wait: expected seconds, got '-1s'"),
        (["pause", "t1", "--timeout", "-2m"], "pause: argument --timeout: expected seconds, got"),
        (["ps", "--limit", "-5d"], "ps: argument --limit: expected a whole number, got '-5d'"),
        (["logs", "t1", "--limit", "-1x"], "logs: argument --limit: expected a whole number"),
        (["events", "t1", "--limit", "-x"], "events: argument --limit: expected a whole number"),
        (["logs", "t1", "--since", "-1d"], "--since '-1d' is not an ISO-8601 time"),
        (["ps", "--after", "-zz"], "--after: bad page cursor '-zz'"),
        (["ps", "--status", "-x"], "'-x' is not a valid TaskStatus"),
    ],
)
def test_a_value_that_starts_with_a_dash_reaches_its_check(
    db: str, argv: list[str], message: str
) -> None:
    """Not argparse's "expected one argument": the option's own check names the value."""
    code, out, err = run("--store", db, *argv)
    assert (code, out) == (EXIT_USAGE, "")
    assert err.startswith(f"chongming: {message}"), err


def test_a_text_value_may_start_with_a_dash(db: str) -> None:
    """`--name -x` filters by that prefix; `--reason -x` is queued as written."""
    code, out, err = run("--store", db, "--json", "ps", "--name", "-x")
    assert (code, out) == (0, "[]\n"), err
    code, _, err = run("--store", db, "skip", "t1", "--reason", "-not needed", "--no-wait")
    assert code == 0, err
    store = SqliteStore(db)
    try:
        assert [c.args for c in store.commands("t1")] == [{"reason": "-not needed"}]
    finally:
        store.close()


def test_a_value_that_starts_with_two_dashes_is_written_with_equals(db: str) -> None:
    code, _, err = run("--store", db, "skip", "t1", "--reason", "--late", "--no-wait")
    assert code == EXIT_USAGE
    assert err == (
        "chongming: skip: argument --reason: expected one argument "
        "(a value that starts with '--' is written --reason=VALUE)\n"
    )
    code, _, err = run("--store", db, "skip", "t1", "--reason=--late", "--no-wait")
    assert code == 0, err

"""What the CLI says about a user's string in a message: a task id or an option's value
is quoted once-escaped (as ``ps`` shows it), and no control character a user typed
reaches the terminal raw."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chongming_nb.cli.common import EXIT_USAGE, quoted
from chongming_nb.cli.main import main
from chongming_nb.core.models import TaskSnapshot
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

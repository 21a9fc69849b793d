"""What a ``chongming`` start costs: the modules it loads and the parser it builds.

Every control verb from a shell pays for interpreter start, imports and argument parsing
before its command reaches the store (issue 5: command-to-applied latency). These tests
keep the heavy parts out of that path: the data stack, the notebook and server layers,
the controller and executors, optional store backends, and the stdlib modules the CLI
used to import for small conveniences.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chongming_nb.cli.common import EXIT_USAGE, CliError
from chongming_nb.cli.control import _new_command_id, _user
from chongming_nb.cli.main import main
from chongming_nb.cli.parser import _SUBCOMMANDS, _terminal_columns, build_parser, parse_args
from chongming_nb.core.models import CommandState, TaskSnapshot
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore

#: Top-level packages a CLI start must not load (``export`` loads pandas when it runs).
HEAVY_PACKAGES = frozenset(
    {
        "pandas",
        "numpy",
        "pyarrow",
        "ipywidgets",
        "anywidget",
        "IPython",
        "ipykernel",
        "traitlets",
        "jupyter_server",
        "tornado",
        "dask",
        "distributed",
        "psycopg",
        "asyncio",
        "concurrent",
        "multiprocessing",
        "subprocess",
        "logging",
        # small, but the CLI had them only for a command id, the user name and the
        # terminal width (shutil loads zlib, bz2 and lzma)
        "uuid",
        "getpass",
        "shutil",
        "bz2",
        "lzma",
        # an owner id's nonce: os.urandom, not secrets (which loads random and hashlib)
        "secrets",
        "random",
        "hashlib",
    }
)

#: chongming_nb modules that are not needed to read a task and queue a command.
HEAVY_OURS = (
    "chongming_nb.control.controller",
    "chongming_nb.control.kernel",
    "chongming_nb.control.pipeline",
    "chongming_nb.control.spec",
    "chongming_nb.core.events",
    "chongming_nb.core.policies",
    "chongming_nb.frames",
    "chongming_nb.notebook",
    # the package root imported the pictures room to install the live timeline's display
    # (16 ms of every start); the display now travels with the timeline
    "chongming_nb.pictures",
    "chongming_nb.runtime",
    "chongming_nb.server",
    "chongming_nb.stores.memory",
    "chongming_nb.stores.postgres",
)


def _loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    probe = code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))\n"
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def _heavy(modules: set[str]) -> list[str]:
    top = sorted(m for m in modules if m.split(".")[0] in HEAVY_PACKAGES)
    ours = sorted(m for m in modules if m.startswith(HEAVY_OURS))
    return top + ours


def test_the_probe_sees_a_heavy_import() -> None:
    """The check below can fail: importing the pandas-backed frames module is caught."""
    found = _heavy(_loaded_after("import chongming_nb.cli.main, chongming_nb.frames"))
    assert "pandas" in found and "numpy" in found and "chongming_nb.frames" in found


def test_cli_import_loads_nothing_heavy() -> None:
    loaded = _loaded_after("import chongming_nb.cli.main")
    assert "chongming_nb.cli.main" in loaded
    assert _heavy(loaded) == []


def _store_with_running_task(path: Path) -> None:
    store = SqliteStore(path)
    try:
        store.create(
            TaskSnapshot(
                task_id="r1",
                name="loop",
                status=TaskStatus.RUNNING,
                status_version=4,
                attempt=1,
                created_at=datetime(2026, 2, 1, 9, 0, tzinfo=UTC),
                started_at=datetime(2026, 2, 1, 9, 0, 1, tzinfo=UTC),
                lease_owner="host:1:kernel",
            )
        )
    finally:
        store.close()


@pytest.mark.parametrize("with_user_env", [True, False])
def test_a_control_verb_run_loads_nothing_heavy(tmp_path: Path, with_user_env: bool) -> None:
    """The measured path itself: read the task, check the verb, queue the command, plus
    the read-only commands a shell user runs next to it."""
    path = tmp_path / "tasks.db"
    _store_with_running_task(path)
    env = {k: v for k, v in os.environ.items() if k not in ("LOGNAME", "USER", "LNAME", "USERNAME")}
    env.pop("CHONGMING_STORE", None)
    if with_user_env:
        env["LOGNAME"] = "someone"
    run = textwrap.dedent(
        f"""
        import io
        from chongming_nb.cli.main import main
        for argv in (["pause", "r1", "--no-wait"], ["status", "r1"], ["ps"], ["events", "r1"]):
            code = main(["--store", {str(path)!r}, *argv], out=io.StringIO(), err=io.StringIO())
            assert code == 0, (argv, code)
        """
    )
    loaded = _loaded_after(run, env)
    assert _heavy(loaded) == []
    store = SqliteStore(path)
    try:
        (cmd,) = store.commands("r1")
    finally:
        store.close()
    assert cmd.verb == "pause" and cmd.state is CommandState.PENDING
    assert cmd.actor == ("cli:someone" if with_user_env else f"cli:{_user()}")


ARGVS = [
    ["ps"],
    ["--json", "ps", "--status", "running", "--status", "paused", "--limit", "0"],
    ["--store", "ps", "status", "x"],  # a store file named like a subcommand
    ["--store=/tmp/a.db", "status", "x"],
    ["stop", "x", "--no-graceful", "--timeout", "3", "--wait", "1"],
    ["pause", "x", "--timeout", "2", "--no-wait"],
    ["resume", "x"],
    ["retry", "x", "--force"],
    ["skip", "x", "--reason", "not today"],
    ["logs", "x", "--limit", "5", "--since", "2026-01-01T00:00:00"],
    ["events", "x", "--type", "a", "--type", "b", "--limit", "3"],
    ["attempts", "x"],
    ["export", "--format", "csv", "--out", "o.csv", "--what", "attempts"],
    ["--json", "--store", "s.db", "pause", "ps"],  # a task id named like a subcommand
]


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: " ".join(a))
def test_a_command_line_parses_as_with_the_full_parser(argv: list[str]) -> None:
    assert vars(parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_only_the_named_subcommands_are_built() -> None:
    """What makes a start cheaper: no parser objects for subcommands not in the line."""
    sub = next(a for a in build_parser({"pause", "x"})._actions if a.dest == "command")
    assert list(sub.choices or ()) == ["pause"]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices or ()) == list(_SUBCOMMANDS)


def _full_parser_error(argv: list[str]) -> str:
    with pytest.raises(CliError) as info:
        build_parser().parse_args(argv)
    return f"chongming: {info.value}\n"


BAD_ARGVS = [
    [],
    ["frobnicate"],
    ["frobnicate", "pause"],  # a valid name later in the line
    ["pause"],
    ["pause", "x", "--bogus"],
    ["ps", "--limit", "many"],
    ["--json"],
    ["export", "--format", "xml", "--out", "o"],
    ["status", "x", "y"],
]


@pytest.mark.parametrize("argv", BAD_ARGVS, ids=lambda a: " ".join(a) or "(empty)")
def test_usage_errors_are_worded_by_the_full_parser(argv: list[str]) -> None:
    err = io.StringIO()
    assert main(argv, out=io.StringIO(), err=err) == EXIT_USAGE
    assert err.getvalue() == _full_parser_error(argv)


def test_help_is_the_full_parsers(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["-h"], ["--he"], ["--json", "--help", "ps"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        full = capsys.readouterr().out
        assert main(argv) == 0
        assert capsys.readouterr().out == full, argv
        assert all(name in full for name in _SUBCOMMANDS)
    for name in _SUBCOMMANDS:
        with pytest.raises(SystemExit):
            build_parser().parse_args([name, "--help"])
        full = capsys.readouterr().out
        assert main([name, "--help"]) == 0
        assert capsys.readouterr().out == full, name
        assert "usage: chongming " + name in full


def test_command_ids_are_random_uuid4_hex() -> None:
    ids = {_new_command_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 32 and cid == cid.lower()
        u = uuid.UUID(hex=cid)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and u.hex == cid


def test_user_from_the_environment_then_the_password_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import getpass

    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("USERNAME", "last")
    monkeypatch.setenv("USER", "second")
    assert _user() == "second" == getpass.getuser()
    monkeypatch.setenv("LOGNAME", "first")
    assert _user() == "first" == getpass.getuser()
    for var in ("LOGNAME", "USER", "USERNAME"):
        monkeypatch.delenv(var)
    assert _user() == getpass.getuser() != ""


@pytest.mark.parametrize("columns", [None, "60", "132", "0", "-5", "wide"])
def test_help_width_is_the_one_argparse_would_use(
    monkeypatch: pytest.MonkeyPatch, columns: str | None
) -> None:
    import shutil

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _terminal_columns() == shutil.get_terminal_size().columns
    parser = build_parser()
    ours = parser.format_help()
    parser.formatter_class = argparse.HelpFormatter
    assert ours == parser.format_help()

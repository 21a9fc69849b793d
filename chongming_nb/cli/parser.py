"""The argument parser of ``chongming``: one subcommand per command, the value checks
of its options, and ``parse_args``, which builds only the subcommands a command line
names."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Collection, Sequence
from datetime import timedelta
from typing import Any

from chongming_nb.cli.common import EXIT_USAGE, MAX_COUNT, CliError, quoted
from chongming_nb.stores._target import parse_target


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the width of the terminal
    on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    stdout = sys.__stdout__
    if columns <= 0 and stdout is not None:
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns
        except (AttributeError, ValueError, OSError):  # not a terminal, or closed
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized like argparse sizes it (terminal width - 2) but
    without importing shutil: argparse builds a formatter for every parser and argument,
    and shutil loads zlib, bz2 and lzma, at every CLI start."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def _parse_optional(self, arg_string: str) -> Any:
        # This CLI's only short option is -h. Any other word that starts with one "-"
        # ("-5d", "-1s", "-x") is a value or a positional, never an unknown option: as
        # one, argparse left the option before it empty (`--older-than -5d` was
        # "expected one argument") instead of letting its check name what is wrong.
        if (
            arg_string[:1] == "-"
            and arg_string[1:2] not in ("", "-")
            and arg_string[:2] not in self._option_string_actions
        ):
            return None
        return super()._parse_optional(arg_string)

    def error(self, message: str) -> Any:  # exit 2 with our wording, never SystemExit
        # main() prefixes "chongming: "; a subcommand's parser names the subcommand
        where = self.prog.removeprefix("chongming").strip()
        missing = re.fullmatch(r"argument (--[\w-]+): expected one argument", message)
        if missing:  # the value left out, or one that starts with "--"
            option = missing.group(1)
            message += f" (a value that starts with '--' is written {option}=VALUE)"
        raise CliError(EXIT_USAGE, f"{where}: {message}" if where else message)


def _count(text: str) -> int:
    """``--limit``: an integer from 0 to MAX_COUNT."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {quoted(text)}") from None
    if not 0 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_COUNT}, got {text}")
    return value


def _seconds(text: str) -> float:
    """``--wait`` / ``--timeout``: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {quoted(text)}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_NOT_POSITIVE = "an age must be positive, like 30d, 12h, 90m or 2w; got "


def _age(text: str) -> timedelta:
    """``--older-than``: a positive age such as ``30d``, ``12h``, ``90m``, ``2w``."""
    raw = text.strip().lower()
    unit = _AGE_UNITS.get(raw[-1:]) if raw else None
    try:
        if unit is None:
            raise ValueError
        value = float(raw[:-1])
    except ValueError:
        if raw.startswith("-"):  # "-5", "-d": a negative age, however written
            raise argparse.ArgumentTypeError(_NOT_POSITIVE + quoted(text)) from None
        raise argparse.ArgumentTypeError(
            f"expected an age like 30d, 12h, 90m or 2w, got {quoted(text)}"
        ) from None
    if not (math.isfinite(value) and value > 0):  # "-5d", "0h", "nand"
        raise argparse.ArgumentTypeError(_NOT_POSITIVE + quoted(text))
    if value * unit > 100 * 365 * 86400:
        raise argparse.ArgumentTypeError(f"an age must be at most 100 years; got {quoted(text)}")
    return timedelta(seconds=value * unit)


def _store_location(text: str) -> str:
    """``--store``: a non-empty location that names a store (checked, not opened)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a path or URL, got an empty string")
    try:
        parse_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_globals(p: argparse.ArgumentParser, default: Any) -> None:
    """``--store`` and ``--json``: before the subcommand (``default`` None/False) and again
    after it (``default`` SUPPRESS: left unset there, they keep the value given before)."""
    p.add_argument(
        "--store",
        type=_store_location,
        default=default if default is argparse.SUPPRESS else None,
        help="store URL or path (default: $CHONGMING_STORE, else "
        "<jupyter data dir>/chongming/tasks.db)",
    )
    p.add_argument(
        "--json", action="store_true", default=default, help="machine-readable JSON output"
    )


def _args_ps(ps: argparse.ArgumentParser) -> None:
    ps.add_argument("--status", action="append", help="only this status (repeatable)")
    ps.add_argument("--active", action="store_true", help="only non-terminal tasks")
    ps.add_argument("--tag")
    ps.add_argument("--name", help="name prefix")
    ps.add_argument("--run", help="pipeline run id")
    ps.add_argument("--limit", type=_count, default=50, help="at most N rows (0: all)")
    ps.add_argument("--after", help="the page after this cursor (from '(more: --after ...)')")


def _args_task(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id")


def _args_control(verb: str) -> Callable[[argparse.ArgumentParser], None]:
    def add(c: argparse.ArgumentParser) -> None:
        c.add_argument("task_id")
        c.add_argument(
            "--wait",
            type=_seconds,
            default=5.0,
            help="seconds to wait for the task's owner to apply the command (default 5)",
        )
        c.add_argument("--no-wait", action="store_true", help="queue the command and return")
        if verb == "stop":
            c.add_argument(
                "--no-graceful", action="store_true", help="do not wait for a checkpoint"
            )
            c.add_argument(
                "--timeout",
                type=_seconds,
                help="grace window in seconds for the task to reach a checkpoint "
                "(how long this command waits is --wait)",
            )
        elif verb == "pause":
            c.add_argument(
                "--timeout",
                type=_seconds,
                help="seconds the task gets to reach a checkpoint "
                "(how long this command waits is --wait)",
            )
        elif verb == "retry":
            c.add_argument("--force", action="store_true", help="grant one more attempt")
        elif verb == "skip":
            c.add_argument("--reason")

    return add


def _args_logs(lg: argparse.ArgumentParser) -> None:
    lg.add_argument("task_id")
    lg.add_argument("--limit", type=_count, default=0, help="only the last N lines")
    lg.add_argument("--since", help="only lines after this ISO-8601 time")


def _args_events(ev: argparse.ArgumentParser) -> None:
    ev.add_argument("task_id")
    ev.add_argument("--type", action="append", help="only this event type (repeatable)")
    ev.add_argument("--limit", type=_count, default=0, help="only the last N events")


def _args_export(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--format", choices=("csv", "json", "parquet"), required=True)
    ex.add_argument("--out", required=True, help="output file")
    ex.add_argument(
        "--what", choices=("tasks", "attempts", "transitions"), default="tasks", help="table"
    )


def _args_prune(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", type=_age, required=True, help="age, e.g. 30d, 12h, 2w")
    p.add_argument("--status", action="append", help="only this finished status (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="count what would go, delete nothing")


def _args_verify(v: argparse.ArgumentParser) -> None:
    v.add_argument("task_ids", nargs="*", metavar="ID", help="only these tasks (default: all)")


#: Subcommand -> (help line, what adds its arguments), in the order ``--help`` lists them.
_SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "ps": ("list tasks, newest first", _args_ps),
    "status": ("one task in detail", _args_task),
    "stop": ("stop a task (gracefully by default)", _args_control("stop")),
    "pause": ("pause a task at its next checkpoint", _args_control("pause")),
    "resume": ("resume a paused task", _args_control("resume")),
    "retry": ("retry a failed/stopped/cancelled/lost task", _args_control("retry")),
    "skip": ("skip a task that has not run", _args_control("skip")),
    "logs": ("captured output of a task", _args_logs),
    "events": ("transitions and events of a task", _args_events),
    "attempts": ("the attempts of a task", _args_task),
    "export": ("write tasks, attempts or transitions to a file", _args_export),
    "verify": ("check that each task's history rebuilds its snapshot", _args_verify),
    "prune": ("delete finished tasks older than an age, with their history", _args_prune),
}


def build_parser(only: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's argument parser: every subcommand, or only those named in ``only``
    (a parser for one command line: see ``parse_args``; its help and its error messages
    list only those subcommands)."""
    p = _Parser(
        prog="chongming",
        description="Inspect and control chongming_nb tasks through the shared store.",
        epilog="Exit codes: 0 ok, 1 internal error, 2 usage / unknown id, 3 verb not "
        "allowed or rejected, 4 store error, 5 not applied within --wait, 6 verify "
        "found a task whose history does not rebuild it.",
    )
    _add_globals(p, False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (text, add_arguments) in _SUBCOMMANDS.items():
        if only is None or name in only:
            child = sub.add_parser(name, help=text)
            add_arguments(child)
            # also after the subcommand (`chongming ps --store x.db --json`)
            _add_globals(child, argparse.SUPPRESS)
    return p


def parse_args(words: Sequence[str]) -> argparse.Namespace:
    """Parse a command line exactly as the full parser does, building only what it needs.

    argparse makes a parser object per subcommand, and a dozen of them are a visible
    share of a CLI start (issue 5: command-to-applied latency). The subcommand a command
    line runs is always one of its words, so a parser with just the subcommands named in
    ``words`` parses it to the same result. Help, and any usage error, come from the
    full parser, so they list every subcommand.
    """
    if not any(w.startswith(("-h", "--h")) for w in words):  # help, or a prefix of --help
        try:
            return build_parser(set(words)).parse_args(words)
        except CliError:
            pass  # worded by the full parser below
    return build_parser().parse_args(words)

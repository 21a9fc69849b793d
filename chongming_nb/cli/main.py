"""``chongming``: inspect and control tasks from a shell, through the shared store.

The CLI reads the same store as the kernels (SQLite file or PostgreSQL). Control verbs
are written to the store's command queue; the kernel that owns the task claims the
command, applies it and records the outcome, which the CLI waits for. The CLI accepts
task ids and verbs only; it never imports or runs user code.

Exit codes (also in docs/cli.md):

0  success (for a control verb: the owner applied it; with --no-wait: it was queued)
1  unexpected internal error
2  usage error, or no task with the given id
3  the verb is not allowed in the task's current status, or the owner rejected it
4  the store cannot be opened or read (missing, corrupt, newer schema, unreachable)
5  the command was queued but no owner applied it within --wait seconds
6  verify: a task's history does not rebuild its snapshot

Read-only commands (ps, status, logs, events, attempts, export, verify) open the store
read-only and never create a file or a directory; control verbs write to an existing
store only. Passwords in the store location are masked in everything printed.

The package: ``main`` (this module: the entry point and the command table),
``parser`` (arguments), ``reading`` (ps, status, logs, events, attempts, verify),
``export`` (export, prune), ``control`` (the verbs) and ``common`` (exit codes,
rendering, masking, the store opened on first use).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from chongming_nb.cli.common import (
    CONTROL_VERBS,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_STORE,
    CliError,
    _one_line,
    secrets_of,
)
from chongming_nb.cli.control import Controlling
from chongming_nb.cli.export import Exporting
from chongming_nb.cli.parser import parse_args
from chongming_nb.cli.reading import Reading
from chongming_nb.core.errors import StoreError

__all__ = ["Cli", "main"]


class Cli(Reading, Exporting, Controlling):
    """Every command (one module per group: ``reading``, ``export``, ``control``)."""


_HANDLERS: dict[str, Callable[[Cli], int]] = {
    "ps": Cli.cmd_ps,
    "status": Cli.cmd_status,
    "logs": Cli.cmd_logs,
    "events": Cli.cmd_events,
    "attempts": Cli.cmd_attempts,
    "export": Cli.cmd_export,
    "verify": Cli.cmd_verify,
    "prune": Cli.cmd_prune,
    **dict.fromkeys(CONTROL_VERBS, Cli.cmd_control),
}


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    out = out or sys.stdout
    err = err or sys.stderr
    cli: Cli | None = None
    words = list(sys.argv[1:] if argv is None else argv)
    # every password the command line or the environment names is masked in output
    secrets = tuple(
        v for w in (*words, os.environ.get("CHONGMING_STORE", "")) for v in secrets_of(w)
    )
    try:
        try:
            args = parse_args(words)
        except SystemExit as exc:  # --help / --version
            return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_OK
        cli = Cli(args, out, err)
        return _HANDLERS[args.command](cli)
    except CliError as exc:
        err.write(_one_line(f"chongming: {exc}", secrets))
        return exc.code
    except StoreError as exc:
        err.write(_one_line(f"chongming: store error: {exc}", secrets))
        return EXIT_STORE
    except BrokenPipeError:  # pragma: no cover - `chongming ps | head`
        return EXIT_OK
    except Exception as exc:
        err.write(_one_line(f"chongming: internal error: {type(exc).__name__}: {exc}", secrets))
        return EXIT_INTERNAL
    finally:
        if cli is not None:
            cli.close()


def entry() -> None:  # pragma: no cover - console script wrapper
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

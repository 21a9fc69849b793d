"""The control verbs (``stop``, ``pause``, ``resume``, ``retry``, ``skip``): checked
against the state machine, written to the store's command queue, then waited for
until the task's owner applies or rejects them."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from typing import Any

from chongming_nb.cli.common import (
    EXIT_ILLEGAL,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    CliBase,
    CliError,
    _WallClock,
    clean,
    to_jsonable,
)
from chongming_nb.control.ownership import refusal
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.models import Command, CommandState
from chongming_nb.core.state_machine import StateMachine


def _user() -> str:
    """The login name, found as ``getpass.getuser()`` finds it (the environment, then
    the password database) without importing getpass and termios at every CLI start."""
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        name = os.environ.get(var)
        if name:
            return name
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except Exception:  # no pwd module (Windows), or a uid without an entry
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def _new_command_id() -> str:
    """A random (version 4) UUID as 32 hex digits, like ``uuid.uuid4().hex``, without
    importing uuid (and platform) at every CLI start."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    return b.hex()


class Controlling(CliBase):
    def cmd_control(self) -> int:
        a = self.args
        verb: str = a.command
        snap = self.task(a.task_id)
        force = bool(getattr(a, "force", False))
        try:
            ok, why = StateMachine(_WallClock()).can(snap, verb, force=force)
        except ConfigurationError as exc:  # pragma: no cover - verbs are fixed by argparse
            raise CliError(EXIT_USAGE, str(exc)) from exc
        if not ok:
            why = (why or "").replace("retry(force=True)", "--force")  # the CLI's words
            raise CliError(EXIT_ILLEGAL, f"cannot {verb} task {clean(snap.task_id)}: {why}")
        gone = self.gone([snap], finished=True).get(snap.task_id)
        if gone is not None:
            # nothing would claim the command: say so now rather than wait out --wait
            raise CliError(
                EXIT_ILLEGAL, f"cannot {verb} task {clean(snap.task_id)}: {refusal(snap, gone)}"
            )
        args: dict[str, Any] = {}
        if verb == "stop":
            args["graceful"] = not a.no_graceful
            if a.timeout is not None:
                args["timeout"] = a.timeout
        elif verb == "pause" and a.timeout is not None:
            args["timeout"] = a.timeout
        elif verb == "retry":
            args["force"] = force
        elif verb == "skip" and a.reason:
            args["reason"] = a.reason
        command = Command(
            command_id=_new_command_id(),
            task_id=snap.task_id,
            verb=verb,
            args=args,
            actor=f"cli:{_user()}",
            created_at=datetime.now(UTC),
        )
        self.store.submit_command(command)
        if a.no_wait:
            return self._report(command, "queued", EXIT_OK)
        deadline = time.monotonic() + a.wait
        delay = 0.02
        while True:
            got = self.store.get_command(command.command_id)
            if got is not None and got.state in (CommandState.DONE, CommandState.REJECTED):
                code = EXIT_OK if got.state is CommandState.DONE else EXIT_ILLEGAL
                return self._report(got, got.state.value, code)
            if time.monotonic() >= deadline:
                # the owner may have completed it while we slept: read once more
                got = self.store.get_command(command.command_id)
                if got is not None and got.state in (CommandState.DONE, CommandState.REJECTED):
                    code = EXIT_OK if got.state is CommandState.DONE else EXIT_ILLEGAL
                    return self._report(got, got.state.value, code)
                owner = snap.lease_owner or "no owner recorded"
                return self._report(
                    got or command,
                    "timeout",
                    EXIT_TIMEOUT,
                    note=(
                        f"not applied within --wait {a.wait:g}s (owner: {owner}); the command "
                        "stays queued and will be applied when the owner claims it"
                    ),
                )
            time.sleep(delay)
            delay = min(0.1, delay * 1.5)

    def _report(self, command: Command, result: str, code: int, note: str | None = None) -> int:
        after = self.store.get(command.task_id)
        status = after.status.value if after else None
        if self.args.json:
            self.emit_json(
                {
                    "command_id": command.command_id,
                    "task_id": command.task_id,
                    "verb": command.verb,
                    "result": result,
                    "outcome": command.outcome,
                    "status": status,
                    "note": note,
                }
            )
        else:
            stream = self.out if code == EXIT_OK else self.err
            outcome = ""
            # applied: the fresh status says it all (the owner's own "applied: pause (now
            # pausing)" was printed before it, and read stale beside "status now paused")
            if command.outcome and result != CommandState.DONE.value:
                msg = command.outcome.get("message") or command.outcome.get("error")
                outcome = f": {msg}" if msg else f": {json.dumps(to_jsonable(command.outcome))}"
            stream.write(
                f"{command.verb} {clean(command.task_id)}: {result}{clean(outcome)}"
                f" (status now {status or 'unknown'})\n"
            )
            if note:
                stream.write(f"{note}\n")
        return code

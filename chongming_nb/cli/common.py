"""What every ``chongming`` command shares: exit codes, errors, the terminal-safe
rendering of values, password masking, and ``CliBase`` (the parsed arguments, the
masked output streams, the store opened on first use)."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TextIO

from chongming_nb.control.ownership import gone_tasks
from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import TaskSnapshot, iso_utc, start_text, start_time, utc_clock
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import TaskStore, default_store_path, open_store
from chongming_nb.stores._target import parse_target, redact
from chongming_nb.stores.protocol import OwnerRecord

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_ILLEGAL = 3
EXIT_STORE = 4
EXIT_TIMEOUT = 5
EXIT_VERIFY = 6

#: The largest row count a store can bind (SQLite and PostgreSQL: a signed 64-bit int).
MAX_COUNT = 2**63 - 1

CONTROL_VERBS = ("stop", "pause", "resume", "retry", "skip")
#: Commands that only read: the store is opened read-only for them.
READ_ONLY = frozenset({"ps", "status", "logs", "events", "attempts", "export", "verify"})


class _WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class CliError(Exception):
    """An error with an exit code; its message goes to stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ rendering


def clean(value: object) -> str:
    """Text safe for a terminal: control characters (ANSI escapes, CR, NUL...) are shown
    as escapes instead of being interpreted."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def quoted(value: object) -> str:
    """A user's string (a task id, an option's value) quoted in a message: ``clean``, in
    single quotes, escaped once (``'ab\\x1bc'`` for ``ab``, ESC, ``c``), as ``ps`` shows
    it; never ``repr`` of the cleaned text, which doubles every backslash."""
    return f"'{clean(value)}'"


#: Characters JSON lets through raw that a terminal or a JavaScript reader may act on:
#: the C1 controls (U+0080-U+009F; U+009B is a terminal's CSI) and the line and paragraph
#: separators. Only strings can hold them, so their escapes keep the JSON the same.
_RAW_UNSAFE = {c: f"\\u{c:04x}" for c in (*range(0x80, 0xA0), 0x2028, 0x2029)}


def json_text(value: Any) -> str:
    """``value`` as the CLI's JSON: indented, non-ASCII text as it is, except the
    characters of ``_RAW_UNSAFE``, escaped."""
    text = json.dumps(to_jsonable(value), indent=2, ensure_ascii=False)
    # (ASCII text holds none of them: `ps --json` of a big store skips the translation)
    return text if text.isascii() else text.translate(_RAW_UNSAFE)


def to_jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return iso_utc(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted(to_jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return str(value)


def _when(d: datetime | None) -> str:
    return "-" if d is None else d.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _progress(s: TaskSnapshot) -> str:
    p = s.progress
    if p is None:
        return "-"
    frac = p.fraction
    unit = f" {p.unit}" if p.unit else ""
    total = "?" if p.total is None else f"{p.total:g}"
    pct = "" if frac is None else f" ({frac:.0%})"
    return f"{p.done:g}/{total}{unit}{pct}"


def _table(
    rows: Sequence[Sequence[str]],
    header: Sequence[str],
    out: _Masked,
    *,
    widths: list[int] | None = None,
) -> list[int]:
    """Write ``rows`` as columns under ``header``; returns the widths. With ``widths``
    (a later part of a streamed table) the header is not repeated and the widths of the
    first part are kept (a longer cell pushes its line only)."""
    # measured as written: a masked password is shorter than the one it hides
    cells = [[out.mask(clean(c)) for c in r] for r in rows]
    if widths is None:
        cells.insert(0, [clean(c) for c in header])
        widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    return widths


#: Rows per page when ``ps --limit 0`` streams every task.
_STREAM_PAGE = 1000
_PS_HEADER = ("ID", "NAME", "STATUS", "ATTEMPT", "PROGRESS", "CREATED", "OWNER")


def _status(s: TaskSnapshot, gone: str | None = None) -> str:
    """The status, and for a delayed start when it starts: "blocked, starts at 14:05 UTC
    (in 3m)". ``gone``: why the task's owner is gone (``CliBase.gone``): nothing will move
    it, so the status says so and a delayed start is not counted down ("blocked, was to
    start at 14:05 UTC (owner gone)")."""
    at = start_time(s)
    if gone is not None:
        when = "" if at is None else f", was to start at {utc_clock(at)}"
        return f"{s.status.value}{when} (owner gone)"
    if at is None:
        return s.status.value
    return f"{s.status.value}, {start_text(at, datetime.now(UTC))}"


def _ps_row(s: TaskSnapshot, gone: str | None = None) -> tuple[str, ...]:
    return (
        s.task_id,
        s.name,
        _status(s, gone),
        f"{s.attempt}/{s.max_attempts}",
        _progress(s),
        _when(s.created_at),
        s.lease_owner or "-",
    )


# ------------------------------------------------------------------ masking


def secrets_of(location: str | None) -> tuple[str, ...]:
    """The literal passwords in a store location (``--store``, ``$CHONGMING_STORE``)."""
    texts = [location or "", os.environ.get("CHONGMING_STORE", "")]
    found: list[str] = []
    for text in texts:
        if text.strip():
            try:
                found += parse_target(text).secrets
            except ValueError:
                continue
    return tuple(found)


def _one_line(message: str, secrets: tuple[str, ...]) -> str:
    """An error as one line on stderr (a driver's multi-line message joined), masked,
    with any control character left in it shown as an escape (argparse echoes an
    unrecognized argument as it was typed)."""
    return clean(redact(" ".join(message.split()), secrets)) + "\n"


class _Masked:
    """A text stream whose writes have passwords masked (``redact``)."""

    def __init__(self, stream: TextIO, secrets: tuple[str, ...]) -> None:
        self._stream = stream
        self._secrets = secrets

    def mask(self, text: str) -> str:
        """``text`` as this stream would write it (for a caller that lays text out)."""
        return redact(text, self._secrets)

    def write(self, text: str) -> int:
        return self._stream.write(redact(text, self._secrets))

    def flush(self) -> None:
        self._stream.flush()


def _parse_time(text: str) -> datetime:
    try:
        d = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CliError(EXIT_USAGE, f"--since {quoted(text)} is not an ISO-8601 time") from exc
    return d.replace(tzinfo=UTC) if d.tzinfo is None else d


def statuses_of(
    texts: Sequence[str], offered: Iterable[TaskStatus], offered_are: str
) -> frozenset[TaskStatus]:
    """``--status`` values as statuses; exit 2 for an unknown one, listing ``offered``
    (as ``offered_are``: e.g. "known statuses")."""
    try:
        return frozenset(TaskStatus(s) for s in texts)
    except ValueError as exc:
        known = ", ".join(s.value for s in offered)
        raise CliError(EXIT_USAGE, f"{exc}; {offered_are}: {known}") from exc


class CliBase:
    """One command line being run: its arguments, its (masked) output streams, and the
    store, opened on first use (read-only for the commands in ``READ_ONLY``)."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.out = _Masked(out, secrets_of(args.store))
        self.err = _Masked(err, secrets_of(args.store))
        self._store: TaskStore | None = None
        self._owners: dict[str, OwnerRecord] | None = None

    @property
    def store(self) -> TaskStore:
        if self._store is None:
            target = self.args.store or default_store_path()
            readonly = self.args.command in READ_ONLY
            try:
                self._store = open_store(target, readonly=readonly, create=False)
            except StoreError as exc:
                # the store's message names the path or URL (password masked)
                text = str(exc)
                if text.startswith("no store at "):
                    raise CliError(EXIT_STORE, text) from exc
                raise CliError(EXIT_STORE, f"cannot open store: {text}") from exc
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def emit_json(self, value: Any) -> None:
        self.out.write(json_text(value) + "\n")

    def gone(self, snaps: Sequence[TaskSnapshot], *, finished: bool = False) -> dict[str, str]:
        """``task id -> why its owner is provably gone`` among ``snaps`` (the unfinished
        ones; also the finished ones with ``finished``), by the rules the Tasks sidebar
        uses (``chongming_nb.control.ownership``): a pid on this host that is not
        running, or a lease on another host that ran out. The store's owners are read
        once per command, and only when a task has an owner to judge."""
        if not any(s.lease_owner is not None and (finished or not s.is_terminal) for s in snaps):
            return {}  # nothing to judge: the owners are not read
        if self._owners is None:
            self._owners = {o.owner_id: o for o in self.store.owners()}
        return gone_tasks(snaps, now=datetime.now(UTC), owners=self._owners, finished=finished)

    def task(self, task_id: str) -> TaskSnapshot:
        snap = self.store.get(task_id)
        if snap is None:
            raise CliError(EXIT_USAGE, f"no task with id {quoted(task_id)} in {self.store.url}")
        return snap

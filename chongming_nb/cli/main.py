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
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, TextIO

from chongming_nb.core.errors import ConfigurationError, StoreError
from chongming_nb.core.models import Command, CommandState, TaskSnapshot
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores import TaskQuery, TaskStore, default_store_path, open_store
from chongming_nb.stores._target import parse_target, redact

__all__ = [
    "EXIT_ILLEGAL",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_STORE",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "EXIT_VERIFY",
    "main",
]

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


def to_jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
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
    cells = [[clean(c) for c in r] for r in rows]
    if widths is None:
        cells.insert(0, [clean(c) for c in header])
        widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    return widths


#: Rows per page when ``ps --limit 0`` streams every task.
_STREAM_PAGE = 1000
_PS_HEADER = ("ID", "NAME", "STATUS", "ATTEMPT", "PROGRESS", "CREATED", "OWNER")


class _Export:
    """A file that DataFrames are appended to, one after the other, as one CSV, JSON
    array of records or Parquet file (written as they come: one frame in memory)."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self.parts = 0
        self.fh: Any = None
        self.parquet: Any = None

    def __enter__(self) -> _Export:
        if self.fmt != "parquet":
            self.fh = open(self.path, "w", encoding="utf-8", newline="")
        return self

    def write(self, df: Any) -> None:
        if self.fmt == "csv":
            df.to_csv(self.fh, index=False, header=self.parts == 0)
        elif self.fmt == "json":
            text = df.to_json(orient="records", date_format="iso", indent=1)
            body = text.strip()[1:-1].strip("\n")
            if body:
                self.fh.write(("[\n" if self.parts == 0 else ",\n") + body)
                self.parts += 1
            return
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            if self.parquet is None:
                table = pa.Table.from_pandas(df, preserve_index=False)
                self.parquet = pq.ParquetWriter(self.path, table.schema)
            else:  # the first part's schema (a part of empty lists would guess another)
                table = pa.Table.from_pandas(df, schema=self.parquet.schema, preserve_index=False)
            self.parquet.write_table(table)
        self.parts += 1

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            if self.fmt == "json":
                self.fh.write("\n]" if self.parts else "[]")
            self.fh.close()
        if self.parquet is not None:
            self.parquet.close()


def _ps_row(s: TaskSnapshot) -> tuple[str, ...]:
    return (
        s.task_id,
        s.name,
        s.status.value,
        f"{s.attempt}/{s.max_attempts}",
        _progress(s),
        _when(s.created_at),
        s.lease_owner or "-",
    )


# ------------------------------------------------------------------- commands


class Cli:
    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.out = _Masked(out, secrets_of(args.store))
        self.err = _Masked(err, secrets_of(args.store))
        self._store: TaskStore | None = None

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
        self.out.write(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False) + "\n")

    def task(self, task_id: str) -> TaskSnapshot:
        snap = self.store.get(task_id)
        if snap is None:
            raise CliError(EXIT_USAGE, f"no task with id {clean(task_id)!r} in {self.store.url}")
        return snap

    # ------------------------------------------------------------- reading
    def cmd_ps(self) -> int:
        a = self.args
        statuses: frozenset[TaskStatus] | None = None
        if a.status:
            try:
                statuses = frozenset(TaskStatus(s) for s in a.status)
            except ValueError as exc:
                known = ", ".join(s.value for s in TaskStatus)
                raise CliError(EXIT_USAGE, f"{exc}; known statuses: {known}") from exc
        elif a.active:
            statuses = frozenset(s for s in TaskStatus if s not in TERMINAL)
        q = TaskQuery(
            status=statuses,
            tag=a.tag,
            name_prefix=a.name,
            pipeline_run_id=a.run,
            limit=a.limit if a.limit > 0 else _STREAM_PAGE,
        )
        # one keyset page for --limit N (its cost does not grow with the store); all
        # pages, each written as it comes, for --limit 0 (memory does not grow either)
        after: str | None = a.after
        widths: list[int] | None = None
        shown = 0
        if a.json:
            self.out.write("[")
        while True:
            try:
                snaps, after = self.store.page(q, after=after)
            except StoreError as exc:
                if a.after is not None and shown == 0:
                    raise CliError(EXIT_USAGE, f"--after: {exc}") from exc
                raise
            if a.json:
                for s in snaps:
                    sep = ",\n" if shown else "\n"
                    item = json.dumps(to_jsonable(s), indent=2, ensure_ascii=False)
                    self.out.write(sep + textwrap.indent(item, "  "))
                    shown += 1
            else:
                rows = [_ps_row(s) for s in snaps]
                widths = _table(rows, _PS_HEADER, self.out, widths=widths)
                shown += len(rows)
            if after is None or a.limit > 0:
                break
        if a.json:
            self.out.write("\n]\n" if shown else "]\n")
            return EXIT_OK
        if not shown:
            self.out.write("(no tasks)\n")
        elif after is not None:
            self.out.write(f"(more: --after {after})\n")
        return EXIT_OK

    def cmd_status(self) -> int:
        s = self.task(self.args.task_id)
        if self.args.json:
            self.emit_json(s)
            return EXIT_OK
        lines: list[tuple[str, Any]] = [
            ("id", s.task_id),
            ("name", s.name),
            ("status", s.status.value),
            ("version", s.status_version),
            ("requested", s.requested_action.value if s.requested_action else "-"),
            ("attempt", f"{s.attempt}/{s.max_attempts}"),
            ("progress", _progress(s)),
            ("message", s.progress.message if s.progress and s.progress.message else "-"),
            ("created", _when(s.created_at)),
            ("started", _when(s.started_at)),
            ("ended", _when(s.ended_at)),
            ("heartbeat", _when(s.last_heartbeat_at)),
            ("owner", s.lease_owner or "-"),
            ("executor", s.executor or "-"),
            ("pid", s.pid if s.pid is not None else "-"),
            ("pipeline run", s.pipeline_run_id or "-"),
            ("tags", ", ".join(sorted(s.tags)) or "-"),
            ("deps", ", ".join(s.deps) or "-"),
        ]
        if s.failure is not None:
            lines.append(("failure", f"{s.failure.kind.value}: {s.failure.message}"))
        width = max(len(k) for k, _ in lines)
        for k, v in lines:
            self.out.write(f"{k.ljust(width)}  {clean(v)}\n")
        return EXIT_OK

    def cmd_logs(self) -> int:
        self.task_or_history(self.args.task_id)
        since = _parse_time(self.args.since) if self.args.since else None
        recs = self.store.logs(self.args.task_id, limit=self.args.limit or None, since=since)
        if self.args.json:
            self.emit_json(recs)
            return EXIT_OK
        for r in recs:
            level = f" {r.level}" if r.level else ""
            self.out.write(f"{_when(r.at)} [{clean(r.stream)}{clean(level)}] {clean(r.line)}\n")
        return EXIT_OK

    def cmd_events(self) -> int:
        self.task_or_history(self.args.task_id)
        types = frozenset(self.args.type) if self.args.type else None
        evs = self.store.events(self.args.task_id, types=types, limit=self.args.limit or None)
        hist = self.store.history(self.args.task_id)
        if self.args.json:
            self.emit_json({"transitions": hist, "events": evs})
            return EXIT_OK
        self.out.write("transitions:\n")
        _table(
            [
                (
                    str(t.version),
                    _when(t.at),
                    f"{t.from_status.value} -> {t.to_status.value}",
                    t.trigger,
                    t.actor,
                    t.reason or "",
                )
                for t in hist
            ],
            ("V", "AT", "CHANGE", "TRIGGER", "ACTOR", "REASON"),
            self.out,
        )
        if evs:
            self.out.write("events:\n")
            _table(
                [(_when(e.at), e.type, json.dumps(to_jsonable(e.payload))) for e in evs],
                ("AT", "TYPE", "PAYLOAD"),
                self.out,
            )
        return EXIT_OK

    def cmd_attempts(self) -> int:
        self.task_or_history(self.args.task_id)
        atts = self.store.attempts(self.args.task_id)
        if self.args.json:
            self.emit_json(atts)
            return EXIT_OK
        rows = [
            (
                str(a.attempt),
                _when(a.started_at),
                _when(a.ended_at),
                "-" if a.duration is None else f"{a.duration.total_seconds():.3f}s",
                a.outcome.value if a.outcome else "-",
                a.failure_kind.value if a.failure_kind else "-",
                a.failure_message or "",
            )
            for a in atts
        ]
        _table(
            rows, ("#", "STARTED", "ENDED", "DURATION", "OUTCOME", "FAILURE", "MESSAGE"), self.out
        )
        if not atts:
            self.out.write("(no attempts)\n")
        return EXIT_OK

    def task_or_history(self, task_id: str) -> None:
        """Unknown id -> exit 2, unless the task was pruned but its history remains."""
        if self.store.get(task_id) is None and not self.store.history(task_id):
            raise CliError(EXIT_USAGE, f"no task with id {clean(task_id)!r} in {self.store.url}")

    def _export_frames(self, what: str, store: TaskStore) -> Iterator[Any]:
        """The export as DataFrames of at most ``_STREAM_PAGE`` tasks each, oldest task
        first: keyset pages of tasks, each page's frame read in one query when the store
        builds frames (so memory holds one page, however big the store)."""
        from chongming_nb import frames

        columns = getattr(store, "frame_columns", None)
        q = TaskQuery(order="oldest", limit=_STREAM_PAGE)
        after: str | None = None
        while True:
            snaps, after = store.page(q, after=after)
            if snaps:
                names = {s.task_id: s.name for s in snaps}
                kind = what
                if columns is not None:
                    df = frames.frame_from_columns(
                        kind, columns(kind, TaskQuery(ids=frozenset(names)))
                    )
                    if kind == "tasks":  # read newest first: this page oldest first
                        df = df.iloc[::-1].reset_index(drop=True)
                elif kind == "tasks":
                    df = frames.snapshots_frame(snaps)
                elif kind == "attempts":
                    recs = [r for s in snaps for r in store.attempts(s.task_id)]
                    df = frames.attempts_frame(recs, names)
                else:
                    trs = [t for s in snaps for t in store.history(s.task_id)]
                    df = frames.transitions_frame(trs, names)
                yield df
            if after is None:
                return

    def cmd_export(self) -> int:
        a = self.args
        parts = self._export_frames(a.what, self.store)  # the store opens (or is refused) first
        out_path = a.out
        parent = os.path.dirname(os.path.abspath(out_path))
        if not os.path.isdir(parent):
            raise CliError(EXIT_USAGE, f"--out {out_path}: directory {parent} does not exist")
        rows = 0
        try:
            with _Export(out_path, a.format) as sink:
                for df in parts:
                    if len(df):
                        sink.write(df)
                        rows += len(df)
                if rows == 0:
                    sink.write(self._empty_frame(a.what))
        except OSError as exc:
            raise CliError(EXIT_USAGE, f"cannot write {out_path}: {exc}") from exc
        summary = {"rows": rows, "what": a.what, "format": a.format, "out": out_path}
        if a.json:
            self.emit_json(summary)
        else:
            self.out.write(f"wrote {rows} {a.what} rows to {clean(out_path)} ({a.format})\n")
        return EXIT_OK

    def cmd_prune(self) -> int:
        """Delete finished tasks older than ``--older-than`` with all their history (one
        transaction; never a task that has not finished)."""
        a = self.args
        statuses: frozenset[TaskStatus] | None = None
        if a.status:
            try:
                statuses = frozenset(TaskStatus(s) for s in a.status)
            except ValueError as exc:
                known = ", ".join(s.value for s in TERMINAL)
                raise CliError(EXIT_USAGE, f"{exc}; finished statuses: {known}") from exc
            live = sorted(s.value for s in statuses if s not in TERMINAL)
            if live:
                raise CliError(EXIT_USAGE, f"--status {live[0]}: only finished tasks are pruned")
        cutoff = _WallClock().now() - a.older_than
        counts = self.store.purge(older_than=cutoff, status=statuses, dry_run=a.dry_run)
        if a.json:
            self.emit_json({"dry_run": a.dry_run, "older_than": cutoff.isoformat(), **counts})
            return EXIT_OK
        verb = "would delete" if a.dry_run else "deleted"
        rest = ", ".join(f"{counts[t]} {t}" for t in counts if t != "tasks")
        self.out.write(
            f"{verb} {counts['tasks']} finished tasks ended before {_when(cutoff)} ({rest})\n"
        )
        return EXIT_OK

    @staticmethod
    def _empty_frame(what: str) -> Any:
        from chongming_nb import frames

        if what == "tasks":
            return frames.snapshots_frame([])
        if what == "attempts":
            return frames.attempts_frame([])
        return frames.transitions_frame([])

    def cmd_verify(self) -> int:
        """Replay each task's transitions and compare them with its snapshot: a gap (a
        transition the store never received, a snapshot ahead of or behind its
        history) is reported, and the exit code is 6 when there is one."""
        from chongming_nb.control.persistence import verify

        store = self.store
        ids = list(self.args.task_ids) or [
            s.task_id for s in store.query(TaskQuery(order="oldest"))
        ]
        results: list[dict[str, Any]] = []
        for tid in ids:
            snap = store.get(tid)
            hist = store.history(tid)
            if snap is None:
                if not hist:
                    raise CliError(EXIT_USAGE, f"no task with id {clean(tid)!r} in {store.url}")
                results.append(
                    {"task_id": tid, "name": None, "ok": True,
                     "detail": f"snapshot pruned; {len(hist)} transitions kept"}
                )  # fmt: skip
                continue
            ok, detail = verify(hist, snap)
            results.append({"task_id": tid, "name": snap.name, "ok": ok, "detail": detail})
        bad = [r for r in results if not r["ok"]]
        if self.args.json:
            self.emit_json({"tasks": results, "ok": not bad})
        else:
            for r in results:
                mark = "ok " if r["ok"] else "GAP"
                name = f" {clean(r['name'])}" if r["name"] else ""
                self.out.write(f"{mark} {clean(r['task_id'])}{name}: {clean(r['detail'])}\n")
            self.out.write(
                f"{len(results)} tasks checked: {len(results) - len(bad)} ok, "
                f"{len(bad)} with gaps\n"
            )
        return EXIT_VERIFY if bad else EXIT_OK

    # ------------------------------------------------------------- control
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
                        f"not applied within {a.wait:g}s (owner: {owner}); the command "
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
    """An error as one line on stderr (a driver's multi-line message joined), masked."""
    return redact(" ".join(message.split()), secrets) + "\n"


class _Masked:
    """A text stream whose writes have passwords masked (``redact``)."""

    def __init__(self, stream: TextIO, secrets: tuple[str, ...]) -> None:
        self._stream = stream
        self._secrets = secrets

    def write(self, text: str) -> int:
        return self._stream.write(redact(text, self._secrets))

    def flush(self) -> None:
        self._stream.flush()


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


def _parse_time(text: str) -> datetime:
    try:
        d = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CliError(EXIT_USAGE, f"--since {text!r} is not an ISO-8601 time") from exc
    return d.replace(tzinfo=UTC) if d.tzinfo is None else d


# -------------------------------------------------------------------- parser


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

    def error(self, message: str) -> Any:  # exit 2 with our wording, never SystemExit
        # main() prefixes "chongming: "; a subcommand's parser names the subcommand
        where = self.prog.removeprefix("chongming").strip()
        raise CliError(EXIT_USAGE, f"{where}: {message}" if where else message)


def _count(text: str) -> int:
    """``--limit``: an integer from 0 to MAX_COUNT."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_COUNT}, got {text}")
    return value


def _seconds(text: str) -> float:
    """``--wait`` / ``--timeout``: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _age(text: str) -> timedelta:
    """``--older-than``: a positive age such as ``30d``, ``12h``, ``90m``, ``2w``."""
    raw = text.strip().lower()
    unit = _AGE_UNITS.get(raw[-1:]) if raw else None
    try:
        if unit is None:
            raise ValueError
        value = float(raw[:-1])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an age like 30d, 12h, 90m or 2w, got {text!r}"
        ) from None
    if not (math.isfinite(value) and 0 < value * unit <= 100 * 365 * 86400):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 100 years, got {text}")
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


def _add_json(p: argparse.ArgumentParser, default: Any) -> None:
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
        c.add_argument("--wait", type=_seconds, default=5.0, help="seconds to wait (default 5)")
        c.add_argument("--no-wait", action="store_true", help="queue the command and return")
        if verb == "stop":
            c.add_argument(
                "--no-graceful", action="store_true", help="do not wait for a checkpoint"
            )
            c.add_argument("--timeout", type=_seconds, help="grace window in seconds")
        elif verb == "pause":
            c.add_argument("--timeout", type=_seconds, help="seconds to reach a checkpoint")
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
    p.add_argument(
        "--store",
        type=_store_location,
        help="store URL or path (default: $CHONGMING_STORE, else "
        "<jupyter data dir>/chongming/tasks.db)",
    )
    _add_json(p, False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (text, add_arguments) in _SUBCOMMANDS.items():
        if only is None or name in only:
            child = sub.add_parser(name, help=text)
            add_arguments(child)
            # also after the subcommand; unset there, it leaves the global value alone
            _add_json(child, argparse.SUPPRESS)
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

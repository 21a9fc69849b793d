"""The store bases: what every backend does alike, and what the SQL ones do alike.

``StoreBase`` (under ``InMemoryStore`` and ``SqlStore``) checks the arguments of the
contract's methods once and passes them on to the backend's hooks (``_record``,
``_claim``, ``_purge``...); ``create``, ``save``, ``append``, ``touch`` and the other
writes of one part are a ``_record`` of fewer parts.

``SqlStore`` holds every read, the command queue, owners, runs and pruning, written
once in SQL that both databases accept (``?`` placeholders; the dialect turns them into
``%s`` for psycopg). A backend provides:

* ``dialect`` (``_sql.SQLITE`` / ``_sql.POSTGRES``) and ``driver_error`` (the
  driver's error class): placeholders, set membership, tags, the claim's row lock;
* ``_connect()`` and ``_fail()``: a new connection, and a ``StoreError`` naming the
  store; the base keeps one connection per process under the store's lock (``_db``,
  ``_read``, ``close``), a backend adds ``_write()`` (one write transaction);
* ``_t(value)``: a time as the database stores it (SQLite: integer microseconds
  since the epoch; PostgreSQL: the aware datetime, a ``timestamptz``);
* ``_record(batch)``: the one write path of snapshots, history, logs and touches
  (``record_batch``; the writes of ``StoreBase`` are it with fewer parts), opening
  and migrating.

The tables are ``ddl(types)`` in each backend's column types (``_schema``: the tables,
their indexes and migrations), so their shape is stated once too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import replace
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import AttemptRecord, Command, CommandState, TaskSnapshot, Transition
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores import _codec as codec
from chongming_nb.stores._schema import Conn, Cursor
from chongming_nb.stores._sql import Dialect, purge_statuses, task_order, task_where
from chongming_nb.stores.protocol import (
    DROPPED_STREAM,
    LOG_ROW_OVERHEAD,
    LOG_TEXT_WEIGHT,
    EventRecord,
    LogRecord,
    OwnerRecord,
    RunRecord,
    SaveItem,
    TaskQuery,
    TaskStore,
    Touch,
    dropped_count,
    dropped_marker,
)

__all__ = ["FRAME_COLUMNS", "Batch", "FrameKind", "Only", "SqlStore", "StoreBase", "upsert"]


def _cols(columns: Sequence[str]) -> str:
    return ", ".join(columns)


def _marks(columns: Sequence[str]) -> str:
    return ", ".join("?" for _ in columns)


def upsert(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    """Insert, or replace every other column of the row with the same ``key``."""
    rest = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    return (
        f"INSERT INTO {table} ({_cols(columns)}) VALUES ({_marks(columns)}) "
        f"ON CONFLICT ({_cols(key)}) DO UPDATE SET {rest}"
    )


_TERMINAL_VALUES = sorted(s.value for s in TERMINAL)
_TASK_COLS = _cols(codec.TASK_COLUMNS)
_SELECT_TASK = f"SELECT {_TASK_COLS} FROM tasks"
#: The tables that hold a task's history, by task_id (deleted with the task by purge).
_HISTORY_TABLES = ("transitions", "attempts", "events", "logs", "commands")


#: Rows of a page when the query gives no limit.
PAGE = 100


def _parse_cursor(after: str | None, store: Any) -> tuple[int, datetime | None] | None:
    """``(seq, created_at)`` of a page cursor (``"SEQ:TIME"``); StoreError if it is not
    one ``page`` made."""
    if after is None:
        return None
    seq, sep, when = str(after).partition(":")
    try:
        if not sep or not seq.isdigit():
            raise ValueError
        return int(seq), codec.text_to_dt(when) if when else None
    except ValueError:
        raise StoreError(
            f"bad page cursor {str(after)[:60]!r} for {store.url}: use the cursor a page returned"
        ) from None


_COMMANDS = _cols(codec.COMMAND_COLUMNS)
_COMMAND_TIMES = ("created_at", "lease_until", "completed_at")


FrameKind = Literal["tasks", "attempts", "transitions"]

#: The columns ``SqlStore.frame_columns`` returns, by kind, with the SQL of each
#: (``{t}`` the time in microseconds of a column, ``{f}`` a JSON field, ``{r}`` JSON
#: left to Python; columns of "tasks" are bare, those of the others ``t.`` (the task)
#: or ``r.`` (the row)).
_FRAME_SQL: dict[str, tuple[tuple[str, str], ...]] = {
    "tasks": (
        ("task_id", "task_id"),
        ("name", "name"),
        ("status", "status"),
        ("attempt", "attempt"),
        ("max_attempts", "max_attempts"),
        ("created_at", "{t:created_at}"),
        ("queued_at", "{t:queued_at}"),
        ("started_at", "{t:started_at}"),
        ("ended_at", "{t:ended_at}"),
        ("progress_done", "{f:progress:done}"),
        ("progress_total", "{f:progress:total}"),
        ("progress_unit", "{f:progress:unit}"),
        ("message", "{f:progress:message}"),
        ("progress_raw", "{r:progress}"),
        ("failure_kind", "{f:failure:kind}"),
        ("failure_message", "{f:failure:message}"),
        ("failure_raw", "{r:failure}"),
        ("executor", "executor"),
        ("pipeline_run_id", "pipeline_run_id"),
        ("tags", "tags"),
        ("priority", "priority"),
        ("overridden", "overridden"),
        ("status_version", "status_version"),
    ),
    "attempts": (
        ("task_id", "r.task_id"),
        ("name", "t.name"),
        ("attempt", "r.attempt"),
        ("started_at", "{t:r.started_at}"),
        ("ended_at", "{t:r.ended_at}"),
        ("outcome", "r.outcome"),
        ("failure_kind", "r.failure_kind"),
        ("failure_message", "r.failure_message"),
        ("traceback", "r.traceback"),
        ("executor", "r.executor"),
        ("abandoned", "r.abandoned"),
        ("exit_code", "r.exit_code"),
    ),
    "transitions": (
        ("task_id", "r.task_id"),
        ("name", "t.name"),
        ("version", "r.version"),
        ("from_status", "r.from_status"),
        ("to_status", "r.to_status"),
        ("trigger", "r.trigger"),
        ("actor", "r.actor"),
        ("reason", "r.reason"),
        ("at", "{t:r.at}"),
        ("override", "r.override"),
    ),
}
FRAME_COLUMNS: dict[str, tuple[str, ...]] = {
    kind: tuple(name for name, _ in cols) for kind, cols in _FRAME_SQL.items()
}
#: kind -> (table, its time column, its order within a task)
_FRAME_ROWS = {
    "attempts": ("attempts", "started_at", "attempt"),
    "transitions": ("transitions", "at", "version"),
}


def _frame_select(d: Dialect, kind: str) -> str:
    def spell(expr: str) -> str:
        if not expr.startswith("{"):
            return expr
        what, *args = expr[1:-1].split(":")
        if what == "t":
            return d.micros(args[0])
        if what == "f":
            return d.json_field(args[0], args[1])
        return d.json_raw(args[0])

    return "SELECT " + ", ".join(spell(expr) for _, expr in _FRAME_SQL[kind])


def _where(*conditions: tuple[str, list[Any]] | None) -> tuple[str, list[Any]]:
    """The WHERE clause of the given ``(sql, params)`` conditions, and their params."""
    given = [c for c in conditions if c is not None]
    if not given:
        return "", []
    return "WHERE " + " AND ".join(c[0] for c in given), [v for c in given for v in c[1]]


def _row(cur: Cursor, values: Sequence[Any]) -> dict[str, Any]:
    # a sqlite3 description entry is a 7-tuple, a psycopg Column a sequence of 7
    return {d[0]: v for d, v in zip(cur.description, values, strict=True)}


R = TypeVar("R", LogRecord, EventRecord)


class Batch(NamedTuple):
    """One recorder batch: the parts of ``SqlStore.record_batch`` (a write of fewer
    parts leaves the others empty)."""

    items: Sequence[SaveItem] = ()
    transitions: Sequence[Transition] = ()
    attempts: Sequence[AttemptRecord] = ()
    events: Sequence[EventRecord] = ()
    clears: Sequence[str] = ()
    logs: Sequence[tuple[str, Sequence[LogRecord]]] = ()
    touches: Sequence[Touch] = ()


#: Only these names (event types, task ids); None: every one.
Only = frozenset[str] | None


class StoreBase(TaskStore):
    """What every backend (``InMemoryStore``, ``SqlStore``) does alike, written once: the
    writes that are one ``_record`` of fewer parts (``create`` is a batch of one new
    snapshot, ``touch_many`` one of touches...), and the checks of the arguments of the methods
    below, which then call the backend's hook with checked ones (times in UTC). Its
    methods' documentation is ``TaskStore``'s."""

    # ------------------------------------------------------ backend hooks
    def _record(self, batch: Batch) -> None:  # pragma: no cover - abstract
        """Write the whole batch or nothing: ``clears`` first, then the snapshots with
        their transitions, attempts and events, then the log lines, then the touches."""
        raise NotImplementedError

    def _logs_since(
        self, task_id: str, since: datetime | None, limit: int | None
    ) -> list[LogRecord]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _events_since(
        self, task_id: str | None, since: datetime | None, types: Only, limit: int | None
    ) -> list[EventRecord]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _claim(
        self, owner: str, now: datetime, until: datetime, limit: int, task_ids: Only
    ) -> list[Command]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _complete(
        self, command_id: str, now: datetime, outcome: Mapping[str, Any] | None, state: CommandState
    ) -> None:  # pragma: no cover - abstract
        """Complete a command not yet completed; StoreError for an unknown one."""
        raise NotImplementedError

    def _purge(
        self, cutoff: datetime, statuses: list[str], keep: frozenset[str], dry_run: bool
    ) -> dict[str, int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _prune(self, keep_terminal: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ writes
    def create(self, snapshot: TaskSnapshot) -> None:
        self._record(Batch([(snapshot, None)]))

    def save(self, snapshot: TaskSnapshot, *, expect_version: int) -> None:
        self._record(Batch([(snapshot, expect_version)]))

    def save_many(
        self,
        items: Sequence[SaveItem],
        transitions: Sequence[Transition] = (),
        *,
        attempts: Sequence[AttemptRecord] = (),
        events: Sequence[EventRecord] = (),
    ) -> None:
        self._record(Batch(items, transitions, attempts, events))

    def append(self, transition: Transition) -> None:
        self._record(Batch(transitions=[transition]))

    def save_attempt(self, attempt: AttemptRecord) -> None:
        self._record(Batch(attempts=[attempt]))

    def append_events(self, events: Sequence[EventRecord]) -> None:
        self._record(Batch(events=events))

    def append_logs(self, task_id: str, lines: Sequence[LogRecord]) -> None:
        if lines:
            self._record(Batch(logs=[(task_id, lines)]))

    def touch_many(self, touches: Sequence[Touch]) -> None:
        if touches:
            self._record(Batch(touches=touches))

    # ------------------------------------------------------------- reads
    def logs(
        self, task_id: str, *, limit: int | None = None, since: datetime | None = None
    ) -> list[LogRecord]:
        return self._logs_since(task_id, codec.utc(since, "since"), limit)

    def events(
        self,
        task_id: str | None = None,
        *,
        since: datetime | None = None,
        types: frozenset[str] | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        return self._events_since(task_id, codec.utc(since, "since"), types, limit)

    # ---------------------------------------------------------- commands
    def claim_commands(
        self,
        *,
        owner: str,
        now: datetime,
        lease_seconds: float,
        limit: int = 50,
        task_ids: frozenset[str] | None = None,
    ) -> list[Command]:
        now = codec.utc_req(now, "now")
        until = now + timedelta(seconds=lease_seconds)
        return self._claim(owner, now, until, max(0, limit), task_ids)

    def complete_command(
        self,
        command_id: str,
        *,
        now: datetime,
        outcome: Mapping[str, Any] | None = None,
        state: CommandState = CommandState.DONE,
    ) -> None:
        if state not in (CommandState.DONE, CommandState.REJECTED):
            raise StoreError(f"command {command_id}: a command completes as done or rejected")
        self._complete(command_id, codec.utc_req(now, "now"), outcome, state)

    # --------------------------------------------------------- retention
    def purge(
        self,
        *,
        older_than: datetime,
        status: frozenset[TaskStatus] | None = None,
        keep: frozenset[str] = frozenset(),
        dry_run: bool = False,
    ) -> dict[str, int]:
        statuses = purge_statuses(status)
        return self._purge(codec.utc_req(older_than, "older_than"), statuses, keep, dry_run)

    def prune(self, *, keep_terminal: int) -> int:
        if keep_terminal < 0:
            raise ValueError(f"keep_terminal must be >= 0, got {keep_terminal}")
        return self._prune(keep_terminal)


class SqlStore(StoreBase):
    """A ``TaskStore`` over a SQL database (see the module docstring)."""

    dialect: ClassVar[Dialect]
    #: The backend keeps a ``task_counts`` table (status -> tasks) up to date.
    _counted: ClassVar[bool] = False
    #: the driver's base error: one raised inside ``_read``/``_write`` becomes StoreError
    driver_error: ClassVar[type[Exception]]

    # set by the backend's __init__
    _url: str  # without a password
    _lock: threading.RLock
    _closed: bool
    _schema: int
    _pid: int
    _conn: Any

    # ------------------------------------------------------ backend hooks
    def _connect(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _fail(self, what: str, exc: BaseException | None = None) -> StoreError:
        raise NotImplementedError  # pragma: no cover - abstract

    def _write(self) -> AbstractContextManager[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _t(self, value: datetime | None) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _usable(self, conn: Any) -> bool:
        """Whether this process's connection can still be used (PostgreSQL: not closed
        or broken by the server); a new one is opened when it cannot."""
        return True

    def _closed_hook(self) -> None:
        """After ``close`` closed the connection, under the store's lock."""

    # ----------------------------------------------------------- plumbing
    @property
    def url(self) -> str:
        return self._url

    @property
    def schema_version(self) -> int:
        return self._schema

    def _db(self) -> Any:
        """The connection, under the store's lock: a forked child never shares its
        parent's connection, and an unusable one is replaced."""
        if self._closed:
            raise self._fail("is closed")
        if os.getpid() != self._pid or not self._usable(self._conn):
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock:
            conn = self._db()
            try:
                yield conn
            except self.driver_error as exc:
                raise self._fail("read failed", exc) from exc

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with suppress(self.driver_error):
                self._conn.close()
            self._closed_hook()

    def _sql(self, sql: str) -> str:
        return self.dialect.q(sql)

    def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._read() as conn:
            cur = conn.execute(self._sql(sql), params)
            return [_row(cur, v) for v in cur.fetchall()]

    def _one(self, sql: str, params: Sequence[Any]) -> dict[str, Any] | None:
        with self._read() as conn:
            cur = conn.execute(self._sql(sql), params)
            values = cur.fetchone()
            return None if values is None else _row(cur, values)

    def _change(self, sql: str, params: Sequence[Any]) -> int:
        """Run one writing statement in a transaction of its own; the rows it changed."""
        with self._write() as conn:
            return int(conn.execute(self._sql(sql), params).rowcount)

    def _conflict(self, conn: Conn, updates: Sequence[Sequence[Any]]) -> ConcurrencyConflict:
        """The conflict of the first update row (``(..., task_id, expect)``) that does
        not match the store; the caller holds the write lock and undid the updates."""
        for values in updates:
            tid, expect = values[-2], values[-1]
            found = conn.execute(
                self._sql("SELECT status_version FROM tasks WHERE task_id = ?"), (tid,)
            ).fetchone()
            if found is None or int(found[0]) != expect:
                return ConcurrencyConflict(tid, expect, None if found is None else int(found[0]))
        return ConcurrencyConflict(updates[0][-2], updates[0][-1], None)

    def _duplicate(self, conn: Conn, ids: Sequence[str]) -> StoreError:
        """The error for a batch of creates of which one exists (the first of ``ids``
        found; the caller holds the write lock and undid the creates)."""
        for tid in ids:
            if conn.execute(self._sql("SELECT 1 FROM tasks WHERE task_id = ?"), (tid,)).fetchone():
                return StoreError(f"task {tid} already exists in {self.url}")
        return StoreError(f"a task of the batch already exists in {self.url}")

    def _newest(
        self,
        sql: str,
        params: list[Any],
        limit: int | None,
        decode: Callable[[Mapping[str, Any]], R],
    ) -> list[R]:
        """The rows of ``sql`` (logs or events) in time order, the newest ``limit``."""
        sql += " ORDER BY at DESC, seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))
        rows = [decode(r) for r in self._fetch(sql, params)]
        rows.reverse()
        return rows

    def _timed(self, row: dict[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
        return tuple(self._t(v) if k in columns else v for k, v in row.items())

    # ------------------------------------------------------------- writes
    def record_batch(
        self,
        items: Sequence[SaveItem] = (),
        transitions: Sequence[Transition] = (),
        *,
        attempts: Sequence[AttemptRecord] = (),
        events: Sequence[EventRecord] = (),
        clears: Sequence[str] = (),
        logs: Sequence[tuple[str, Sequence[LogRecord]]] = (),
        touches: Sequence[Touch] = (),
    ) -> None:
        """A whole recorder batch in ONE transaction (all lands or nothing does):
        ``clear_attempts`` of ``clears`` first, then ``save_many(items, transitions,
        attempts=..., events=...)``, then ``append_logs`` of each ``(task_id, lines)``,
        then ``touch_many(touches)``; errors as those methods raise them."""
        self._record(Batch(items, transitions, attempts, events, clears, logs, touches))

    # ---------------------------------------------------------- snapshots
    def get(self, task_id: str) -> TaskSnapshot | None:
        r = self._one(f"{_SELECT_TASK} WHERE task_id = ?", (task_id,))
        return None if r is None else codec.row_to_snapshot(r)

    def query(self, query: TaskQuery | None = None) -> list[TaskSnapshot]:
        q = query or TaskQuery()
        where, params = task_where(q, self.dialect)
        sql = f"{_SELECT_TASK} {where} {task_order(q.order, self.dialect)}"
        if q.limit is not None:
            sql += " LIMIT ?"
            params.append(q.limit)
        return [codec.row_to_snapshot(r) for r in self._fetch(sql, params)]

    def page(
        self, query: TaskQuery | None = None, *, after: str | None = None
    ) -> tuple[list[TaskSnapshot], str | None]:
        """One page of ``query``'s rows in its order (``query.limit`` rows, default
        ``PAGE``), following the row the cursor ``after`` names; returns the rows and
        the cursor of the next page (None after the last). Keyset pagination on the
        indexed (created_at, seq): a page costs the same however many rows come before
        it, and rows written meanwhile are neither repeated nor skipped."""
        q = query or TaskQuery()
        size = PAGE if q.limit is None else q.limit
        newest = q.order == "newest"
        cmp, way = ("<", "DESC") if newest else (">", "ASC")
        mark = _parse_cursor(after, self)
        where, params = task_where(q, self.dialect)
        glue = " AND " if where else "WHERE "
        rows: list[dict[str, Any]] = []
        # dated rows first (the index order), then the undated ones (by seq)
        if mark is None or mark[1] is not None:
            cond = "created_at IS NOT NULL"
            extra: list[Any] = []
            if mark is not None:
                cond += f" AND (created_at, seq) {cmp} (?, ?)"
                extra = [self._t(mark[1]), mark[0]]
            rows = self._fetch(
                f"SELECT seq, {_TASK_COLS} FROM tasks {where}{glue}{cond} "
                f"ORDER BY created_at {way}, seq {way} LIMIT ?",
                [*params, *extra, size + 1],
            )
        if len(rows) <= size:
            cond = "created_at IS NULL"
            extra = []
            if mark is not None and mark[1] is None:
                cond += f" AND seq {cmp} ?"
                extra = [mark[0]]
            rows += self._fetch(
                f"SELECT seq, {_TASK_COLS} FROM tasks {where}{glue}{cond} "
                f"ORDER BY seq {way} LIMIT ?",
                [*params, *extra, size + 1 - len(rows)],
            )
        more = len(rows) > size
        rows = rows[:size]
        snaps = [codec.row_to_snapshot(r) for r in rows]
        if not more or not rows:
            return snaps, None
        last = snaps[-1]
        return snaps, f"{rows[-1]['seq']}:{codec.dt_to_text(last.created_at) or ''}"

    def counts(self, query: TaskQuery | None = None) -> dict[TaskStatus, int]:
        q = query or TaskQuery()
        out = dict.fromkeys(TaskStatus, 0)
        if self._counted and replace(q, status=None, limit=None, order="newest") == TaskQuery():
            # nothing but statuses asked: the kept counts, not a pass over the tasks
            rows = self._fetch("SELECT status, n FROM task_counts WHERE n > 0")
            if q.status is not None:
                rows = [r for r in rows if TaskStatus(r["status"]) in q.status]
        else:
            where, params = task_where(q, self.dialect)
            rows = self._fetch(
                f"SELECT status, COUNT(*) AS n FROM tasks {where} GROUP BY status", params
            )
        for r in rows:
            out[TaskStatus(r["status"])] = int(r["n"])
        return out

    # ------------------------------------------------------------ history
    def history(self, task_id: str, *, since_version: int = 0) -> list[Transition]:
        rows = self._fetch(
            f"SELECT {_cols(codec.TRANSITION_COLUMNS)} FROM transitions "
            "WHERE task_id = ? AND version > ? ORDER BY version",
            (task_id, since_version),
        )
        return [codec.row_to_transition(r) for r in rows]

    def histories(
        self, task_ids: Sequence[str], *, touching: frozenset[TaskStatus] | None = None
    ) -> dict[str, list[Transition]]:
        out: dict[str, list[Transition]] = {}
        if not task_ids:
            return out
        d = self.dialect
        of_tasks = d.in_list("task_id", sorted(set(task_ids)))
        touched = None
        if touching is not None:
            values = sorted(s.value for s in touching)
            into, p_into = d.in_list("to_status", values)
            out_of, p_out = d.in_list("from_status", values)
            touched = (f"({into} OR {out_of})", p_into + p_out)
        where, params = _where(of_tasks, touched)
        rows = self._fetch(
            f"SELECT {_cols(codec.TRANSITION_COLUMNS)} FROM transitions {where} "
            "ORDER BY task_id, version",
            params,
        )
        for r in rows:
            tr = codec.row_to_transition(r)
            out.setdefault(tr.task_id, []).append(tr)
        return out

    def attempts(self, task_id: str) -> list[AttemptRecord]:
        rows = self._fetch(
            f"SELECT {_cols(codec.ATTEMPT_COLUMNS)} FROM attempts "
            "WHERE task_id = ? ORDER BY attempt",
            (task_id,),
        )
        return [codec.row_to_attempt(r) for r in rows]

    def clear_attempts(self, task_id: str) -> int:
        return self._change("DELETE FROM attempts WHERE task_id = ?", (task_id,))

    def trim_logs(self, task_id: str, max_bytes: int) -> int:
        """Keep the newest lines of ``task_id`` whose size (see ``protocol.log_size``) fits
        ``max_bytes``; the newest dropped line becomes the "… N lines dropped" marker
        (N counts every line dropped so far). Returns the lines dropped now."""
        with self._write() as conn:
            cut = conn.execute(
                self._sql(
                    f"SELECT seq FROM (SELECT seq, SUM({LOG_TEXT_WEIGHT} * LENGTH(line) + ?) OVER "
                    "(ORDER BY at DESC, seq DESC) AS acc FROM logs WHERE task_id = ? "
                    "AND stream <> ?) ranked WHERE acc > ? ORDER BY acc LIMIT 1"
                ),
                (LOG_ROW_OVERHEAD, task_id, DROPPED_STREAM, max_bytes),
            ).fetchone()
            if cut is None:
                return 0
            cut_seq = cut[0]
            cut_at = conn.execute(
                self._sql("SELECT at FROM logs WHERE seq = ?"), (cut_seq,)
            ).fetchone()[0]
            # every line at or before the cut, in the (at, seq) order logs() reads
            where = "task_id = ? AND (at < ? OR (at = ? AND seq <= ?))"
            rows = conn.execute(
                self._sql(f"SELECT stream, line FROM logs WHERE {where}"),
                (task_id, cut_at, cut_at, cut_seq),
            ).fetchall()
            dropped = sum(1 for r in rows if r[0] != DROPPED_STREAM)
            before = sum(dropped_count(r[1]) for r in rows if r[0] == DROPPED_STREAM)
            conn.execute(
                self._sql(f"DELETE FROM logs WHERE {where} AND seq <> ?"),
                (task_id, cut_at, cut_at, cut_seq, cut_seq),
            )
            conn.execute(
                self._sql("UPDATE logs SET stream = ?, line = ?, level = NULL WHERE seq = ?"),
                (DROPPED_STREAM, dropped_marker(before + dropped), cut_seq),
            )
            return dropped

    def _logs_since(
        self, task_id: str, since: datetime | None, limit: int | None
    ) -> list[LogRecord]:
        sql = "SELECT at, stream, line, level FROM logs WHERE task_id = ?"
        params: list[Any] = [task_id]
        if since is not None:
            sql += " AND at > ?"
            params.append(self._t(since))
        return self._newest(sql, params, limit, codec.row_to_log)

    def _events_since(
        self, task_id: str | None, since: datetime | None, types: Only, limit: int | None
    ) -> list[EventRecord]:
        where, params = _where(
            None if task_id is None else ("task_id = ?", [task_id]),
            None if since is None else ("at > ?", [self._t(since)]),
            None if types is None else self.dialect.in_list("type", sorted(types)),
        )
        sql = f"SELECT {_cols(codec.EVENT_COLUMNS)} FROM events {where}"
        return self._newest(sql, params, limit, codec.row_to_event)

    # ----------------------------------------------------------- commands
    def submit_command(self, command: Command) -> None:
        row = codec.command_to_row(command)
        row.update(
            state=CommandState.PENDING.value,
            claimed_by=None,
            lease_until=None,
            completed_at=None,
            outcome=None,
        )
        self._change(
            f"INSERT INTO commands ({_COMMANDS}) VALUES ({_marks(codec.COMMAND_COLUMNS)}) "
            "ON CONFLICT (command_id) DO NOTHING",
            self._timed(row, _COMMAND_TIMES),
        )

    def _claim(
        self, owner: str, now: datetime, until: datetime, limit: int, task_ids: Only
    ) -> list[Command]:
        cond = "(state = 'pending' OR (state = 'claimed' AND lease_until <= ?))"
        params: list[Any] = [self._t(now)]
        if task_ids is not None:
            sql, p = self.dialect.in_list("task_id", sorted(task_ids))
            cond += f" AND {sql}"
            params += p
        with self._write() as conn:
            cur = conn.execute(
                self._sql(
                    "UPDATE commands SET state = 'claimed', claimed_by = ?, lease_until = ? "
                    f"WHERE seq IN (SELECT seq FROM commands WHERE {cond} ORDER BY seq LIMIT ?"
                    f"{self.dialect.claim_lock}) RETURNING seq, {_COMMANDS}"
                ),
                [owner, self._t(until), *params, limit],
            )
            rows = [_row(cur, v) for v in cur.fetchall()]
        rows.sort(key=lambda r: r["seq"])
        return [codec.row_to_command(r) for r in rows]

    def _complete(
        self, command_id: str, now: datetime, outcome: Mapping[str, Any] | None, state: CommandState
    ) -> None:
        at = self._t(now)
        out = codec.dumps_obj(outcome, f"command {command_id} outcome")
        with self._write() as conn:
            cur = conn.execute(
                self._sql(
                    "UPDATE commands SET state = ?, completed_at = ?, outcome = ? "
                    "WHERE command_id = ? AND state IN ('pending', 'claimed')"
                ),
                (state.value, at, out, command_id),
            )
            if cur.rowcount == 0:
                found = conn.execute(
                    self._sql("SELECT 1 FROM commands WHERE command_id = ?"), (command_id,)
                ).fetchone()
                if found is None:
                    raise StoreError(f"no command with id {command_id!r} in {self.url}")

    def get_command(self, command_id: str) -> Command | None:
        r = self._one(f"SELECT {_COMMANDS} FROM commands WHERE command_id = ?", (command_id,))
        return None if r is None else codec.row_to_command(r)

    def commands(
        self, task_id: str | None = None, *, state: CommandState | None = None
    ) -> list[Command]:
        where, params = _where(
            None if task_id is None else ("task_id = ?", [task_id]),
            None if state is None else ("state = ?", [CommandState(state).value]),
        )
        rows = self._fetch(f"SELECT {_COMMANDS} FROM commands {where} ORDER BY seq", params)
        return [codec.row_to_command(r) for r in rows]

    # ------------------------------------------------------- owners, runs
    def _upsert(
        self, table: str, cols: Sequence[str], key: str, row: dict[str, Any], times: Sequence[str]
    ) -> None:
        """Insert or replace the row keyed by ``key`` (its ``times`` as the store keeps them)."""
        self._change(upsert(table, cols, (key,)), self._timed(row, times))

    def upsert_owner(self, owner: OwnerRecord) -> None:
        row = codec.owner_to_row(owner)
        self._upsert("owners", codec.OWNER_COLUMNS, "owner_id", row, codec.OWNER_TIMES)

    def owners(self) -> list[OwnerRecord]:
        rows = self._fetch(f"SELECT {_cols(codec.OWNER_COLUMNS)} FROM owners ORDER BY owner_id")
        return [codec.row_to_owner(r) for r in rows]

    def save_run(self, run: RunRecord) -> None:
        row = codec.run_to_row(run)
        self._upsert("runs", codec.RUN_COLUMNS, "run_id", row, codec.RUN_TIMES)

    def get_run(self, run_id: str) -> RunRecord | None:
        r = self._one(f"SELECT {_cols(codec.RUN_COLUMNS)} FROM runs WHERE run_id = ?", (run_id,))
        return None if r is None else codec.row_to_run(r)

    def list_runs(
        self, limit: int | None = None, *, status: Collection[str] | None = None
    ) -> list[RunRecord]:
        sql = f"SELECT {_cols(codec.RUN_COLUMNS)} FROM runs"
        params: list[Any] = []
        if status is not None:
            chosen = sorted(set(status))
            if not chosen:
                return []
            cond, more = self.dialect.in_list("status", chosen)
            sql += f" WHERE {cond}"
            params += more
        sql += " ORDER BY created_at DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))
        return [codec.row_to_run(r) for r in self._fetch(sql, params)]

    # ------------------------------------------------------------- frames
    def frame_columns(
        self,
        kind: FrameKind,
        query: TaskQuery | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, Sequence[Any]]:
        """The columns of a DataFrame of ``kind`` in ONE query (``FRAME_COLUMNS``):
        "tasks" (one row per task, newest first), "attempts" or "transitions" (per
        task, oldest task first; in attempt or version order). ``query`` selects the
        tasks (its ``limit``: the newest that many); ``since`` / ``until`` (since <=
        time < until) the rows by their own time: created_at, started_at, at. Times
        come as integer microseconds since the epoch (None for none); ``*_raw``
        columns hold JSON the database did not read (``Dialect.json_field``)."""
        q = query or TaskQuery()
        d = self.dialect
        where, params = task_where(q, d)
        if kind == "tasks":
            sql = f"{_frame_select(d, 'tasks')} FROM tasks {where}"
            timed, order = "tasks.created_at", "ORDER BY tasks.created_at DESC, tasks.seq DESC"
            if d.name != "sqlite":  # undated last (SQLite sorts NULL last descending)
                order = "ORDER BY tasks.created_at DESC NULLS LAST, tasks.seq DESC"
        else:
            table, time_col, by = _FRAME_ROWS[kind]
            picked = f"SELECT seq, task_id, name, created_at FROM tasks {where}"
            if q.limit is not None:
                picked += f" {task_order('newest', d)} LIMIT ?"
                params.append(q.limit)
            sql = (
                f"{_frame_select(d, kind)} FROM ({picked}) AS t "
                f"JOIN {table} AS r ON r.task_id = t.task_id"
            )
            timed, order = f"r.{time_col}", f"ORDER BY {d.oldest_first('t')}, r.{by}"
        bounds = []
        if since is not None:
            bounds.append(f"{timed} >= ?")
            params.append(self._t(codec.utc(since, "since")))
        if until is not None:
            bounds.append(f"{timed} < ?")
            params.append(self._t(codec.utc(until, "until")))
        if bounds:
            sql += (" AND " if kind == "tasks" and where else " WHERE ") + " AND ".join(bounds)
        sql += f" {order}"
        if kind == "tasks" and q.limit is not None:
            sql += " LIMIT ?"
            params.append(q.limit)
        names = FRAME_COLUMNS[kind]
        with self._read() as conn:
            rows = conn.execute(self._sql(sql), params).fetchall()
        if not rows:
            return {c: () for c in names}
        if len(rows[0]) != len(names):
            raise StoreError(f"a {kind} frame read {len(rows[0])} columns, not {len(names)}")
        # one column at a time (zip(*rows) pulls one value from every row per step)
        return {c: list(map(itemgetter(i), rows)) for i, c in enumerate(names)}

    # ---------------------------------------------------------- retention
    def _purge(
        self, cutoff: datetime, statuses: list[str], keep: frozenset[str], dry_run: bool
    ) -> dict[str, int]:
        """Delete the tasks of ``statuses`` (all terminal) that ended before ``cutoff``,
        but those in ``keep``, with their transitions, attempts, events, log lines and
        commands, in ONE transaction; returns the rows deleted per table (``dry_run``:
        the rows it would delete, and deletes nothing). Then gives the space back
        (``_reclaim``)."""
        in_status, params = self.dialect.in_list("status", statuses)
        cond = f"{in_status} AND COALESCE(ended_at, created_at) < ?"
        params.append(self._t(cutoff))
        if keep:
            not_kept, more = self.dialect.in_list("task_id", sorted(keep))
            cond += f" AND NOT ({not_kept})"
            params += more
        doomed = f"SELECT task_id FROM tasks WHERE {cond}"
        counts: dict[str, int] = {}
        with self._write() as conn:
            for table in _HISTORY_TABLES:
                verb = "SELECT COUNT(*) FROM" if dry_run else "DELETE FROM"
                cur = conn.execute(self._sql(f"{verb} {table} WHERE task_id IN ({doomed})"), params)
                counts[table] = int(cur.fetchone()[0]) if dry_run else int(cur.rowcount)
            verb = "SELECT COUNT(*) FROM" if dry_run else "DELETE FROM"
            cur = conn.execute(self._sql(f"{verb} tasks WHERE {cond}"), params)
            counts["tasks"] = int(cur.fetchone()[0]) if dry_run else int(cur.rowcount)
        if not dry_run and counts["tasks"]:
            self._reclaim()
        return counts

    def _reclaim(self) -> None:
        """Give the pages of deleted rows back (a backend hook; PostgreSQL's autovacuum
        does it on its own)."""

    # ---------------------------------------------------------------- ops
    def _prune(self, keep_terminal: int) -> int:
        status_sql, params = self.dialect.in_list("status", _TERMINAL_VALUES)
        return self._change(
            "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks "
            f"WHERE {status_sql} {task_order('newest', self.dialect)} "
            f"LIMIT {self.dialect.no_limit} OFFSET ?)",
            [*params, keep_terminal],
        )

"""The PostgreSQL store: one control plane shared by several machines (psycopg 3).

* one connection per store instance, guarded by a lock, in autocommit mode with an
  explicit transaction per write (a broken connection is reopened on the next call;
  a forked child opens its own);
* every table lives in one schema (default ``chongming``; choose another with the
  ``schema=`` argument or a ``?schema=NAME`` URL parameter), created on first use;
* command claims use ``SELECT ... FOR UPDATE SKIP LOCKED`` so concurrent claimers never
  block on, or receive, the same command;
* times are ``timestamptz`` (the session runs in UTC), nested values are JSON text
  (so floats, key order and NaN round-trip exactly);
* PostgreSQL text cannot hold NUL characters: in log lines they are replaced by
  U+FFFD; anywhere else a NUL raises ``StoreError``.

Failures name the URL (without its password): an unreachable server, a schema that
holds someone else's tables, or a schema written by a newer release raise
``StoreError`` and nothing is changed.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors

from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import (
    AttemptRecord,
    Command,
    CommandState,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores import _codec as codec
from chongming_nb.stores import _sql
from chongming_nb.stores._sql import POSTGRES, task_order, task_where
from chongming_nb.stores._target import is_keyword_string, parse_target, redact
from chongming_nb.stores.protocol import (
    SCHEMA_VERSION,
    EventRecord,
    LogRecord,
    OwnerRecord,
    RunRecord,
    SaveItem,
    TaskQuery,
    Touch,
    TouchViaTouchMany,
    WritesViaRecordBatch,
)

__all__ = ["MIGRATIONS", "PostgresStore"]

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: Schema migrations: target version -> statements that bring version-1 up to it.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE chongming_schema (version INTEGER NOT NULL)",
        """CREATE TABLE tasks (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            task_id TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            pipeline_run_id TEXT,
            tags TEXT NOT NULL,
            status TEXT NOT NULL,
            status_version BIGINT NOT NULL,
            requested_action TEXT,
            attempt BIGINT NOT NULL,
            max_attempts BIGINT NOT NULL,
            created_at TIMESTAMPTZ,
            queued_at TIMESTAMPTZ,
            started_at TIMESTAMPTZ,
            ended_at TIMESTAMPTZ,
            last_heartbeat_at TIMESTAMPTZ,
            retry_at TIMESTAMPTZ,
            progress TEXT,
            failure TEXT,
            outcome TEXT,
            executor TEXT,
            pid BIGINT,
            priority BIGINT NOT NULL,
            deps TEXT NOT NULL,
            idempotency_key TEXT,
            bucket BIGINT,
            bucket_key TEXT,
            lease_owner TEXT,
            lease_until TIMESTAMPTZ,
            overridden BOOLEAN NOT NULL
        )""",
        "CREATE INDEX tasks_status ON tasks(status)",
        "CREATE INDEX tasks_run ON tasks(pipeline_run_id)",
        "CREATE INDEX tasks_created ON tasks(created_at, seq)",
        "CREATE INDEX tasks_bucket ON tasks(bucket)",
        "CREATE INDEX tasks_owner ON tasks(lease_owner)",
        """CREATE TABLE transitions (
            task_id TEXT NOT NULL,
            version BIGINT NOT NULL,
            from_status TEXT NOT NULL,
            to_status TEXT NOT NULL,
            trigger TEXT NOT NULL,
            actor TEXT NOT NULL,
            reason TEXT,
            at TIMESTAMPTZ NOT NULL,
            override BOOLEAN NOT NULL,
            PRIMARY KEY (task_id, version)
        )""",
        """CREATE TABLE attempts (
            task_id TEXT NOT NULL,
            attempt BIGINT NOT NULL,
            started_at TIMESTAMPTZ NOT NULL,
            ended_at TIMESTAMPTZ,
            outcome TEXT,
            failure_kind TEXT,
            failure_message TEXT,
            traceback TEXT,
            executor TEXT,
            abandoned BOOLEAN NOT NULL,
            exit_code BIGINT,
            PRIMARY KEY (task_id, attempt)
        )""",
        """CREATE TABLE logs (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            task_id TEXT NOT NULL,
            at TIMESTAMPTZ NOT NULL,
            stream TEXT NOT NULL,
            line TEXT NOT NULL,
            level TEXT
        )""",
        "CREATE INDEX logs_task ON logs(task_id, at, seq)",
        """CREATE TABLE events (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            event_id TEXT NOT NULL UNIQUE,
            task_id TEXT,
            at TIMESTAMPTZ NOT NULL,
            type TEXT NOT NULL,
            payload TEXT NOT NULL
        )""",
        "CREATE INDEX events_task ON events(task_id, at, seq)",
        "CREATE INDEX events_at ON events(at, seq)",
        """CREATE TABLE commands (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            command_id TEXT NOT NULL UNIQUE,
            task_id TEXT NOT NULL,
            verb TEXT NOT NULL,
            args TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at TIMESTAMPTZ,
            state TEXT NOT NULL,
            claimed_by TEXT,
            lease_until TIMESTAMPTZ,
            completed_at TIMESTAMPTZ,
            outcome TEXT
        )""",
        "CREATE INDEX commands_state ON commands(state, seq)",
        "CREATE INDEX commands_task ON commands(task_id, seq)",
        """CREATE TABLE owners (
            owner_id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid BIGINT NOT NULL,
            kernel_id TEXT,
            started_at TIMESTAMPTZ NOT NULL,
            heartbeat_at TIMESTAMPTZ NOT NULL
        )""",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL,
            spec TEXT NOT NULL
        )""",
        "CREATE INDEX runs_created ON runs(created_at)",
    ],
}


def _cols(columns: Sequence[str]) -> str:
    return ", ".join(columns)


def _phs(columns: Sequence[str]) -> str:
    return ", ".join("%s" for _ in columns)


def _upsert(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    rest = [c for c in columns if c not in key]
    return (
        f"INSERT INTO {table} ({_cols(columns)}) VALUES ({_phs(columns)}) "
        f"ON CONFLICT ({_cols(key)}) DO UPDATE SET "
        + ", ".join(f"{c} = EXCLUDED.{c}" for c in rest)
    )


_INSERT_TASK = (
    f"INSERT INTO tasks ({_cols(codec.TASK_COLUMNS)}) VALUES ({_phs(codec.TASK_COLUMNS)})"
)
_UPDATE_COLS = [c for c in codec.TASK_COLUMNS if c != "task_id"]
_UPDATE_TASK = (
    f"UPDATE tasks SET {', '.join(f'{c} = %s' for c in _UPDATE_COLS)} "
    "WHERE task_id = %s AND status_version = %s"
)
_SELECT_TASK = f"SELECT {_cols(codec.TASK_COLUMNS)} FROM tasks"
_INSERT_TRANSITION = (
    f"INSERT INTO transitions ({_cols(codec.TRANSITION_COLUMNS)}) "
    f"VALUES ({_phs(codec.TRANSITION_COLUMNS)}) ON CONFLICT DO NOTHING"
)
_UPSERT_ATTEMPT = _upsert("attempts", codec.ATTEMPT_COLUMNS, ("task_id", "attempt"))
_INSERT_EVENT = (
    f"INSERT INTO events ({_cols(codec.EVENT_COLUMNS)}) VALUES ({_phs(codec.EVENT_COLUMNS)}) "
    "ON CONFLICT (event_id) DO NOTHING"
)
_TOUCH = (
    "UPDATE tasks SET progress = COALESCE(%s, progress), "
    "last_heartbeat_at = COALESCE(%s, last_heartbeat_at), "
    "lease_owner = COALESCE(%s, lease_owner), lease_until = COALESCE(%s, lease_until), "
    "pid = COALESCE(%s, pid) WHERE task_id = %s"
)
_INSERT_LOG = "INSERT INTO logs (task_id, at, stream, line, level) VALUES (%s, %s, %s, %s, %s)"
_TERMINAL_VALUES = sorted(s.value for s in TERMINAL)


class _Missed(Exception):
    """An update of a group commit matched no row (rolls its savepoint back)."""


def _split_url(url: str, schema: str | None) -> tuple[str, str]:
    """Separate our ``schema=`` parameter from the libpq URL (or keyword string)."""
    if is_keyword_string(url):
        return url, schema or "chongming"
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    found = [v for k, v in params if k == "schema"]
    kept = [(k, v) for k, v in params if k != "schema"]
    chosen = schema or (found[-1] if found else "chongming")
    clean = urlunsplit(parts._replace(query=urlencode(kept)))
    return clean, chosen


def _row(cur: psycopg.Cursor[Any], values: Sequence[Any]) -> dict[str, Any]:
    assert cur.description is not None
    return {d.name: v for d, v in zip(cur.description, values, strict=True)}


class PostgresStore(TouchViaTouchMany, WritesViaRecordBatch):
    """A ``TaskStore`` in a PostgreSQL schema."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        connect_timeout: float = 10.0,
        readonly: bool = False,
    ) -> None:
        target = parse_target(url)
        self._secrets = target.secrets
        self._display = target.display
        self._readonly = readonly
        self._conninfo, self._schema_name = _split_url(url, schema)
        if not _IDENT.match(self._schema_name):
            raise StoreError(
                f"postgres store {self._display}: schema name {self._schema_name!r} must "
                "match [a-z_][a-z0-9_]*"
            )
        self._connect_timeout = connect_timeout
        self._lock = threading.RLock()
        self._closed = False
        self._schema = 0
        self._pid = os.getpid()
        self._conn = self._connect()
        try:
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    # ----------------------------------------------------------- opening
    def _fail(self, what: str, exc: BaseException | None = None) -> StoreError:
        detail = f": {exc}".rstrip() if exc is not None else ""
        # a driver's message may quote the connection string: masked as a whole
        return StoreError(
            redact(
                f"postgres store {self._display} (schema {self._schema_name}): {what}{detail}",
                self._secrets,
            )
        )

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=max(1, int(self._connect_timeout)),
            )
        except psycopg.Error as exc:
            raise self._fail("cannot connect", exc) from exc
        try:
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute(f'SET search_path TO "{self._schema_name}"')
            if self._readonly:
                conn.execute("SET default_transaction_read_only = on")
        except psycopg.Error as exc:
            conn.close()
            raise self._fail("cannot configure the session", exc) from exc
        return conn

    def _migrate(self) -> None:
        conn = self._conn
        name = self._schema_name
        if self._readonly:
            self._check_schema()
            return
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"chongming:{name}",))
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{name}"')
                tables = {
                    r[0]
                    for r in conn.execute(
                        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                        (name,),
                    )
                }
                if "chongming_schema" in tables:
                    row = conn.execute("SELECT MAX(version) FROM chongming_schema").fetchone()
                    version = int(row[0]) if row and row[0] is not None else 0
                elif tables:
                    raise self._fail(
                        "the schema holds tables of something else ("
                        + ", ".join(sorted(tables))
                        + "); refusing to touch it"
                    )
                else:
                    version = 0
                if version > SCHEMA_VERSION:
                    raise self._fail(
                        f"has schema version {version}, newer than this release supports "
                        f"({SCHEMA_VERSION}); upgrade chongming_nb"
                    )
                for target in range(version + 1, SCHEMA_VERSION + 1):
                    for stmt in MIGRATIONS[target]:
                        conn.execute(stmt)
                    conn.execute("DELETE FROM chongming_schema")
                    conn.execute("INSERT INTO chongming_schema (version) VALUES (%s)", (target,))
                    version = target
        except psycopg.Error as exc:
            raise self._fail("cannot read or migrate the schema", exc) from exc
        self._schema = version

    def _check_schema(self) -> None:
        """Read-only: the schema must hold this release's tables (nothing is created)."""
        try:
            tables = {
                r[0]
                for r in self._conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (self._schema_name,),
                )
            }
            if "chongming_schema" not in tables:
                raise StoreError(
                    f"no store at {self._display} (schema {self._schema_name} holds no "
                    "chongming tables)"
                )
            row = self._conn.execute("SELECT MAX(version) FROM chongming_schema").fetchone()
        except psycopg.Error as exc:
            raise self._fail("cannot read the schema", exc) from exc
        version = int(row[0]) if row and row[0] is not None else 0
        if version != SCHEMA_VERSION:
            raise self._fail(
                f"has schema version {version}, this release reads {SCHEMA_VERSION}; "
                + (
                    "upgrade chongming_nb"
                    if version > SCHEMA_VERSION
                    else "open it once for writing (a controller) to upgrade"
                )
            )
        self._schema = version

    # ---------------------------------------------------------- plumbing
    @property
    def url(self) -> str:
        return self._display

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._schema_name

    @property
    def schema_version(self) -> int:
        return self._schema

    def __repr__(self) -> str:
        return f"PostgresStore({self._display!r}, schema={self._schema_name!r})"

    def _db(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise self._fail("is closed")
        if os.getpid() != self._pid or self._conn.closed or self._conn.broken:
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            conn = self._db()
            try:
                with conn.transaction():
                    yield conn
            except psycopg.Error as exc:
                raise self._fail("write failed", exc) from exc

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            conn = self._db()
            try:
                yield conn
            except psycopg.Error as exc:
                raise self._fail("read failed", exc) from exc

    # --------------------------------------------------------- snapshots
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
        tx = safe = _sql.same_time
        creates, updates = _sql.task_rows(items, tx, safe)
        trows = _sql.transition_rows(transitions, tx, safe)
        arows = _sql.attempt_rows(attempts, tx, safe)
        erows = _sql.event_rows(events, tx, safe)
        lrows = [
            (tid, at, stream, line.replace("\x00", "\ufffd"), level)
            for tid, at, stream, line, level in _sql.log_rows(logs, tx, safe)
        ]
        urows = _sql.touch_rows(touches, tx, safe)
        # one executemany per kind of row: psycopg pipelines them (no round trip per row)
        with self._write() as conn:
            cur = conn.cursor()
            if clears:
                cur.executemany("DELETE FROM attempts WHERE task_id = %s", [(t,) for t in clears])
            if creates:
                try:
                    with conn.transaction():  # a savepoint, so the error can be named
                        cur.executemany(_INSERT_TASK, creates)
                except pg_errors.UniqueViolation as exc:
                    ids = [values[0] for values in creates]
                    found = cur.execute(
                        "SELECT task_id FROM tasks WHERE task_id = ANY(%s) ORDER BY task_id",
                        (ids,),
                    ).fetchall()
                    dup = found[0][0] if found else "?"
                    raise StoreError(f"task {dup} already exists in {self.url}") from exc
            if updates:
                try:
                    with conn.transaction():  # a savepoint: undone when one misses
                        cur.executemany(_UPDATE_TASK, updates)
                        # task_id is unique: each update matches at most one row, so the
                        # total is the number of updates exactly when none missed
                        if cur.rowcount != len(updates):
                            raise _Missed
                except _Missed:
                    current = dict(
                        cur.execute(
                            "SELECT task_id, status_version FROM tasks WHERE task_id = ANY(%s)",
                            ([values[-2] for values in updates],),
                        ).fetchall()
                    )
                    for values in updates:
                        tid, expect = values[-2], values[-1]
                        now = current.get(tid)
                        if now is None or int(now) != expect:
                            raise ConcurrencyConflict(
                                tid, expect, None if now is None else int(now)
                            ) from None
                    raise ConcurrencyConflict(updates[0][-2], updates[0][-1], None) from None
            if trows:
                cur.executemany(_INSERT_TRANSITION, trows)
            if arows:
                cur.executemany(_UPSERT_ATTEMPT, arows)
            if erows:
                cur.executemany(_INSERT_EVENT, erows)
            if lrows:
                cur.executemany(_INSERT_LOG, lrows)
            if urows:
                cur.executemany(_TOUCH, urows)

    def get(self, task_id: str) -> TaskSnapshot | None:
        with self._read() as conn:
            cur = conn.execute(f"{_SELECT_TASK} WHERE task_id = %s", (task_id,))
            values = cur.fetchone()
            return None if values is None else codec.row_to_snapshot(_row(cur, values))

    def query(self, query: TaskQuery | None = None) -> list[TaskSnapshot]:
        q = query or TaskQuery()
        where, params = task_where(q, POSTGRES)
        sql = f"{_SELECT_TASK} {where} {task_order(q.order)}"
        if q.limit is not None:
            sql += " LIMIT %s"
            params.append(q.limit)
        with self._read() as conn:
            cur = conn.execute(sql, params)
            return [codec.row_to_snapshot(_row(cur, v)) for v in cur.fetchall()]

    def counts(self, query: TaskQuery | None = None) -> dict[TaskStatus, int]:
        where, params = task_where(query or TaskQuery(), POSTGRES)
        out = dict.fromkeys(TaskStatus, 0)
        with self._read() as conn:
            cur = conn.execute(
                f"SELECT status, COUNT(*) FROM tasks {where} GROUP BY status",
                params,
            )
            for status, n in cur.fetchall():
                out[TaskStatus(status)] = int(n)
        return out

    # ----------------------------------------------------------- history
    def append(self, transition: Transition) -> None:
        self.save_many([], [transition])

    def history(self, task_id: str, *, since_version: int = 0) -> list[Transition]:
        with self._read() as conn:
            cur = conn.execute(
                f"SELECT {_cols(codec.TRANSITION_COLUMNS)} FROM transitions "
                "WHERE task_id = %s AND version > %s ORDER BY version",
                (task_id, since_version),
            )
            return [codec.row_to_transition(_row(cur, v)) for v in cur.fetchall()]

    def save_attempt(self, attempt: AttemptRecord) -> None:
        self.save_many([], attempts=[attempt])

    def attempts(self, task_id: str) -> list[AttemptRecord]:
        with self._read() as conn:
            cur = conn.execute(
                f"SELECT {_cols(codec.ATTEMPT_COLUMNS)} FROM attempts "
                "WHERE task_id = %s ORDER BY attempt",
                (task_id,),
            )
            return [codec.row_to_attempt(_row(cur, v)) for v in cur.fetchall()]

    def clear_attempts(self, task_id: str) -> int:
        with self._write() as conn:
            return conn.execute("DELETE FROM attempts WHERE task_id = %s", (task_id,)).rowcount

    def append_logs(self, task_id: str, lines: Sequence[LogRecord]) -> None:
        if lines:
            self.record_batch(logs=[(task_id, lines)])

    def logs(
        self, task_id: str, *, limit: int | None = None, since: datetime | None = None
    ) -> list[LogRecord]:
        sql = "SELECT at, stream, line, level FROM logs WHERE task_id = %s"
        params: list[Any] = [task_id]
        if since is not None:
            sql += " AND at > %s"
            params.append(codec.utc(since, "since"))
        sql += " ORDER BY at DESC, seq DESC"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(max(0, limit))
        with self._read() as conn:
            cur = conn.execute(sql, params)
            rows = [codec.row_to_log(_row(cur, v)) for v in cur.fetchall()]
        rows.reverse()
        return rows

    def append_events(self, events: Sequence[EventRecord]) -> None:
        self.save_many([], events=events)

    def events(
        self,
        task_id: str | None = None,
        *,
        since: datetime | None = None,
        types: frozenset[str] | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        parts: list[str] = []
        params: list[Any] = []
        if task_id is not None:
            parts.append("task_id = %s")
            params.append(task_id)
        if since is not None:
            parts.append("at > %s")
            params.append(codec.utc(since, "since"))
        if types is not None:
            sql, p = POSTGRES.in_list("type", sorted(types))
            parts.append(sql)
            params += p
        where = ("WHERE " + " AND ".join(parts)) if parts else ""
        sql = f"SELECT {_cols(codec.EVENT_COLUMNS)} FROM events {where} ORDER BY at DESC, seq DESC"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(max(0, limit))
        with self._read() as conn:
            cur = conn.execute(sql, params)
            rows = [codec.row_to_event(_row(cur, v)) for v in cur.fetchall()]
        rows.reverse()
        return rows

    # ------------------------------------------------------ side channel
    def touch_many(self, touches: Sequence[Touch]) -> None:
        if touches:
            self.record_batch(touches=touches)

    # ---------------------------------------------------------- commands
    def submit_command(self, command: Command) -> None:
        row = codec.command_to_row(command)
        row.update(
            state=CommandState.PENDING.value,
            claimed_by=None,
            lease_until=None,
            completed_at=None,
            outcome=None,
        )
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO commands ({_cols(codec.COMMAND_COLUMNS)}) "
                f"VALUES ({_phs(codec.COMMAND_COLUMNS)}) ON CONFLICT (command_id) DO NOTHING",
                tuple(row[c] for c in codec.COMMAND_COLUMNS),
            )

    def claim_commands(
        self,
        *,
        owner: str,
        now: datetime,
        lease_seconds: float,
        limit: int = 50,
        task_ids: frozenset[str] | None = None,
    ) -> list[Command]:
        now_utc = codec.utc_req(now, "now")
        until = now_utc + timedelta(seconds=lease_seconds)
        cond = "(state = 'pending' OR (state = 'claimed' AND lease_until <= %s))"
        params: list[Any] = [now_utc]
        if task_ids is not None:
            sql, p = POSTGRES.in_list("task_id", sorted(task_ids))
            cond += f" AND {sql}"
            params += p
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE commands SET state = 'claimed', claimed_by = %s, lease_until = %s "
                f"WHERE seq IN (SELECT seq FROM commands WHERE {cond} ORDER BY seq LIMIT %s "
                f"FOR UPDATE SKIP LOCKED) RETURNING seq, {_cols(codec.COMMAND_COLUMNS)}",
                [owner, until, *params, max(0, limit)],
            )
            rows = [_row(cur, v) for v in cur.fetchall()]
        rows.sort(key=lambda r: r["seq"])
        return [codec.row_to_command(r) for r in rows]

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
        now_utc = codec.utc_req(now, "now")
        out = codec.dumps_obj(outcome, f"command {command_id} outcome")
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE commands SET state = %s, completed_at = %s, outcome = %s "
                "WHERE command_id = %s AND state IN ('pending', 'claimed')",
                (state.value, now_utc, out, command_id),
            )
            if cur.rowcount == 0:
                found = conn.execute(
                    "SELECT 1 FROM commands WHERE command_id = %s", (command_id,)
                ).fetchone()
                if found is None:
                    raise StoreError(f"no command with id {command_id!r} in {self.url}")

    def get_command(self, command_id: str) -> Command | None:
        with self._read() as conn:
            cur = conn.execute(
                f"SELECT {_cols(codec.COMMAND_COLUMNS)} FROM commands WHERE command_id = %s",
                (command_id,),
            )
            v = cur.fetchone()
            return None if v is None else codec.row_to_command(_row(cur, v))

    def commands(
        self, task_id: str | None = None, *, state: CommandState | None = None
    ) -> list[Command]:
        parts: list[str] = []
        params: list[Any] = []
        if task_id is not None:
            parts.append("task_id = %s")
            params.append(task_id)
        if state is not None:
            parts.append("state = %s")
            params.append(CommandState(state).value)
        where = ("WHERE " + " AND ".join(parts)) if parts else ""
        with self._read() as conn:
            cur = conn.execute(
                f"SELECT {_cols(codec.COMMAND_COLUMNS)} FROM commands {where} ORDER BY seq",
                params,
            )
            return [codec.row_to_command(_row(cur, v)) for v in cur.fetchall()]

    # ------------------------------------------------------------ owners
    def upsert_owner(self, owner: OwnerRecord) -> None:
        row = codec.owner_to_row(owner)
        with self._write() as conn:
            conn.execute(
                _upsert("owners", codec.OWNER_COLUMNS, ("owner_id",)),
                tuple(row[c] for c in codec.OWNER_COLUMNS),
            )

    def owners(self) -> list[OwnerRecord]:
        with self._read() as conn:
            cur = conn.execute(f"SELECT {_cols(codec.OWNER_COLUMNS)} FROM owners ORDER BY owner_id")
            return [codec.row_to_owner(_row(cur, v)) for v in cur.fetchall()]

    # -------------------------------------------------------------- runs
    def save_run(self, run: RunRecord) -> None:
        row = codec.run_to_row(run)
        with self._write() as conn:
            conn.execute(
                _upsert("runs", codec.RUN_COLUMNS, ("run_id",)),
                tuple(row[c] for c in codec.RUN_COLUMNS),
            )

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._read() as conn:
            cur = conn.execute(
                f"SELECT {_cols(codec.RUN_COLUMNS)} FROM runs WHERE run_id = %s",
                (run_id,),
            )
            v = cur.fetchone()
            return None if v is None else codec.row_to_run(_row(cur, v))

    def list_runs(self, limit: int | None = None) -> list[RunRecord]:
        sql = f"SELECT {_cols(codec.RUN_COLUMNS)} FROM runs ORDER BY created_at DESC"
        params: list[Any] = []
        if limit is not None:
            sql += " LIMIT %s"
            params.append(max(0, limit))
        with self._read() as conn:
            cur = conn.execute(sql, params)
            return [codec.row_to_run(_row(cur, v)) for v in cur.fetchall()]

    # --------------------------------------------------------------- ops
    def prune(self, *, keep_terminal: int) -> int:
        if keep_terminal < 0:
            raise ValueError(f"keep_terminal must be >= 0, got {keep_terminal}")
        with self._write() as conn:
            cur = conn.execute(
                "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks "
                f"WHERE status = ANY(%s) {task_order('newest')} OFFSET %s)",
                (_TERMINAL_VALUES, keep_terminal),
            )
            return int(cur.rowcount)

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (tests and teardown only)."""
        with self._write() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self._schema_name}" CASCADE')

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with suppress(psycopg.Error):
                self._conn.close()

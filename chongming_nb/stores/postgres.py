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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from chongming_nb.core.errors import StoreError
from chongming_nb.stores import _codec as codec
from chongming_nb.stores import _sql
from chongming_nb.stores._base import Batch, SqlStore, upsert
from chongming_nb.stores._schema import (
    CHANGED_INDEXES,
    DROPPED_INDEXES,
    check_version,
    ddl,
    migrate,
    stored_version,
)
from chongming_nb.stores._target import parse_target, redact, split_schema
from chongming_nb.stores.protocol import SCHEMA_VERSION

__all__ = ["MIGRATIONS", "PostgresStore"]

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: Schema migrations: target version -> statements that bring version-1 up to it.
MIGRATIONS: dict[int, list[str]] = {
    1: ddl(_sql.POSTGRES.types, 1),
    # version 2: the indexes (times were timestamptz already)
    2: [*(f"DROP INDEX {name}" for name in DROPPED_INDEXES), *CHANGED_INDEXES],
}
#: A new schema: the current tables at once.
FRESH: tuple[int, list[str]] = (2, ddl(_sql.POSTGRES.types, 2))


def _insert(table: str, columns: Sequence[str], tail: str = "") -> str:
    marks = ", ".join("%s" for _ in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}){tail}"


_INSERT_TASK = _insert("tasks", codec.TASK_COLUMNS)
_UPDATE_TASK = (
    f"UPDATE tasks SET {', '.join(f'{c} = %s' for c in codec.TASK_COLUMNS[1:])} "
    "WHERE task_id = %s AND status_version = %s"
)
_INSERT_TRANSITION = _insert("transitions", codec.TRANSITION_COLUMNS, " ON CONFLICT DO NOTHING")
_UPSERT_ATTEMPT = _sql.POSTGRES.q(upsert("attempts", codec.ATTEMPT_COLUMNS, ("task_id", "attempt")))
_INSERT_EVENT = _insert("events", codec.EVENT_COLUMNS, " ON CONFLICT (event_id) DO NOTHING")
_TOUCH = (
    "UPDATE tasks SET progress = COALESCE(%s, progress), "
    "last_heartbeat_at = COALESCE(%s, last_heartbeat_at), "
    "lease_owner = COALESCE(%s, lease_owner), lease_until = COALESCE(%s, lease_until), "
    "pid = COALESCE(%s, pid) WHERE task_id = %s"
)
_INSERT_LOG = _insert("logs", ("task_id", "at", "stream", "line", "level"))


class _Missed(Exception):
    """An update of a group commit matched no row (rolls its savepoint back)."""


class PostgresStore(SqlStore):
    """A ``TaskStore`` in a PostgreSQL schema."""

    dialect = _sql.POSTGRES
    driver_error = psycopg.Error

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
        self._url = target.display
        self._readonly = readonly
        self._conninfo, self._schema_name = split_schema(url, schema)
        if not _IDENT.match(self._schema_name):
            raise StoreError(
                f"postgres store {self._url}: schema name {self._schema_name!r} must "
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
        where = f"postgres store {self._url} (schema {self._schema_name})"
        return StoreError(redact(f"{where}: {what}{detail}", self._secrets))

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

    def _tables(self) -> set[str]:
        cur = self._conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (self._schema_name,),
        )
        return {r[0] for r in cur}

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
                tables = self._tables()
                version = migrate(
                    conn,
                    tables,
                    SCHEMA_VERSION,
                    MIGRATIONS,
                    self._fail,
                    "the schema holds tables of something else ({tables})",
                    fresh=FRESH,
                )
        except psycopg.Error as exc:
            raise self._fail("cannot read or migrate the schema", exc) from exc
        self._schema = version

    def _check_schema(self) -> None:
        """Read-only: the schema must hold this release's tables (nothing is created)."""
        try:
            if "chongming_schema" not in self._tables():
                raise StoreError(
                    f"no store at {self._url} (schema {self._schema_name} holds no "
                    "chongming tables)"
                )
            version = stored_version(self._conn)
        except psycopg.Error as exc:
            raise self._fail("cannot read the schema", exc) from exc
        check_version(version, SCHEMA_VERSION, self._fail, readonly=True)
        self._schema = version

    # ---------------------------------------------------------- plumbing
    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._schema_name

    def __repr__(self) -> str:
        return f"PostgresStore({self._url!r}, schema={self._schema_name!r})"

    def _t(self, value: datetime | None) -> datetime | None:
        return value  # a timestamptz takes the aware datetime itself

    def _usable(self, conn: psycopg.Connection[Any]) -> bool:
        return not (conn.closed or conn.broken)

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            conn = self._db()
            try:
                with conn.transaction():
                    yield conn
            except psycopg.Error as exc:
                raise self._fail("write failed", exc) from exc

    # ------------------------------------------------------------ writes
    def _record(self, batch: Batch) -> None:
        tx = safe = _sql.same_time
        creates, updates = _sql.task_rows(batch.items, tx, safe)
        trows = _sql.transition_rows(batch.transitions, tx, safe)
        arows = _sql.attempt_rows(batch.attempts, tx, safe)
        erows = _sql.event_rows(batch.events, tx, safe)
        lrows = [
            (tid, at, stream, line.replace("\x00", "\ufffd"), level)
            for tid, at, stream, line, level in _sql.log_rows(batch.logs, tx, safe)
        ]
        urows = _sql.touch_rows(batch.touches, tx, safe)
        clears = [(t,) for t in batch.clears]
        # one executemany per kind of row: psycopg pipelines them (no round trip per row)
        with self._write() as conn:
            cur = conn.cursor()
            if clears:
                cur.executemany("DELETE FROM attempts WHERE task_id = %s", clears)
            if creates:
                try:
                    with conn.transaction():  # a savepoint, so the error can be named
                        cur.executemany(_INSERT_TASK, creates)
                except pg_errors.UniqueViolation:
                    raise self._duplicate(conn, [values[0] for values in creates]) from None
            if updates:
                try:
                    with conn.transaction():  # a savepoint: undone when one misses
                        cur.executemany(_UPDATE_TASK, updates)
                        # task_id is unique: each update matches at most one row, so the
                        # total is the number of updates exactly when none missed
                        if cur.rowcount != len(updates):
                            raise _Missed
                except _Missed:
                    raise self._conflict(conn, updates) from None
            for sql, rows in (
                (_INSERT_TRANSITION, trows),
                (_UPSERT_ATTEMPT, arows),
                (_INSERT_EVENT, erows),
                (_INSERT_LOG, lrows),
                (_TOUCH, urows),
            ):
                if rows:
                    cur.executemany(sql, rows)

    # --------------------------------------------------------------- ops
    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (tests and teardown only)."""
        with self._write() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self._schema_name}" CASCADE')

"""The SQL stores' schema: the tables in each backend's column types, their indexes,
and the schema version's check and migrations (used by ``_base.SqlStore``'s backends)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from chongming_nb.stores.protocol import SCHEMA_VERSION

__all__ = [
    "CHANGED_INDEXES",
    "DROPPED_INDEXES",
    "Conn",
    "Cursor",
    "check_version",
    "ddl",
    "migrate",
    "stored_version",
    "table_columns",
    "tables",
]


class Cursor(Protocol):
    """What both drivers' cursors offer and the base uses."""

    @property
    def description(self) -> Any: ...
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """``sqlite3.Connection`` and ``psycopg.Connection`` alike."""

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...


def tables(types: Mapping[str, str]) -> list[str]:
    """The tables (the same columns in every schema version), in a backend's column
    types: ``seq`` (an auto-increasing integer key), ``int``, ``time``, ``bool`` and
    ``keyed`` (what follows the closing parenthesis of a table with a composite
    primary key)."""
    t = types
    return [
        "CREATE TABLE chongming_schema (version INTEGER NOT NULL)",
        f"""CREATE TABLE tasks (
            seq {t["seq"]},
            task_id TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            pipeline_run_id TEXT,
            tags TEXT NOT NULL,
            status TEXT NOT NULL,
            status_version {t["int"]} NOT NULL,
            requested_action TEXT,
            attempt {t["int"]} NOT NULL,
            max_attempts {t["int"]} NOT NULL,
            created_at {t["time"]},
            queued_at {t["time"]},
            started_at {t["time"]},
            ended_at {t["time"]},
            last_heartbeat_at {t["time"]},
            retry_at {t["time"]},
            progress TEXT,
            failure TEXT,
            outcome TEXT,
            executor TEXT,
            pid {t["int"]},
            priority {t["int"]} NOT NULL,
            deps TEXT NOT NULL,
            idempotency_key TEXT,
            bucket {t["int"]},
            bucket_key TEXT,
            lease_owner TEXT,
            lease_until {t["time"]},
            overridden {t["bool"]} NOT NULL
        )""",
        f"""CREATE TABLE transitions (
            task_id TEXT NOT NULL,
            version {t["int"]} NOT NULL,
            from_status TEXT NOT NULL,
            to_status TEXT NOT NULL,
            trigger TEXT NOT NULL,
            actor TEXT NOT NULL,
            reason TEXT,
            at {t["time"]} NOT NULL,
            override {t["bool"]} NOT NULL,
            PRIMARY KEY (task_id, version)
        ){t["keyed"]}""",
        f"""CREATE TABLE attempts (
            task_id TEXT NOT NULL,
            attempt {t["int"]} NOT NULL,
            started_at {t["time"]} NOT NULL,
            ended_at {t["time"]},
            outcome TEXT,
            failure_kind TEXT,
            failure_message TEXT,
            traceback TEXT,
            executor TEXT,
            abandoned {t["bool"]} NOT NULL,
            exit_code {t["int"]},
            PRIMARY KEY (task_id, attempt)
        ){t["keyed"]}""",
        f"""CREATE TABLE logs (
            seq {t["seq"]},
            task_id TEXT NOT NULL,
            at {t["time"]} NOT NULL,
            stream TEXT NOT NULL,
            line TEXT NOT NULL,
            level TEXT
        )""",
        f"""CREATE TABLE events (
            seq {t["seq"]},
            event_id TEXT NOT NULL UNIQUE,
            task_id TEXT,
            at {t["time"]} NOT NULL,
            type TEXT NOT NULL,
            payload TEXT NOT NULL
        )""",
        f"""CREATE TABLE commands (
            seq {t["seq"]},
            command_id TEXT NOT NULL UNIQUE,
            task_id TEXT NOT NULL,
            verb TEXT NOT NULL,
            args TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at {t["time"]},
            state TEXT NOT NULL,
            claimed_by TEXT,
            lease_until {t["time"]},
            completed_at {t["time"]},
            outcome TEXT
        )""",
        f"""CREATE TABLE owners (
            owner_id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid {t["int"]} NOT NULL,
            kernel_id TEXT,
            started_at {t["time"]} NOT NULL,
            heartbeat_at {t["time"]} NOT NULL
        )""",
        f"""CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at {t["time"]} NOT NULL,
            updated_at {t["time"]} NOT NULL,
            spec TEXT NOT NULL
        )""",
    ]


#: The indexes every schema version has.
_INDEXES = [
    "CREATE INDEX tasks_created ON tasks(created_at, seq)",
    "CREATE INDEX logs_task ON logs(task_id, at, seq)",
    "CREATE INDEX commands_state ON commands(state, seq)",
    "CREATE INDEX commands_task ON commands(task_id, seq)",
    "CREATE INDEX runs_created ON runs(created_at)",
]
#: The indexes of schema version 1 that version 2 changes.
_CHANGED_V1 = [
    "CREATE INDEX tasks_status ON tasks(status)",
    "CREATE INDEX tasks_run ON tasks(pipeline_run_id)",
    "CREATE INDEX tasks_bucket ON tasks(bucket)",
    "CREATE INDEX tasks_owner ON tasks(lease_owner)",
    "CREATE INDEX events_task ON events(task_id, at, seq)",
    "CREATE INDEX events_at ON events(at, seq)",
]
#: Their version 2 (see ``ddl``): a status filter reads its page in index
#: order; run and bucket are indexed only where set (most tasks have neither); the
#: owner's open tasks are found through the status index (``TaskQuery(owner=...,
#: status=NON_TERMINAL)`` is the one query by owner), so lease_owner has none; events
#: are read per task (a task has few; they are sorted by time once found), all of
#: them at once only by ``events()`` without a task, which sorts them: their time is
#: in no index.
CHANGED_INDEXES = [
    "CREATE INDEX tasks_status_created ON tasks(status, created_at, seq)",
    "CREATE INDEX tasks_run ON tasks(pipeline_run_id) WHERE pipeline_run_id IS NOT NULL",
    "CREATE INDEX tasks_bucket ON tasks(bucket) WHERE bucket IS NOT NULL",
    "CREATE INDEX events_task ON events(task_id, seq)",
]
#: The names of ``_CHANGED_V1`` (version 2 drops them, then makes ``CHANGED_INDEXES``).
DROPPED_INDEXES = [
    "tasks_status",
    "tasks_run",
    "tasks_bucket",
    "tasks_owner",
    "events_task",
    "events_at",
]


def ddl(types: Mapping[str, str], version: int = SCHEMA_VERSION) -> list[str]:
    """The tables and indexes of schema ``version`` (1 or 2) in a backend's column
    types (see ``tables``)."""
    changed = _CHANGED_V1 if version == 1 else CHANGED_INDEXES
    return [*tables(types), *changed, *_INDEXES]


def table_columns() -> dict[str, list[tuple[str, bool]]]:
    """Each table's columns in order, with whether the column holds a time (read off
    ``tables`` written with a marker for the time type)."""
    mark = "CHONGMING_TIME"
    out: dict[str, list[tuple[str, bool]]] = {}
    for stmt in tables(
        {"seq": "INTEGER", "int": "INTEGER", "time": mark, "bool": "INTEGER", "keyed": ""}
    ):
        head, _, body = stmt.partition("(")
        cols: list[tuple[str, bool]] = []
        for line in body.splitlines():
            words = line.replace(",", " ").replace(")", " ").split()
            if words and words[0] != "PRIMARY":
                cols.append((words[0], words[1] == mark))
        out[head.split()[-1]] = cols
    return out


def check_version(version: int, target: int, fail: Any, *, readonly: bool = False) -> None:
    """Refuse a schema newer than this release's (``target``), and, for reading only, an
    older one (reading never migrates). ``fail(message)`` makes the error."""
    if version > target:
        raise fail(
            f"has schema version {version}, newer than this release supports "
            f"({target}); upgrade chongming_nb"
        )
    if readonly and version < target:
        raise fail(
            f"has schema version {version}, older than this release's "
            f"({target}); open it once for writing (a controller) to upgrade"
        )


def stored_version(conn: Conn) -> int:
    """The schema version recorded in ``chongming_schema`` (0 when it holds none)."""
    row = conn.execute("SELECT MAX(version) FROM chongming_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def migrate(
    conn: Conn,
    tables: set[str],
    target: int,
    migrations: Mapping[int, Sequence[str]],
    fail: Any,
    foreign: str,
    fresh: tuple[int, Sequence[str]] | None = None,
) -> int:
    """Bring the schema of a database holding ``tables`` up to ``target`` inside the
    caller's transaction (``migrations[v]`` brings ``v - 1`` to ``v``; an empty database,
    version 0, is created by ``fresh``'s statements at its version when given, and
    migrated on from there); ``fail(message)`` makes the error for a schema newer than
    this release, and for a database that holds other tables (``foreign``, with
    ``{tables}`` in it). Returns the version reached."""
    if "chongming_schema" in tables:
        version = stored_version(conn)
    elif tables:
        raise fail(foreign.format(tables=", ".join(sorted(tables))) + "; refusing to touch it")
    else:
        version = 0
    check_version(version, target, fail)
    if version == 0 and fresh is not None and fresh[0] <= target:
        for stmt in fresh[1]:
            conn.execute(stmt)
        version = fresh[0]
        _stamp(conn, version)
    for step in range(version + 1, target + 1):
        for stmt in migrations[step]:
            conn.execute(stmt)
        _stamp(conn, step)
        version = step
    return version


def _stamp(conn: Conn, version: int) -> None:
    conn.execute("DELETE FROM chongming_schema")
    conn.execute("INSERT INTO chongming_schema (version) VALUES (" + str(version) + ")")

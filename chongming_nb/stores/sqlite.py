"""The SQLite store: the embedded default, safe from many threads and several processes.

* stdlib ``sqlite3`` in WAL mode with ``synchronous=NORMAL`` (a commit survives a
  process crash; a power cut may lose the last few commits, never corrupts);
* one connection per store instance guarded by a lock (per process: a forked child
  opens its own connection on first use); ``busy_timeout`` makes writers from other
  processes wait instead of failing;
* ``BEGIN IMMEDIATE`` for every write transaction, so claims and batches take the
  write lock up front and two processes never claim the same command;
* a ``chongming_schema`` table records the schema version; older files are migrated
  in place, a newer one is refused;
* a new file is created with mode 0600 (the -wal and -shm files inherit it), new
  directories with 0700; a file found readable by others is tightened with a
  ``StoreFileModeWarning`` (or refused when it cannot be);
* ``readonly=True`` opens the file with SQLite's ``mode=ro`` and never creates
  anything: a missing file is "no store at PATH"; ``create=False`` opens an existing
  file for writing without creating one.

Failures name the path: a file that is not a SQLite database (or is corrupt), a
directory that cannot be created or written, a database written by a newer release,
or a SQLite file that belongs to something else raise ``StoreError`` and nothing in
the file is changed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from itertools import chain
from pathlib import Path
from typing import Any
from urllib.parse import quote

from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import (
    AttemptRecord,
    TaskSnapshot,
    Transition,
)
from chongming_nb.stores import _codec as codec
from chongming_nb.stores import _sql
from chongming_nb.stores._base import Batch, SqlStore
from chongming_nb.stores._codec import encode
from chongming_nb.stores._schema import (
    check_version,
    ddl,
    migrate,
    stored_version,
    table_columns,
    tables,
)
from chongming_nb.stores.protocol import (
    SCHEMA_VERSION,
    SaveItem,
)

__all__ = ["MIGRATIONS", "SqliteStore", "StoreFileModeWarning"]

_HEADER = b"SQLite format 3\x00"
#: The files SQLite keeps beside the database in WAL mode.
_SIDE = ("-wal", "-shm")
#: The error for a database of other tables ({tables}: their names).
_FOREIGN = "is a SQLite database of something else (tables: {tables})"


class StoreFileModeWarning(UserWarning):
    """A store file was readable by other users and has been made private."""


def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents, each with mode 0700 (whatever the
    umask: ``mkdir(parents=True, mode=...)`` applies the mode to the last one only)."""
    missing: list[Path] = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)


#: Files (device, inode) this process holds SqliteStore connections on, with a count.
#: Closing *any* descriptor of a file drops every POSIX lock this process holds on it,
#: including the SHARED lock SQLite keeps in WAL mode; another process would then take
#: itself for the last connection and delete the WAL under our feet (later commits
#: lost). So the raw header check below runs only while no connection of ours is open.
_LIVE: dict[tuple[int, int], int] = {}
_LIVE_LOCK = threading.Lock()


def _bind_plainly() -> None:
    """sqlite3 binds exact int, float, str and bytes as they are, but sends any other
    value -- None and bool included -- through its adapter registry; a miss there
    raises and formats two AttributeErrors per value, the largest single cost of
    binding our rows. Adapters for None (itself) and bool (int) store exactly what
    sqlite3 stores without them (NULL; 0 or 1), without that cost. Process-wide; an
    adapter someone else registered first is kept."""
    # {}.get(None) is None: a C-level callable, cheaper than a Python identity function
    nothing: dict[Any, None] = {}
    if (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(type(None), nothing.get)
    if (bool, sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(bool, int)


_bind_plainly()


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


#: Kept per status by triggers, so the status counts (the sidebar's, on every poll)
#: read a handful of rows instead of every task.
_COUNTS = [
    "CREATE TABLE task_counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
    """CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks BEGIN
        INSERT INTO task_counts (status, n) VALUES (NEW.status, 1)
        ON CONFLICT (status) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
        UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
    END""",
    """CREATE TRIGGER task_counts_update AFTER UPDATE OF status ON tasks
    WHEN OLD.status IS NOT NEW.status BEGIN
        UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
        INSERT INTO task_counts (status, n) VALUES (NEW.status, 1)
        ON CONFLICT (status) DO UPDATE SET n = n + 1;
    END""",
]
#: Version 1 stored times as fixed-width ISO text (``codec.dt_to_text``).
_V1_TYPES = {**_sql.SQLITE.types, "time": "TEXT"}


def _to_v2() -> list[str]:
    """Version 1 -> 2: times become integer microseconds since the epoch (each table
    with a time is rebuilt: a column's type cannot change in place, and a TEXT column
    would turn the integers back into text), new task indexes, the status counts."""
    out: list[str] = []
    new = {stmt.split()[2]: stmt for stmt in tables(_sql.SQLITE.types)}
    for name, cols in table_columns().items():
        if not any(timed for _, timed in cols):
            continue
        names = ", ".join(c for c, _ in cols)
        values = ", ".join(_sql.text_micros(c) if timed else c for c, timed in cols)
        tmp = f"{name}__v2"
        out += [
            new[name].replace(f"CREATE TABLE {name} (", f"CREATE TABLE {tmp} (", 1),
            f"INSERT INTO {tmp} ({names}) SELECT {values} FROM {name}",
        ]
        if cols[0][0] == "seq":  # AUTOINCREMENT: never reuse a number handed out
            out += [
                f"DELETE FROM sqlite_sequence WHERE name = '{tmp}'",
                f"INSERT INTO sqlite_sequence (name, seq) "
                f"SELECT '{tmp}', seq FROM sqlite_sequence WHERE name = '{name}'",
            ]
        out += [f"DROP TABLE {name}", f"ALTER TABLE {tmp} RENAME TO {name}"]
    out += [stmt for stmt in ddl(_sql.SQLITE.types, 2) if stmt.startswith("CREATE INDEX")]
    out += _COUNTS
    out.append(
        "INSERT INTO task_counts (status, n) SELECT status, COUNT(*) FROM tasks GROUP BY status"
    )
    return out


#: Schema migrations: target version -> statements that bring version-1 up to it.
MIGRATIONS: dict[int, list[str]] = {1: ddl(_V1_TYPES, 1), 2: _to_v2()}
#: A new file: the current schema at once.
FRESH: tuple[int, list[str]] = (2, [*ddl(_sql.SQLITE.types, 2), *_COUNTS])


# ------------------------------------------------------------------ batch writes
#
# The recorder writes each batch from a thread that shares the GIL with the controller
# and the workers, so what it does in Python (and what sqlite3 does while binding
# values, which holds the GIL too) slows all of them. Two things keep a batch cheap:
#
# * few statement steps: sqlite3 releases the GIL for every step, and the recorder
#   then waits to take it back (up to the interpreter's switch interval, 5 ms, while
#   other threads run Python), so rows go many to a statement (``_SIZES``): thousands
#   of rows in a handful of steps;
# * little binding: sqlite3 binds an exact int, float, str or bytes directly but sends
#   None and bool through its adapter registry, at several times the cost. A task row
#   is mostly None; so are a transition's reason and an attempt's failure fields. A
#   row whose such columns are all at their usual value (None, or False for a flag)
#   binds only its other columns, and the statement has the usual values as literals
#   (``_usual_task``, ``_usual_transitions``, ``_usual_attempt``); any other row is
#   built by the shared, checking builders of ``_sql`` and binds every column.

#: Rows per statement, largest first; what is left after the smallest size goes one
#: row per step. 256 rows of 28 task columns stay far below SQLite's limit of 32766
#: parameters.
_SIZES = (256, 64, 16, 4)
#: ``(_known(id(t)) or _micros(t))[1]``: the stored value of a time (see ``_sql.TIMES``).
_known = _sql.TIMES.get
_micros = _sql.time_micros


class _Many:
    """A statement for any number of rows: ``build(n)`` writes it for ``n`` rows."""

    __slots__ = ("build", "statements")

    def __init__(self, build: Callable[[int], str]) -> None:
        self.build = build
        self.statements: dict[int, str] = {}

    def sql(self, n: int) -> str:
        got = self.statements.get(n)
        if got is None:
            got = self.statements[n] = self.build(n)
        return got

    def run(self, conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> int:
        """Execute ``rows`` in order, in few steps; how many rows they changed."""
        changed = 0
        i, n = 0, len(rows)
        for size in _SIZES:
            if n - i >= size:
                sql = self.sql(size)
                while n - i >= size:
                    changed += conn.execute(
                        sql, list(chain.from_iterable(rows[i : i + size]))
                    ).rowcount
                    i += size
        if i < n:
            changed += conn.executemany(self.sql(1), rows[i:]).rowcount
        return changed


def _literal(value: str | bool | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(int(value))


def _insert(
    head: str, bound: Sequence[str], literals: Mapping[str, str | bool | None] = {}
) -> _Many:
    """``head (<bound>, <literals>) VALUES (?, ..., <literal values>), ...`` (``head``
    is ``INSERT [OR ...] INTO table``)."""
    names = ", ".join([*bound, *literals])
    row = "(" + ", ".join(["?"] * len(bound) + [_literal(v) for v in literals.values()]) + ")"
    return _Many(lambda n: f"{head} ({names}) VALUES {', '.join([row] * n)}")


def _update(values: Sequence[str], assignments: str, where: str) -> _Many:
    """``UPDATE tasks SET <assignments> FROM (VALUES (...), ...) AS v WHERE <where>``,
    where ``{name}`` in ``assignments`` and ``where`` stands for the column of ``v``
    that holds the row's value ``name`` (rows are in the order of ``values``). Each row
    must match at most one task (task_id is unique; a batch updates a task once)."""
    refs = {name: f"v.column{k + 1}" for k, name in enumerate(values)}
    sets, cond = assignments.format_map(refs), where.format_map(refs)
    row = "(" + ", ".join("?" for _ in values) + ")"
    return _Many(
        lambda n: f"UPDATE tasks SET {sets} FROM (VALUES {', '.join([row] * n)}) AS v WHERE {cond}"
    )


#: Task columns with their usual value (see ``_usual_task``).
_TASK_USUAL: dict[str, str | bool | None] = {
    "pipeline_run_id": None,
    "requested_action": None,
    "retry_at": None,
    "progress": None,
    "failure": None,
    "pid": None,
    "idempotency_key": None,
    "bucket": None,
    "bucket_key": None,
    "lease_owner": None,
    "lease_until": None,
    "overridden": False,
}


def _usual_task(s: TaskSnapshot) -> tuple[Any, ...] | None:
    """The values ``s`` binds if its columns in ``_TASK_USUAL`` are at their usual
    values: those of the other columns (``_USUAL``), or fewer for a task that has not
    started (``_UNSTARTED``). Else None, and None whenever a value needs the checking
    builder."""
    if not (
        s.pipeline_run_id is None
        and s.requested_action is None
        and s.retry_at is None
        and s.progress is None
        and s.failure is None
        and s.pid is None
        and s.idempotency_key is None
        and s.bucket is None
        and s.bucket_key is None
        and s.lease_owner is None
        and s.lease_until is None
        and not s.overridden
    ):
        return None
    out, tags, deps = s.outcome, s.tags, s.deps
    if out is not None and out.__class__ is not dict:
        return None
    created, queued, started = s.created_at, s.queued_at, s.started_at
    ended, beat = s.ended_at, s.last_heartbeat_at
    # the columns of _UNSTARTED, in order; _USUAL has four more before the last three
    head = (
        s.task_id,
        s.name,
        encode(sorted(tags)) if tags else "[]",
        s.status._value_,
        s.status_version,
        s.attempt,
        s.max_attempts,
        (_known(id(created)) or _micros(created))[1],
        None if queued is None else (_known(id(queued)) or _micros(queued))[1],
    )
    tail = (s.executor, s.priority, encode(list(deps)) if deps else "[]")
    if started is None and ended is None and beat is None and out is None:
        return head + tail
    return (
        *head,
        None if started is None else (_known(id(started)) or _micros(started))[1],
        None if ended is None else (_known(id(ended)) or _micros(ended))[1],
        None if beat is None else (_known(id(beat)) or _micros(beat))[1],
        None if out is None else encode(out),
        *tail,
    )


_INSERT_TASK = _insert("INSERT INTO tasks", codec.TASK_COLUMNS)

#: task_id comes first in the columns: an update row (``_sql.task_rows``) is the row
#: without it, then task_id and the expected version.
_UPDATE_COLS = codec.TASK_COLUMNS[1:]
_UPDATE_VALUES = (*_UPDATE_COLS, "task_id", "expect")
_UPDATE_TASK = _update(
    _UPDATE_VALUES,
    ", ".join(f"{c} = {{{c}}}" for c in _UPDATE_COLS),
    "tasks.task_id = {task_id} AND tasks.status_version = {expect}",
)
#: Indexed columns that a task keeps from its creation on (almost always). The usual
#: update leaves them out of SET -- SQLite rewrites the entry of every index with a
#: column in SET, changed or not -- and requires them unchanged in WHERE instead, so
#: a row matches only when the narrow update leaves it exactly equal to the full one.
#: When not every row matches, the batch's updates are redone in full.
_KEPT = ("pipeline_run_id", "created_at", "bucket", "lease_owner")
_UPDATE_HOT = _update(
    _UPDATE_VALUES,
    ", ".join(f"{c} = {{{c}}}" for c in _UPDATE_COLS if c not in _KEPT),
    "tasks.task_id = {task_id} AND tasks.status_version = {expect}"
    + "".join(f" AND tasks.{c} IS {{{c}}}" for c in _KEPT),
)


class _UsualTasks:
    """The statements for task rows whose columns in ``literals`` are at those values
    (``_usual_task``): an insert of the other columns, and the narrow update
    (``_UPDATE_HOT``) whose rows are those values, then the expected version."""

    __slots__ = ("columns", "insert", "update")

    def __init__(self, literals: Mapping[str, str | bool | None]) -> None:
        self.columns = tuple(c for c in codec.TASK_COLUMNS if c not in literals)
        self.insert = _insert("INSERT INTO tasks", self.columns, literals)
        self.update = _update(
            (*self.columns, "expect"),
            ", ".join(
                [f"{c} = {{{c}}}" for c in self.columns if c not in _KEPT and c != "task_id"]
                + [f"{c} = {_literal(v)}" for c, v in literals.items() if c not in _KEPT]
            ),
            "tasks.task_id = {task_id} AND tasks.status_version = {expect}"
            + "".join(
                f" AND tasks.{c} IS {{{c}}}"
                if c in self.columns
                else f" AND tasks.{c} IS {_literal(literals[c])}"
                for c in _KEPT
            ),
        )


_USUAL = _UsualTasks(_TASK_USUAL)
_UNSTARTED = _UsualTasks(
    {
        **_TASK_USUAL,
        "started_at": None,
        "ended_at": None,
        "last_heartbeat_at": None,
        "outcome": None,
    }
)
#: ``len(_usual_task(...))`` -> its statements.
_USUAL_TASKS = {len(u.columns): u for u in (_USUAL, _UNSTARTED)}

_TRANSITION_USUAL: dict[str, str | bool | None] = {"reason": None, "override": False}
_INSERT_TRANSITION = _insert("INSERT OR IGNORE INTO transitions", codec.TRANSITION_COLUMNS)
_INSERT_USUAL_TRANSITION = _insert(
    "INSERT OR IGNORE INTO transitions",
    [c for c in codec.TRANSITION_COLUMNS if c not in _TRANSITION_USUAL],
    _TRANSITION_USUAL,
)
#: A kind of transition -- (from, to, trigger, actor) -- is one of few (the
#: controller's state changes), so a kind with at least ``_KIND_ROWS`` rows in a batch
#: gets statements with its values as literals, and its rows bind only (task_id,
#: version, at). The other rows bind all their values (``_INSERT_USUAL_TRANSITION``).
#: Past ``_MAX_KINDS`` kinds the statements are dropped and made again as needed.
TransitionKind = tuple[str, str, str, str]
_KINDS: dict[TransitionKind, _Many] = {}
_MAX_KINDS = 32
_KIND_ROWS = 8


def _kind_insert(kind: TransitionKind) -> _Many | None:
    if not all(v.__class__ is str and "\x00" not in v for v in kind):
        return None
    if len(_KINDS) >= _MAX_KINDS:
        _KINDS.clear()
    literals = dict(zip(("from_status", "to_status", "trigger", "actor"), kind, strict=True))
    many = _KINDS[kind] = _insert(
        "INSERT OR IGNORE INTO transitions",
        ("task_id", "version", "at"),
        {**literals, **_TRANSITION_USUAL},
    )
    return many


def _usual_transitions(
    transitions: Sequence[Transition],
) -> tuple[list[tuple[_Many, list[tuple[Any, ...]]]], list[Transition]]:
    """(the transitions without a reason or override as statements with the rows they
    write; the other transitions, for the checking builder)."""
    kinds: dict[TransitionKind, list[tuple[Any, ...]]] = {}
    get = kinds.get
    other: list[Transition] = []
    for t in transitions:
        if t.reason is None and not t.override:
            try:
                at = (_known(id(t.at)) or _micros(t.at))[1]  # NotUtc for None
                kind = (t.from_status._value_, t.to_status._value_, t.trigger, t.actor)
            except Exception:  # the checking builder names what is wrong
                other.append(t)
                continue
            rows = get(kind)
            if rows is None:
                rows = kinds[kind] = []
            rows.append((t.task_id, t.version, at))
        else:
            other.append(t)
    out: list[tuple[_Many, list[tuple[Any, ...]]]] = []
    for kind, rows in kinds.items():
        many = (_KINDS.get(kind) or _kind_insert(kind)) if len(rows) >= _KIND_ROWS else None
        if many is None:
            out.append((_INSERT_USUAL_TRANSITION, [(r[0], r[1], *kind, r[2]) for r in rows]))
        else:
            out.append((many, rows))
    return out, other


_ATTEMPT_USUAL: dict[str, str | bool | None] = {
    "failure_kind": None,
    "failure_message": None,
    "traceback": None,
    "abandoned": False,
    "exit_code": None,
}
_UPSERT_ATTEMPT = _insert("INSERT OR REPLACE INTO attempts", codec.ATTEMPT_COLUMNS)
_UPSERT_USUAL_ATTEMPT = _insert(
    "INSERT OR REPLACE INTO attempts",
    [c for c in codec.ATTEMPT_COLUMNS if c not in _ATTEMPT_USUAL],
    _ATTEMPT_USUAL,
)


def _usual_attempt(a: AttemptRecord) -> tuple[Any, ...] | None:
    """``a`` in the columns of ``_UPSERT_USUAL_ATTEMPT`` if it has no failure and no
    exit code and was not abandoned, else None."""
    if (
        a.failure_kind is None
        and a.failure_message is None
        and a.traceback is None
        and not a.abandoned
        and a.exit_code is None
    ):
        started, ended, outcome = a.started_at, a.ended_at, a.outcome
        return (
            a.task_id,
            a.attempt,
            (_known(id(started)) or _micros(started))[1],  # NotUtc for None
            None if ended is None else (_known(id(ended)) or _micros(ended))[1],
            None if outcome is None else outcome._value_,
            a.executor,
        )
    return None


_INSERT_EVENT = _insert("INSERT OR IGNORE INTO events", codec.EVENT_COLUMNS)
_INSERT_LOG = _insert("INSERT INTO logs", ("task_id", "at", "stream", "line", "level"))


class _BatchRows:
    """The rows of one ``record_batch``, built before its transaction: task creates as
    runs of one statement each (in order: rowid order is creation order), updates of
    usual rows (``_usual_task`` values, then the expected version) and of other rows
    (``_sql.task_rows`` update rows) with the items they come from, then the other
    kinds of rows, usual ones apart."""

    __slots__ = (
        "attempts",
        "creates",
        "events",
        "kinds",
        "logs",
        "safe",
        "saved",
        "touches",
        "transitions",
        "tx",
        "updates",
        "usual_attempts",
        "usual_updates",
    )

    def __init__(self, batch: Batch) -> None:
        self.tx = tx = _sql.micros_times()
        self.safe = safe = codec.dt_to_micros
        creates: list[tuple[_Many, list[tuple[Any, ...]]]] = []
        usual_updates: dict[_Many, list[tuple[Any, ...]]] = {}
        updates: list[tuple[Any, ...]] = []
        saved: list[SaveItem] = []
        for snap, expect in _sql.collapse(batch.items):
            try:
                core = _usual_task(snap)
            except Exception:  # the checking builder names what is wrong
                core = None
            if expect is not None:
                saved.append((snap, expect))
                if core is None:
                    row = _sql.task_row(snap, tx, safe)
                    updates.append((*row[1:], row[0], expect))
                else:
                    update = _USUAL_TASKS[len(core)].update
                    rows = usual_updates.get(update)
                    if rows is None:
                        rows = usual_updates[update] = []
                    rows.append((*core, expect))
                continue
            many = _INSERT_TASK if core is None else _USUAL_TASKS[len(core)].insert
            if not creates or creates[-1][0] is not many:
                creates.append((many, []))
            creates[-1][1].append(_sql.task_row(snap, tx, safe) if core is None else core)
        self.creates, self.saved = creates, saved
        self.usual_updates, self.updates = usual_updates, updates
        self.kinds, other = _usual_transitions(batch.transitions)
        self.transitions = _sql.transition_rows(other, tx, safe) if other else []
        self.usual_attempts: list[tuple[Any, ...]] = []
        self.attempts: list[tuple[Any, ...]] = []
        for a in batch.attempts:
            try:
                arow = _usual_attempt(a)
            except Exception:  # the checking builder names what is wrong
                arow = None
            if arow is None:
                self.attempts.append(_sql.attempt_row(a, tx, safe))
            else:
                self.usual_attempts.append(arow)
        self.events = _sql.event_rows(batch.events, tx, safe)
        self.logs = _sql.log_rows(batch.logs, tx, safe)
        self.touches = _sql.touch_rows(batch.touches, tx, safe)


_TOUCH_COLUMNS = ("progress", "last_heartbeat_at", "lease_owner", "lease_until", "pid")


def _touch(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Touch rows (one per task, see ``_sql.touch_rows``), each as an UPDATE of only its
    given columns: a column in SET costs its index entries a rewrite even when the
    value stays (``lease_owner`` is indexed, and most touches are progress or beats)."""
    shapes: dict[tuple[bool, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        key = tuple(v is not None for v in row[:-1])
        if any(key):
            shapes.setdefault(key, []).append(tuple(v for v in row if v is not None))
    for key, params in shapes.items():
        cols = ", ".join(f"{c} = ?" for c, given in zip(_TOUCH_COLUMNS, key, strict=True) if given)
        conn.executemany(f"UPDATE tasks SET {cols} WHERE task_id = ?", params)


class SqliteStore(SqlStore):
    """A ``TaskStore`` in one SQLite file. ``path`` may be ``~``-relative."""

    dialect = _sql.SQLITE
    _counted = True
    driver_error = sqlite3.Error

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        readonly: bool = False,
        create: bool = True,
    ) -> None:
        self._path = Path(path).expanduser().absolute()
        self._url = f"sqlite://{self._path}"
        self._timeout = timeout
        self._readonly = readonly
        self._lock = threading.RLock()
        self._closed = False
        self._schema = 0
        if readonly or not create:
            self._check_existing()
        else:
            self._prepare_file()
        self._pid = os.getpid()
        self._conn = self._connect()
        try:
            if readonly:
                self._check_schema()
            else:
                self._migrate()
            # only a file known to be ours (a foreign database is left as it was)
            self._tighten(strict=not readonly)
        except BaseException:
            self._conn.close()
            raise
        self._key = _file_key(self._path)
        if self._key is not None:
            with _LIVE_LOCK:
                _LIVE[self._key] = _LIVE.get(self._key, 0) + 1

    # ------------------------------------------------------------ opening
    def _fail(self, what: str, exc: BaseException | None = None) -> StoreError:
        detail = f": {exc}" if exc is not None else ""
        return StoreError(f"sqlite store {self._path}: {what}{detail}")

    def _fail_reading(self, what: str, exc: sqlite3.Error) -> StoreError:
        """``_fail(what + " (corrupt?)")``, unless the driver said the file is locked or
        busy: then the error says so, and how long it was waited on -- a locked store
        is not a damaged one."""
        text = str(exc).lower()
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return self._fail(
                f"{what}: the database is locked by another connection or process"
                f" (waited {self._timeout:g}s); try again when it is done"
            )
        return self._fail(f"{what} (corrupt?)", exc)

    def _prepare_file(self) -> None:
        path = self._path
        parent = path.parent
        if path.is_dir():
            raise self._fail("is a directory, not a database file")
        if not parent.exists():
            try:
                _make_private_dirs(parent)
            except OSError as exc:
                raise self._fail(f"cannot create directory {parent}", exc) from exc
        if not parent.is_dir():
            raise self._fail(f"{parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise self._fail(f"directory {parent} is not writable")
        if path.exists():
            header = self._header()
            if header and header != _HEADER:
                raise self._fail("is not a SQLite database (corrupt or foreign file); left as is")
            return
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except FileExistsError:
            return
        except OSError as exc:
            raise self._fail("cannot create the file", exc) from exc
        try:
            os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
        finally:
            os.close(fd)

    def _header(self) -> bytes | None:
        """The first bytes of the existing file (b"" for an empty one); None when SQLite
        has it open in this process already (no raw open/close of a live file)."""
        with _LIVE_LOCK:
            if _LIVE.get(_file_key(self._path) or (-1, -1)):
                return None
        try:
            with self._path.open("rb") as fh:
                return fh.read(len(_HEADER))
        except OSError as exc:
            raise self._fail("cannot read the file", exc) from exc

    def _check_existing(self) -> None:
        """Opening without creating (read-only, or ``create=False``): the file must be
        there and be a SQLite file; nothing is created, not even a directory."""
        path = self._path
        if path.is_dir():
            raise self._fail("is a directory, not a database file")
        if not path.exists():
            raise StoreError(f"no store at {path}")
        header = self._header()
        if header is not None and header != _HEADER:
            if not header:
                raise StoreError(f"no store at {path} (the file is empty)")
            raise self._fail("is not a SQLite database (corrupt or foreign file); left as is")

    def _tighten(self, *, strict: bool) -> None:
        """The database, its -wal and its -shm are 0600: a file found looser (e.g.
        created by hand, or by an older release under a lax umask) is tightened, with
        a warning. One that cannot be tightened (another user's) is refused for
        writing (``strict``) and only warned about for reading."""
        for f in (self._path, *(self._path.with_name(self._path.name + s) for s in _SIDE)):
            try:
                mode = f.stat().st_mode & 0o777
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._fail(f"cannot inspect {f}", exc) from exc
            if mode & 0o077 == 0:
                continue
            try:
                os.chmod(f, mode & 0o700)
            except OSError as exc:
                problem = (
                    f"{f} has mode {mode:04o} (readable by other users) and cannot be "
                    "made private; fix it with chmod 600"
                )
                if strict:
                    raise self._fail(problem, exc) from exc
                warnings.warn(problem, StoreFileModeWarning, stacklevel=3)
                continue
            warnings.warn(
                f"chongming store file {f} had mode {mode:04o}; tightened to "
                f"{mode & 0o700:04o} (task data is private to its user)",
                StoreFileModeWarning,
                stacklevel=3,
            )

    def _connect(self) -> sqlite3.Connection:
        try:
            if self._readonly:
                conn = sqlite3.connect(
                    f"file:{quote(str(self._path))}?mode=ro",
                    uri=True,
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                    cached_statements=256,
                )
            else:
                conn = sqlite3.connect(
                    str(self._path),
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                    cached_statements=256,
                )
        except sqlite3.Error as exc:
            raise self._fail("cannot open", exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
            if self._readonly:
                return conn  # the journal mode is the writer's business
            if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
                # a new file gives deleted pages back on purge (set on an existing file
                # it would rewrite the header and change nothing else)
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise self._fail(f"could not switch to WAL (journal_mode={mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            conn.close()
            raise self._fail_reading("cannot open", exc) from exc
        except StoreError:
            conn.close()
            raise
        return conn

    def _tables(self) -> set[str]:
        cur = self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        return {r[0] for r in cur}

    def _check_schema(self) -> None:
        """Read-only: the file must hold this release's schema (nothing is migrated)."""
        try:
            tables = self._tables()
            if "chongming_schema" not in tables:
                if tables:
                    raise self._fail(_FOREIGN.format(tables=", ".join(sorted(tables))))
                raise StoreError(f"no store at {self._path} (the database has no tables)")
            version = stored_version(self._conn)
        except sqlite3.Error as exc:
            raise self._fail_reading("cannot read the schema", exc) from exc
        check_version(version, SCHEMA_VERSION, self._fail, readonly=True)
        self._schema = version

    def _migrate(self) -> None:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                tables = self._tables()
                version = migrate(
                    conn, tables, SCHEMA_VERSION, MIGRATIONS, self._fail, _FOREIGN, fresh=FRESH
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._fail_reading("cannot read or migrate the schema", exc) from exc
        self._schema = version

    # ------------------------------------------------------------ plumbing
    @property
    def path(self) -> Path:
        return self._path

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r})"

    def _t(self, value: datetime | None) -> int | None:
        return codec.dt_to_micros(value)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._db()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._fail("cannot begin a write", exc) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._fail("write failed", exc) from exc
                raise

    # ------------------------------------------------------------ snapshots
    def _record(self, batch: Batch) -> None:
        rows = _BatchRows(batch)
        with self._write() as conn:
            if batch.clears:
                conn.executemany(
                    "DELETE FROM attempts WHERE task_id = ?", [(t,) for t in batch.clears]
                )
            if rows.creates:
                self._insert_tasks(conn, rows.creates)
            if rows.saved:
                self._update_tasks(conn, rows)
            for many, part in (
                *rows.kinds,
                (_INSERT_TRANSITION, rows.transitions),
                (_UPSERT_USUAL_ATTEMPT, rows.usual_attempts),
                (_UPSERT_ATTEMPT, rows.attempts),
                (_INSERT_EVENT, rows.events),
                (_INSERT_LOG, rows.logs),
            ):
                if part:
                    many.run(conn, part)
            if rows.touches:
                _touch(conn, rows.touches)

    def _insert_tasks(
        self, conn: sqlite3.Connection, runs: list[tuple[_Many, list[tuple[Any, ...]]]]
    ) -> None:
        conn.execute("SAVEPOINT chongming_creates")
        try:
            for many, rows in runs:
                many.run(conn, rows)
        except sqlite3.IntegrityError:
            # undo the rows inserted before the failing one, then name it
            conn.execute("ROLLBACK TO chongming_creates")
            raise self._duplicate(conn, [row[0] for _, rows in runs for row in rows]) from None
        conn.execute("RELEASE chongming_creates")

    def _update_tasks(self, conn: sqlite3.Connection, rows: _BatchRows) -> None:
        conn.execute("SAVEPOINT chongming_updates")
        # task_id is unique: each update matches at most one row, so the total is the
        # number of updates exactly when every one of them matched
        changed = 0
        for update, usual in rows.usual_updates.items():
            changed += update.run(conn, usual)
        if rows.updates:
            changed += _UPDATE_HOT.run(conn, rows.updates)
        if changed == len(rows.saved):
            conn.execute("RELEASE chongming_updates")
            return
        # a kept column changed or a version missed: redo them all in full
        conn.execute("ROLLBACK TO chongming_updates")
        updates = []
        for snap, expect in rows.saved:
            row = _sql.task_row(snap, rows.tx, rows.safe)
            updates.append((*row[1:], row[0], expect))
        if _UPDATE_TASK.run(conn, updates) != len(updates):
            # undo them and name the first that does not match (the write lock is
            # ours, nobody changes a version meanwhile)
            conn.execute("ROLLBACK TO chongming_updates")
            raise self._conflict(conn, updates)
        conn.execute("RELEASE chongming_updates")

    def _reclaim(self) -> None:
        """After a purge: free pages go back to the file system when the file was
        created with ``auto_vacuum = INCREMENTAL`` (every file this release creates);
        in an older file they stay free inside it and are reused by later writes."""
        with self._lock:
            conn = self._db()
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
                # run to completion (one execute() step frees a single page)
                conn.executescript("PRAGMA incremental_vacuum")

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` ("ok" when the file is sound)."""
        with self._read() as conn:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
            return "\n".join(str(r[0]) for r in rows)

    def _closed_hook(self) -> None:
        if self._key is not None:
            with _LIVE_LOCK:
                left = _LIVE.get(self._key, 0) - 1
                if left > 0:
                    _LIVE[self._key] = left
                else:
                    _LIVE.pop(self._key, None)

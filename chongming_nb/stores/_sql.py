"""What the SQLite and PostgreSQL backends share: SQL text (two small dialects), the
group-commit collapse, and the rows they write."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import AttemptRecord, TaskSnapshot, Transition
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores import _codec as codec
from chongming_nb.stores._codec import encode
from chongming_nb.stores.protocol import (
    EventRecord,
    LogRecord,
    SaveItem,
    TaskQuery,
    Touch,
    fold_ascii,
)


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a backend spells what its SQL does not share. Shared SQL is written with
    ``?`` placeholders; ``q`` turns it into the backend's own."""

    name: str
    #: appended to the claim's inner SELECT (PostgreSQL locks the rows it claims)
    claim_lock: str
    #: LIMIT without a limit, for ``OFFSET`` alone
    no_limit: str
    #: column types for ``_schema.ddl``
    types: Mapping[str, str]

    def q(self, sql: str) -> str:
        """``sql`` with the backend's placeholders (psycopg: ``%s``, and ``%%`` for %)."""
        if self.name == "sqlite":
            return sql
        got = _PG_SQL.get(sql)
        if got is None:
            if len(_PG_SQL) > 1024:
                _PG_SQL.clear()
            got = _PG_SQL[sql] = sql.replace("%", "%%").replace("?", "%s")
        return got

    def in_list(self, column: str, values: list[Any]) -> tuple[str, list[Any]]:
        if self.name == "sqlite":
            return f"{column} IN (SELECT value FROM json_each(?))", [json.dumps(values)]
        return f"{column} = ANY(?)", [values]

    def has_tag(self) -> str:
        if self.name == "sqlite":
            return "EXISTS (SELECT 1 FROM json_each(tasks.tags) WHERE value = ?)"
        return "(tasks.tags::jsonb @> jsonb_build_array(?::text))"

    def micros(self, column: str) -> str:
        """A stored time as integer microseconds since the epoch (NULL stays NULL)."""
        if self.name == "sqlite":  # stored so
            return column
        return f"CAST(EXTRACT(EPOCH FROM {column}) * 1000000 AS BIGINT)"

    def json_field(self, column: str, key: str) -> str:
        """A field of a JSON text column, NULL where the text is not strict JSON (NaN
        in a progress; see ``json_raw``). PostgreSQL leaves them all to ``json_raw``."""
        if self.name == "sqlite":
            return f"CASE WHEN json_valid({column}) THEN json_extract({column}, '$.{key}') END"
        return "NULL"

    def json_raw(self, column: str) -> str:
        """The JSON text that ``json_field`` could not read (decoded in Python)."""
        if self.name == "sqlite":
            return f"CASE WHEN NOT json_valid({column}) THEN {column} END"
        return column

    def oldest_first(self, table: str) -> str:
        """Oldest task first, ties by creation order, undated first: the reverse of the
        newest-first order (SQLite sorts NULL first ascending; PostgreSQL is told)."""
        nulls = "" if self.name == "sqlite" else " NULLS FIRST"
        return f"{table}.created_at{nulls}, {table}.seq"

    def prefix(self) -> str:
        """SQL for ``name starts with prefix``; it takes (len, prefix)."""
        if self.name == "sqlite":
            return "substr(name, 1, ?) = ?"
        return "left(name, ?) = ?"

    def contains(self) -> str:
        """SQL for ``name or task id contains text``, ASCII capitals folded (as
        ``protocol.fold_ascii``); it takes (folded text, folded text)."""
        if self.name == "sqlite":  # SQLite's lower() folds ASCII letters only
            return "(instr(lower(name), ?) > 0 OR instr(lower(task_id), ?) > 0)"
        fold = "'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'"
        return (
            f"(strpos(translate(name, {fold}), ?) > 0 OR strpos(translate(task_id, {fold}), ?) > 0)"
        )


_PG_SQL: dict[str, str] = {}
_FINISHED = sorted(s.value for s in TERMINAL)
#: seconds since the epoch of a SQLite time text (unixepoch is SQLite 3.38+)
_EPOCH = (
    "unixepoch({})"
    if sqlite3.sqlite_version_info >= (3, 38)
    else "CAST(strftime('%s', {}) AS INTEGER)"
)


def text_micros(column: str) -> str:
    """SQLite: the fixed-width UTC text of a time (schema version 1, ``dt_to_text``)
    as integer microseconds since the epoch: seconds, then the fraction."""
    return (
        f"({_EPOCH.format(f'substr({column}, 1, 19)')} * 1000000"
        f" + CAST(substr({column}, 21, 6) AS INTEGER))"
    )


SQLITE = Dialect(
    "sqlite",
    claim_lock="",
    no_limit="-1",
    types={
        "seq": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "int": "INTEGER",
        "time": "INTEGER",
        "bool": "INTEGER",
        "keyed": " WITHOUT ROWID",
    },
)
POSTGRES = Dialect(
    "postgres",
    claim_lock=" FOR UPDATE SKIP LOCKED",
    no_limit="ALL",
    types={
        "seq": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "int": "BIGINT",
        "time": "TIMESTAMPTZ",
        "bool": "BOOLEAN",
        "keyed": "",
    },
)


def task_where(q: TaskQuery, d: Dialect) -> tuple[str, list[Any]]:
    """The WHERE clause (possibly empty, ``?`` placeholders) and its parameters for ``q``."""
    parts: list[str] = []
    params: list[Any] = []
    if q.status is not None:
        if len(q.status) == 1:  # the (status, created_at, seq) index reads it in order
            parts.append("status = ?")
            params.append(TaskStatus(next(iter(q.status))).value)
        else:
            sql, p = d.in_list("status", sorted(s.value for s in q.status))
            parts.append(sql)
            params += p
    if q.tag is not None:
        parts.append(d.has_tag())
        params.append(q.tag)
    if q.name_prefix is not None:
        parts.append(d.prefix())
        params += [len(q.name_prefix), q.name_prefix]
    if q.text is not None:
        parts.append(d.contains())
        params += [fold_ascii(q.text)] * 2
    if q.pipeline_run_id is not None:
        parts.append("pipeline_run_id = ?")
        params.append(q.pipeline_run_id)
    if q.owner is not None:
        parts.append("lease_owner = ?")
        params.append(q.owner)
    if q.owners is not None:
        sql, p = d.in_list("lease_owner", sorted(q.owners))
        parts.append(sql)
        params += p
    if q.buckets is not None:
        sql, p = d.in_list("bucket", sorted(q.buckets))
        parts.append(sql)
        params += p
    if q.ids is not None:
        sql, p = d.in_list("task_id", sorted(q.ids))
        parts.append(sql)
        params += p
    return ("WHERE " + " AND ".join(parts)) if parts else "", params


def purge_statuses(status: frozenset[TaskStatus] | None) -> list[str]:
    """The terminal statuses a purge may delete (all of them by default); a live one is
    refused by name."""
    if status is None:
        return _FINISHED
    live = sorted(TaskStatus(s).value for s in status if TaskStatus(s) not in TERMINAL)
    if live:
        raise StoreError(
            f"purge deletes finished tasks only; {', '.join(live)} is not finished "
            f"(finished: {', '.join(_FINISHED)})"
        )
    return sorted(TaskStatus(s).value for s in status)


def task_order(order: str, d: Dialect | None = None) -> str:
    """Newest (or oldest) first by created_at, ties by creation order, undated last.
    SQLite sorts NULL last descending by itself: newest first there reads the
    (created_at, seq) index backwards instead of sorting every row."""
    direction = "DESC" if order == "newest" else "ASC"
    if d is not None and d.name == "sqlite" and order == "newest":
        return "ORDER BY created_at DESC, seq DESC"
    return f"ORDER BY (created_at IS NULL), created_at {direction}, seq {direction}"


def collapse(items: Sequence[SaveItem]) -> list[tuple[TaskSnapshot, int | None]]:
    """Group commit: several items for one task in a batch become one write of the last
    snapshot, expecting the first item's version (or a create). A chain whose links do
    not follow (item k expects another version than item k-1 wrote) is a conflict."""
    chains: dict[str, list[Any]] = {}
    for snap, expect in items:
        chain = chains.get(snap.task_id)
        if chain is None:
            chains[snap.task_id] = [snap, expect]
            continue
        staged: TaskSnapshot = chain[0]
        if expect is None or expect != staged.status_version:
            if expect is None:
                raise StoreError(f"task {snap.task_id} is created twice in one batch")
            raise ConcurrencyConflict(snap.task_id, expect, staged.status_version)
        chain[0] = snap
    return [(c[0], c[1]) for c in chains.values()]


# ------------------------------------------------------------------ row building
#
# Both SQL backends write the same rows: tuples in the column order of
# ``codec.*_COLUMNS``. They differ only in how a time is stored, given as ``tx``: SQLite
# stores integer microseconds since the epoch (``micros_times()``), PostgreSQL the aware
# datetime itself (``same_time``). A ``tx`` accepts only None or an aware UTC
# ``datetime`` (the common case) and raises ``NotUtc`` otherwise (so does ``_req`` for
# a required time that is None); the builders then validate the record through the
# codec (a naive, non-datetime or missing time is a StoreError naming the field; another
# zone is converted to UTC) and build the row with ``safe`` instead.

Times = Callable[[Any], Any]
X = TypeVar("X")


class NotUtc(Exception):
    """A time that is not None or an aware UTC datetime (the slow path handles it)."""


_EPOCH_UTC = codec.EPOCH
_US = codec.MICROSECOND

#: The SQLite value (integer microseconds since the epoch) of datetime objects written
#: lately, by ``id``: a task's times recur in its snapshot, transitions, attempt and
#: events as the same objects, and in the next batches again. Keyed by identity,
#: which is cheap, unlike hashing an aware datetime; each entry holds its object, so
#: no id is reused while the entry lives (and a hit is the very object). Emptied by
#: ``micros_times`` past ``_MAX_TIMES``.
TIMES: dict[int, tuple[datetime, int]] = {}
_MAX_TIMES = 32768


def time_micros(value: Any) -> tuple[datetime, int]:
    """``(value, codec.dt_to_micros(value))`` for an aware UTC datetime (``NotUtc`` for
    anything else), kept in ``TIMES``. ``(TIMES.get(id(t)) or time_micros(t))[1]`` is
    the value of ``t`` without a Python call when it was written lately."""
    if value.__class__ is not datetime or value.tzinfo is not UTC:
        raise NotUtc
    entry = TIMES[id(value)] = (value, (value - _EPOCH_UTC) // _US)
    return entry


def micros_times() -> Times:
    """SQLite's ``tx`` for one batch: None stays None, a datetime's value comes from
    ``TIMES`` or ``time_micros``."""
    if len(TIMES) > _MAX_TIMES:
        TIMES.clear()  # between batches: a batch's own times stay while it is built
    get = TIMES.get

    def tx(value: Any) -> int | None:
        if value is None:
            return None
        return (get(id(value)) or time_micros(value))[1]

    return tx


def same_time(value: Any) -> Any:
    """PostgreSQL's ``tx``: the datetime itself (timestamptz)."""
    if value is None or (value.__class__ is datetime and value.tzinfo is UTC):
        return value
    raise NotUtc


def _status(value: Any) -> str:
    return value._value_ if value.__class__ is TaskStatus else TaskStatus(value).value


def _task_row(s: TaskSnapshot, tx: Times) -> tuple[Any, ...]:
    tags, deps, ra, out = s.tags, s.deps, s.requested_action, s.outcome
    return (
        s.task_id,
        s.name,
        s.pipeline_run_id,
        encode(sorted(tags)) if tags else "[]",
        _status(s.status),
        s.status_version,
        None if ra is None else ra.value,
        s.attempt,
        s.max_attempts,
        tx(s.created_at),
        tx(s.queued_at),
        tx(s.started_at),
        tx(s.ended_at),
        tx(s.last_heartbeat_at),
        tx(s.retry_at),
        None if s.progress is None else codec.progress_to_json(s.progress, s.task_id),
        None if s.failure is None else codec.failure_to_json(s.failure),
        None
        if out is None
        else encode(out)
        if out.__class__ is dict
        else codec.dumps_obj(out, f"task {s.task_id}: outcome"),
        s.executor,
        s.pid,
        s.priority,
        encode(list(deps)) if deps else "[]",
        s.idempotency_key,
        s.bucket,
        s.bucket_key,
        s.lease_owner,
        tx(s.lease_until),
        bool(s.overridden),
    )


def task_row(s: TaskSnapshot, tx: Times, safe: Times) -> tuple[Any, ...]:
    """A snapshot as a row of ``codec.TASK_COLUMNS`` (``task_id`` first)."""
    try:
        return _task_row(s, tx)
    except (NotUtc, TypeError):
        return _task_row(codec.check_snapshot_times(s), safe)


def task_rows(
    items: Sequence[SaveItem], tx: Times, safe: Times
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """``collapse(items)`` as (rows to insert, rows to update). An update row is the
    row without its ``task_id``, then ``task_id`` and the expected version (the
    parameters of ``UPDATE ... SET <columns but task_id> WHERE task_id AND version``)."""
    creates: list[tuple[Any, ...]] = []
    updates: list[tuple[Any, ...]] = []
    for snap, expect in collapse(items):
        row = task_row(snap, tx, safe)
        if expect is None:
            creates.append(row)
        else:
            updates.append((*row[1:], row[0], expect))
    return creates, updates


def _req(value: Any) -> Any:
    """A required time's row value; None (the time is missing) goes to the slow path,
    which names the field."""
    if value is None:
        raise NotUtc
    return value


def _transition_row(t: Transition, tx: Times) -> tuple[Any, ...]:
    return (
        t.task_id,
        t.version,
        _status(t.from_status),
        _status(t.to_status),
        t.trigger,
        t.actor,
        t.reason,
        _req(tx(t.at)),
        bool(t.override),
    )


def transition_row(t: Transition, tx: Times, safe: Times) -> tuple[Any, ...]:
    """A transition as a row of ``codec.TRANSITION_COLUMNS``."""
    try:
        return _transition_row(t, tx)
    except (NotUtc, TypeError):
        at = codec.utc_req(t.at, f"task {t.task_id}: transition {t.version} at")
        return _transition_row(replace(t, at=at), safe)


def _attempt_row(a: AttemptRecord, tx: Times) -> tuple[Any, ...]:
    return (
        a.task_id,
        a.attempt,
        _req(tx(a.started_at)),
        tx(a.ended_at),
        None if a.outcome is None else _status(a.outcome),
        None if a.failure_kind is None else a.failure_kind.value,
        a.failure_message,
        a.traceback,
        a.executor,
        bool(a.abandoned),
        a.exit_code,
    )


def attempt_row(a: AttemptRecord, tx: Times, safe: Times) -> tuple[Any, ...]:
    """An attempt as a row of ``codec.ATTEMPT_COLUMNS``."""
    try:
        return _attempt_row(a, tx)
    except (NotUtc, TypeError):
        what = f"task {a.task_id}: attempt {a.attempt}"
        fixed = replace(
            a,
            started_at=codec.utc_req(a.started_at, f"{what} started_at"),
            ended_at=codec.utc(a.ended_at, f"{what} ended_at"),
        )
        return _attempt_row(fixed, safe)


def _event_row(e: EventRecord, tx: Times) -> tuple[Any, ...]:
    p = e.payload
    return (
        e.event_id,
        e.task_id,
        _req(tx(e.at)),
        e.type,
        "{}"
        if not p
        else encode(p)
        if p.__class__ is dict
        else codec.dumps_obj(p, f"event {e.event_id} payload"),
    )


def event_row(e: EventRecord, tx: Times, safe: Times) -> tuple[Any, ...]:
    """An event as a row of ``codec.EVENT_COLUMNS``."""
    try:
        return _event_row(e, tx)
    except (NotUtc, TypeError):
        return _event_row(replace(e, at=codec.utc_req(e.at, f"event {e.event_id} at")), safe)


def _touch_row(t: Touch, tx: Times) -> tuple[Any, ...]:
    p = t.progress
    return (
        None if p is None else codec.progress_to_json(p, t.task_id),
        tx(t.heartbeat_at),
        t.lease_owner,
        tx(t.lease_until),
        t.pid,
        t.task_id,
    )


def touch_row(t: Touch, tx: Times, safe: Times) -> tuple[Any, ...]:
    """A touch as the parameters of the backends' ``_TOUCH`` update: progress JSON,
    heartbeat, lease owner, lease end, pid, then ``task_id`` (None = unchanged)."""
    try:
        return _touch_row(t, tx)
    except (NotUtc, TypeError):
        fixed = replace(
            t,
            heartbeat_at=codec.utc(t.heartbeat_at, f"task {t.task_id}: heartbeat_at"),
            lease_until=codec.utc(t.lease_until, f"task {t.task_id}: lease_until"),
        )
        return _touch_row(fixed, safe)


def log_row(task_id: str, rec: LogRecord, tx: Times, safe: Times) -> tuple[Any, ...]:
    """A log line as ``(task_id, at, stream, line, level)``."""
    try:
        at = tx(rec.at)
    except (NotUtc, TypeError):
        at = safe(codec.utc_req(rec.at, f"task {task_id}: log line at"))
    if at is None:
        codec.utc_req(rec.at, f"task {task_id}: log line at")
    return (task_id, at, rec.stream, rec.line, rec.level)


def _rows(
    items: Sequence[X],
    fast: Callable[[X, Times], tuple[Any, ...]],
    slow: Callable[[X, Times, Times], tuple[Any, ...]],
    tx: Times,
    safe: Times,
) -> list[tuple[Any, ...]]:
    """The rows of ``items`` by their ``fast`` builder; when one needs the slow path
    (a time not in UTC, or missing), all of them by ``slow``."""
    try:
        return [fast(x, tx) for x in items]
    except (NotUtc, TypeError):
        return [slow(x, tx, safe) for x in items]


def transition_rows(ts: Sequence[Transition], tx: Times, safe: Times) -> list[tuple[Any, ...]]:
    return _rows(ts, _transition_row, transition_row, tx, safe)


def attempt_rows(
    attempts: Sequence[AttemptRecord], tx: Times, safe: Times
) -> list[tuple[Any, ...]]:
    return _rows(attempts, _attempt_row, attempt_row, tx, safe)


def event_rows(events: Sequence[EventRecord], tx: Times, safe: Times) -> list[tuple[Any, ...]]:
    return _rows(events, _event_row, event_row, tx, safe)


def log_rows(
    logs: Sequence[tuple[str, Sequence[LogRecord]]], tx: Times, safe: Times
) -> list[tuple[Any, ...]]:
    return [log_row(tid, rec, tx, safe) for tid, lines in logs for rec in lines]


#: The fields of a touch, in the order of the touch row (task_id last).
TOUCH_FIELDS = ("progress", "heartbeat_at", "lease_owner", "lease_until", "pid")


def merge_touches(touches: Sequence[Touch]) -> list[Touch]:
    """One touch per task: applying touches in order sets each field to its last
    non-None value, so their merge (in order of first appearance) does the same."""
    merged: dict[str, Touch] = {}
    for t in touches:
        seen = merged.get(t.task_id)
        if seen is None:
            merged[t.task_id] = t
            continue
        merged[t.task_id] = Touch(
            t.task_id,
            progress=seen.progress if t.progress is None else t.progress,
            heartbeat_at=seen.heartbeat_at if t.heartbeat_at is None else t.heartbeat_at,
            lease_owner=seen.lease_owner if t.lease_owner is None else t.lease_owner,
            lease_until=seen.lease_until if t.lease_until is None else t.lease_until,
            pid=seen.pid if t.pid is None else t.pid,
        )
    return list(merged.values())


def touch_rows(touches: Sequence[Touch], tx: Times, safe: Times) -> list[tuple[Any, ...]]:
    """``merge_touches(touches)`` as touch rows."""
    return [touch_row(t, tx, safe) for t in merge_touches(touches)]

"""Row codec shared by the SQL backends: models <-> flat rows, with full fidelity.

Rows are dicts keyed by column name. Datetimes stay aware ``datetime`` objects
normalised to UTC (the SQLite backend stores them as integer microseconds since the
epoch, ``dt_to_micros``; schema version 1 stored fixed-width ISO text, ``dt_to_text``;
PostgreSQL stores ``timestamptz``).
Nested values (tags, deps, progress, failure, outcome, args, payloads, specs) are
JSON text. Enums are stored by value.

JSON values round-trip exactly (floats by ``repr``, NaN and infinities included).
A value that is not JSON (in ``outcome``, command args, payloads) is stored as its
``repr`` string; a tuple comes back as a list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import (
    AttemptRecord,
    Command,
    CommandState,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import RequestedAction, TaskStatus
from chongming_nb.stores.protocol import EventRecord, LogRecord, OwnerRecord, RunRecord

# --------------------------------------------------------------------- datetimes

_SNAPSHOT_TIMES = (
    "created_at",
    "queued_at",
    "started_at",
    "ended_at",
    "last_heartbeat_at",
    "retry_at",
    "lease_until",
)


def utc(value: datetime | None, what: str) -> datetime | None:
    """``value`` in UTC; StoreError naming ``what`` if it is naive."""
    if value is None:
        return None
    if value.__class__ is datetime and value.tzinfo is UTC:
        return value
    if not isinstance(value, datetime):
        raise StoreError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise StoreError(f"{what} is a naive datetime ({value.isoformat()}); use an aware UTC one")
    return value.astimezone(UTC)


def utc_req(value: datetime, what: str) -> datetime:
    out = utc(value, what)
    if out is None:
        raise StoreError(f"{what} is required")
    return out


def dt_to_text(value: datetime | None) -> str | None:
    """Fixed-width ISO-8601 text in UTC (sortable as text; the year is always 4 digits)."""
    if value is None:
        return None
    d = value if value.tzinfo is UTC else value.astimezone(UTC)
    return d.isoformat(timespec="microseconds")


#: The epoch, and one microsecond: a SQLite time is ``(t - EPOCH) // MICROSECOND``.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def dt_to_micros(value: datetime | None) -> int | None:
    """Integer microseconds since the epoch (exact; order is time order)."""
    if value is None:
        return None
    return (value - EPOCH) // MICROSECOND


def text_to_dt(value: str | int | datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime: integer microseconds since the epoch
    (SQLite), ISO text (SQLite schema version 1, page cursors) or a datetime
    (PostgreSQL)."""
    if value is None:
        return None
    if isinstance(value, int):
        return EPOCH + timedelta(microseconds=value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value if value.tzinfo is UTC else value.astimezone(UTC)
    d = datetime.fromisoformat(value)
    if d.tzinfo is None:
        return d.replace(tzinfo=UTC)
    return d.astimezone(UTC) if d.tzinfo is not UTC else d


def text_to_dt_req(value: str | int | datetime) -> datetime:
    out = text_to_dt(value)
    assert out is not None
    return out


def check_snapshot_times(s: TaskSnapshot) -> TaskSnapshot:
    """``s`` with every datetime in UTC (``s`` itself when they already are); StoreError
    for a naive one. Used by every backend on write."""
    changes: dict[str, Any] = {}
    for name in _SNAPSHOT_TIMES:
        value = getattr(s, name)
        fixed = utc(value, f"task {s.task_id}: {name}")
        if fixed is not value:
            changes[name] = fixed
    p = s.progress
    if p is not None and p.updated_at is not None:
        fixed = utc(p.updated_at, f"task {s.task_id}: progress.updated_at")
        if fixed is not p.updated_at:
            changes["progress"] = replace(p, updated_at=fixed)
    return replace(s, **changes) if changes else s


# -------------------------------------------------------------------------- json


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


#: One encoder for every write (``json.dumps`` with options builds a new one per call).
#: It checks for circular values (ValueError) and is what ``encode`` falls back on.
_ENCODE = json.JSONEncoder(default=_json_default, separators=(",", ":"), ensure_ascii=False).encode


def _fast_encoder() -> Callable[[Any], str]:
    """``_ENCODE`` without its per-call set-up: the C encoder behind
    ``JSONEncoder.encode`` built once, without the table of containers it is inside
    (the circular check, which makes an encoder unsafe to share between threads). A
    circular value recurses until RecursionError instead; the checking encoder then
    names it. Same text as ``_ENCODE`` for every value."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the _json accelerator
        return _ENCODE
    encoder = make(
        None, _json_default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
    join = "".join

    def encode(value: Any) -> str:
        try:
            return join(encoder(value, 0))
        except RecursionError:
            return _ENCODE(value)

    return encode


#: ``value`` as JSON text (the writers' hot path).
encode = _fast_encoder()


def dumps(value: Any) -> str | None:
    if value is None:
        return None
    return encode(value)


def loads(text: str | None) -> Any:
    if text is None:
        return None
    return json.loads(text)


def dumps_obj(value: Mapping[str, Any] | None, what: str) -> str | None:
    if value is None:
        return None
    if value.__class__ is dict:
        return encode(value)
    if not isinstance(value, Mapping):
        raise StoreError(f"{what} must be a mapping (a JSON object), got {type(value).__name__}")
    return encode(dict(value))  # the encoder takes dicts only (it would repr a Mapping)


# ---------------------------------------------------------- progress / failure


def progress_to_json(p: Progress | None, task_id: str | None = None) -> str | None:
    """``p`` as JSON; a naive ``updated_at`` is a StoreError naming ``task_id``."""
    if p is None:
        return None
    at = p.updated_at
    if at is not None and (at.__class__ is not datetime or at.tzinfo is not UTC):
        what = "progress.updated_at" if task_id is None else f"task {task_id}: progress.updated_at"
        at = utc(at, what)
    return encode(
        {
            "done": p.done,
            "total": p.total,
            "unit": p.unit,
            "message": p.message,
            "updated_at": None if at is None else at.isoformat(timespec="microseconds"),
        }
    )


def progress_from_json(text: str | None) -> Progress | None:
    d = loads(text)
    if d is None:
        return None
    return Progress(
        done=d["done"],
        total=d.get("total"),
        unit=d.get("unit"),
        message=d.get("message"),
        updated_at=text_to_dt(d.get("updated_at")),
    )


def failure_to_json(f: Failure | None) -> str | None:
    if f is None:
        return None
    return dumps(
        {
            "kind": f.kind.value,
            "message": f.message,
            "traceback": f.traceback,
            "retryable": f.retryable,
            "exit_code": f.exit_code,
            "exception_type": f.exception_type,
        }
    )


def failure_from_json(text: str | None) -> Failure | None:
    d = loads(text)
    if d is None:
        return None
    return Failure(
        kind=FailureKind(d["kind"]),
        message=d["message"],
        traceback=d.get("traceback"),
        retryable=bool(d.get("retryable", False)),
        exit_code=d.get("exit_code"),
        exception_type=d.get("exception_type"),
    )


# --------------------------------------------------------------------- snapshots


def columns(record: type) -> tuple[str, ...]:
    """The columns of a record's table: the fields of its dataclass, in order."""
    return tuple(f.name for f in fields(record))


TASK_COLUMNS = columns(TaskSnapshot)
#: Columns that hold datetimes.
TASK_TIME_COLUMNS = frozenset(_SNAPSHOT_TIMES)


_EMPTY_LIST = "[]"


def _u(value: datetime | None, tid: str, name: str) -> datetime | None:
    if value is None or (value.__class__ is datetime and value.tzinfo is UTC):
        return value
    return utc(value, f"task {tid}: {name}")


def snapshot_to_row(s: TaskSnapshot) -> dict[str, Any]:
    tid = s.task_id
    return {
        "task_id": s.task_id,
        "name": s.name,
        "pipeline_run_id": s.pipeline_run_id,
        "tags": dumps(sorted(s.tags)) if s.tags else _EMPTY_LIST,
        "status": s.status.value,
        "status_version": s.status_version,
        "requested_action": None if s.requested_action is None else s.requested_action.value,
        "attempt": s.attempt,
        "max_attempts": s.max_attempts,
        "created_at": _u(s.created_at, tid, "created_at"),
        "queued_at": _u(s.queued_at, tid, "queued_at"),
        "started_at": _u(s.started_at, tid, "started_at"),
        "ended_at": _u(s.ended_at, tid, "ended_at"),
        "last_heartbeat_at": _u(s.last_heartbeat_at, tid, "last_heartbeat_at"),
        "retry_at": _u(s.retry_at, tid, "retry_at"),
        "progress": progress_to_json(s.progress),
        "failure": failure_to_json(s.failure),
        "outcome": dumps_obj(s.outcome, f"task {s.task_id}: outcome"),
        "executor": s.executor,
        "pid": s.pid,
        "priority": s.priority,
        "deps": dumps(list(s.deps)) if s.deps else _EMPTY_LIST,
        "idempotency_key": s.idempotency_key,
        "bucket": s.bucket,
        "bucket_key": s.bucket_key,
        "lease_owner": s.lease_owner,
        "lease_until": _u(s.lease_until, tid, "lease_until"),
        "overridden": bool(s.overridden),
    }


def row_to_snapshot(r: Mapping[str, Any]) -> TaskSnapshot:
    ra = r["requested_action"]
    return TaskSnapshot(
        task_id=r["task_id"],
        name=r["name"],
        pipeline_run_id=r["pipeline_run_id"],
        tags=frozenset(loads(r["tags"]) or ()),
        status=TaskStatus(r["status"]),
        status_version=int(r["status_version"]),
        requested_action=None if ra is None else RequestedAction(ra),
        attempt=int(r["attempt"]),
        max_attempts=int(r["max_attempts"]),
        created_at=text_to_dt(r["created_at"]),
        queued_at=text_to_dt(r["queued_at"]),
        started_at=text_to_dt(r["started_at"]),
        ended_at=text_to_dt(r["ended_at"]),
        last_heartbeat_at=text_to_dt(r["last_heartbeat_at"]),
        retry_at=text_to_dt(r["retry_at"]),
        progress=progress_from_json(r["progress"]),
        failure=failure_from_json(r["failure"]),
        outcome=loads(r["outcome"]),
        executor=r["executor"],
        pid=r["pid"],
        priority=int(r["priority"]),
        deps=tuple(loads(r["deps"]) or ()),
        idempotency_key=r["idempotency_key"],
        bucket=r["bucket"],
        bucket_key=r["bucket_key"],
        lease_owner=r["lease_owner"],
        lease_until=text_to_dt(r["lease_until"]),
        overridden=bool(r["overridden"]),
    )


# -------------------------------------------------------------------- history

TRANSITION_COLUMNS: tuple[str, ...] = (
    "task_id",
    "version",
    "from_status",
    "to_status",
    "trigger",
    "actor",
    "reason",
    "at",
    "override",
)


def transition_to_row(t: Transition) -> dict[str, Any]:
    return {
        "task_id": t.task_id,
        "version": t.version,
        "from_status": TaskStatus(t.from_status).value,
        "to_status": TaskStatus(t.to_status).value,
        "trigger": t.trigger,
        "actor": t.actor,
        "reason": t.reason,
        "at": utc_req(t.at, f"task {t.task_id}: transition {t.version} at"),
        "override": bool(t.override),
    }


def row_to_transition(r: Mapping[str, Any]) -> Transition:
    return Transition(
        task_id=r["task_id"],
        from_status=TaskStatus(r["from_status"]),
        to_status=TaskStatus(r["to_status"]),
        trigger=r["trigger"],
        actor=r["actor"],
        reason=r["reason"],
        at=text_to_dt_req(r["at"]),
        version=int(r["version"]),
        override=bool(r["override"]),
    )


ATTEMPT_COLUMNS = columns(AttemptRecord)


def attempt_to_row(a: AttemptRecord) -> dict[str, Any]:
    what = f"task {a.task_id}: attempt {a.attempt}"
    return {
        "task_id": a.task_id,
        "attempt": a.attempt,
        "started_at": utc_req(a.started_at, f"{what} started_at"),
        "ended_at": utc(a.ended_at, f"{what} ended_at"),
        "outcome": None if a.outcome is None else TaskStatus(a.outcome).value,
        "failure_kind": None if a.failure_kind is None else a.failure_kind.value,
        "failure_message": a.failure_message,
        "traceback": a.traceback,
        "executor": a.executor,
        "abandoned": bool(a.abandoned),
        "exit_code": a.exit_code,
    }


def row_to_attempt(r: Mapping[str, Any]) -> AttemptRecord:
    return AttemptRecord(
        task_id=r["task_id"],
        attempt=int(r["attempt"]),
        started_at=text_to_dt_req(r["started_at"]),
        ended_at=text_to_dt(r["ended_at"]),
        outcome=None if r["outcome"] is None else TaskStatus(r["outcome"]),
        failure_kind=None if r["failure_kind"] is None else FailureKind(r["failure_kind"]),
        failure_message=r["failure_message"],
        traceback=r["traceback"],
        executor=r["executor"],
        abandoned=bool(r["abandoned"]),
        exit_code=r["exit_code"],
    )


# ----------------------------------------------------------- logs and events


def log_to_row(task_id: str, rec: LogRecord) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "at": utc_req(rec.at, f"task {task_id}: log line at"),
        "stream": rec.stream,
        "line": rec.line,
        "level": rec.level,
    }


def row_to_log(r: Mapping[str, Any]) -> LogRecord:
    return LogRecord(
        at=text_to_dt_req(r["at"]), stream=r["stream"], line=r["line"], level=r["level"]
    )


EVENT_COLUMNS = columns(EventRecord)


def event_to_row(e: EventRecord) -> dict[str, Any]:
    return {
        "event_id": e.event_id,
        "task_id": e.task_id,
        "at": utc_req(e.at, f"event {e.event_id} at"),
        "type": e.type,
        "payload": dumps_obj(e.payload, f"event {e.event_id} payload") or "{}",
    }


def row_to_event(r: Mapping[str, Any]) -> EventRecord:
    return EventRecord(
        event_id=r["event_id"],
        task_id=r["task_id"],
        at=text_to_dt_req(r["at"]),
        type=r["type"],
        payload=loads(r["payload"]) or {},
    )


# ------------------------------------------------------------------- commands

COMMAND_COLUMNS = columns(Command)


def command_to_row(c: Command) -> dict[str, Any]:
    what = f"command {c.command_id}"
    return {
        "command_id": c.command_id,
        "task_id": c.task_id,
        "verb": c.verb,
        "args": dumps_obj(c.args, f"{what} args") or "{}",
        "actor": c.actor,
        "created_at": utc(c.created_at, f"{what} created_at"),
        "state": CommandState(c.state).value,
        "claimed_by": c.claimed_by,
        "lease_until": utc(c.lease_until, f"{what} lease_until"),
        "completed_at": utc(c.completed_at, f"{what} completed_at"),
        "outcome": dumps_obj(c.outcome, f"{what} outcome"),
    }


def row_to_command(r: Mapping[str, Any]) -> Command:
    return Command(
        command_id=r["command_id"],
        task_id=r["task_id"],
        verb=r["verb"],
        args=loads(r["args"]) or {},
        actor=r["actor"],
        created_at=text_to_dt(r["created_at"]),
        state=CommandState(r["state"]),
        claimed_by=r["claimed_by"],
        lease_until=text_to_dt(r["lease_until"]),
        completed_at=text_to_dt(r["completed_at"]),
        outcome=loads(r["outcome"]),
    )


# --------------------------------------------------------------- owners, runs

OWNER_COLUMNS = columns(OwnerRecord)


def owner_to_row(o: OwnerRecord) -> dict[str, Any]:
    return {
        "owner_id": o.owner_id,
        "host": o.host,
        "pid": o.pid,
        "kernel_id": o.kernel_id,
        "started_at": utc_req(o.started_at, f"owner {o.owner_id} started_at"),
        "heartbeat_at": utc_req(o.heartbeat_at, f"owner {o.owner_id} heartbeat_at"),
    }


def row_to_owner(r: Mapping[str, Any]) -> OwnerRecord:
    return OwnerRecord(
        owner_id=r["owner_id"],
        host=r["host"],
        pid=int(r["pid"]),
        kernel_id=r["kernel_id"],
        started_at=text_to_dt_req(r["started_at"]),
        heartbeat_at=text_to_dt_req(r["heartbeat_at"]),
    )


RUN_COLUMNS = columns(RunRecord)


def run_to_row(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "name": run.name,
        "status": run.status,
        "created_at": utc_req(run.created_at, f"run {run.run_id} created_at"),
        "updated_at": utc_req(run.updated_at, f"run {run.run_id} updated_at"),
        "spec": dumps_obj(run.spec, f"run {run.run_id} spec") or "{}",
    }


def row_to_run(r: Mapping[str, Any]) -> RunRecord:
    return RunRecord(
        run_id=r["run_id"],
        name=r["name"],
        status=r["status"],
        created_at=text_to_dt_req(r["created_at"]),
        updated_at=text_to_dt_req(r["updated_at"]),
        spec=loads(r["spec"]) or {},
    )


def times_to_text(row: dict[str, Any], columns: Iterable[str]) -> dict[str, Any]:
    """Turn the datetime values of ``columns`` in ``row`` into fixed-width text."""
    for c in columns:
        if c in row:
            row[c] = dt_to_text(row[c])
    return row

"""Row codec shared by the SQL backends: models <-> flat rows, with full fidelity.

Rows read are dicts keyed by column name (``row_to_*``); the rows the batch writer
writes are built in ``_sql`` (tuples in the order of ``*_COLUMNS``), those of commands,
owners and runs here (``*_to_row``). Datetimes stay aware ``datetime`` objects
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
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from chongming_nb.core import models
from chongming_nb.core.errors import StoreError
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
    return None if value is None else models.iso_utc(value)


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


def check_snapshot_times(s: models.TaskSnapshot) -> models.TaskSnapshot:
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


def progress_to_json(p: models.Progress | None, task_id: str | None = None) -> str | None:
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


def progress_from_json(text: str | None) -> models.Progress | None:
    d = loads(text)
    if d is None:
        return None
    return models.Progress(
        done=d["done"],
        total=d.get("total"),
        unit=d.get("unit"),
        message=d.get("message"),
        updated_at=text_to_dt(d.get("updated_at")),
    )


def failure_to_json(f: models.Failure | None) -> str | None:
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


def failure_from_json(text: str | None) -> models.Failure | None:
    d = loads(text)
    if d is None:
        return None
    return models.Failure(
        kind=models.FailureKind(d["kind"]),
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


TASK_COLUMNS = columns(models.TaskSnapshot)
#: Columns that hold datetimes.
TASK_TIME_COLUMNS = frozenset(_SNAPSHOT_TIMES)


def row_to_snapshot(r: Mapping[str, Any]) -> models.TaskSnapshot:
    ra = r["requested_action"]
    return models.TaskSnapshot(
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


def row_to_transition(r: Mapping[str, Any]) -> models.Transition:
    return models.Transition(
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


ATTEMPT_COLUMNS = columns(models.AttemptRecord)


def row_to_attempt(r: Mapping[str, Any]) -> models.AttemptRecord:
    return models.AttemptRecord(
        task_id=r["task_id"],
        attempt=int(r["attempt"]),
        started_at=text_to_dt_req(r["started_at"]),
        ended_at=text_to_dt(r["ended_at"]),
        outcome=None if r["outcome"] is None else TaskStatus(r["outcome"]),
        failure_kind=None if r["failure_kind"] is None else models.FailureKind(r["failure_kind"]),
        failure_message=r["failure_message"],
        traceback=r["traceback"],
        executor=r["executor"],
        abandoned=bool(r["abandoned"]),
        exit_code=r["exit_code"],
    )


# ----------------------------------------------------------- logs and events


def row_to_log(r: Mapping[str, Any]) -> LogRecord:
    return LogRecord(
        at=text_to_dt_req(r["at"]), stream=r["stream"], line=r["line"], level=r["level"]
    )


EVENT_COLUMNS = columns(EventRecord)


def row_to_event(r: Mapping[str, Any]) -> EventRecord:
    return EventRecord(**_plain_fields(r, EVENT_COLUMNS, ("at",), "payload"))


# ------------------------------------------------------------------- commands

COMMAND_COLUMNS = columns(models.Command)


def command_to_row(c: models.Command) -> dict[str, Any]:
    what = f"command {c.command_id}"
    return {
        "command_id": c.command_id,
        "task_id": c.task_id,
        "verb": c.verb,
        "args": dumps_obj(c.args, f"{what} args") or "{}",
        "actor": c.actor,
        "created_at": utc(c.created_at, f"{what} created_at"),
        "state": models.CommandState(c.state).value,
        "claimed_by": c.claimed_by,
        "lease_until": utc(c.lease_until, f"{what} lease_until"),
        "completed_at": utc(c.completed_at, f"{what} completed_at"),
        "outcome": dumps_obj(c.outcome, f"{what} outcome"),
    }


def row_to_command(r: Mapping[str, Any]) -> models.Command:
    return models.Command(
        command_id=r["command_id"],
        task_id=r["task_id"],
        verb=r["verb"],
        args=loads(r["args"]) or {},
        actor=r["actor"],
        created_at=text_to_dt(r["created_at"]),
        state=models.CommandState(r["state"]),
        claimed_by=r["claimed_by"],
        lease_until=text_to_dt(r["lease_until"]),
        completed_at=text_to_dt(r["completed_at"]),
        outcome=loads(r["outcome"]),
    )


# ------------------------------------------------ owners, runs: plain records
#
# An owner, a run and an event are plain records: a column per field, their times
# required (UTC), and at most one JSON object (a run's spec, an event's payload).

OWNER_COLUMNS = columns(OwnerRecord)
OWNER_TIMES = ("started_at", "heartbeat_at")
RUN_COLUMNS = columns(RunRecord)
RUN_TIMES = ("created_at", "updated_at")


def _plain_row(rec: Any, what: str, times: tuple[str, ...], obj: str = "") -> dict[str, Any]:
    """A plain record as a row; ``what`` names it in an error."""
    row = {f.name: getattr(rec, f.name) for f in fields(rec)}
    for name in times:
        row[name] = utc_req(row[name], f"{what} {name}")
    if obj:
        row[obj] = dumps_obj(row[obj], f"{what} {obj}") or "{}"
    return row


def _plain_fields(
    r: Mapping[str, Any], cols: tuple[str, ...], times: tuple[str, ...], obj: str = ""
) -> dict[str, Any]:
    """The fields of a plain record read from its row."""
    values = {c: r[c] for c in cols}
    for name in times:
        values[name] = text_to_dt_req(values[name])
    if obj:
        values[obj] = loads(values[obj]) or {}
    return values


def owner_to_row(o: OwnerRecord) -> dict[str, Any]:
    return _plain_row(o, f"owner {o.owner_id}", OWNER_TIMES)


def row_to_owner(r: Mapping[str, Any]) -> OwnerRecord:
    return OwnerRecord(**_plain_fields(r, OWNER_COLUMNS, OWNER_TIMES))


def run_to_row(run: RunRecord) -> dict[str, Any]:
    return _plain_row(run, f"run {run.run_id}", RUN_TIMES, "spec")


def row_to_run(r: Mapping[str, Any]) -> RunRecord:
    return RunRecord(**_plain_fields(r, RUN_COLUMNS, RUN_TIMES, "spec"))

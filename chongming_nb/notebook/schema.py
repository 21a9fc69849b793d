"""The one Python source of the widget's message shapes, status names and verbs.

The front end (``static/widget.js``) never hard-codes any of this: the widget sends
:func:`schema_for_js` to it as the ``schema`` trait at construction, and the JavaScript
reads status names, tones, verbs and message type names from there. A test asserts that
the JavaScript holds no hand-copied status list.

Messages, front end -> kernel (custom widget messages)::

    {"type": "action", "action": <verb>, "task_id": <str>, "request_id": <int>,
     "key": <str, optional>}
    {"type": "bulk",   "action": "pause"|"resume"|"stop", "request_id": <int>}
    {"type": "detail", "task_id": <str>, "request_id": <int>}     # logs + traceback
    {"type": "sync",   "request_id": <int>}                        # resend full state
    {"type": "view",   "request_id": <int>}     # a view was drawn (no answer; outputs.py)

Messages, kernel -> front end::

    {"type": "ack",    "request_id", "ok", "reason", "task_id", "action"}
    {"type": "patch",  "seq", "base", "upsert": [row, ...],       # rows new to the table
                       "update": [{"id", <changed fields>}, ...],  # only what changed
                       "remove": [id, ...], "summary": {status: count}, "at": <epoch ms>}
    {"type": "full",   "seq", "rows": [row, ...], "summary", "at"}
    {"type": "detail", "request_id", "task_id", "logs": [log, ...], "traceback",
                       "failure"}

A row (see :data:`ROW_FIELDS`) carries ``can``: a map verb -> bool computed by the
kernel with ``ctl.can``; the front end enables a button exactly when it is true.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from chongming_nb.core.models import ACTOR_SOURCE_LABELS, ACTOR_SOURCES
from chongming_nb.core.state_machine import CONTROL_VERBS
from chongming_nb.core.states import STATUS_TONES as _STATUS_TONES
from chongming_nb.core.states import TERMINAL, TaskStatus

SCHEMA_VERSION: Final = 1

#: Every status name, in lifecycle order (the ``FINISHED`` alias is not a separate name).
STATUSES: Final[tuple[str, ...]] = tuple(dict.fromkeys(s.value for s in TaskStatus))
TERMINAL_STATUSES: Final[tuple[str, ...]] = tuple(s for s in STATUSES if TaskStatus(s) in TERMINAL)

#: How a badge is coloured (the CSS knows tones only): one table, in the core.
STATUS_TONES: Final[Mapping[str, str]] = _STATUS_TONES

#: Statuses a person ends a task with (drawn neutral, never as an error; the row says
#: who and when).
PERSON_ENDED_STATUSES: Final[tuple[str, ...]] = ("stopped", "cancelled", "skipped")

#: Words for a status in a row (display only; the status name is what is compared).
STATUS_LABELS: Final[Mapping[str, str]] = {s: s.replace("_", " ") for s in STATUSES}

#: A board's default order: rank of each status (running first, then paused, queued,
#: finished; newest first inside a rank).
BOARD_RANKS: Final[Mapping[str, int]] = {
    "starting": 0,
    "running": 0,
    "pausing": 0,
    "stopping": 0,
    "paused": 1,
    "pending": 2,
    "blocked": 2,
    "queued": 2,
    "retry_wait": 2,
    **dict.fromkeys(TERMINAL_STATUSES, 3),
}

#: The per-row verbs (the control plane's verbs, from the core).
VERBS: Final[tuple[str, ...]] = tuple(CONTROL_VERBS)
#: Verbs the "Pause all" / "Resume all" / "Stop all" buttons send for the whole table
#: (the kernel applies each to every task whose ``can`` allows it).
BULK_VERBS: Final[tuple[str, ...]] = ("pause", "resume", "stop")
#: Human labels for the buttons (display only; the verb is what is sent).
VERB_LABELS: Final[Mapping[str, str]] = {
    "pause": "Pause",
    "resume": "Resume",
    "stop": "Stop",
    "retry": "Retry",
    "skip": "Skip",
}

CLIENT_TYPES: Final[tuple[str, ...]] = ("action", "bulk", "detail", "sync", "view")
SERVER_TYPES: Final[tuple[str, ...]] = ("ack", "patch", "full", "detail", "ping")

#: The kernel pings every widget that has sent nothing for this long (from a background
#: thread, so also while a cell runs; a patch or ack counts as a sign of life too); a view
#: that hears nothing for three intervals says it is disconnected.
PING_SECONDS: Final[float] = 5.0
KINDS: Final[tuple[str, ...]] = ("task", "run", "board")

#: The mime type of a table's saved snapshot (``{"rows", "title", "kind", "model_id",
#: "total_rows", "summary", "at"}``): the JupyterLab extension draws it when the widget's
#: model is gone (a notebook reopened without its kernel) and shows the live widget
#: instead while the model lives.
SNAPSHOT_MIME: Final = "application/vnd.chongming.tasks+json"
WIDGET_MIME: Final = "application/vnd.jupyter.widget-view+json"

#: One row as sent to the front end: key -> its TypeScript type. The one definition of
#: the row shape: ``scripts/gen_ts_contract.py`` writes the ``TaskRow`` interface of
#: ``labextension/src/contract.ts`` from it, and the widget and the sidebar both draw
#: rows of this shape (the sidebar's rows add :data:`LISTING_ROW_TYPES`).
ROW_TYPES: Final[Mapping[str, str]] = {
    "id": "string",  # task id
    "name": "string",
    "status": "TaskStatus",
    "version": "number",  # status_version
    "attempt": "number",
    "max_attempts": "number",
    "done": "number",
    "total": "number | null",  # None when unknown
    "unit": "string | null",
    "message": "string | null",  # last progress message or last log line
    "rate": "number | null",  # units per second, None when unknown
    "eta": "number | null",  # seconds, None when unknown
    "created": "number | null",  # epoch ms
    "started": "number | null",  # epoch ms of the current/last attempt, None before the first
    "ended": "number | null",  # epoch ms, None while not terminal
    "failure": "RowFailure | null",  # None for a stop: a stop is not a failure
    "ended_by": "ActorSource | null",  # stopped/cancelled/skipped: who asked; else None
    "end_reason": "string | null",  # the reason they gave (or what the executor had to do)
    "has_tb": "boolean",  # a traceback can be fetched with a "detail" request
    "tags": "string[]",
    "run": "string | null",  # pipeline run id or None
    "starts": "number | null",  # epoch ms a delayed task may start (delay= / not_before=)
    "requested": "string | null",  # "stop" | "pause" | None while on its way
    "can": "Record<ControlVerb, boolean>",  # for every verb in VERBS
    # A row's elapsed time is the work of its current attempt: its wall time (started ->
    # ended, frozen, or now) minus the time it spent paused in place (PAUSED); both
    # fields come from the task's transitions (the kernel's history for a board, the
    # store's for the sidebar), so every view shows the same elapsed time.
    # epoch ms the pause a started, unfinished task is in now began (its clock stands
    # still there); None when it is not paused in place
    "frozen": "number | null",
    # ms the current attempt spent PAUSED in its pauses that ended (0: never paused)
    "paused": "number",
}
#: Keys of one row, in order.
ROW_FIELDS: Final[tuple[str, ...]] = tuple(ROW_TYPES)

#: ``failure`` of a row.
FAILURE_TYPES: Final[Mapping[str, str]] = {
    "kind": "string",
    "message": "string",
    "exception_type": "string | null",
    "traceback?": "string | null",  # only in a task's details
}

#: What a row of the server's listing (the Tasks sidebar) adds to :data:`ROW_TYPES`.
LISTING_ROW_TYPES: Final[Mapping[str, str]] = {
    "why": "Partial<Record<ControlVerb, string>>",  # why a verb is not allowed now
    "owner": "string | null",  # the controller's "host:pid:kernel_id"
    "host": "string | null",
    "pid": "number | null",
    "kernel_id": "string | null",
    "notebook": "string | null",  # the session path of the owning kernel, when known
    "kernel_gone": "boolean",  # the kernel owning this unfinished task restarted or died
    "kernel_gone_reason": "string | null",  # why its kernel is gone (also for a finished task)
}

#: Tooltips of the verb buttons (what a click does; the kernel still validates it).
VERB_TIPS: Final[Mapping[str, str]] = {
    "pause": "Pause at the next checkpoint (a running task finishes its current step)",
    "resume": "Resume where it paused",
    "stop": "Stop: ask it to end at the next checkpoint (not counted as a failure)",
    "retry": "Run it again as a new attempt",
    "skip": "Skip it: mark it done without running it",
}

#: Request ids are JSON integers in this range (JavaScript's safe integers).
MAX_REQUEST_ID: Final = 2**53 - 1
MAX_TASK_ID_LEN: Final = 512


class SchemaError(ValueError):
    """A message from the front end does not match the schema. Says what was wrong."""


@dataclass(frozen=True, slots=True)
class ActionRequest:
    action: str
    task_id: str
    request_id: int
    #: the same click may also travel through the server (when the kernel is busy);
    #: the key lets the kernel apply it once
    key: str | None = None


@dataclass(frozen=True, slots=True)
class BulkRequest:
    action: str
    request_id: int


@dataclass(frozen=True, slots=True)
class DetailRequest:
    task_id: str
    request_id: int


@dataclass(frozen=True, slots=True)
class SyncRequest:
    request_id: int


@dataclass(frozen=True, slots=True)
class ViewDrawn:
    """A front end drew a view of the table: someone sees the live widget."""

    request_id: int


ClientMessage = ActionRequest | BulkRequest | DetailRequest | SyncRequest | ViewDrawn

_ALLOWED_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "action": frozenset({"type", "action", "task_id", "request_id", "key"}),
    "bulk": frozenset({"type", "action", "request_id"}),
    "detail": frozenset({"type", "task_id", "request_id"}),
    "sync": frozenset({"type", "request_id"}),
    "view": frozenset({"type", "request_id"}),
}


def _request_id(msg: Mapping[str, Any]) -> int:
    rid = msg.get("request_id")
    if isinstance(rid, bool) or not isinstance(rid, int):
        raise SchemaError(f"request_id must be an integer, got {type(rid).__name__}")
    if not 0 <= rid <= MAX_REQUEST_ID:
        raise SchemaError(f"request_id out of range: {rid}")
    return rid


def _task_id(msg: Mapping[str, Any]) -> str:
    tid = msg.get("task_id")
    if not isinstance(tid, str):
        raise SchemaError(f"task_id must be a string, got {type(tid).__name__}")
    if not tid or len(tid) > MAX_TASK_ID_LEN:
        raise SchemaError(f"task_id must have 1..{MAX_TASK_ID_LEN} characters")
    return tid


def parse_client_message(msg: object) -> ClientMessage:
    """Validate one message from the front end; raise :class:`SchemaError` if it is not
    exactly one of the shapes above (unknown keys are rejected too)."""
    if not isinstance(msg, Mapping):
        raise SchemaError(f"message must be an object, got {type(msg).__name__}")
    mtype = msg.get("type")
    if not isinstance(mtype, str) or mtype not in _ALLOWED_KEYS:
        raise SchemaError(f"unknown message type {mtype!r}; known: {', '.join(CLIENT_TYPES)}")
    if not all(isinstance(k, str) for k in msg):
        raise SchemaError("message keys must be strings")
    extra = set(msg) - _ALLOWED_KEYS[mtype]
    if extra:
        raise SchemaError(f"unexpected keys for {mtype!r}: {', '.join(sorted(extra))}")
    rid = _request_id(msg)
    if mtype == "action":
        action = msg.get("action")
        if not isinstance(action, str) or action not in VERBS:
            raise SchemaError(f"unknown action {action!r}; known: {', '.join(VERBS)}")
        key = msg.get("key")
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 100):
            raise SchemaError("key must be a string of 1..100 characters")
        return ActionRequest(action=action, task_id=_task_id(msg), request_id=rid, key=key)
    if mtype == "bulk":
        action = msg.get("action")
        if not isinstance(action, str) or action not in BULK_VERBS:
            raise SchemaError(f"unknown bulk action {action!r}; known: {', '.join(BULK_VERBS)}")
        return BulkRequest(action=action, request_id=rid)
    if mtype == "detail":
        return DetailRequest(task_id=_task_id(msg), request_id=rid)
    if mtype == "view":
        return ViewDrawn(request_id=rid)
    return SyncRequest(request_id=rid)


def ack(
    request_id: int,
    ok: bool,
    reason: str | None,
    *,
    task_id: str | None = None,
    action: str | None = None,
) -> dict[str, Any]:
    return {
        "type": "ack",
        "request_id": request_id,
        "ok": ok,
        "reason": reason,
        "task_id": task_id,
        "action": action,
    }


def schema_for_js() -> dict[str, Any]:
    """Everything the front end needs to know about names, as plain JSON."""
    return {
        "version": SCHEMA_VERSION,
        "statuses": list(STATUSES),
        "terminal": list(TERMINAL_STATUSES),
        "tones": dict(STATUS_TONES),
        "verbs": list(VERBS),
        "bulk_verbs": list(BULK_VERBS),
        "verb_labels": dict(VERB_LABELS),
        "client_types": list(CLIENT_TYPES),
        "server_types": list(SERVER_TYPES),
        "row_fields": list(ROW_FIELDS),
        "kinds": list(KINDS),
        "actor_sources": list(ACTOR_SOURCES),
        "actor_labels": dict(ACTOR_SOURCE_LABELS),
        "ping_ms": int(PING_SECONDS * 1000),
        "row_types": dict(ROW_TYPES),
        "listing_row_types": dict(LISTING_ROW_TYPES),
        "failure_types": dict(FAILURE_TYPES),
        "status_labels": dict(STATUS_LABELS),
        "board_ranks": dict(BOARD_RANKS),
        "verb_tips": dict(VERB_TIPS),
        "person_ended": list(PERSON_ENDED_STATUSES),
    }


def schema_hash() -> str:
    """A short hash of :func:`schema_for_js`: the generated TypeScript contract carries
    it, and a widget whose compiled contract differs from its kernel's says so."""
    import hashlib
    import json

    text = json.dumps(schema_for_js(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]

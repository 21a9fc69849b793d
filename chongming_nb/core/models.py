"""Frozen value objects: snapshots, progress, failures, attempts, transitions, commands.

Orthogonal dimensions are kept apart (seed 001 §1.3): lifecycle (``status``), retry
count (``attempt``), progress, health (``last_heartbeat_at``) and result (``failure`` /
``outcome``) never share one enum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from chongming_nb.core._fast import evolver, fast_init, maker
from chongming_nb.core.states import TERMINAL, RequestedAction, TaskStatus


class FailureKind(StrEnum):
    EXCEPTION = "exception"
    NONZERO_EXIT = "nonzero_exit"
    TIMEOUT_START = "timeout_start"
    TIMEOUT_ATTEMPT = "timeout_attempt"
    TIMEOUT_IDLE = "timeout_idle"
    CANCELLED = "cancelled"
    LOST = "lost"
    DEPENDENCY_FAILED = "dependency_failed"
    CONDITION_FALSE = "condition_false"


#: Where a verb that ended a task came from, as a person reads it. ``actor_source``
#: maps the free-form actor strings of transitions and commands onto these.
ACTOR_SOURCES: tuple[str, ...] = (
    "widget",
    "sidebar",
    "cli",
    "api",
    "interrupt",
    "pipeline",
    "system",
)
#: How a row says who ended a task: "stopped {label} at 14:03".
ACTOR_SOURCE_LABELS: Mapping[str, str] = {
    "widget": "from the widget",
    "sidebar": "from the sidebar",
    "cli": "from the CLI",
    "api": "from Python",
    "interrupt": "by interrupt",
    "pipeline": "by its pipeline",
    "system": "by the system",
}

_SOURCE_OF_ACTOR: dict[str, str] = {
    "widget": "widget",
    "sidebar": "sidebar",
    "cli": "cli",
    "user": "api",
    "api": "api",
    "ui": "api",
    "magic": "api",
    "interrupt": "interrupt",
    "store": "api",
    "orchestrator": "pipeline",
    "pipeline": "pipeline",
}


def actor_source(actor: str | None) -> str | None:
    """``"sidebar:alice"`` -> ``"sidebar"``, ``"cli:root"`` -> ``"cli"``, ``"user"`` (a
    call from Python) -> ``"api"``, a kernel interrupt (■) stopping a loop ->
    ``"interrupt"``, the orchestrator -> ``"pipeline"``; anything else
    (reconcile, supervisor, executor, ...) -> ``"system"``. None stays None."""
    if not actor:
        return None
    head = actor.split(":", 1)[0].strip().lower()
    return _SOURCE_OF_ACTOR.get(head, "system")


def ended_by_outcome(actor: str, reason: str | None, detail: str | None = None) -> dict[str, Any]:
    """``TaskSnapshot.outcome`` of a task a verb ended (stopped, cancelled, skipped):
    who asked and why, if they said. The time is ``ended_at``. A stop is not a failure:
    a stopped task has no ``failure`` (its attempt records outcome ``stopped`` and no
    ``failure_kind``); a cancel keeps its ``Failure`` (kind ``cancelled`` or
    ``dependency_failed``) as well. ``detail``: what the executor had to do (e.g. a
    process terminated after the stop window)."""
    out: dict[str, Any] = {"by": actor, "reason": reason}
    if detail is not None:
        out["detail"] = detail
    return out


def ended_by(s: TaskSnapshot) -> Mapping[str, Any] | None:
    """The :func:`ended_by_outcome` of a stopped, cancelled or skipped task, else None."""
    if s.status not in _ENDED_BY_VERB:
        return None
    out = s.outcome
    if out is None or not isinstance(out.get("by"), str):
        return None
    return out


def end_summary(s: TaskSnapshot) -> tuple[str | None, str | None]:
    """``(source, note)`` of a task a verb ended: where the verb came from (one of
    ``ACTOR_SOURCES``) and the reason given, else what the executor had to do; both
    None for any other task. What the widget's and the sidebar's rows carry."""
    ended = ended_by(s)
    if ended is None:
        return None, None
    note = ended.get("reason") or ended.get("detail")
    return actor_source(str(ended["by"])), None if note is None else str(note)


_ENDED_BY_VERB = frozenset({TaskStatus.STOPPED, TaskStatus.CANCELLED, TaskStatus.SKIPPED})


@fast_init
@dataclass(frozen=True, slots=True)
class Progress:
    """Latest progress report. ``total`` may be unknown."""

    done: float = 0
    total: float | None = None
    unit: str | None = None
    message: str | None = None
    updated_at: datetime | None = None

    @property
    def fraction(self) -> float | None:
        if self.total is None or self.total <= 0:
            return None
        return min(1.0, max(0.0, self.done / self.total))


@fast_init
@dataclass(frozen=True, slots=True)
class Failure:
    """Why an attempt did not succeed. ``traceback`` is the full user traceback."""

    kind: FailureKind
    message: str
    traceback: str | None = None
    retryable: bool = False
    exit_code: int | None = None
    exception_type: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """Everything known about one task at one ``status_version``."""

    # identity
    task_id: str
    name: str
    pipeline_run_id: str | None = None
    tags: frozenset[str] = frozenset()
    # lifecycle
    status: TaskStatus = TaskStatus.PENDING
    status_version: int = 0
    requested_action: RequestedAction | None = None
    # attempts
    attempt: int = 0
    max_attempts: int = 1
    # time (``started_at`` belongs to the current attempt; None between attempts)
    created_at: datetime | None = None
    queued_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_heartbeat_at: datetime | None = None
    # when a waiting task may be queued: the end of a retry backoff (RETRY_WAIT) or a
    # delayed start (``delay=`` / ``not_before=``, while PENDING/BLOCKED)
    retry_at: datetime | None = None
    # progress
    progress: Progress | None = None
    # result
    failure: Failure | None = None
    outcome: Mapping[str, Any] | None = None
    # carrier
    executor: str | None = None
    pid: int | None = None
    # scheduling
    priority: int = 0
    deps: tuple[str, ...] = ()
    idempotency_key: str | None = None
    bucket: int | None = None
    bucket_key: str | None = None
    # supervision
    lease_owner: str | None = None
    lease_until: datetime | None = None
    overridden: bool = False

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None:
            return None
        end = self.ended_at
        return None if end is None else end - self.started_at

    def evolve(self, **changes: Any) -> TaskSnapshot:
        """A copy with ``changes`` applied (like ``dataclasses.replace``, ~7x faster:
        every transition makes one, so it is on the hot path of every task)."""
        return _evolve_snapshot(self, changes)


_evolve_snapshot = evolver(TaskSnapshot)
# a status transition's copy: (s, changes, status, status_version, ended_at,
# requested_action[, retry_at]); ``changes`` win over the leading values
_TRANSITION_FIELDS = ("status", "status_version", "ended_at", "requested_action")
_evolve_status = evolver(TaskSnapshot, leading=(*_TRANSITION_FIELDS, "retry_at"))
_evolve_status_keep_retry = evolver(TaskSnapshot, leading=_TRANSITION_FIELDS)
# the three transitions every task makes, with the fields each one always writes as
# leading values (no ``changes`` dict, no setattr per field): see StateMachine
_evolve_queued = evolver(TaskSnapshot, leading=(*_TRANSITION_FIELDS, "retry_at", "queued_at"))
_evolve_starting = evolver(
    TaskSnapshot,
    leading=(
        *_TRANSITION_FIELDS,
        "retry_at",
        "attempt",
        "started_at",
        "last_heartbeat_at",
        "executor",
        "failure",
        "progress",
    ),
)
_evolve_succeeded = evolver(
    TaskSnapshot, leading=(*_TRANSITION_FIELDS, "retry_at", "outcome", "failure")
)
_BLANK = TaskSnapshot(task_id="", name="")


#: The fields a submitted task's snapshot sets (the rest keep their defaults).
SUBMIT_FIELDS = (
    "task_id",
    "name",
    "pipeline_run_id",
    "tags",
    "max_attempts",
    "created_at",
    "executor",
    "priority",
    "deps",
    "idempotency_key",
    "bucket",
    "bucket_key",
    "lease_owner",
    "lease_until",
)
_evolve_submitted = evolver(TaskSnapshot, leading=SUBMIT_FIELDS)


#: Statuses in which a task may wait for a delayed start (``delay=`` / ``not_before=``:
#: its ``retry_at`` is the start time).
WAITING_TO_START = frozenset({TaskStatus.PENDING, TaskStatus.BLOCKED})


def start_time(s: TaskSnapshot) -> datetime | None:
    """When a task waiting for a delayed start may start (None: it is not waiting)."""
    return s.retry_at if s.status in WAITING_TO_START else None


def start_text(at: datetime, now: datetime) -> str:
    """ "starts at 14:05 UTC (in 3m)": a delayed start, as every view says it."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    left = max(0.0, (at - now).total_seconds())
    return f"starts at {utc_clock(at)} (in {_in(left)})"


def iso_utc(at: datetime) -> str:
    """ISO-8601 text in UTC with its microseconds, always the same width
    (``2026-03-01T12:00:01.000000+00:00``: ``isoformat()`` drops a zero fraction)."""
    d = at if at.tzinfo is UTC else at.astimezone(UTC)
    return d.isoformat(timespec="microseconds")


def utc_clock(at: datetime) -> str:
    """ "14:05 UTC" (a naive time is taken as UTC)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%H:%M UTC")


def _in(seconds: float) -> str:
    if seconds < 60:
        return f"{int(seconds)}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m" if minutes else f"{hours}h"


def submitted_snapshot(*values: Any) -> TaskSnapshot:
    """A new task's snapshot from the values of SUBMIT_FIELDS, in that order:
    ``TaskSnapshot(**dict(zip(SUBMIT_FIELDS, values)))`` without a 32-parameter keyword
    call, as positional slot stores on a copy of a blank snapshot (once per submit)."""
    if len(values) != len(SUBMIT_FIELDS):
        raise TypeError(f"submitted_snapshot takes {len(SUBMIT_FIELDS)} values ({SUBMIT_FIELDS})")
    return _evolve_submitted(_BLANK, None, *values)


@fast_init
@dataclass(frozen=True, slots=True)
class Transition:
    """One accepted status change, as written to the append-only history."""

    task_id: str
    from_status: TaskStatus
    to_status: TaskStatus
    trigger: str
    actor: str
    reason: str | None
    at: datetime
    version: int
    override: bool = False


#: ``Transition(...)`` without the class call (``core/_fast.py: maker``): the state
#: machine builds one for every change.
new_transition = maker(Transition)


@fast_init
@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One execution attempt. Appended at start, completed at its end; never rewritten
    except by ``reset`` (which clears them all)."""

    task_id: str
    attempt: int
    started_at: datetime
    ended_at: datetime | None = None
    outcome: TaskStatus | None = None
    failure_kind: FailureKind | None = None
    failure_message: str | None = None
    traceback: str | None = None
    executor: str | None = None
    abandoned: bool = False
    exit_code: int | None = None

    @property
    def duration(self) -> timedelta | None:
        return None if self.ended_at is None else self.ended_at - self.started_at


#: ``AttemptRecord(...)`` without the class call: made when an attempt starts and ends.
new_attempt_record = maker(AttemptRecord)


class CommandState(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"
    REJECTED = "rejected"


@fast_init
@dataclass(frozen=True, slots=True)
class Command:
    """A control verb addressed to a task, travelling through the store's leased queue.

    Carries a verb and arguments made of plain data: never code.
    """

    command_id: str
    task_id: str
    verb: str
    args: Mapping[str, Any] = field(default_factory=dict)
    actor: str = "unknown"
    created_at: datetime | None = None
    state: CommandState = CommandState.PENDING
    claimed_by: str | None = None
    lease_until: datetime | None = None
    completed_at: datetime | None = None
    outcome: Mapping[str, Any] | None = None

"""Event types. Every event is a frozen value with an ``event_id`` (consumers must be
idempotent) and the time it happened. Ids and times are supplied by the caller."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, dataclass_transform

from chongming_nb.core._fast import fast_init
from chongming_nb.core.models import AttemptRecord, Failure, Progress, TaskSnapshot
from chongming_nb.core.states import TaskStatus

T = TypeVar("T")


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
def event_type(cls: type[T]) -> type[T]:
    """Declare an event type: a frozen, slotted, keyword-only dataclass, built fast
    (``_fast.fast_init``)."""
    return fast_init(dataclass(frozen=True, slots=True, kw_only=True)(cls))


@event_type
class Event:
    event_id: str
    at: datetime
    task_id: str | None = None

    @property
    def type(self) -> str:
        return type(self).__name__


@event_type
class TaskCreated(Event):
    snapshot: TaskSnapshot


@event_type
class TaskStatusChanged(Event):
    from_status: TaskStatus
    to_status: TaskStatus
    trigger: str
    actor: str
    reason: str | None
    version: int


@event_type
class AttemptStarted(Event):
    attempt: int
    executor: str | None = None


@event_type
class AttemptFailed(Event):
    attempt: int
    failure: Failure
    record: AttemptRecord | None = None


@event_type
class ProgressUpdated(Event):
    progress: Progress


@event_type
class TaskHeartbeat(Event):
    pass


@event_type
class TaskOutput(Event):
    """Something a task chose to emit with ``ctx.emit(kind, payload)``."""

    kind: str
    payload: Any = None


@event_type
class TaskLogLine(Event):
    """One line a task printed or logged (stream: stdout, stderr or log)."""

    stream: str
    line: str
    level: str | None = None


@event_type
class TaskWarning(Event):
    """Something the user should know that is not a failure (e.g. a pause rolled back)."""

    message: str


@event_type
class CompensationRan(Event):
    """A compensation callable ran for a succeeded node (ok) or raised (error)."""

    ok: bool
    error: str | None = None


@event_type
class PipelineRunStatusChanged(Event):
    run_id: str
    from_status: str | None
    to_status: str
    counts: Mapping[str, int] = field(default_factory=dict)


@event_type
class AdminOverride(Event):
    from_status: TaskStatus
    to_status: TaskStatus
    actor: str
    reason: str
    version: int


EVENT_TYPES: tuple[type[Event], ...] = (
    TaskCreated,
    TaskStatusChanged,
    AttemptStarted,
    AttemptFailed,
    ProgressUpdated,
    TaskHeartbeat,
    TaskOutput,
    TaskLogLine,
    TaskWarning,
    CompensationRan,
    PipelineRunStatusChanged,
    AdminOverride,
)

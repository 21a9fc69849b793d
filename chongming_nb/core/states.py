"""The 15-state lifecycle and the transition table (seed 001 §2, v1.3) as data."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Generic, TypeVar


class TaskStatus(StrEnum):
    """Where a task is now. Nine non-terminal states, six terminal ones."""

    # non-terminal
    PENDING = "pending"
    BLOCKED = "blocked"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"
    RETRY_WAIT = "retry_wait"
    STOPPING = "stopping"
    # terminal
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    LOST = "lost"
    # legacy alias of the seed's six-state draft
    FINISHED = "succeeded"


class RequestedAction(StrEnum):
    """What someone asked a running task to do (shown while it is on its way)."""

    STOP = "stop"
    PAUSE = "pause"


E = TypeVar("E", bound=Enum)


class Members(Generic[E]):
    """An enum's members as plain attributes: ``S = Members(TaskStatus)``, then ``S.QUEUED``
    is ``TaskStatus.QUEUED``. For code that reads members on every task: on Python 3.11,
    every read of ``TaskStatus.QUEUED`` goes through the hook that ``EnumType.__getattr__``
    installs (~0.2 µs, ten times a plain attribute; Python 3.12 removed it), and the
    controller reads a few dozen per task."""

    def __init__(self, enum: type[E]) -> None:
        self.__dict__.update(enum.__members__)

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> E: ...


#: TaskStatus's members, read fast (see Members): ``from ...states import STATUS as S``.
STATUS: Members[TaskStatus] = Members(TaskStatus)

_S = TaskStatus

# Seed 001 §2.3 v1.3, verbatim. Do not edit without changing the seed.
TRANSITIONS: Mapping[TaskStatus, frozenset[TaskStatus]] = MappingProxyType(
    {
        _S.PENDING: frozenset({_S.BLOCKED, _S.QUEUED, _S.SKIPPED, _S.CANCELLED, _S.STOPPED}),
        _S.BLOCKED: frozenset({_S.QUEUED, _S.SKIPPED, _S.CANCELLED, _S.STOPPED}),
        _S.QUEUED: frozenset({_S.STARTING, _S.PAUSED, _S.SKIPPED, _S.STOPPED, _S.CANCELLED}),
        _S.STARTING: frozenset(
            {_S.RUNNING, _S.RETRY_WAIT, _S.PAUSING, _S.STOPPING, _S.FAILED, _S.LOST}
        ),
        _S.RUNNING: frozenset(
            {_S.SUCCEEDED, _S.FAILED, _S.RETRY_WAIT, _S.PAUSING, _S.STOPPING, _S.LOST}
        ),
        # PAUSING -> RUNNING is a pause that was withdrawn (abort_pause)
        _S.PAUSING: frozenset({_S.PAUSED, _S.RUNNING, _S.FAILED, _S.STOPPING, _S.LOST}),
        # resume target: RUNNING for an in-place pause, QUEUED if it never started
        _S.PAUSED: frozenset({_S.QUEUED, _S.RUNNING, _S.STOPPED, _S.CANCELLED}),
        _S.RETRY_WAIT: frozenset(
            {_S.STARTING, _S.QUEUED, _S.PAUSED, _S.STOPPED, _S.FAILED, _S.CANCELLED}
        ),
        # STOPPING -> SUCCEEDED: it happened to finish inside the grace window
        _S.STOPPING: frozenset({_S.STOPPED, _S.SUCCEEDED, _S.FAILED, _S.LOST}),
        _S.SUCCEEDED: frozenset(),
        _S.FAILED: frozenset(),
        _S.STOPPED: frozenset(),
        _S.CANCELLED: frozenset(),
        _S.SKIPPED: frozenset(),
        _S.LOST: frozenset(),
    }
)

#: Derived from the table: the states with no out-edges.
TERMINAL: frozenset[TaskStatus] = frozenset(s for s, out in TRANSITIONS.items() if not out)
NON_TERMINAL: frozenset[TaskStatus] = frozenset(TRANSITIONS) - TERMINAL
#: Terminal states that ``retry`` may bring back to QUEUED.
REVIVABLE: frozenset[TaskStatus] = frozenset({_S.FAILED, _S.STOPPED, _S.CANCELLED, _S.LOST})
#: States in which a task holds an execution resource (the v1.2 rule).
OCCUPIED: frozenset[TaskStatus] = frozenset({_S.STARTING, _S.RUNNING, _S.PAUSING, _S.STOPPING})
#: Non-terminal states that hold no execution resource: control verbs act at once.
UNOCCUPIED: frozenset[TaskStatus] = frozenset(
    {_S.PENDING, _S.BLOCKED, _S.QUEUED, _S.PAUSED, _S.RETRY_WAIT}
)


def is_terminal(status: TaskStatus) -> bool:
    return status in TERMINAL


#: How each status reads when drawn — idle, active, warn, ok, bad or muted — for the
#: rows, the sidebar and the pictures alike. A person's stop, cancel or skip is muted,
#: never bad: it is not a failure.
STATUS_TONES: Mapping[str, str] = MappingProxyType(
    {
        "pending": "idle",
        "blocked": "idle",
        "queued": "idle",
        "starting": "active",
        "running": "active",
        "pausing": "warn",
        "paused": "warn",
        "retry_wait": "warn",
        "stopping": "warn",
        "succeeded": "ok",
        "failed": "bad",
        "stopped": "muted",
        "cancelled": "muted",
        "skipped": "muted",
        "lost": "bad",
    }
)

"""The state machine: the only writer of task status.

Every method takes a snapshot and returns ``(new_snapshot, transition)``; it never
mutates. A rejected request raises ``InvalidTransition`` (or ``AttemptsExhausted``) and
changes nothing. Idempotency of user verbs lives in the Controller, not here.

Invariants (checked by the property tests):

* an accepted transition is an edge of TRANSITIONS, or a ``retry``/``reset`` (the only
  exits from a terminal state besides force; their Transition has ``override=False``),
  or an audited ``force_transition`` (``override=True``);
* each accepted transition raises ``status_version`` by exactly one;
* RUNNING, PAUSING and STOPPING imply ``started_at``; ``ended_at`` is set exactly in
  terminal states; ``requested_action`` is STOP exactly in STOPPING and PAUSE exactly in
  PAUSING;
* PENDING, BLOCKED, QUEUED and RETRY_WAIT imply no ``started_at`` (so ``resume`` can
  tell an in-place pause from a pause before the start);
* ``can(snapshot, verb)`` is true exactly when the verb's method would accept.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from chongming_nb.core.clock import Clock
from chongming_nb.core.errors import (
    AttemptsExhausted,
    ConfigurationError,
    InvalidTransition,
    TaskError,
)
from chongming_nb.core.models import (
    Failure,
    FailureKind,
    TaskSnapshot,
    Transition,
    _evolve_queued,
    _evolve_starting,
    _evolve_status,
    _evolve_status_keep_retry,
    _evolve_succeeded,
    ended_by_outcome,
    new_transition,
)
from chongming_nb.core.states import (
    OCCUPIED,
    REVIVABLE,
    STATUS,
    TERMINAL,
    TRANSITIONS,
    UNOCCUPIED,
    RequestedAction,
    TaskStatus,
)

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: The user-facing verbs ``can`` answers for.
VERBS: tuple[str, ...] = ("start", "stop", "pause", "resume", "cancel", "retry", "skip", "reset")

#: The verbs the control plane (widget clicks, store commands, REST, CLI) accepts.
#: The one source for the widget and the JupyterLab extension. Task ids and these
#: words are all the control plane ever takes: never code.
CONTROL_VERBS: tuple[str, ...] = ("pause", "resume", "stop", "retry", "skip")

Result = tuple[TaskSnapshot, Transition]

#: Triggers of the two sanctioned exits from a terminal state (besides force).
REVIVE_TRIGGERS: tuple[str, str] = ("user:retry", "user:reset")

# The source states each method accepts (a subset of the table; the table is checked too).
_START_FROM = frozenset({S.PENDING, S.BLOCKED})
_PAUSE_AT_ONCE = frozenset({S.QUEUED, S.RETRY_WAIT})
_PAUSE_DEFERRED = frozenset({S.STARTING, S.RUNNING})
_STOP_AT_ONCE = UNOCCUPIED
_STOP_DEFERRED = frozenset({S.STARTING, S.RUNNING, S.PAUSING})
_CANCEL_AT_ONCE = frozenset(s for s in UNOCCUPIED if S.CANCELLED in TRANSITIONS[s])
_SKIP_FROM = frozenset(s for s in TRANSITIONS if S.SKIPPED in TRANSITIONS[s])
_FAIL_FROM = frozenset({S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING, S.RETRY_WAIT})
_LOST_FROM = frozenset(s for s in TRANSITIONS if S.LOST in TRANSITIONS[s])
_SUCCEED_FROM = frozenset(s for s in TRANSITIONS if S.SUCCEEDED in TRANSITIONS[s])
_QUEUE_FROM = frozenset({S.PENDING, S.BLOCKED, S.RETRY_WAIT})
_DISPATCH_FROM = frozenset({S.QUEUED, S.RETRY_WAIT})
#: The requested action each status implies (none for the others).
_REQUESTED: dict[TaskStatus, RequestedAction] = {
    S.STOPPING: RequestedAction.STOP,
    S.PAUSING: RequestedAction.PAUSE,
}

#: What arriving in a status writes besides it: the requested action it implies and
#: whether it is terminal (then ``ended_at`` is the time of the change).
Arrival = tuple[RequestedAction | None, bool]

#: Every edge of TRANSITIONS, with its arrival: derived from the table once, read by
#: ``_apply`` for every change (one dict lookup checks the edge and says what it writes).
_EDGES: dict[tuple[TaskStatus, TaskStatus], Arrival] = {
    (f, to): (_REQUESTED.get(to), to in TERMINAL) for f, tos in TRANSITIONS.items() for to in tos
}
#: The arrival in each status by a sanctioned way around the table (retry, reset, force).
_ARRIVALS: dict[TaskStatus, Arrival] = {
    to: (_REQUESTED.get(to), to in TERMINAL) for to in TaskStatus
}
#: Non-terminal states in which the current attempt has not started (no started_at).
_NOT_STARTED = frozenset({S.PENDING, S.BLOCKED, S.QUEUED, S.RETRY_WAIT})


#: A snapshot copier of core/models.py: ``(s, changes, status, version, ended_at,
#: requested_action, *leading values) -> TaskSnapshot``.
Evolve = Callable[..., TaskSnapshot]


#: The actor each trigger names (``"executor"`` of ``"executor:started"``), interned: every
#: kept transition shares one string per actor (a new one per transition cost a finished
#: task ~170 bytes of its history). Filled as triggers are seen: the controller's are a
#: few dozen; a caller of the public methods may pass its own (at most 1,024 are kept).
_ACTORS: dict[str, str] = {}


def _actor_of(trigger: str) -> str:
    actor = _ACTORS.get(trigger)
    if actor is None:
        actor = sys.intern(trigger.partition(":")[0])
        if len(_ACTORS) < 1024:
            _ACTORS[trigger] = actor
    return actor


@functools.cache  # a few module-level sets; asked for every verb a row cannot take
def _allowed_text(sources: frozenset[TaskStatus]) -> tuple[str, ...]:
    return tuple(sorted(s.value for s in sources))


class StateMachine:
    """Applies lifecycle events to snapshots. ``clock`` supplies the time of each change."""

    __slots__ = ("clock",)

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    # ----------------------------------------------------------------- plumbing

    def _apply(
        self,
        s: TaskSnapshot,
        to: TaskStatus,
        *,
        trigger: str,
        actor: str | None = None,
        reason: str | None = None,
        override: bool = False,
        revive: bool = False,
        changes: Mapping[str, Any] | None = None,
        now: datetime | None = None,
        evolve: Evolve | None = None,
        values: tuple[Any, ...] = (),
    ) -> Result:
        """The one place a change is made: ``s`` -> ``to``, one version up.

        ``evolve`` + ``values``: the copy for an edge that always writes the same extra
        fields (``evolve(s, changes, to, version, ended_at, requested, *values)``);
        by default, ``retry_at`` is cleared except on arrival in RETRY_WAIT. ``actor``:
        by default the one the trigger names (``"executor"`` of ``"executor:started"``)."""
        # retry/reset (revive) and force_transition (override) are the only ways
        # around the table; everything else must be an edge of it.
        arrival = _EDGES.get((s.status, to))
        if arrival is None:
            if not (override or revive):
                allowed = [t.value for t in TRANSITIONS[s.status]]
                raise InvalidTransition(s.status, to.value, allowed, task_id=s.task_id)
            arrival = _ARRIVALS[to]
        if now is None:
            now = self.clock.now()
        version = s.status_version + 1
        requested, terminal = arrival
        ended = now if terminal else None
        # leading fields by position, then ``changes``, which win (ended_at, retry_at);
        # no caller changes status, status_version or requested_action through them
        if evolve is not None:
            new = evolve(s, changes, to, version, ended, requested, *values)
        elif to is S.RETRY_WAIT:
            new = _evolve_status_keep_retry(s, changes, to, version, ended, requested)
        else:
            new = _evolve_status(s, changes, to, version, ended, requested, None)
        if actor is None:
            actor = _actor_of(trigger)
        tr = new_transition(s.task_id, s.status, to, trigger, actor, reason, now, version, override)
        return new, tr

    @staticmethod
    def _reject(
        s: TaskSnapshot, verb: str, sources: frozenset[TaskStatus], detail: str | None = None
    ) -> InvalidTransition:
        return InvalidTransition(
            s.status, verb, _allowed_text(sources), detail=detail, task_id=s.task_id
        )

    # ------------------------------------------------------------- predicates

    def check(self, s: TaskSnapshot, verb: str, *, force: bool = False) -> TaskError | None:
        """The error ``verb`` would raise on ``s``, or None if it would be accepted."""
        st = s.status
        if verb == "start":
            return None if st in _START_FROM else self._reject(s, verb, _START_FROM)
        if verb == "stop":
            ok = st in _STOP_AT_ONCE or st in _STOP_DEFERRED
            return None if ok else self._reject(s, verb, _STOP_AT_ONCE | _STOP_DEFERRED)
        if verb == "pause":
            ok = st in _PAUSE_AT_ONCE or st in _PAUSE_DEFERRED
            return None if ok else self._reject(s, verb, _PAUSE_AT_ONCE | _PAUSE_DEFERRED)
        if verb == "resume":
            return None if st is S.PAUSED else self._reject(s, verb, frozenset({S.PAUSED}))
        if verb == "cancel":
            ok = st in _CANCEL_AT_ONCE or st in _STOP_DEFERRED
            return None if ok else self._reject(s, verb, _CANCEL_AT_ONCE | _STOP_DEFERRED)
        if verb == "retry":
            if st not in REVIVABLE:
                return self._reject(s, verb, REVIVABLE)
            if not force and s.attempt >= s.max_attempts:
                return AttemptsExhausted(s.attempt, s.max_attempts, task_id=s.task_id)
            return None
        if verb == "skip":
            return None if st in _SKIP_FROM else self._reject(s, verb, _SKIP_FROM)
        if verb == "reset":
            if st in OCCUPIED or (st is S.PAUSED and s.started_at is not None):
                return self._reject(
                    s,
                    verb,
                    TERMINAL | UNOCCUPIED,
                    detail="it holds a running execution; stop it first",
                )
            return None
        raise ConfigurationError(f"unknown verb {verb!r}; known verbs: {', '.join(VERBS)}")

    def can(self, s: TaskSnapshot, verb: str, *, force: bool = False) -> tuple[bool, str | None]:
        """``(True, None)`` if ``verb`` would be accepted now, else ``(False, why)``."""
        err = self.check(s, verb, force=force)
        return (True, None) if err is None else (False, str(err))

    def _require(self, s: TaskSnapshot, verb: str, *, force: bool = False) -> None:
        err = self.check(s, verb, force=force)
        if err is not None:
            raise err

    # ------------------------------------------------------------ user verbs

    def start(self, s: TaskSnapshot, *, actor: str = "user", reason: str | None = None) -> Result:
        """PENDING/BLOCKED -> QUEUED (dependencies resolved)."""
        self._require(s, "start")
        return self.mark_queued(s, trigger="user:start", actor=actor, reason=reason)

    def request_pause(
        self, s: TaskSnapshot, *, actor: str = "user", reason: str | None = None
    ) -> Result:
        """Unoccupied: QUEUED/RETRY_WAIT -> PAUSED at once. Occupied: -> PAUSING."""
        self._require(s, "pause")
        to = S.PAUSED if s.status in _PAUSE_AT_ONCE else S.PAUSING
        changes: dict[str, Any] = {}
        if s.status is S.RETRY_WAIT:
            changes["retry_at"] = None
        return self._apply(s, to, trigger="user:pause", actor=actor, reason=reason, changes=changes)

    def resume(self, s: TaskSnapshot, *, actor: str = "user", reason: str | None = None) -> Result:
        """PAUSED -> RUNNING for an in-place pause, -> QUEUED if it never started."""
        self._require(s, "resume")
        if s.started_at is not None:
            return self._apply(s, S.RUNNING, trigger="user:resume", actor=actor, reason=reason)
        return self._apply(
            s,
            S.QUEUED,
            trigger="user:resume",
            actor=actor,
            reason=reason,
            changes={"queued_at": self.clock.now()},
        )

    def request_stop(
        self,
        s: TaskSnapshot,
        *,
        actor: str = "user",
        reason: str | None = None,
        trigger: str = "user:stop",
    ) -> Result:
        """Unoccupied -> STOPPED at once; occupied -> STOPPING (grace window).

        A stop is not a failure: the stopped task has no ``failure``; its ``outcome``
        says who stopped it and why (:func:`ended_by_outcome`), set already on STOPPING
        so that ``confirm_stopped`` keeps it."""
        self._require(s, "stop")
        ended = ended_by_outcome(actor, reason)
        if s.status in _STOP_AT_ONCE:
            return self._apply(
                s,
                S.STOPPED,
                trigger=trigger,
                actor=actor,
                reason=reason,
                changes={"failure": None, "outcome": ended},
            )
        return self._apply(
            s, S.STOPPING, trigger=trigger, actor=actor, reason=reason, changes={"outcome": ended}
        )

    def cancel(
        self,
        s: TaskSnapshot,
        *,
        reason: str,
        actor: str = "orchestrator",
        kind: FailureKind = FailureKind.CANCELLED,
    ) -> Result:
        """Cascade cancel. Unoccupied -> CANCELLED at once; occupied -> STOPPING (the
        execution must still notice; it then ends STOPPED)."""
        self._require(s, "cancel")
        ended = ended_by_outcome(actor, reason)
        if s.status in _CANCEL_AT_ONCE:
            return self._apply(
                s,
                S.CANCELLED,
                trigger="orchestrator:cancel",
                actor=actor,
                reason=reason,
                changes={"failure": Failure(kind, reason), "outcome": ended},
            )
        return self._apply(
            s,
            S.STOPPING,
            trigger="orchestrator:cancel",
            actor=actor,
            reason=reason,
            changes={"outcome": ended},
        )

    def skip(
        self,
        s: TaskSnapshot,
        *,
        reason: str | None = None,
        actor: str = "user",
        kind: FailureKind | None = None,
    ) -> Result:
        """PENDING/BLOCKED/QUEUED -> SKIPPED; ``kind`` records why a skip that is an
        automatic decision was made (a pipeline's ``condition_false``)."""
        self._require(s, "skip")
        changes: dict[str, Any] = {"outcome": ended_by_outcome(actor, reason)}
        if kind is not None:
            changes["failure"] = Failure(kind, reason or kind.value)
        return self._apply(
            s, S.SKIPPED, trigger="user:skip", actor=actor, reason=reason, changes=changes
        )

    def retry(
        self,
        s: TaskSnapshot,
        *,
        force: bool = False,
        actor: str = "user",
        reason: str | None = None,
    ) -> Result:
        """FAILED/STOPPED/CANCELLED/LOST -> QUEUED, keeping the attempt history.

        Without ``force`` the attempt budget must allow another attempt; with it the
        budget grows by one.
        """
        self._require(s, "retry", force=force)
        now = self.clock.now()
        max_attempts = max(s.max_attempts, s.attempt + 1) if force else s.max_attempts
        return self._apply(
            s,
            S.QUEUED,
            trigger="user:retry",
            actor=actor,
            reason=reason,
            revive=True,
            changes={
                "max_attempts": max_attempts,
                "queued_at": now,
                "started_at": None,
                "failure": None,
                "outcome": None,
                "progress": None,
                "pid": None,
            },
        )

    def reset(self, s: TaskSnapshot, *, actor: str = "user", reason: str | None = None) -> Result:
        """Any state not holding an execution -> PENDING, attempt counter back to 0."""
        self._require(s, "reset")
        return self._apply(
            s,
            S.PENDING,
            trigger="user:reset",
            actor=actor,
            reason=reason,
            revive=True,
            changes={
                "attempt": 0,
                "queued_at": None,
                "started_at": None,
                "failure": None,
                "outcome": None,
                "progress": None,
                "last_heartbeat_at": None,
                "pid": None,
            },
        )

    def force_transition(
        self, s: TaskSnapshot, to: TaskStatus, *, actor: str, reason: str
    ) -> Result:
        """Bypass the table. Needs a non-empty actor and reason; marks the snapshot
        ``overridden``. The caller records an AdminOverride event.

        The snapshot stays self-consistent: forcing into an occupied state sets
        ``started_at`` if missing; forcing into a state that holds no execution and has
        not started (pending, blocked, queued, retry_wait) clears ``started_at`` and
        ``pid``, so a later pause/resume cannot claim a RUNNING execution that is not there.
        """
        if not isinstance(actor, str) or not actor.strip():
            raise ConfigurationError("force_transition needs a non-empty actor")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError("force_transition needs a non-empty reason")
        try:
            to = TaskStatus(to)
        except ValueError:
            known = ", ".join(t.value for t in TaskStatus)
            raise ConfigurationError(
                f"force_transition to unknown status {to!r}; known: {known}"
            ) from None
        changes: dict[str, Any] = {"overridden": True}
        if to in OCCUPIED and s.started_at is None:
            changes["started_at"] = self.clock.now()
        elif to in _NOT_STARTED:
            changes["started_at"] = None
            changes["pid"] = None
        return self._apply(
            s, to, trigger="admin:force", actor=actor, reason=reason, override=True, changes=changes
        )

    # ------------------------------------------------------ lifecycle events

    def mark_blocked(
        self, s: TaskSnapshot, *, reason: str | None = None, until: datetime | None = None
    ) -> Result:
        """PENDING -> BLOCKED: waiting for dependencies and/or, with ``until``, for a
        delayed start (kept in ``retry_at``: the time the task may be queued)."""
        if s.status is not S.PENDING:
            raise self._reject(s, "mark_blocked", frozenset({S.PENDING}))
        return self._apply(
            s,
            S.BLOCKED,
            trigger="scheduler:blocked",
            reason=reason,
            changes=None if until is None else {"retry_at": until},
        )

    def mark_queued(
        self,
        s: TaskSnapshot,
        *,
        trigger: str = "scheduler:ready",
        actor: str = "scheduler",
        reason: str | None = None,
        now: datetime | None = None,
    ) -> Result:
        """``now``: the time of the change, when the caller already read the clock."""
        if s.status not in _QUEUE_FROM:
            raise self._reject(s, "mark_queued", _QUEUE_FROM)
        if now is None:
            now = self.clock.now()
        return self._apply(
            s,
            S.QUEUED,
            trigger=trigger,
            actor=actor,
            reason=reason,
            now=now,
            evolve=_evolve_queued,
            values=(None, now),  # retry_at, queued_at
        )

    def mark_starting(self, s: TaskSnapshot, *, executor: str | None = None) -> Result:
        """QUEUED/RETRY_WAIT -> STARTING; a new attempt begins (guard: the budget)."""
        if s.status not in _DISPATCH_FROM:
            raise self._reject(s, "mark_starting", _DISPATCH_FROM)
        if s.attempt + 1 > s.max_attempts:
            raise AttemptsExhausted(s.attempt, s.max_attempts, task_id=s.task_id)
        now = self.clock.now()
        return self._apply(
            s,
            S.STARTING,
            trigger="scheduler:dispatch",
            now=now,
            evolve=_evolve_starting,
            # retry_at, attempt, started_at, last_heartbeat_at, executor, failure, progress
            values=(None, s.attempt + 1, now, now, executor or s.executor, None, None),
        )

    def mark_running(
        self, s: TaskSnapshot, *, pid: int | None = None, at: datetime | None = None
    ) -> Result:
        """STARTING -> RUNNING (guard: ``started_at`` is set). ``at``: when the executor
        reported the start, if the transition is recorded later than that."""
        if s.status is not S.STARTING:
            raise self._reject(s, "mark_running", frozenset({S.STARTING}))
        if s.started_at is None:
            raise self._reject(s, "mark_running", frozenset({S.STARTING}), detail="no started_at")
        return self._apply(
            s,
            S.RUNNING,
            trigger="executor:started",
            changes=None if pid is None else {"pid": pid},
            now=at,
        )

    def confirm_paused(self, s: TaskSnapshot) -> Result:
        if s.status is not S.PAUSING:
            raise self._reject(s, "confirm_paused", frozenset({S.PAUSING}))
        return self._apply(s, S.PAUSED, trigger="executor:paused")

    def abort_pause(self, s: TaskSnapshot, *, reason: str | None = None) -> Result:
        """PAUSING -> RUNNING: the pause was not reached in time, or was withdrawn."""
        if s.status is not S.PAUSING:
            raise self._reject(s, "abort_pause", frozenset({S.PAUSING}))
        return self._apply(s, S.RUNNING, trigger="executor:pause_aborted", reason=reason)

    def confirm_stopped(
        self,
        s: TaskSnapshot,
        *,
        failure: Failure | None = None,
        reason: str | None = None,
        detail: str | None = None,
    ) -> Result:
        """STOPPING -> STOPPED: the execution noticed the stop (a known outcome). No
        failure unless the stop came from a cancel (``failure``: its kind); the outcome
        set by ``request_stop``/``cancel`` (who asked) stands, with ``detail`` (what the
        executor had to do) added."""
        if s.status is not S.STOPPING:
            raise self._reject(s, "confirm_stopped", frozenset({S.STOPPING}))
        changes: dict[str, Any] = {"failure": failure}
        if detail is not None:
            prev = s.outcome if s.outcome is not None and "by" in s.outcome else None
            changes["outcome"] = ended_by_outcome(
                str(prev["by"]) if prev else "executor",
                prev.get("reason") if prev else reason,
                detail,
            )
        return self._apply(
            s,
            S.STOPPED,
            trigger="executor:stopped",
            reason=reason,
            changes=changes,
        )

    def mark_succeeded(
        self,
        s: TaskSnapshot,
        *,
        outcome: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> Result:
        """``now``: the time of the change, when the caller already read the clock."""
        if s.status not in _SUCCEED_FROM:
            raise self._reject(s, "mark_succeeded", _SUCCEED_FROM)
        return self._apply(
            s,
            S.SUCCEEDED,
            trigger="executor:returned",
            now=now,
            evolve=_evolve_succeeded,
            values=(None, outcome, None),  # retry_at, outcome, failure
        )

    def mark_failed(
        self, s: TaskSnapshot, failure: Failure, *, retry_at: datetime | None = None
    ) -> Result:
        """An attempt failed. -> RETRY_WAIT when the failure is retryable, the budget
        allows another attempt and the table has the edge; otherwise -> FAILED."""
        if s.status not in _FAIL_FROM:
            raise self._reject(s, "mark_failed", _FAIL_FROM)
        can_retry = (
            failure.retryable
            and s.attempt < s.max_attempts
            and S.RETRY_WAIT in TRANSITIONS[s.status]
        )
        if can_retry:
            return self._apply(
                s,
                S.RETRY_WAIT,
                trigger="executor:failed",
                reason=failure.message,
                changes={
                    "failure": failure,
                    "outcome": None,
                    "started_at": None,
                    "retry_at": retry_at,
                    "pid": None,
                },
            )
        trigger = "retry:exhausted" if failure.retryable else "executor:failed"
        return self._apply(
            s,
            S.FAILED,
            trigger=trigger,
            actor="executor",
            reason=failure.message,
            changes={"failure": failure, "outcome": None},  # a stop asked before: void
        )

    def mark_lost(self, s: TaskSnapshot, *, reason: str, actor: str = "supervisor") -> Result:
        """The carrier vanished or was abandoned: the result is unknown."""
        if s.status not in _LOST_FROM:
            raise self._reject(s, "mark_lost", _LOST_FROM)
        return self._apply(
            s,
            S.LOST,
            trigger="supervisor:lost",
            actor=actor,
            reason=reason,
            changes={"failure": Failure(FailureKind.LOST, reason)},
        )


def replay(initial: TaskSnapshot, transitions: list[Transition]) -> tuple[TaskStatus, int]:
    """Status and version that a history of transitions leads to (for verification)."""
    status, version = initial.status, initial.status_version
    for t in transitions:
        if t.from_status is not status or t.version != version + 1:
            raise InvalidTransition(
                status, t.to_status.value, [], detail=f"history gap at version {t.version}"
            )
        sanctioned = t.override or t.trigger in REVIVE_TRIGGERS
        if not sanctioned and t.to_status not in TRANSITIONS[status]:
            raise InvalidTransition(
                status, t.to_status.value, [s.value for s in TRANSITIONS[status]]
            )
        status, version = t.to_status, t.version
    return status, version


VerbMethod = Callable[..., Result]

"""Random event sequences over every StateMachine method, checked against an independent
model of the rules (seed 001 §2.3 v1.2/v1.3, §3.1) and the snapshot invariants."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from chongming_nb import (
    TERMINAL,
    TRANSITIONS,
    AttemptsExhausted,
    ConfigurationError,
    Failure,
    FailureKind,
    InvalidTransition,
    StateMachine,
    TaskError,
    TaskSnapshot,
    TaskStatus,
    Transition,
)
from chongming_nb.core.state_machine import REVIVE_TRIGGERS, VERBS, replay
from chongming_nb.core.states import RequestedAction
from chongming_nb.testing import FakeClock

S = TaskStatus
Snap = TaskSnapshot
Expect = TaskStatus | type[TaskError]

# ---------------------------------------------------------------- the model (oracle)
# Written from the seed, not from state_machine.py: for each event, where it leads from a
# snapshot, or which error it must raise.

NOT_STARTED = {S.PENDING, S.BLOCKED, S.QUEUED, S.RETRY_WAIT}
HOLDS_EXECUTION = {S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING}


def _in(s: Snap, sources: set[TaskStatus], to: TaskStatus) -> Expect:
    return to if s.status in sources else InvalidTransition


def expect_start(s: Snap) -> Expect:
    return _in(s, {S.PENDING, S.BLOCKED}, S.QUEUED)


def expect_stop(s: Snap) -> Expect:
    if s.status in {S.PENDING, S.BLOCKED, S.QUEUED, S.PAUSED, S.RETRY_WAIT}:
        return S.STOPPED
    return _in(s, {S.STARTING, S.RUNNING, S.PAUSING}, S.STOPPING)


def expect_pause(s: Snap) -> Expect:
    if s.status in {S.QUEUED, S.RETRY_WAIT}:
        return S.PAUSED
    return _in(s, {S.STARTING, S.RUNNING}, S.PAUSING)


def expect_resume(s: Snap) -> Expect:
    if s.status is not S.PAUSED:
        return InvalidTransition
    return S.RUNNING if s.started_at is not None else S.QUEUED


def expect_cancel(s: Snap) -> Expect:
    if s.status in {S.PENDING, S.BLOCKED, S.QUEUED, S.PAUSED, S.RETRY_WAIT}:
        return S.CANCELLED
    return _in(s, {S.STARTING, S.RUNNING, S.PAUSING}, S.STOPPING)


def expect_retry(s: Snap, force: bool) -> Expect:
    if s.status not in {S.FAILED, S.STOPPED, S.CANCELLED, S.LOST}:
        return InvalidTransition
    if not force and s.attempt >= s.max_attempts:
        return AttemptsExhausted
    return S.QUEUED


def expect_skip(s: Snap) -> Expect:
    return _in(s, {S.PENDING, S.BLOCKED, S.QUEUED}, S.SKIPPED)


def expect_reset(s: Snap) -> Expect:
    if s.status in HOLDS_EXECUTION or (s.status is S.PAUSED and s.started_at is not None):
        return InvalidTransition
    return S.PENDING


def expect_mark_starting(s: Snap) -> Expect:
    if s.status not in {S.QUEUED, S.RETRY_WAIT}:
        return InvalidTransition
    return S.STARTING if s.attempt + 1 <= s.max_attempts else AttemptsExhausted


def expect_mark_failed(s: Snap, retryable: bool) -> Expect:
    if s.status not in {S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING, S.RETRY_WAIT}:
        return InvalidTransition
    if retryable and s.attempt < s.max_attempts and s.status in {S.STARTING, S.RUNNING}:
        return S.RETRY_WAIT
    return S.FAILED


VERB_EXPECT: dict[str, Callable[[Snap], Expect]] = {
    "start": expect_start,
    "stop": expect_stop,
    "pause": expect_pause,
    "resume": expect_resume,
    "cancel": expect_cancel,
    "retry": lambda s: expect_retry(s, force=False),
    "skip": expect_skip,
    "reset": expect_reset,
}


def verb_call(sm: StateMachine, verb: str) -> Callable[[Snap], Any]:
    return {
        "start": lambda s: sm.start(s),
        "stop": lambda s: sm.request_stop(s),
        "pause": lambda s: sm.request_pause(s),
        "resume": lambda s: sm.resume(s),
        "cancel": lambda s: sm.cancel(s, reason="cascade"),
        "retry": lambda s: sm.retry(s),
        "skip": lambda s: sm.skip(s, reason="not needed"),
        "reset": lambda s: sm.reset(s),
    }[verb]


# ---------------------------------------------------------------- the machine

NAMES = st.sampled_from(["", " ", "ops", "ana@x"])


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.sm = StateMachine(self.clock)
        self.initial = TaskSnapshot(task_id="t", name="job", created_at=self.clock.now())
        self.snap = self.initial
        self.history: list[Transition] = []
        self.accepted = 0
        self.rejected = 0
        self.can_checked: Snap | None = None  # the snapshot ``can`` was last checked on

    @initialize(max_attempts=st.integers(1, 3))
    def budget(self, max_attempts: int) -> None:
        self.initial = self.initial.evolve(max_attempts=max_attempts)
        self.snap = self.initial

    # -------------------------------------------------------------- the checker

    def apply(self, label: str, expected: Expect, call: Callable[[Snap], Any]) -> None:
        before = self.snap
        if isinstance(expected, TaskStatus):
            new, tr = call(before)
            self.check_accepted(label, before, new, tr, expected)
            self.snap = new
            self.history.append(tr)
            self.accepted += 1
            return
        try:
            call(before)
        except TaskError as err:
            assert type(err) is expected, (label, before.status, err)
            if isinstance(err, InvalidTransition):
                assert err.current is before.status
                assert err.requested
                assert isinstance(err.allowed, tuple)
                assert before.status.value not in err.allowed or err.detail, err
                assert before.status.value in str(err)
        else:
            raise AssertionError(f"{label} from {before.status} was accepted, expected {expected}")
        # the snapshot object is immutable; "changes nothing" means no new version either
        assert self.snap is before
        self.rejected += 1

    def check_accepted(
        self, label: str, before: Snap, new: Snap, tr: Transition, expected: TaskStatus
    ) -> None:
        assert new.status is expected, (label, before.status, new.status, expected)
        assert new.status_version == before.status_version + 1
        assert (tr.from_status, tr.to_status) == (before.status, new.status)
        assert tr.version == new.status_version
        assert tr.task_id == before.task_id
        assert tr.at == self.clock.now()
        is_edge = new.status in TRANSITIONS[before.status]
        is_revive = tr.trigger in REVIVE_TRIGGERS and not tr.override
        is_force = tr.override and tr.trigger == "admin:force"
        assert is_edge or is_revive or is_force, (label, tr)
        if before.status in TERMINAL:
            assert is_revive or is_force, f"{label} left terminal {before.status}"
        if is_revive:
            assert tr.trigger == f"user:{label}"
        if is_force:
            assert label == "force" and new.overridden

    # -------------------------------------------------------------- user verbs

    @rule(verb=st.sampled_from(VERBS))
    def verb(self, verb: str) -> None:
        self.apply(verb, VERB_EXPECT[verb](self.snap), verb_call(self.sm, verb))

    @rule()
    def retry_forced(self) -> None:
        expected = expect_retry(self.snap, force=True)
        self.apply("retry", expected, lambda s: self.sm.retry(s, force=True))
        if expected is S.QUEUED:
            assert self.snap.attempt < self.snap.max_attempts

    @rule(to=st.sampled_from(list(TaskStatus)), actor=NAMES, reason=NAMES)
    def force(self, to: TaskStatus, actor: str, reason: str) -> None:
        ok = actor.strip() and reason.strip()
        expected: Expect = to if ok else ConfigurationError
        self.apply(
            "force", expected, lambda s: self.sm.force_transition(s, to, actor=actor, reason=reason)
        )

    # ------------------------------------------------------- lifecycle events

    @rule()
    def mark_blocked(self) -> None:
        self.apply("mark_blocked", _in(self.snap, {S.PENDING}, S.BLOCKED), self.sm.mark_blocked)

    @rule()
    def mark_queued(self) -> None:
        expected = _in(self.snap, {S.PENDING, S.BLOCKED, S.RETRY_WAIT}, S.QUEUED)
        self.apply("mark_queued", expected, self.sm.mark_queued)
        if expected is S.QUEUED:
            assert self.snap.queued_at == self.clock.now()

    @rule()
    def mark_starting(self) -> None:
        expected = expect_mark_starting(self.snap)
        attempt = self.snap.attempt
        self.apply("mark_starting", expected, lambda s: self.sm.mark_starting(s, executor="thread"))
        if expected is S.STARTING:
            assert self.snap.attempt == attempt + 1
            assert self.snap.started_at == self.clock.now()

    @rule()
    def mark_running(self) -> None:
        self.apply("mark_running", _in(self.snap, {S.STARTING}, S.RUNNING), self.sm.mark_running)

    @rule()
    def confirm_paused(self) -> None:
        expected = _in(self.snap, {S.PAUSING}, S.PAUSED)
        self.apply("confirm_paused", expected, self.sm.confirm_paused)

    @rule()
    def abort_pause(self) -> None:
        self.apply("abort_pause", _in(self.snap, {S.PAUSING}, S.RUNNING), self.sm.abort_pause)

    @rule()
    def confirm_stopped(self) -> None:
        expected = _in(self.snap, {S.STOPPING}, S.STOPPED)
        self.apply("confirm_stopped", expected, self.sm.confirm_stopped)

    @rule()
    def mark_succeeded(self) -> None:
        expected = _in(self.snap, {S.RUNNING, S.STOPPING}, S.SUCCEEDED)
        self.apply("mark_succeeded", expected, self.sm.mark_succeeded)

    @rule(retryable=st.booleans())
    def mark_failed(self, retryable: bool) -> None:
        failure = Failure(FailureKind.EXCEPTION, "boom", retryable=retryable)
        retry_at = self.clock.now() + timedelta(seconds=2)
        self.apply(
            "mark_failed",
            expect_mark_failed(self.snap, retryable),
            lambda s: self.sm.mark_failed(s, failure, retry_at=retry_at),
        )

    @rule()
    def mark_lost(self) -> None:
        expected = _in(self.snap, {S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING}, S.LOST)
        self.apply("mark_lost", expected, lambda s: self.sm.mark_lost(s, reason="vanished"))

    # ---------------------------------------------------------------- time

    @rule(seconds=st.floats(0, 3600, allow_nan=False))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # ------------------------------------------------------------ invariants

    @invariant()
    def occupied_states_have_started(self) -> None:
        s = self.snap
        if s.status in HOLDS_EXECUTION:
            assert s.started_at is not None, s
        if s.status in NOT_STARTED:
            assert s.started_at is None, s

    @invariant()
    def ended_exactly_in_terminal_states(self) -> None:
        assert (self.snap.ended_at is not None) == (self.snap.status in TERMINAL)

    @invariant()
    def requested_action_matches_status(self) -> None:
        s = self.snap
        assert (s.requested_action is RequestedAction.STOP) == (s.status is S.STOPPING)
        assert (s.requested_action is RequestedAction.PAUSE) == (s.status is S.PAUSING)

    @invariant()
    def budget_respected(self) -> None:
        assert 0 <= self.snap.attempt <= self.snap.max_attempts
        if self.snap.status is not S.RETRY_WAIT:
            assert self.snap.retry_at is None

    @invariant()
    def can_agrees_with_the_methods(self) -> None:
        if self.snap is self.can_checked:  # unchanged since the last check (pure functions)
            return
        self.can_checked = self.snap
        for verb in VERBS:
            ok, why = self.sm.can(self.snap, verb)
            try:
                verb_call(self.sm, verb)(self.snap)
            except TaskError as err:
                assert ok is False and why == str(err), (verb, self.snap.status)
            else:
                assert ok is True and why is None, (verb, self.snap.status)
            assert ok == isinstance(VERB_EXPECT[verb](self.snap), TaskStatus)
        forced_ok, _ = self.sm.can(self.snap, "retry", force=True)
        assert forced_ok == (expect_retry(self.snap, force=True) is S.QUEUED)

    @invariant()
    def history_replays(self) -> None:
        assert self.snap.status_version == len(self.history)
        assert replay(self.initial, self.history) == (self.snap.status, self.snap.status_version)

    @precondition(lambda self: self.accepted + self.rejected > 0)
    @invariant()
    def overridden_only_after_force(self) -> None:
        forced = any(t.override for t in self.history)
        assert self.snap.overridden == forced


LifecycleMachine.TestCase.settings = settings(
    max_examples=2000,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLifecycle = LifecycleMachine.TestCase

"""StateMachine: every verb, lifecycle event and guard, one behaviour per test."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from chongming_nb import (
    TRANSITIONS,
    AttemptsExhausted,
    ConfigurationError,
    Failure,
    FailureKind,
    InvalidTransition,
    StateMachine,
    TaskSnapshot,
    TaskStatus,
)
from chongming_nb.core.models import ended_by
from chongming_nb.core.state_machine import replay
from chongming_nb.core.states import RequestedAction
from chongming_nb.testing import FakeClock

MakeSnap = Callable[..., TaskSnapshot]  # the ``make`` fixture of conftest.py
S = TaskStatus
ALL = list(TaskStatus)
RETRYABLE = Failure(FailureKind.EXCEPTION, "boom", retryable=True)
FATAL = Failure(FailureKind.EXCEPTION, "boom", retryable=False)


# ------------------------------------------------------------------ the v1.2 rule

UNOCCUPIED_STOP = [S.PENDING, S.BLOCKED, S.QUEUED, S.PAUSED, S.RETRY_WAIT]
OCCUPIED_STOP = [S.STARTING, S.RUNNING, S.PAUSING]


@pytest.mark.parametrize("st", UNOCCUPIED_STOP)
def test_stop_on_an_unoccupied_task_is_immediate(sm: StateMachine, make: MakeSnap, st: S) -> None:
    s = make(st)
    new, tr = sm.request_stop(s, actor="ana", reason="not needed")
    assert new.status is S.STOPPED
    assert new.requested_action is None
    assert new.ended_at == sm.clock.now()
    # a stop is not a failure: no Failure, the outcome says who stopped it and why
    assert new.failure is None
    assert new.outcome == {"by": "ana", "reason": "not needed"}
    assert ended_by(new) == {"by": "ana", "reason": "not needed"}
    assert (tr.from_status, tr.to_status, tr.trigger) == (st, S.STOPPED, "user:stop")
    assert (tr.actor, tr.reason) == ("ana", "not needed")


@pytest.mark.parametrize("st", OCCUPIED_STOP)
def test_stop_on_an_occupied_task_goes_through_stopping(
    sm: StateMachine, make: MakeSnap, st: S
) -> None:
    new, tr = sm.request_stop(make(st))
    assert new.status is S.STOPPING
    assert new.requested_action is RequestedAction.STOP
    assert new.ended_at is None
    assert tr.to_status is S.STOPPING


def test_stop_on_stopping_is_rejected(sm: StateMachine, make: MakeSnap) -> None:
    with pytest.raises(InvalidTransition) as ei:
        sm.request_stop(make(S.STOPPING))
    assert "stopping" not in ei.value.allowed


@pytest.mark.parametrize("st", [S.SUCCEEDED, S.FAILED, S.STOPPED, S.CANCELLED, S.SKIPPED, S.LOST])
def test_stop_on_a_terminal_task_is_rejected(sm: StateMachine, make: MakeSnap, st: S) -> None:
    with pytest.raises(InvalidTransition) as ei:
        sm.request_stop(make(st))
    assert ei.value.current is st
    assert ei.value.requested == "stop"


@pytest.mark.parametrize("st", [S.QUEUED, S.RETRY_WAIT])
def test_pause_before_start_is_immediate(sm: StateMachine, make: MakeSnap, st: S) -> None:
    s = make(st, retry_at=sm.clock.now() + timedelta(seconds=5) if st is S.RETRY_WAIT else None)
    new, _ = sm.request_pause(s)
    assert new.status is S.PAUSED
    assert new.requested_action is None
    assert new.started_at is None
    assert new.retry_at is None


@pytest.mark.parametrize("st", [S.STARTING, S.RUNNING])
def test_pause_while_occupied_goes_through_pausing(sm: StateMachine, make: MakeSnap, st: S) -> None:
    new, _ = sm.request_pause(make(st))
    assert new.status is S.PAUSING
    assert new.requested_action is RequestedAction.PAUSE


@pytest.mark.parametrize(
    "st", sorted(set(S) - {S.QUEUED, S.RETRY_WAIT, S.STARTING, S.RUNNING}, key=ALL.index)
)
def test_pause_elsewhere_is_rejected(sm: StateMachine, make: MakeSnap, st: S) -> None:
    with pytest.raises(InvalidTransition) as ei:
        sm.request_pause(make(st))
    assert set(ei.value.allowed) == {"queued", "retry_wait", "starting", "running"}


@pytest.mark.parametrize("st", UNOCCUPIED_STOP)
def test_cancel_unoccupied_is_immediate(sm: StateMachine, make: MakeSnap, st: S) -> None:
    new, tr = sm.cancel(make(st), reason="upstream failed", kind=FailureKind.DEPENDENCY_FAILED)
    assert new.status is S.CANCELLED
    assert new.failure == Failure(FailureKind.DEPENDENCY_FAILED, "upstream failed")
    assert tr.trigger == "orchestrator:cancel"
    assert tr.reason == "upstream failed"


@pytest.mark.parametrize("st", OCCUPIED_STOP)
def test_cancel_occupied_goes_through_stopping(sm: StateMachine, make: MakeSnap, st: S) -> None:
    new, _ = sm.cancel(make(st), reason="pipeline stopped")
    assert new.status is S.STOPPING
    assert new.requested_action is RequestedAction.STOP


# ------------------------------------------------------------------ resume


def test_resume_after_an_in_place_pause_returns_to_running(
    sm: StateMachine, make: MakeSnap
) -> None:
    s = make(S.RUNNING)
    s, _ = sm.request_pause(s)
    s, _ = sm.confirm_paused(s)
    assert s.status is S.PAUSED and s.started_at is not None
    new, tr = sm.resume(s)
    assert new.status is S.RUNNING
    assert new.started_at == s.started_at
    assert tr.trigger == "user:resume"


def test_resume_of_a_task_paused_while_queued_requeues_it(
    sm: StateMachine, make: MakeSnap, clock: FakeClock
) -> None:
    s, _ = sm.request_pause(make(S.QUEUED))
    clock.advance(30)
    new, _ = sm.resume(s)
    assert new.status is S.QUEUED
    assert new.queued_at == clock.now()
    assert new.started_at is None


def test_resume_of_a_task_paused_in_retry_wait_requeues_it(
    sm: StateMachine, make: MakeSnap
) -> None:
    s = make(S.RUNNING)
    s, _ = sm.mark_failed(s, RETRYABLE)
    assert s.status is S.RETRY_WAIT and s.started_at is None
    s, _ = sm.request_pause(s)
    new, _ = sm.resume(s)
    assert new.status is S.QUEUED


@pytest.mark.parametrize("st", sorted(set(S) - {S.PAUSED}, key=ALL.index))
def test_resume_only_from_paused(sm: StateMachine, make: MakeSnap, st: S) -> None:
    with pytest.raises(InvalidTransition) as ei:
        sm.resume(make(st))
    assert ei.value.allowed == ("paused",)


# ------------------------------------------------------------------ guards


def test_mark_running_needs_started_at(sm: StateMachine, make: MakeSnap) -> None:
    s = make(S.STARTING, started_at=None)
    with pytest.raises(InvalidTransition) as ei:
        sm.mark_running(s)
    assert "started_at" in str(ei.value)
    ok, _ = sm.mark_running(make(S.STARTING))
    assert ok.status is S.RUNNING


def test_mark_starting_writes_started_at_so_every_running_has_one(
    sm: StateMachine, make: MakeSnap, clock: FakeClock
) -> None:
    s, _ = sm.mark_starting(make(S.QUEUED), executor="thread")
    assert s.started_at == clock.now()
    assert s.attempt == 1
    assert s.executor == "thread"
    s, _ = sm.mark_running(s, pid=4242)
    assert s.status is S.RUNNING and s.pid == 4242


def test_the_actor_a_trigger_names_is_one_string_for_every_transition(
    sm: StateMachine, make: MakeSnap
) -> None:
    # every finished task keeps its transitions: a new actor string per transition
    # cost each one ~170 bytes (bench_memory's row)
    _, first = sm.mark_starting(make(S.QUEUED))
    _, second = sm.mark_starting(make(S.QUEUED))
    assert first.actor == "scheduler"
    assert first.actor is second.actor


@pytest.mark.parametrize("st", sorted(set(S) - {S.PAUSING}, key=ALL.index))
def test_abort_pause_only_from_pausing(sm: StateMachine, make: MakeSnap, st: S) -> None:
    with pytest.raises(InvalidTransition):
        sm.abort_pause(make(st))


def test_abort_pause_cannot_use_the_paused_to_running_edge(
    sm: StateMachine, make: MakeSnap
) -> None:
    # the sequence the seed's property test found: queued -> pause -> abort_pause
    s, _ = sm.request_pause(make(S.QUEUED))
    with pytest.raises(InvalidTransition):
        sm.abort_pause(s)


def test_abort_pause_rolls_back_to_running(sm: StateMachine, make: MakeSnap) -> None:
    new, tr = sm.abort_pause(make(S.PAUSING), reason="no checkpoint within 30s")
    assert new.status is S.RUNNING
    assert new.requested_action is None
    assert tr.reason == "no checkpoint within 30s"


def test_mark_starting_guard_attempts_exhausted(sm: StateMachine, make: MakeSnap) -> None:
    s = make(S.QUEUED, attempt=3, max_attempts=3)
    with pytest.raises(AttemptsExhausted) as ei:
        sm.mark_starting(s)
    assert (ei.value.attempt, ei.value.max_attempts) == (3, 3)
    assert "3/3" in str(ei.value)
    new, _ = sm.mark_starting(make(S.QUEUED, attempt=2, max_attempts=3))
    assert new.attempt == 3


def test_mark_starting_from_retry_wait(sm: StateMachine, make: MakeSnap) -> None:
    new, _ = sm.mark_starting(make(S.RETRY_WAIT, attempt=1, retry_at=sm.clock.now()))
    assert new.status is S.STARTING
    assert new.attempt == 2
    assert new.retry_at is None


@pytest.mark.parametrize("actor", ["", "   "])
def test_force_transition_needs_an_actor(sm: StateMachine, make: MakeSnap, actor: str) -> None:
    with pytest.raises(ConfigurationError, match="actor"):
        sm.force_transition(make(S.RUNNING), S.SUCCEEDED, actor=actor, reason="checked")


@pytest.mark.parametrize("reason", ["", "  "])
def test_force_transition_needs_a_reason(sm: StateMachine, make: MakeSnap, reason: str) -> None:
    with pytest.raises(ConfigurationError, match="reason"):
        sm.force_transition(make(S.RUNNING), S.SUCCEEDED, actor="ops", reason=reason)


def test_force_transition_rejects_an_unknown_status(sm: StateMachine, make: MakeSnap) -> None:
    with pytest.raises(ConfigurationError, match="'done'"):
        sm.force_transition(make(S.RUNNING), "done", actor="ops", reason="x")  # type: ignore[arg-type]


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_force_transition_goes_anywhere_and_is_marked(
    sm: StateMachine, make: MakeSnap, src: S, dst: S
) -> None:
    s = make(src)
    new, tr = sm.force_transition(s, dst, actor="ops@x", reason="checked by hand")
    assert new.status is dst
    assert new.overridden is True
    assert new.status_version == s.status_version + 1
    assert tr.override is True
    assert (tr.trigger, tr.actor, tr.reason) == ("admin:force", "ops@x", "checked by hand")
    assert (new.ended_at is not None) == (
        dst in {S.SUCCEEDED, S.FAILED, S.STOPPED, S.CANCELLED, S.SKIPPED, S.LOST}
    )
    if dst in {S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING}:
        assert new.started_at is not None
    if dst in {S.PENDING, S.BLOCKED, S.QUEUED, S.RETRY_WAIT}:
        assert new.started_at is None


def test_force_to_queued_then_pause_resume_does_not_invent_a_running_task(
    sm: StateMachine, make: MakeSnap
) -> None:
    s, _ = sm.force_transition(make(S.RUNNING), S.QUEUED, actor="ops", reason="requeue")
    s, _ = sm.request_pause(s)
    s, _ = sm.resume(s)
    assert s.status is S.QUEUED


# ------------------------------------------------------------------ retry, reset


@pytest.mark.parametrize("st", [S.FAILED, S.STOPPED, S.CANCELLED, S.LOST])
def test_retry_revives_to_queued_keeping_attempts(
    sm: StateMachine, make: MakeSnap, clock: FakeClock, st: S
) -> None:
    s = make(st, attempt=1, max_attempts=3, failure=FATAL, outcome={"x": 1})
    new, tr = sm.retry(s)
    assert new.status is S.QUEUED
    assert new.attempt == 1  # the next mark_starting opens attempt 2
    assert new.max_attempts == 3
    assert (new.started_at, new.ended_at, new.failure, new.outcome) == (None, None, None, None)
    assert new.queued_at == clock.now()
    assert tr.trigger == "user:retry"
    assert tr.override is False
    s2, _ = sm.mark_starting(new)
    assert s2.attempt == 2


@pytest.mark.parametrize("st", [S.SUCCEEDED, S.SKIPPED, *OCCUPIED_STOP, S.STOPPING, S.QUEUED])
def test_retry_only_from_revivable(sm: StateMachine, make: MakeSnap, st: S) -> None:
    with pytest.raises(InvalidTransition) as ei:
        sm.retry(make(st), force=True)
    assert set(ei.value.allowed) == {"failed", "stopped", "cancelled", "lost"}


def test_retry_without_budget_needs_force(sm: StateMachine, make: MakeSnap) -> None:
    s = make(S.FAILED, attempt=3, max_attempts=3)
    with pytest.raises(AttemptsExhausted):
        sm.retry(s)
    assert sm.can(s, "retry")[0] is False
    assert sm.can(s, "retry", force=True) == (True, None)
    new, _ = sm.retry(s, force=True)
    assert new.status is S.QUEUED
    assert new.max_attempts == 4
    started, _ = sm.mark_starting(new)
    assert started.attempt == 4


def test_forced_retry_with_budget_left_keeps_the_budget(sm: StateMachine, make: MakeSnap) -> None:
    new, _ = sm.retry(make(S.LOST, attempt=1, max_attempts=3), force=True)
    assert new.max_attempts == 3


@pytest.mark.parametrize(
    "st", [S.PENDING, S.BLOCKED, S.QUEUED, S.RETRY_WAIT, S.SUCCEEDED, S.FAILED, S.SKIPPED, S.LOST]
)
def test_reset_clears_attempts(sm: StateMachine, make: MakeSnap, st: S) -> None:
    s = make(st, attempt=2, failure=FATAL, last_heartbeat_at=sm.clock.now(), pid=12)
    new, tr = sm.reset(s)
    assert new.status is S.PENDING
    assert new.attempt == 0
    assert (new.failure, new.started_at, new.ended_at, new.pid, new.last_heartbeat_at) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert tr.trigger == "user:reset"
    assert tr.override is False


@pytest.mark.parametrize("st", [*OCCUPIED_STOP, S.STOPPING])
def test_reset_refused_while_holding_an_execution(sm: StateMachine, make: MakeSnap, st: S) -> None:
    with pytest.raises(InvalidTransition, match="stop it first"):
        sm.reset(make(st))


def test_reset_refused_for_an_in_place_pause_but_not_for_a_queued_pause(
    sm: StateMachine, make: MakeSnap
) -> None:
    in_place = make(S.PAUSED, started_at=sm.clock.now())
    with pytest.raises(InvalidTransition):
        sm.reset(in_place)
    assert sm.reset(make(S.PAUSED))[0].status is S.PENDING


# ------------------------------------------------------------------ mark_failed


@pytest.mark.parametrize("st", [S.STARTING, S.RUNNING])
def test_retryable_failure_with_budget_waits(sm: StateMachine, make: MakeSnap, st: S) -> None:
    at = sm.clock.now() + timedelta(seconds=4)
    new, tr = sm.mark_failed(make(st, attempt=1, max_attempts=3, pid=9), RETRYABLE, retry_at=at)
    assert new.status is S.RETRY_WAIT
    assert new.retry_at == at
    assert new.failure == RETRYABLE
    assert (new.started_at, new.pid, new.ended_at) == (None, None, None)
    assert tr.trigger == "executor:failed"
    assert tr.reason == "boom"


def test_retryable_failure_without_budget_fails(sm: StateMachine, make: MakeSnap) -> None:
    new, tr = sm.mark_failed(make(S.RUNNING, attempt=3, max_attempts=3), RETRYABLE)
    assert new.status is S.FAILED
    assert tr.trigger == "retry:exhausted"
    assert new.ended_at is not None


def test_fatal_failure_fails_at_once(sm: StateMachine, make: MakeSnap) -> None:
    new, tr = sm.mark_failed(make(S.RUNNING, attempt=1, max_attempts=5), FATAL)
    assert new.status is S.FAILED
    assert tr.trigger == "executor:failed"


@pytest.mark.parametrize("st", [S.PAUSING, S.STOPPING, S.RETRY_WAIT])
def test_failure_where_the_table_has_no_retry_wait_edge_fails(
    sm: StateMachine, make: MakeSnap, st: S
) -> None:
    new, _ = sm.mark_failed(make(st, attempt=1, max_attempts=5), RETRYABLE)
    assert new.status is S.FAILED


@pytest.mark.parametrize("st", [S.PENDING, S.BLOCKED, S.QUEUED, S.PAUSED, S.SUCCEEDED, S.FAILED])
def test_mark_failed_from_elsewhere_is_rejected(sm: StateMachine, make: MakeSnap, st: S) -> None:
    with pytest.raises(InvalidTransition):
        sm.mark_failed(make(st), FATAL)


# ------------------------------------------------------------------ other events


def test_the_happy_path(sm: StateMachine, clock: FakeClock) -> None:
    s0 = TaskSnapshot(task_id="t", name="n", created_at=clock.now())
    s, t1 = sm.mark_blocked(s0, reason="waiting for a")
    s, t2 = sm.start(s)
    clock.advance(1)
    s, t3 = sm.mark_starting(s)
    s, t4 = sm.mark_running(s)
    clock.advance(5)
    s, t5 = sm.mark_succeeded(s, outcome={"rows": 10})
    assert s.status is S.SUCCEEDED
    assert s.outcome == {"rows": 10}
    assert s.duration == timedelta(seconds=5)
    assert [t.version for t in (t1, t2, t3, t4, t5)] == [1, 2, 3, 4, 5]
    assert [t.to_status for t in (t1, t2, t3, t4, t5)] == [
        S.BLOCKED,
        S.QUEUED,
        S.STARTING,
        S.RUNNING,
        S.SUCCEEDED,
    ]
    assert t2.trigger == "user:start"
    assert replay(s0, [t1, t2, t3, t4, t5]) == (S.SUCCEEDED, 5)


def test_stopping_ends_stopped_lost_or_succeeded(sm: StateMachine, make: MakeSnap) -> None:
    s = make(S.STOPPING)
    stopped, _ = sm.confirm_stopped(s)
    assert stopped.status is S.STOPPED and stopped.failure is None
    lost, tr = sm.mark_lost(s, reason="thread abandoned after 10s")
    assert lost.status is S.LOST
    assert lost.failure == Failure(FailureKind.LOST, "thread abandoned after 10s")
    assert tr.trigger == "supervisor:lost"
    done, _ = sm.mark_succeeded(s)
    assert done.status is S.SUCCEEDED and done.requested_action is None


@pytest.mark.parametrize(
    ("method", "sources"),
    [
        ("mark_blocked", {S.PENDING}),
        ("mark_queued", {S.PENDING, S.BLOCKED, S.RETRY_WAIT}),
        ("mark_starting", {S.QUEUED, S.RETRY_WAIT}),
        ("mark_running", {S.STARTING}),
        ("confirm_paused", {S.PAUSING}),
        ("abort_pause", {S.PAUSING}),
        ("confirm_stopped", {S.STOPPING}),
        ("mark_succeeded", {S.RUNNING, S.STOPPING}),
        ("mark_lost", {S.STARTING, S.RUNNING, S.PAUSING, S.STOPPING}),
        ("start", {S.PENDING, S.BLOCKED}),
        ("skip", {S.PENDING, S.BLOCKED, S.QUEUED}),
    ],
)
def test_event_sources(sm: StateMachine, make: MakeSnap, method: str, sources: set[S]) -> None:
    kwargs = {"reason": "r"} if method == "mark_lost" else {}
    for st in S:
        s = make(st)
        fn = getattr(sm, method)
        if st in sources:
            new, tr = fn(s, **kwargs)
            assert new.status in TRANSITIONS[st], (method, st)
            assert tr.version == s.status_version + 1
        else:
            with pytest.raises(InvalidTransition) as ei:
                fn(s, **kwargs)
            assert set(ei.value.allowed) == {x.value for x in sources}, (method, st)
            assert ei.value.current is st


def test_skip_is_not_accepted_from_failed(sm: StateMachine, make: MakeSnap) -> None:
    # documented seed discrepancy: the verb table lists it, the frozen table has no edge
    with pytest.raises(InvalidTransition):
        sm.skip(make(S.FAILED), reason="never mind")
    assert sm.can(make(S.FAILED), "skip")[0] is False


def test_skip_with_a_condition_records_why(sm: StateMachine, make: MakeSnap) -> None:
    new, _ = sm.skip(make(S.BLOCKED), reason="no rows", kind=FailureKind.CONDITION_FALSE)
    assert new.status is S.SKIPPED
    assert new.failure == Failure(FailureKind.CONDITION_FALSE, "no rows")


# ------------------------------------------------------------------ rejections, can


def test_invalid_transition_carries_current_requested_allowed(
    sm: StateMachine, make: MakeSnap
) -> None:
    s = make(S.SUCCEEDED, task_id="extract-1")
    with pytest.raises(InvalidTransition) as ei:
        sm.request_pause(s)
    err = ei.value
    assert err.current is S.SUCCEEDED
    assert err.requested == "pause"
    assert err.allowed == ("queued", "retry_wait", "running", "starting")
    assert err.task_id == "extract-1"
    assert str(err) == (
        "task extract-1: cannot pause from succeeded "
        "(allowed from here: queued, retry_wait, running, starting)"
    )


def test_invalid_transition_message_without_allowed_states() -> None:
    err = InvalidTransition(S.FAILED, "queued", [])
    assert str(err) == "cannot queued from failed (allowed from here: nothing)"


def test_rejection_changes_nothing(sm: StateMachine, make: MakeSnap) -> None:
    s = make(S.RUNNING)
    before = TaskSnapshot(**{f: getattr(s, f) for f in s.__dataclass_fields__})
    with pytest.raises(InvalidTransition):
        sm.resume(s)
    assert s == before


def test_can_reports_why(sm: StateMachine, make: MakeSnap) -> None:
    assert sm.can(make(S.RUNNING), "pause") == (True, None)
    ok, why = sm.can(make(S.SUCCEEDED), "pause")
    assert ok is False
    assert why is not None and "cannot pause from succeeded" in why


def test_can_rejects_unknown_verbs(sm: StateMachine, make: MakeSnap) -> None:
    with pytest.raises(ConfigurationError, match=r"'explode'.*start"):
        sm.can(make(S.RUNNING), "explode")


def test_transition_records_time_from_the_injected_clock(
    sm: StateMachine, make: MakeSnap, clock: FakeClock
) -> None:
    clock.advance(3600)
    _, tr = sm.request_stop(make(S.RUNNING))
    assert tr.at == clock.now()


def test_replay_rejects_a_gap_and_an_unsanctioned_edge(sm: StateMachine, make: MakeSnap) -> None:
    s0 = make(S.QUEUED, status_version=0)
    s1, t1 = sm.mark_starting(s0)
    _, t2 = sm.mark_running(s1)
    with pytest.raises(InvalidTransition, match="gap"):
        replay(s0, [t2])
    bad = type(t1)(
        task_id="t1",
        from_status=S.QUEUED,
        to_status=S.RUNNING,
        trigger="made:up",
        actor="x",
        reason=None,
        at=t1.at,
        version=1,
    )
    with pytest.raises(InvalidTransition):
        replay(s0, [bad])

"""Seed 001 §3.1: every control verb from every reachable status.

Each case drives a real task on a real Controller (thread executor, FakeClock so no
grace window or backoff elapses by itself) into the status under test, applies the
verb, and checks the immediate result (the v1.2 rule), that repeating the verb is
harmless (no error, no extra transition), and that an illegal verb raises
InvalidTransition naming current, requested and allowed states and changes nothing.

The expected table below is written out by hand from §3.1 and the v1.2 rule: it is not
derived from the code under test.
"""

from __future__ import annotations

from typing import Any

import pytest
from ctl_helpers import Rig, failing_task, ok_task, wait_status, wait_until

from chongming_nb import (
    AdminOverride,
    AttemptsExhausted,
    ConcurrencyPolicy,
    ConfigurationError,
    Controller,
    Exponential,
    InvalidTransition,
    RetryPolicy,
    TaskStatus,
)
from chongming_nb.core.states import TERMINAL

S = TaskStatus

STATES = [
    "pending",
    "blocked",
    "queued",
    "starting",
    "running",
    "pausing",
    "paused_inplace",
    "paused_queued",
    "retry_wait",
    "stopping",
    "succeeded",
    "failed",
    "stopped",
    "cancelled",
    "skipped",
    "lost",
]
STATUS_OF = {
    "paused_inplace": S.PAUSED,
    "paused_queued": S.PAUSED,
    **{s: S(s) for s in STATES if not s.startswith("paused_")},
}

NOOP = "noop"
BAD = "invalid"
EXHAUSTED = "exhausted"

# verb -> {state: expected}; states not listed are InvalidTransition.
EXPECTED: dict[str, dict[str, Any]] = {
    "start": {
        "pending": S.QUEUED,
        "blocked": NOOP,
        "queued": NOOP,
        "starting": NOOP,
        "running": NOOP,
    },
    "stop": {
        **dict.fromkeys(
            ["pending", "blocked", "queued", "paused_inplace", "paused_queued", "retry_wait"],
            S.STOPPED,
        ),
        **dict.fromkeys(["starting", "running", "pausing"], S.STOPPING),
        "stopping": NOOP,
        "stopped": NOOP,
    },
    "pause": {
        "queued": S.PAUSED,
        "retry_wait": S.PAUSED,
        "starting": S.PAUSING,
        "running": S.PAUSING,
        "pausing": NOOP,
        "paused_inplace": NOOP,
        "paused_queued": NOOP,
    },
    "resume": {
        "paused_inplace": S.RUNNING,
        "paused_queued": S.QUEUED,
        "pausing": S.RUNNING,
        "running": NOOP,
        "queued": NOOP,
        "starting": NOOP,
    },
    "cancel": {
        **dict.fromkeys(
            ["pending", "blocked", "queued", "paused_inplace", "paused_queued", "retry_wait"],
            S.CANCELLED,
        ),
        **dict.fromkeys(["starting", "running", "pausing"], S.STOPPING),
        "stopping": NOOP,
        "stopped": NOOP,
        "cancelled": NOOP,
    },
    # attempt budget 1: a task that ran once is exhausted without force
    "retry": {
        "failed": EXHAUSTED,
        "lost": EXHAUSTED,
        "stopped": S.QUEUED,
        "cancelled": S.QUEUED,
        "queued": NOOP,
        "starting": NOOP,
        "running": NOOP,
    },
    "retry_force": {
        **dict.fromkeys(["failed", "lost", "stopped", "cancelled"], S.QUEUED),
        "queued": NOOP,
        "starting": NOOP,
        "running": NOOP,
    },
    "skip": {"pending": S.SKIPPED, "blocked": S.SKIPPED, "queued": S.SKIPPED, "skipped": NOOP},
    "reset": {
        **dict.fromkeys(
            [
                "blocked",
                "queued",
                "paused_queued",
                "retry_wait",
                "succeeded",
                "failed",
                "stopped",
                "cancelled",
                "skipped",
                "lost",
            ],
            S.PENDING,
        ),
        "pending": NOOP,
    },
}

# The states a verb is *legal* from (InvalidTransition.allowed), by hand from §3.1/v1.2.
ALLOWED: dict[str, set[S]] = {
    "start": {S.PENDING, S.BLOCKED},
    "stop": {
        S.PENDING,
        S.BLOCKED,
        S.QUEUED,
        S.PAUSED,
        S.RETRY_WAIT,
        S.STARTING,
        S.RUNNING,
        S.PAUSING,
    },
    "pause": {S.QUEUED, S.RETRY_WAIT, S.STARTING, S.RUNNING},
    "resume": {S.PAUSED},
    "cancel": {
        S.PENDING,
        S.BLOCKED,
        S.QUEUED,
        S.PAUSED,
        S.RETRY_WAIT,
        S.STARTING,
        S.RUNNING,
        S.PAUSING,
    },
    "retry": {S.FAILED, S.STOPPED, S.CANCELLED, S.LOST},
    "retry_force": {S.FAILED, S.STOPPED, S.CANCELLED, S.LOST},
    "skip": {S.PENDING, S.BLOCKED, S.QUEUED},
    "reset": set(TERMINAL) | {S.PENDING, S.BLOCKED, S.QUEUED, S.PAUSED, S.RETRY_WAIT},
}


def build(rig: Rig, state: str) -> tuple[Controller, str]:
    """A controller (max_parallel=1, FakeClock) with one task in ``state``. Whenever the
    task under test does not hold the only slot, a gated blocker does, so QUEUED stays
    QUEUED."""
    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=1))
    clock = rig.clock

    def blocker() -> str:
        g = rig.gate()
        b = ctl.submit(g.stubborn, name="blocker")
        wait_status(ctl, b, S.RUNNING)
        return b.id

    if state in ("queued", "paused_queued", "stopped", "cancelled", "skipped", "pending"):
        blocker()
        h = ctl.submit(ok_task, name="target")
        assert h.status is S.QUEUED
        if state == "paused_queued":
            ctl.pause(h)
        elif state == "stopped":
            ctl.stop(h)
        elif state == "cancelled":
            ctl.cancel(h)
        elif state in ("skipped", "pending"):
            ctl.skip(h)
            if state == "pending":
                ctl.reset(h, confirm=True)
    elif state == "blocked":
        up = blocker()
        h = ctl.submit(ok_task, name="target", after=[up])
    elif state == "starting":
        h = ctl.submit(ok_task, name="target", executor=rig.gated_executor())
        wait_until(ctl, lambda: ctl.running(h.id), what="gated launch")
    elif state in ("running", "pausing", "stopping", "lost"):
        g = rig.gate()
        h = ctl.submit(g.stubborn, name="target")
        wait_status(ctl, h, S.RUNNING)
        assert g.entered.wait(5)
        if state == "pausing":
            ctl.pause(h, timeout=100)
        elif state == "stopping":
            ctl.stop(h, timeout=100)
        elif state == "lost":
            ctl.stop(h, timeout=1)
            clock.advance(2)
            wait_status(ctl, h, S.LOST)
    elif state == "paused_inplace":
        g = rig.gate()
        h = ctl.submit(g.cooperative, name="target")
        wait_status(ctl, h, S.RUNNING)
        ctl.pause(h)
        wait_status(ctl, h, S.PAUSED)
    elif state == "retry_wait":
        retry = RetryPolicy(max_attempts=3, backoff=Exponential(base=100, jitter="none"))
        h = ctl.submit(failing_task, name="target", retry=retry)
        wait_status(ctl, h, S.RETRY_WAIT)
        blocker()
    elif state in ("succeeded", "failed"):
        h = ctl.submit(ok_task if state == "succeeded" else failing_task, name="target")
        wait_status(ctl, h, STATUS_OF[state])
        blocker()
    else:  # pragma: no cover - the table and this builder list the same states
        raise AssertionError(state)
    assert ctl.get(h).status is STATUS_OF[state], (state, ctl.get(h).status)
    return ctl, h.id


def call(ctl: Controller, verb: str, tid: str) -> Any:
    if verb == "retry_force":
        return ctl.retry(tid, force=True)
    if verb == "reset":
        return ctl.reset(tid, confirm=True)
    return getattr(ctl, verb)(tid)


CASES = [(verb, state) for verb in EXPECTED for state in STATES]


@pytest.mark.parametrize(("verb", "state"), CASES, ids=[f"{v}-{s}" for v, s in CASES])
def test_verb_from_state(rig: Rig, verb: str, state: str) -> None:
    ctl, tid = build(rig, state)
    before = ctl.get(tid)
    expected = EXPECTED[verb].get(state, BAD)

    if expected == BAD:
        with pytest.raises(InvalidTransition) as info:
            call(ctl, verb, tid)
        err = info.value
        assert err.current is before.status
        assert err.requested == verb.removesuffix("_force")
        assert set(err.allowed) == {s.value for s in ALLOWED[verb]}
        assert before.status.value in str(err) and err.requested in str(err)
        after = ctl.get(tid)
        assert (after.status, after.status_version) == (before.status, before.status_version)
        return
    if expected == EXHAUSTED:
        with pytest.raises(AttemptsExhausted):
            call(ctl, verb, tid)
        assert ctl.get(tid).status_version == before.status_version
        return

    snap = call(ctl, verb, tid)
    history = ctl.history(tid)
    if expected == NOOP:
        assert snap.status is before.status
        assert snap.status_version == before.status_version
    else:
        assert snap.status is expected, f"{verb} from {state} gave {snap.status}"
        assert snap.status_version == before.status_version + 1
        step = history[before.status_version]  # versions start at 1; list index = version-1
        assert (step.from_status, step.to_status) == (before.status, expected)
        assert step.version == before.status_version + 1
    # idempotency: the same verb again is accepted and changes nothing
    mid = ctl.get(tid)
    if mid.status is snap.status:
        again = call(ctl, verb, tid)
        assert again.status_version == mid.status_version, f"repeated {verb} made a transition"
        assert again.status is mid.status


def test_matrix_covers_every_status() -> None:
    assert set(STATUS_OF.values()) == set(S)
    for verb in EXPECTED:
        assert set(EXPECTED[verb]) <= set(STATES)


# --------------------------------------------------------------- single verbs


def test_wait_timeout_has_no_side_effects(rig: Rig) -> None:
    ctl, tid = build(rig, "running")
    before = ctl.get(tid)
    with pytest.raises(TimeoutError, match=tid):
        ctl.wait(tid, timeout=0.05)
    with pytest.raises(TimeoutError):
        ctl.handle(tid).wait(timeout=0.01)
    after = ctl.get(tid)
    assert (after.status, after.status_version) == (S.RUNNING, before.status_version)
    assert ctl.history(tid) == ctl.history(tid)[: before.status_version]


def test_wait_returns_terminal_snapshot(rig: Rig) -> None:
    ctl = rig.controller()
    h = ctl.submit(ok_task, 7)
    snap = ctl.wait(h, timeout=5)
    assert snap.status is S.SUCCEEDED and h.result(timeout=1) == 7


def test_reset_needs_confirm(rig: Rig) -> None:
    ctl, tid = build(rig, "failed")
    before = ctl.get(tid)
    with pytest.raises(ConfigurationError, match="confirm=True"):
        ctl.reset(tid)
    with pytest.raises(ConfigurationError):
        ctl.reset(tid, confirm="yes")  # type: ignore[arg-type]
    assert ctl.get(tid).status_version == before.status_version
    assert len(ctl.attempts(tid)) == 1
    snap = ctl.reset(tid, confirm=True)
    assert snap.status is S.PENDING and snap.attempt == 0
    assert ctl.attempts(tid) == []


@pytest.mark.parametrize(
    ("actor", "reason"), [("", "checked"), ("  ", "checked"), ("ops", ""), ("ops", " ")]
)
def test_force_transition_needs_actor_and_reason(rig: Rig, actor: str, reason: str) -> None:
    ctl, tid = build(rig, "failed")
    v = ctl.get(tid).status_version
    with pytest.raises(ConfigurationError):
        ctl.force_transition(tid, S.SUCCEEDED, actor=actor, reason=reason)
    assert ctl.get(tid).status_version == v
    assert not ctl.events(tid, types=[AdminOverride])


def test_force_transition_unknown_status(rig: Rig) -> None:
    ctl, tid = build(rig, "failed")
    with pytest.raises(ConfigurationError, match="unknown status"):
        ctl.force_transition(tid, "done", actor="ops", reason="x")


def test_force_transition_is_audited(rig: Rig) -> None:
    ctl, tid = build(rig, "failed")
    before = ctl.get(tid)
    snap = ctl.force_transition(tid, "succeeded", actor="ops@x", reason="checked by hand")
    assert snap.status is S.SUCCEEDED and snap.overridden
    assert snap.status_version == before.status_version + 1
    tr = ctl.history(tid)[-1]
    assert tr.override and tr.actor == "ops@x" and tr.reason == "checked by hand"
    (audit,) = ctl.events(tid, types=[AdminOverride])
    assert (audit.from_status, audit.to_status) == (S.FAILED, S.SUCCEEDED)
    assert (audit.actor, audit.reason, audit.version) == (
        "ops@x",
        "checked by hand",
        snap.status_version,
    )
    # not idempotent by contract: forcing again is another audited transition
    ctl.force_transition(tid, "succeeded", actor="ops@x", reason="again")
    assert len(ctl.events(tid, types=[AdminOverride])) == 2


def test_force_running_task_to_terminal_keeps_the_record(rig: Rig) -> None:
    """Forcing a running task to FAILED: the late return of its thread does not
    rewrite the forced status."""
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative, 1)
    wait_status(ctl, h, S.RUNNING)
    ctl.force_transition(h, S.FAILED, actor="ops", reason="known bad")
    wait_until(ctl, lambda: not ctl.running(h.id), what="thread exit after force")
    snap = ctl.get(h)
    assert snap.status is S.FAILED and snap.overridden
    (att,) = ctl.attempts(h)
    assert att.ended_at is not None and att.outcome is S.FAILED


def test_unknown_task_id(rig: Rig) -> None:
    from chongming_nb import TaskNotFound

    ctl = rig.controller()
    with pytest.raises(TaskNotFound):
        ctl.stop("nope")
    assert ctl.can("nope", "stop")[0] is False


def test_can_matches_verbs(rig: Rig) -> None:
    """can() is true exactly when the verb would make a transition (the UI's buttons)."""
    for state in ("queued", "running", "paused_inplace", "failed", "succeeded"):
        ctl, tid = build(rig, state)
        for verb in ("stop", "pause", "resume", "skip", "cancel", "start"):
            ok, why = ctl.can(tid, verb)
            moves = EXPECTED[verb].get(state, BAD) not in (BAD, NOOP, EXHAUSTED)
            assert ok is moves, (state, verb, why)
            assert (why is None) is ok
        table = ctl.can_all(tid)
        assert set(table) == {"pause", "resume", "stop", "retry", "skip"}


def test_apply_rejects_bad_input_and_changes_nothing(rig: Rig) -> None:
    ctl, tid = build(rig, "queued")
    v = ctl.get(tid).status_version
    assert ctl.apply(tid, "rm -rf /")[0] is False
    assert ctl.apply(tid, "reset")[0] is False  # not a control-plane verb
    assert ctl.apply(123, "pause")[0] is False  # type: ignore[arg-type]
    assert ctl.apply("missing", "pause")[0] is False
    assert ctl.apply(tid, "resume") == (False, ctl.can(tid, "resume")[1])
    assert ctl.get(tid).status_version == v
    assert ctl.apply(tid, "pause") == (True, None)
    assert ctl.get(tid).status is S.PAUSED

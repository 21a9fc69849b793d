"""Stop, pause, resume, retries and timeouts on the thread executor.

Timers (grace windows, backoff, timeouts) follow the FakeClock: they fire when the test
advances it, never by real waiting.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
from ctl_helpers import Gate, Rig, failing_task, wait_status, wait_until

from chongming_nb import (
    AttemptFailed,
    ConcurrencyPolicy,
    Controller,
    Exponential,
    FailureKind,
    FatalError,
    RetryableError,
    RetryPolicy,
    TaskContext,
    TaskExecutionError,
    TaskStatus,
    TaskWarning,
    Timeout,
)
from chongming_nb.core.models import ended_by

S = TaskStatus


def statuses(ctl, h) -> list[S]:  # type: ignore[no-untyped-def]
    return [tr.to_status for tr in ctl.history(h)]


# ------------------------------------------------------------ cooperative stop


def test_cooperative_stop(rig: Rig) -> None:
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative)
    wait_status(ctl, h, S.RUNNING)
    snap = h.stop(timeout=100)
    assert snap.status is S.STOPPING and snap.requested_action is not None
    assert wait_status(ctl, h, S.STOPPED) is S.STOPPED  # no clock advance: it cooperated
    s = ctl.get(h)
    # a stop is not a failure: no Failure; the outcome says who asked
    assert s.failure is None
    assert ended_by(s) == {"by": "user", "reason": None}
    (att,) = ctl.attempts(h)
    assert att.outcome is S.STOPPED and att.failure_kind is None
    assert not att.abandoned
    wait_until(ctl, lambda: not h.running, what="thread exit")
    assert statuses(ctl, h)[-2:] == [S.STOPPING, S.STOPPED]
    with pytest.raises(TaskExecutionError, match="stopped"):
        h.result(timeout=1)


def test_stop_wait_returns_settled_snapshot(rig: Rig) -> None:
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative)
    wait_status(ctl, h, S.RUNNING)
    assert h.stop(wait=True).status is S.STOPPED


def test_pause_resume_in_place(rig: Rig) -> None:
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative, "done")
    wait_status(ctl, h, S.RUNNING)
    assert h.pause().status is S.PAUSING
    wait_status(ctl, h, S.PAUSED)
    handle = ctl._book.task(h.id).handle
    assert handle is not None
    wait_until(ctl, lambda: handle.token.paused, what="checkpoint blocked in pause")
    assert h.resume().status is S.RUNNING
    g.release()
    assert h.result(timeout=5) == "done"
    assert statuses(ctl, h) == [S.QUEUED, S.STARTING, S.RUNNING, S.PAUSING, S.PAUSED,
                                S.RUNNING, S.SUCCEEDED]  # fmt: skip
    (att,) = ctl.attempts(h)  # a pause does not start a new attempt
    assert att.outcome is S.SUCCEEDED


def test_pause_holds_its_slot(rig: Rig) -> None:
    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=1))
    g = rig.gate()
    h = ctl.submit(g.cooperative)
    wait_status(ctl, h, S.RUNNING)
    h.pause()
    wait_status(ctl, h, S.PAUSED)
    other = ctl.submit(failing_task)
    assert other.status is S.QUEUED  # the paused task still holds the only slot
    h.stop()
    wait_status(ctl, other, S.FAILED)


def test_stop_while_paused_in_place(rig: Rig) -> None:
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative)
    wait_status(ctl, h, S.RUNNING)
    h.pause()
    wait_status(ctl, h, S.PAUSED)
    assert h.stop().status is S.STOPPED  # v1.2: paused holds no running code: at once
    wait_until(ctl, lambda: not h.running, what="paused thread woken and gone")
    (att,) = ctl.attempts(h)
    assert att.outcome is S.STOPPED and not att.abandoned
    assert ctl.get(h).status is S.STOPPED


def test_pause_timeout_rolls_back_with_warning(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    g = rig.gate()

    def stubborn_then_checks(ctx: TaskContext) -> str:
        g.entered.set()
        g.event.wait()
        ctx.checkpoint()  # the withdrawn pause must not block here
        return "finished"

    h = ctl.submit(stubborn_then_checks)
    wait_status(ctl, h, S.RUNNING)
    assert h.pause(timeout=5).status is S.PAUSING
    clock.advance(4)
    assert ctl.get(h).status is S.PAUSING
    clock.advance(2)
    wait_status(ctl, h, S.RUNNING)
    (warn,) = ctl.events(h, types=[TaskWarning])
    assert "pause rolled back" in warn.message
    last = ctl.history(h)[-1]
    assert (last.from_status, last.to_status) == (S.PAUSING, S.RUNNING)
    g.release()
    assert h.result(timeout=5) == "finished"


# ------------------------------------------------------ uncooperative threads


def test_uncooperative_thread_is_lost_and_abandoned(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.stubborn, 1)
    wait_status(ctl, h, S.RUNNING)
    assert h.stop(timeout=3).status is S.STOPPING
    clock.advance(3.5)
    wait_status(ctl, h, S.LOST)
    s = ctl.get(h)
    assert s.failure is not None and s.failure.kind is FailureKind.LOST
    (att,) = ctl.attempts(h)
    assert att.abandoned is True and att.outcome is S.LOST
    assert att.failure_kind is FailureKind.LOST
    assert h.running is True  # honest: the thread still runs
    g.release()
    wait_until(ctl, lambda: not h.running, what="abandoned thread returns")
    ctl.flush()
    # the late return changes nothing but is noted
    assert ctl.get(h).status is S.LOST
    assert ctl.attempts(h)[0].abandoned
    assert any("returned later" in w.message for w in ctl.events(h, types=[TaskWarning]))


def test_hard_stop_abandons_at_once(rig: Rig) -> None:
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.stubborn)
    wait_status(ctl, h, S.RUNNING)
    h.stop(graceful=False)  # grace 0: due now, no clock advance needed
    wait_status(ctl, h, S.LOST)
    assert ctl.attempts(h)[0].abandoned


def test_abandoned_lost_task_can_be_retried(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.stubborn)
    wait_status(ctl, h, S.RUNNING)
    h.stop(graceful=False)
    wait_status(ctl, h, S.LOST)
    g.release()
    h.retry(force=True)
    assert h.result(timeout=5) is None
    atts = ctl.attempts(h)
    assert [a.outcome for a in atts] == [S.LOST, S.SUCCEEDED]
    assert [a.abandoned for a in atts] == [True, False]


INTERPRETER_EXIT = textwrap.dedent(
    """
    import sys, time
    import chongming_nb as cn

    def spin(ctx):
        while True:  # never checkpoints
            pass

    ctl = cn.Controller(stop_grace=0.2)
    h = ctl.submit(spin)
    deadline = time.monotonic() + 10
    while h.status is not cn.TaskStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.01)
    h.stop()
    snap = h.wait(timeout=10)
    print(snap.status.value, h.running, ctl.attempts(h)[0].abandoned, flush=True)
    """
)


def test_interpreter_exits_despite_an_uncooperative_thread() -> None:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", INTERPRETER_EXIT], capture_output=True, text=True, timeout=60
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["lost", "True", "True"]
    # import (pandas, ipywidgets) dominates; the exit itself must not wait for the thread
    assert elapsed < 20, elapsed


# ------------------------------------------------------------------ retries


def test_retry_backoff_follows_the_clock(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    calls: list[int] = []

    def flaky(ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        raise ConnectionError(f"attempt {ctx.attempt}")

    pol = RetryPolicy(max_attempts=3, backoff=Exponential(base=10, factor=2, jitter="none"))
    h = ctl.submit(flaky, retry=pol)
    wait_status(ctl, h, S.RETRY_WAIT)
    s = ctl.get(h)
    assert s.attempt == 1 and s.retry_at == clock.now() + __import__("datetime").timedelta(
        seconds=10
    )
    assert s.failure is not None and s.failure.retryable
    clock.advance(10.5)
    wait_until(ctl, lambda: ctl.get(h).attempt == 2 and ctl.get(h).status is S.RETRY_WAIT,
               what="second attempt failed")  # fmt: skip
    assert ctl.get(h).retry_at == clock.now() + __import__("datetime").timedelta(seconds=20)
    clock.advance(20.5)
    wait_status(ctl, h, S.FAILED)
    assert calls == [1, 2, 3]
    last = ctl.history(h)[-1]
    assert last.trigger == "retry:exhausted"
    assert sum(tr.trigger == "retry:backoff_elapsed" for tr in ctl.history(h)) == 2
    atts = ctl.attempts(h)
    assert [a.attempt for a in atts] == [1, 2, 3]
    assert all(a.failure_kind is FailureKind.EXCEPTION for a in atts)
    assert all("ConnectionError" in (a.traceback or "") for a in atts)
    assert len(ctl.events(h, types=[AttemptFailed])) == 3


@pytest.mark.parametrize(
    ("exc", "retried"),
    [(FatalError("no"), False), (RetryableError("again"), True), (KeyError("k"), False)],
)
def test_retry_on_give_up_on(rig: Rig, exc: Exception, retried: bool) -> None:
    ctl = rig.controller()

    def raiser(ctx: TaskContext) -> None:
        raise exc

    pol = RetryPolicy(max_attempts=2, backoff=Exponential(base=0), give_up_on=(KeyError,))
    h = ctl.submit(raiser, retry=pol)
    wait_status(ctl, h, S.FAILED)
    assert len(ctl.attempts(h)) == (2 if retried else 1)


def test_pause_during_backoff_then_resume(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    pol = RetryPolicy(max_attempts=2, backoff=Exponential(base=5, jitter="none"))
    h = ctl.submit(failing_task, retry=pol)
    wait_status(ctl, h, S.RETRY_WAIT)
    assert h.pause().status is S.PAUSED
    clock.advance(10)  # the stale backoff timer must not requeue a paused task
    ctl.flush()
    assert ctl.get(h).status is S.PAUSED
    assert h.resume().status is S.QUEUED
    wait_status(ctl, h, S.FAILED)
    assert len(ctl.attempts(h)) == 2


# ----------------------------------------------------------------- timeouts


def settle_heartbeat(ctl, h) -> None:  # type: ignore[no-untyped-def]
    """Heartbeats are sampled by the dispatcher: a checkpoint counts as a sign of life at
    the first sample after it. Once the task sits still (its gate entered), take that
    sample now, so a later jump of the fake clock is not mistaken for activity."""
    t = ctl._book.task(h.id)
    wait_until(ctl, lambda: t.hb is not None, what="heartbeat attached")
    t.hb.sample(ctl._clock.monotonic())


def test_idle_timeout(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    g = rig.gate()

    def hangs(ctx: TaskContext) -> None:
        g.entered.set()
        g.event.wait()  # no sign of life...
        ctx.checkpoint()  # ...until here, where the timeout's stop lands

    h = ctl.submit(hangs, timeout=Timeout(idle=30))
    wait_status(ctl, h, S.RUNNING)
    assert g.entered.wait(5)
    settle_heartbeat(ctl, h)
    clock.advance(29)
    assert ctl.get(h).status is S.RUNNING
    clock.advance(2)
    handle = ctl._book.task(h.id).handle
    assert handle is not None
    wait_until(ctl, lambda: handle.token.stop_requested, what="idle timeout fired")
    g.release()
    wait_status(ctl, h, S.FAILED)
    s = ctl.get(h)
    assert s.failure is not None and s.failure.kind is FailureKind.TIMEOUT_IDLE
    assert ctl.attempts(h)[0].failure_kind is FailureKind.TIMEOUT_IDLE


def test_checkpoints_keep_an_idle_timeout_away(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative, "alive", timeout=Timeout(idle=10))
    wait_status(ctl, h, S.RUNNING)
    t = ctl._book.task(h.id)
    handle = t.handle
    assert handle is not None
    wait_until(ctl, lambda: t.hb is not None, what="heartbeat attached")
    # The dispatcher samples heartbeats when the fake clock moves, and each sample arms a
    # liveness probe that the task's next checkpoint answers. So each step waits for the
    # sample at the current time to have seen life, then for the new probe's answer.
    for _ in range(5):  # 40 fake seconds in steps smaller than the idle limit
        now = clock.monotonic()
        wait_until(ctl, lambda n=now: t.hb.last_beat == n, what="a sign of life sampled")
        wait_until(ctl, lambda: not handle.token.probe_pending, what="probe answered")
        clock.advance(8)
    g.release()
    assert h.result(timeout=5) == "alive"


def test_idle_timeout_on_a_stubborn_thread_ends_lost(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller(stop_grace=5)
    g = rig.gate()
    h = ctl.submit(g.stubborn, timeout=Timeout(idle=10))
    wait_status(ctl, h, S.RUNNING)
    assert g.entered.wait(5)
    settle_heartbeat(ctl, h)
    clock.advance(11)
    handle = ctl._book.task(h.id).handle
    assert handle is not None
    wait_until(ctl, lambda: handle.token.stop_requested, what="idle timeout fired")
    clock.advance(6)
    wait_status(ctl, h, S.LOST)
    s = ctl.get(h)
    assert s.failure is not None and "timeout_idle" in s.failure.message
    assert ctl.attempts(h)[0].abandoned


def test_per_attempt_timeout(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative, timeout=Timeout(per_attempt=60))
    wait_status(ctl, h, S.RUNNING)
    clock.advance(61)
    wait_status(ctl, h, S.FAILED)
    s = ctl.get(h)
    assert s.failure is not None and s.failure.kind is FailureKind.TIMEOUT_ATTEMPT
    (att,) = ctl.attempts(h)
    assert att.failure_kind is FailureKind.TIMEOUT_ATTEMPT


def test_per_attempt_timeout_is_retried(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    runs: list[int] = []

    def slow_once(ctx: TaskContext) -> str:
        runs.append(ctx.attempt)
        if ctx.attempt == 1:
            while True:
                ctx.checkpoint()
                threading.Event().wait(0.001)
        return "second time lucky"

    pol = RetryPolicy(max_attempts=2, backoff=Exponential(base=1, jitter="none"))
    h = ctl.submit(slow_once, retry=pol, timeout=Timeout(per_attempt=60))
    wait_status(ctl, h, S.RUNNING)
    clock.advance(61)
    wait_status(ctl, h, S.RETRY_WAIT)
    clock.advance(2)
    assert h.result(timeout=5) == "second time lucky"
    kinds = [a.failure_kind for a in ctl.attempts(h)]
    assert kinds == [FailureKind.TIMEOUT_ATTEMPT, None]


def test_start_timeout(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    ex = rig.gated_executor()
    h = ctl.submit(lambda ctx: "never", executor=ex, timeout=Timeout(start=5))
    wait_until(ctl, lambda: ctl.running(h.id), what="launched")
    assert ctl.get(h).status is S.STARTING
    clock.advance(6)
    handle = ctl._book.task(h.id).handle
    assert handle is not None
    wait_until(ctl, lambda: handle.token.stop_requested, what="start timeout fired")
    ex.go.set()  # the carrier finally starts and meets the stop at its first checkpoint
    wait_status(ctl, h, S.FAILED)
    s = ctl.get(h)
    assert s.failure is not None and s.failure.kind is FailureKind.TIMEOUT_START


def test_no_start_timeout_once_running(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    ctl = rig.controller()
    g = rig.gate()
    h = ctl.submit(g.cooperative, 3, timeout=Timeout(start=5))
    wait_status(ctl, h, S.RUNNING)
    clock.advance(100)
    g.release()
    assert h.result(timeout=5) == 3


def test_async_task_runs_to_completion(rig: Rig) -> None:
    ctl = rig.controller()

    async def coro(ctx: TaskContext, x: int) -> int:
        await ctx.acheckpoint()
        return x * 2

    assert ctl.submit(coro, 21).result(timeout=5) == 42


def test_user_exception_keeps_traceback(rig: Rig) -> None:
    ctl = rig.controller()

    def deep(ctx: TaskContext) -> None:
        def inner() -> None:
            raise ZeroDivisionError("deep inside")

        inner()

    h = ctl.submit(deep)
    with pytest.raises(TaskExecutionError) as info:
        h.result(timeout=5)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    tb = ctl.get(h).failure.traceback  # type: ignore[union-attr]
    assert tb is not None and "inner" in tb and "deep inside" in tb
    assert isinstance(h.exception(), ZeroDivisionError)


def test_gate_helper_sanity() -> None:
    g = Gate()
    g.release()
    assert g.event.is_set()


def test_close_ends_the_idle_worker_threads() -> None:
    """``close()`` returns with the thread executor's idle workers gone, not still on their
    way out (``ThreadPoolExecutor.shutdown`` waits for its threads too)."""
    before = set(threading.enumerate())
    ctl = Controller(concurrency=ConcurrencyPolicy(max_parallel=4))
    gate = threading.Barrier(4, timeout=10)  # four tasks at once: four workers
    handles = [ctl.submit(gate.wait) for _ in range(4)]
    for h in handles:
        h.result(timeout=10)
    workers = [
        t for t in set(threading.enumerate()) - before if t.name.startswith("chongming-task")
    ]
    assert len(workers) == 4
    ctl.close()
    assert [t.name for t in workers if t.is_alive()] == []

"""The process executor through the real Controller: hard stop, crash isolation,
functions from a notebook's ``__main__``, lambdas and closures sent by value, the clear
error naming what cannot be pickled, heartbeats, pause, logs, upstream values."""

from __future__ import annotations

import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import exec_targets as T
import pytest

import chongming_nb as cn
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.models import FailureKind
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.runtime.executors.process import ProcessExecutor
from chongming_nb.testing.executor_contract import poll_until

WAIT = 60.0


@pytest.fixture
def ctl() -> Iterator[cn.Controller]:
    c = cn.Controller(executor="process", stop_grace=0.3, pause_grace=30)
    try:
        yield c
    finally:
        c.close()


def _wait_running(ctl: cn.Controller, h: object) -> None:
    assert poll_until(lambda: ctl.get(h).status is S.RUNNING, WAIT), ctl.get(h)


def _wait_in_loop(ctl: cn.Controller, h: object) -> None:
    """Until the task reported progress 1: past its first checkpoint, in its loop."""
    assert poll_until(lambda: (p := ctl.get(h).progress) is not None and p.done == 1, WAIT)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_uncooperative_cpu_loop_is_stopped_for_real(ctl: cn.Controller) -> None:
    h = ctl.submit(T.burn_forever)
    _wait_in_loop(ctl, h)
    pid = ctl.get(h).pid
    assert pid is not None and pid != os.getpid()
    assert not _gone(pid)
    h.stop()
    assert h.wait(WAIT)
    snap = ctl.get(h)
    assert snap.status is S.STOPPED
    assert snap.failure is None  # a stop is not a failure, even an enforced one
    assert snap.outcome == {
        "by": "user",
        "reason": None,
        "detail": "terminated after the stop window",
    }
    rec = ctl.attempts(h)[-1]
    assert rec.abandoned is False and rec.outcome is S.STOPPED and rec.failure_kind is None
    assert _gone(pid), f"process {pid} survived the stop"


def test_sigint_to_the_child_neither_kills_the_attempt_nor_prints_a_traceback(
    ctl: cn.Controller,
) -> None:
    """Kernel -> Interrupt and kernel shutdown send SIGINT to the whole process group."""
    h = ctl.submit(T.loop_until_stopped)
    _wait_running(ctl, h)
    assert poll_until(lambda: (p := ctl.get(h).progress) is not None and p.done >= 1000, WAIT)
    pid = ctl.get(h).pid
    assert pid is not None and pid != os.getpid()
    os.kill(pid, signal.SIGINT)
    done_before = ctl.get(h).progress.done  # type: ignore[union-attr]
    # still alive and still working after the signal was delivered
    assert poll_until(lambda: ctl.get(h).progress.done > done_before + 5000, WAIT)  # type: ignore[union-attr]
    assert ctl.get(h).status is S.RUNNING and not _gone(pid)
    h.stop()
    assert h.wait(WAIT)
    assert ctl.get(h).status is S.STOPPED
    assert not any("KeyboardInterrupt" in rec.line for rec in h.logs())


def test_lambdas_and_closures_run_in_a_child(ctl: cn.Controller) -> None:
    factor = 7

    def local(ctx: cn.TaskContext, x: int) -> tuple[int, int]:
        ctx.checkpoint()
        return x * factor, os.getpid()

    lam = ctl.submit(lambda: os.getpid())
    clo = ctl.submit(local, 6)
    assert lam.result(timeout=WAIT) != os.getpid()
    value, pid = clo.result(timeout=WAIT)
    assert value == 42 and pid != os.getpid()
    assert ctl.get(clo).pid == pid


def test_what_cannot_be_pickled_is_named_and_nothing_is_created(ctl: cn.Controller) -> None:
    lock = threading.Lock()

    def holds_lock() -> None:
        with lock:
            pass

    with pytest.raises(ConfigurationError, match=r"the task function .*holds_lock") as err:
        ctl.submit(holds_lock)
    assert "cannot be pickled" in str(err.value) and "executor='thread'" in str(err.value)
    with pytest.raises(ConfigurationError, match="argument 0 of 'takes_arg' cannot be pickled"):
        ctl.submit(T.takes_arg, threading.Lock())
    with pytest.raises(ConfigurationError, match="argument handle= of 'takes_kw'"):
        ctl.submit(T.takes_kw, handle=(i for i in range(3)))
    assert ctl.list_tasks() == []


def test_a_function_defined_in_an_interactive_main_runs_in_a_child(
    ctl: cn.Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = types.ModuleType("__main__")  # like IPython's: no __file__
    monkeypatch.setitem(sys.modules, "__main__", main)
    ns = main.__dict__
    exec(
        "import os\n"
        "OFFSET = 100\n"
        "def helper(n):\n    return n + OFFSET\n"
        "def cell_task(ctx, n):\n    ctx.checkpoint()\n    return helper(n), os.getpid()\n",
        ns,
    )
    h = ctl.submit(ns["cell_task"], 1)
    value, pid = h.result(timeout=WAIT)
    assert value == 101 and pid != os.getpid()


@pytest.mark.parametrize(
    ("target", "code"), [(T.segfault, -signal.SIGSEGV), (T.abort, -signal.SIGABRT)]
)
def test_a_crashing_child_fails_with_its_exit_code(
    ctl: cn.Controller, target: Callable[..., Any], code: int
) -> None:
    h = ctl.submit(target)
    assert h.wait(WAIT)
    snap = ctl.get(h)
    assert snap.status is S.FAILED
    f = snap.failure
    assert f is not None and f.kind is FailureKind.NONZERO_EXIT
    assert f.exit_code == code
    assert "result unknown, partial side effects possible" in f.message
    assert ctl.attempts(h)[-1].exit_code == code
    # where it crashed: the child's Python stacks, written by faulthandler
    assert f.traceback is not None and f"in {target.__name__}" in f.traceback, f.traceback
    # the kernel survived, and the controller still runs tasks
    assert ctl.submit(T.square, 7).result(timeout=WAIT) == 49


def test_a_child_that_dies_before_starting_says_so(ctl: cn.Controller) -> None:
    h = ctl.submit(T.takes_arg, T.DiesWhenLoaded())
    assert h.wait(WAIT)
    f = ctl.get(h).failure
    assert f is not None and f.kind is FailureKind.NONZERO_EXIT and f.exit_code == 3
    assert "before the task started" in f.message
    assert "result unknown" not in f.message


def test_heartbeats_cross_the_pipe_so_idle_timeout_does_not_fire(ctl: cn.Controller) -> None:
    h = ctl.submit(T.quiet_checkpoints, 2.0, timeout=cn.Timeout(idle=0.8))
    assert h.result(timeout=WAIT) == "done"


def test_the_idle_clock_starts_when_the_child_starts(ctl: cn.Controller) -> None:
    # the argument takes 1.2 s to load in the child, then the task checkpoints for 1.2 s
    h = ctl.submit(T.quiet_checkpoints, T.SlowToLoad(1.2), timeout=cn.Timeout(idle=0.5))
    assert h.result(timeout=WAIT) == "done"


def test_idle_timeout_kills_a_silent_child(ctl: cn.Controller) -> None:
    h = ctl.submit(T.sleeps_without_checkpoint, 60, timeout=cn.Timeout(idle=0.5))
    _wait_running(ctl, h)
    pid = ctl.get(h).pid
    assert pid is not None
    assert h.wait(WAIT)
    snap = ctl.get(h)
    assert snap.status is S.FAILED
    assert snap.failure is not None and snap.failure.kind is FailureKind.TIMEOUT_IDLE
    assert poll_until(lambda: _gone(pid), WAIT)


def test_pause_resume_progress_and_logs(ctl: cn.Controller) -> None:
    h = ctl.submit(T.steps, 400, "proc")
    _wait_running(ctl, h)
    ctl.pause(h, wait=True)
    assert ctl.get(h).status is S.PAUSED
    done_at_pause = ctl.get(h).progress
    ctl.resume(h)
    assert h.result(timeout=WAIT) == "proc"
    snap = ctl.get(h)
    assert snap.progress is not None and snap.progress.done == 400 and snap.progress.total == 400
    assert done_at_pause is None or done_at_pause.done is None or done_at_pause.done < 400
    assert any(r.line == "proc started" and r.stream == "stdout" for r in ctl.logs(h))


def test_upstream_values_reach_the_child(ctl: cn.Controller) -> None:
    a = ctl.submit(T.square, 6, executor="thread", name="six-squared")
    b = ctl.submit(T.plus_upstream, "six-squared", 1, after=[a])
    assert b.result(timeout=WAIT) == 37


def test_exceptions_keep_their_type_and_the_retry_runs(
    ctl: cn.Controller,
) -> None:
    h = ctl.submit(T.fail_first_attempt, retry=cn.RetryPolicy(max_attempts=2))
    assert h.result(timeout=WAIT) == 2
    first = ctl.attempts(h)[0]
    assert first.failure_kind is FailureKind.EXCEPTION
    assert first.traceback is not None and "first attempt fails" in first.traceback


def test_an_unpicklable_result_is_a_clear_failure(ctl: cn.Controller) -> None:
    h = ctl.submit(T.unpicklable_result)
    assert h.wait(WAIT)
    f = ctl.get(h).failure
    assert f is not None and f.kind is FailureKind.EXCEPTION
    assert "cannot be pickled" in f.message


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="fork is unsafe"):
        ProcessExecutor(start_method="fork")
    with pytest.raises(ConfigurationError, match="terminate_grace"):
        ProcessExecutor(terminate_grace=-1)

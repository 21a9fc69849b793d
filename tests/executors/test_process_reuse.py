"""Warm children of the process executor: a child runs attempt after attempt, and is
never reused after a forced stop, a crash, an attempt that left a thread running, or an
edit of a module file it loaded."""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import exec_targets as T
import pytest

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.runtime.executors.base import Outcome
from chongming_nb.runtime.executors.process import ProcessExecutor, ProcessHandle
from chongming_nb.testing.executor_contract import (
    RecordingReporter,
    make_request,
    poll_until,
    spin_quietly,
)

WAIT = 60.0


@pytest.fixture
def ex() -> Iterator[ProcessExecutor]:
    e = ProcessExecutor(terminate_grace=0.5)
    try:
        yield e
    finally:
        e.shutdown()


def _run(ex: ProcessExecutor, target: Any, *args: Any) -> tuple[ProcessHandle, Outcome]:
    rep = RecordingReporter()
    h = ex.launch(make_request(target, *args), rep)
    return h, rep.outcome(WAIT)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_one_child_runs_attempt_after_attempt(ex: ProcessExecutor) -> None:
    pids = []
    for _ in range(3):
        h, out = _run(ex, T.my_pid)
        assert out.kind == "succeeded"
        assert out.value == h.pid
        assert poll_until(lambda h=h: not h.running, WAIT)  # done, though the child lives
        pids.append(out.value)
    assert len(set(pids)) == 1 and not _gone(pids[0])
    assert ex.pool.started == 1
    # failures and cooperative stops leave the child fit too
    _, out = _run(ex, T.fail_first_attempt)
    assert out.kind == "failed"
    rep = RecordingReporter()
    h = ex.launch(make_request(spin_quietly), rep)
    assert rep.wait_for(lambda: bool(rep.started_calls), WAIT)
    h.request_stop("enough")
    assert rep.outcome(WAIT).kind == "cancelled"
    assert _run(ex, T.my_pid)[1].value == pids[0]
    assert ex.pool.started == 1


def test_a_child_killed_by_a_hard_stop_is_not_reused(ex: ProcessExecutor) -> None:
    first = _run(ex, T.my_pid)[1].value
    rep = RecordingReporter()
    h = ex.launch(make_request(T.burn_forever), rep)
    assert rep.wait_for(lambda: rep.last_progress is not None, WAIT)
    assert h.pid == first  # the warm child took it
    h.request_stop("now")
    assert h.on_stop_timeout() == "killed"
    assert not h.running and _gone(first)
    out = rep.outcome(WAIT)
    assert out.kind == "cancelled" and out.message == "terminated after the stop window"
    after = _run(ex, T.my_pid)[1].value
    assert after != first and ex.pool.started == 2


def test_a_crashed_child_is_replaced(ex: ProcessExecutor) -> None:
    first = _run(ex, T.my_pid)[1].value
    h, out = _run(ex, T.segfault)
    assert h.pid == first
    assert out.kind == "crashed" and out.exit_code is not None and out.exit_code < 0
    assert "result unknown" in (out.message or "")
    after = _run(ex, T.my_pid)[1].value
    assert after != first and ex.pool.started == 2


def test_a_child_that_dies_while_loading_the_next_task_is_replaced(
    ex: ProcessExecutor,
) -> None:
    first = _run(ex, T.my_pid)[1].value
    h, out = _run(ex, T.takes_arg, T.DiesWhenLoaded())
    assert h.pid == first
    assert out.kind == "crashed" and out.exit_code == 3
    assert "before the task started" in (out.message or "")
    assert _run(ex, T.my_pid)[1].value != first


def test_an_attempt_that_leaves_a_thread_running_ends_its_child(ex: ProcessExecutor) -> None:
    _, out = _run(ex, T.leaves_a_thread)
    assert out.kind == "succeeded"
    pid = out.value
    assert poll_until(lambda: _gone(pid), WAIT), "the child should exit after its answer"
    assert _run(ex, T.my_pid)[1].value != pid


def test_a_finished_handle_no_longer_reaches_its_child(ex: ProcessExecutor) -> None:
    old, out = _run(ex, T.my_pid)
    rep = RecordingReporter()
    h = ex.launch(make_request(T.steps, 200, "second"), rep)
    assert h.pid == old.pid
    # late signals for the first attempt: neither stop, pause nor kill touch the second
    old.request_stop("late")
    old.request_pause()
    assert old.on_stop_timeout() == "gone"
    assert rep.outcome(WAIT).kind == "succeeded"
    assert rep.pause_calls == 0
    assert not _gone(out.value)


def test_a_new_stop_or_pause_state_for_each_attempt(ex: ProcessExecutor) -> None:
    rep = RecordingReporter()
    h = ex.launch(make_request(spin_quietly), rep)
    assert rep.wait_for(lambda: bool(rep.started_calls), WAIT)
    h.request_pause()
    assert rep.wait_for(lambda: rep.pause_calls == 1, WAIT)
    h.request_stop("stop while paused")
    assert rep.outcome(WAIT).kind == "cancelled"
    # the same child: the stop and the pause of the last attempt are gone
    h2, out = _run(ex, T.steps, 50, "clean")
    assert h2.pid == h.pid
    assert out.kind == "succeeded" and out.value == "clean"


def test_an_edited_module_is_loaded_afresh(
    ex: ProcessExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "cn_reuse_edit_mod.py"

    def write(version: int, age: float) -> None:
        src.write_text(f"def version(ctx):\n    import os\n    return {version}, os.getpid()\n")
        then = time.time() - age  # well before the attempt: not "edited while loading"
        os.utime(src, (then, then))

    write(1, 100)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("cn_reuse_edit_mod")
    try:
        v1, pid1 = _run(ex, mod.version)[1].value
        assert v1 == 1
        assert _run(ex, mod.version)[1].value == (1, pid1)  # unchanged: the same child
        write(2, 50)
        v2, pid2 = _run(ex, mod.version)[1].value
        assert v2 == 2 and pid2 != pid1
    finally:
        sys.modules.pop("cn_reuse_edit_mod", None)


def test_reuse_off_starts_a_process_per_attempt() -> None:
    ex = ProcessExecutor(reuse=False)
    try:
        a = _run(ex, T.my_pid)[1].value
        assert poll_until(lambda: _gone(a), WAIT)
        b = _run(ex, T.my_pid)[1].value
        assert a != b
        assert ex.pool.idle_pids() == []
    finally:
        ex.shutdown()


def test_idle_children_are_retired() -> None:
    ex = ProcessExecutor(idle_timeout=0.2)
    try:
        pid = _run(ex, T.my_pid)[1].value
        assert poll_until(lambda: _gone(pid), WAIT)
        assert ex.pool.idle_pids() == []
        assert _run(ex, T.my_pid)[1].value != pid
    finally:
        ex.shutdown()


def test_at_most_max_idle_children_wait() -> None:
    ex = ProcessExecutor(max_idle=1)
    try:
        reps = [RecordingReporter() for _ in range(2)]
        hs = [ex.launch(make_request(T.steps, 100, "x"), r) for r in reps]
        for r in reps:
            assert r.outcome(WAIT).kind == "succeeded"
        pids = {h.pid for h in hs}
        assert len(pids) == 2
        assert poll_until(lambda: sum(not _gone(p) for p in pids if p) == 1, WAIT)
        assert len(ex.pool.idle_pids()) == 1
    finally:
        ex.shutdown()


def test_shutdown_ends_idle_children() -> None:
    ex = ProcessExecutor()
    pid = _run(ex, T.my_pid)[1].value
    ex.shutdown()
    assert _gone(pid)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"reuse": "yes"}, "reuse"),
        ({"idle_timeout": 0}, "idle_timeout"),
        ({"max_idle": 0}, "max_idle"),
        ({"max_idle": True}, "max_idle"),
    ],
)
def test_bad_reuse_settings_are_refused(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ProcessExecutor(**kw)

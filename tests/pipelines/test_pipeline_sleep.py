"""Durable sleep steps (``Pipeline.sleep``): the wake time is fixed when the step starts,
stored, and honoured by ``submit(ctl, resume_from=run_id)`` after the kernel was killed;
a sleep waits without a slot, and stop reaches it at once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pipe_helpers import DEADLINE

import chongming_nb as cn
from chongming_nb.control.pipeline import Pipeline, PipelineRun, PipelineRunStatus
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.stores import SqliteStore
from chongming_nb.testing import FakeClock
from chongming_nb.testing.executor_contract import poll_until

R = PipelineRunStatus

# the child: a pipeline (extract, then STEPS) killed while it waits
_CHILD = textwrap.dedent(
    """
    import sys, time
    import chongming_nb as cn

    def extract():
        return 21

    def load(ctx):
        return ctx.upstream("extract") * 2

    ctl = cn.Controller(store=sys.argv[1], artifacts_root=sys.argv[2])
    p = cn.Pipeline("nightly")
    e = p.add(extract, name="extract")
    STEPS
    run = p.submit(ctl)
    print(run.id, flush=True)
    time.sleep(3600)
    """
)
# ... its sleep step under way
CHILD = _CHILD.replace(
    "STEPS",
    'nap = p.sleep("nap", seconds=float(sys.argv[3]), deps=[e])\n'
    'p.add(load, name="load", deps=[nap, e])',
)
# ... its second step waiting for a delayed start
CHILD_DELAYED = _CHILD.replace(
    "STEPS", 'p.add(load, name="load", deps=[e], delay=float(sys.argv[3]))'
)


def _extracted(arts: Path, run_id: str) -> bool:
    """Has the run's manifest recorded extract's success (so a resume restores it)?"""
    manifest = arts / "pipelines" / run_id / "manifest.jsonl"
    if not manifest.exists():
        return False
    lines = [json.loads(ln) for ln in manifest.read_text().splitlines() if ln.strip()]
    return any(ln.get("event") == "succeeded" and ln.get("node") == "extract" for ln in lines)


def _wake_in_store(db: Path, run_id: str, node: str) -> datetime | None:
    store = SqliteStore(db)
    try:
        rec = store.get_run(run_id)
    finally:
        store.close()
    wake = (rec.spec.get("wakes") or {}).get(node) if rec is not None else None
    return None if wake is None else datetime.fromisoformat(wake)


def _kill_9_once_stored(
    tmp_path: Path, child_code: str, node: str, seconds: float
) -> tuple[Path, Path, str, datetime]:
    """Run ``child_code`` in a process, SIGKILL it once the store holds ``node``'s wake
    time and extract's success is recorded; return the store, the artifacts folder, the
    run id and that time."""
    db, arts = tmp_path / "tasks.db", tmp_path / "artifacts"
    script = tmp_path / "child.py"
    script.write_text(child_code)
    child = subprocess.Popen(
        [sys.executable, str(script), str(db), str(arts), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        run_id = child.stdout.readline().strip()
        assert run_id.startswith("run-"), run_id
        deadline = time.monotonic() + DEADLINE
        wake = None
        while wake is None or not _extracted(arts, run_id):  # another process: poll
            assert time.monotonic() < deadline, f"{node} never recorded its wake time"
            wake = _wake_in_store(db, run_id, node)
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert wake - datetime.now(UTC) > timedelta(seconds=1), "killed too late to mean anything"
    return db, arts, run_id, wake


def _resume_after_the_kill(
    db: Path, arts: Path, run_id: str, wake: datetime, delayed: bool
) -> PipelineRun:
    """The same pipeline on a new controller over the dead one's store, resumed from its
    run: extract is restored (not run), load starts within 1 s of ``wake``."""
    ran: dict[str, Any] = {}

    def extract() -> int:
        ran["extract"] = True
        return 0

    def load(ctx: cn.TaskContext) -> int:
        ran["load_started"] = datetime.now(UTC)
        return int(ctx.upstream("extract")) * 2

    ctl = cn.Controller(store=str(db), artifacts_root=arts)
    try:
        ctl.reconcile("fail")  # the dead kernel's tasks: lost (or cancelled: was scheduled)
        p = Pipeline("nightly")
        e = p.add(extract, name="extract")
        if delayed:
            p.add(load, name="load", deps=[e], delay=6)
        else:
            nap = p.sleep("nap", seconds=6, deps=[e])
            p.add(load, name="load", deps=[nap, e])
        run = p.submit(ctl, resume_from=run_id)
        assert run.wait(DEADLINE) is R.SUCCEEDED, run.summary()["first_failure"]
        assert "extract" not in ran, "a succeeded step ran again"
        assert run.result("load") == 42  # extract's stored output fed it
        started = ran["load_started"]
        # the time left, not the whole wait again from the resume
        assert abs((started - wake).total_seconds()) <= 1.0, (started, wake)
        return run
    finally:
        ctl.close()


def test_kill_9_during_a_sleep_then_resume_wakes_at_the_original_time(tmp_path: Path) -> None:
    db, arts, run_id, wake = _kill_9_once_stored(tmp_path, CHILD, "nap", 6)
    run = _resume_after_the_kill(db, arts, run_id, wake, delayed=False)
    assert run.result("nap") == wake.isoformat()


def test_kill_9_while_a_delayed_step_waits_then_resume_starts_it_at_the_original_time(
    tmp_path: Path,
) -> None:
    db, arts, run_id, start_at = _kill_9_once_stored(tmp_path, CHILD_DELAYED, "load", 6)
    _resume_after_the_kill(db, arts, run_id, start_at, delayed=True)


def test_a_delayed_step_resumed_after_its_time_starts_at_once_and_a_restored_one_never_waits(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    ctl = cn.Controller(clock=clock, artifacts_root=tmp_path)
    try:
        p = Pipeline("later")
        first = p.add(lambda: 1, name="first", delay=60)
        p.add(lambda: 2, name="second", deps=[first], delay=120)
        run = p.submit(ctl)
        clock.advance(60)
        assert poll_until(lambda: run.summary()["counts"].get("succeeded") == 1, DEADLINE)
        run.stop()
        assert run.wait(DEADLINE) is R.STOPPED
        clock.advance(3600)  # both start times have passed
        again = p.submit(ctl, resume_from=run.id)  # no advance: nothing waits
        assert again.wait(DEADLINE) is R.SUCCEEDED
        assert again.summary()["restored"] == ["first"]
        assert again.result("second") == 2
    finally:
        ctl.close()


def test_a_passed_wake_time_does_not_wait_and_a_finished_sleep_is_not_rerun(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    ctl = cn.Controller(clock=clock, artifacts_root=tmp_path)
    try:
        p = Pipeline("fast")
        nap = p.sleep("nap", until=clock.now() - timedelta(hours=1))
        after = p.add(lambda: "after", name="after", deps=[nap])
        run = p.submit(ctl)
        assert run.wait(DEADLINE) is R.SUCCEEDED  # no advance needed: the time has passed
        assert run.result(after) == "after"
        again = p.submit(ctl, resume_from=run.id)
        assert again.wait(DEADLINE) is R.SUCCEEDED
        assert again.summary()["restored"] == ["nap", "after"]
    finally:
        ctl.close()


def test_a_sleep_waits_on_the_fake_clock_without_a_slot(tmp_path: Path) -> None:
    clock = FakeClock()
    ctl = cn.Controller(
        clock=clock, artifacts_root=tmp_path, concurrency=cn.ConcurrencyPolicy(max_parallel=1)
    )
    try:
        p = Pipeline("slotless")
        nap = p.sleep("nap", seconds=600)
        p.add(lambda: "after", name="after", deps=[nap])
        run = p.submit(ctl)
        nap_task = run.handle("nap")
        # while the sleep waits, the only slot runs another task
        other = ctl.submit(lambda: "other")
        assert other.result(timeout=DEADLINE) == "other"
        assert nap_task.status is S.RUNNING and run.status is R.RUNNING
        clock.advance(600)
        assert run.wait(DEADLINE) is R.SUCCEEDED
    finally:
        ctl.close()


def test_stop_reaches_a_sleeping_step_at_once(tmp_path: Path) -> None:
    ctl = cn.Controller(artifacts_root=tmp_path)  # a real clock: an hour to sleep
    try:
        p = Pipeline("stoppable")
        p.sleep("nap", seconds=3600)
        run = p.submit(ctl)
        nap = run.handle("nap")
        assert poll_until(lambda: ctl.get(nap.id).status is S.RUNNING, DEADLINE)
        run.stop()
        assert run.wait(DEADLINE) is R.STOPPED
        assert ctl.get(nap.id).status is S.STOPPED
    finally:
        ctl.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of seconds= or until="),
        ({"seconds": 1, "until": datetime.now(UTC)}, "exactly one"),
        ({"seconds": -1}, "sleep seconds must be a finite number of seconds >= 0"),
        ({"seconds": float("nan")}, "sleep seconds must be a finite number"),
        ({"seconds": 1e12}, "at most"),
        ({"seconds": True}, "sleep seconds must be a number of seconds"),
        ({"until": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"until": "tomorrow"}, "timezone-aware"),
    ],
)
def test_bad_sleep_steps_are_refused(kwargs: dict[str, Any], match: str) -> None:
    p = Pipeline("bad")
    with pytest.raises(ConfigurationError, match=match):
        p.sleep("nap", **kwargs)
    assert len(p) == 0


def test_pause_and_resume_of_a_run_reach_a_sleeping_step(tmp_path: Path) -> None:
    clock = FakeClock()
    ctl = cn.Controller(clock=clock, artifacts_root=tmp_path)
    try:
        p = Pipeline("pausable")
        nap = p.sleep("nap", seconds=60)
        p.add(lambda: "after", name="after", deps=[nap])
        run = p.submit(ctl)
        h = run.handle("nap")
        assert poll_until(lambda: "nap" in run._wakes, DEADLINE)  # its wake time is fixed
        run.pause()
        assert poll_until(lambda: ctl.get(h.id).status is S.PAUSED, DEADLINE)
        assert run.status is R.PAUSED
        run.resume()
        clock.advance(60)
        assert run.wait(DEADLINE) is R.SUCCEEDED
        assert run.result("after") == "after"
    finally:
        ctl.close()

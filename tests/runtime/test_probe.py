"""Liveness probes on the cancellation token: requested by a sampler, answered by the
next checkpoint, never at the cost of a stop, a pause or another probe."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chongming_nb import CancellationToken, TaskCancelled
from chongming_nb.runtime.heartbeat import Heartbeat

WAIT = 5.0


# ------------------------------------------------------------------ the fast path


class _WriteRecorder(CancellationToken):
    """A token that records every attribute written once ``recording`` is on."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.recording = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "recording", False):
            self.writes.append(name)
        super().__setattr__(name, value)


def test_fast_path_writes_nothing() -> None:
    tok = _WriteRecorder()
    for _ in range(1000):
        tok.checkpoint()
    assert tok.writes == [] and tok.beats == 0


def test_slow_path_for_a_probe_writes_the_answer_only() -> None:
    tok = _WriteRecorder()
    tok.recording = False
    tok.arm_probe()
    tok.recording = True
    tok.writes.clear()
    tok.checkpoint()
    assert sorted(tok.writes) == ["_probe", "beats", "flag"]
    tok.writes.clear()
    tok.checkpoint()  # answered: back on the fast path
    assert tok.writes == []


# ------------------------------------------------------------------ answering probes


def test_probe_is_answered_once_by_the_next_checkpoint() -> None:
    tok = CancellationToken()
    tok.arm_probe()
    tok.arm_probe()  # arming an armed probe asks for one answer, not two
    assert tok.flag and tok.probe_pending and tok.beats == 0
    tok.checkpoint()
    assert tok.beats == 1 and not tok.probe_pending and tok.flag is False
    tok.checkpoint()
    assert tok.beats == 1


def test_a_token_born_armed_is_answered_like_an_armed_one_and_heartbeat_keeps_it() -> None:
    from chongming_nb.runtime.heartbeat import Heartbeat

    tok = CancellationToken(armed=True)
    assert tok.flag and tok.probe_pending and tok.beats == 0
    hb = Heartbeat(tok, 10.0)  # already armed: no second probe, one answer
    assert tok.probe_pending
    tok.checkpoint()
    assert tok.beats == 1 and not tok.probe_pending and tok.flag is False
    assert hb.sample(11.0)  # the answer counts as life at the first sample
    assert tok.probe_pending  # and the sample armed the next probe
    plain = CancellationToken()
    assert not plain.flag and not plain.probe_pending
    Heartbeat(plain, 0.0)
    assert plain.probe_pending  # a plain token is armed by its Heartbeat


def test_acheckpoint_answers_a_probe() -> None:
    import asyncio

    tok = CancellationToken()
    tok.arm_probe()
    asyncio.run(tok.acheckpoint())
    assert tok.beats == 1 and tok.flag is False


def test_a_pending_stop_outlives_the_probe_answer() -> None:
    tok = CancellationToken()
    tok.request_stop("stop")
    tok.arm_probe()
    with pytest.raises(TaskCancelled, match="stop"):
        tok.checkpoint()
    assert tok.beats == 1 and tok.flag  # answered, and the stop still pending
    with pytest.raises(TaskCancelled):
        tok.checkpoint()


def test_a_probe_armed_during_a_pause_survives_resume() -> None:
    tok = CancellationToken()
    tok.request_pause()
    left = threading.Event()

    def body() -> None:
        tok.checkpoint()
        left.set()

    th = threading.Thread(target=body, daemon=True)
    th.start()
    _until(lambda: tok.paused)
    tok.arm_probe()  # the sampler's probe while the task sits in the pause
    tok.resume()
    assert left.wait(WAIT)
    th.join(WAIT)
    assert tok.flag and tok.probe_pending  # resume must not clear the probe's flag
    tok.checkpoint()
    assert tok.beats == 1 and tok.flag is False


def test_heartbeat_sees_a_checkpoint_between_two_samples() -> None:
    tok = CancellationToken()
    hb = Heartbeat(tok, now=0.0)
    for i in range(1, 6):
        tok.checkpoint()
        assert hb.sample(float(i)) is True
    assert hb.sample(6.0) is False and hb.last_beat == 5.0


def test_track_and_progress_show_life_to_a_heartbeat() -> None:
    from chongming_nb.runtime.context import TaskContext

    class _Quiet:
        def progress(self, *args: Any) -> None:
            pass

    tok = CancellationToken()
    ctx = TaskContext(task_id="t", name="n", attempt=1, token=tok, reporter=_Quiet())  # type: ignore[arg-type]
    hb = Heartbeat(tok, now=0.0)
    samples = []
    for i in ctx.track(range(10_000)):
        if i in (0, 5_000):
            samples.append(hb.sample(float(i)))
    # a checkpoint before the first batch answered the heartbeat's first probe, and the
    # one after the last batch answered the probe armed mid-loop (batch sizes adapt to
    # timing, so which batch boundary answers it in between is not fixed)
    assert samples[0] is True and hb.sample(20_000.0) is True
    assert hb.sample(20_001.0) is False
    ctx.progress(done=1)  # a progress report is a sign of life of its own
    assert hb.sample(20_002.0) is True


# -------------------------------------------------- a stop racing with an answer


class _GatedLock:
    """A lock that holds the *task* thread at a chosen point: before it acquires
    (``before``) or while it holds the lock (``holding``), until ``go`` is set. Other
    threads pass straight through, so the test decides the interleaving."""

    def __init__(self, task_thread_name: str, where: str) -> None:
        self._lock = threading.Lock()
        self._task = task_thread_name
        self._where = where
        self.reached = threading.Event()
        self.go = threading.Event()

    def _gated(self) -> bool:
        return threading.current_thread().name == self._task and not self.go.is_set()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._where == "before" and self._gated():
            self.reached.set()
            assert self.go.wait(WAIT)
        got = self._lock.acquire(blocking, timeout)
        if got and self._where == "holding" and self._gated():
            self.reached.set()
            assert self.go.wait(WAIT)
        return got

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("where", ["before", "holding"])
def test_a_stop_racing_with_a_probe_answer_is_never_lost(where: str) -> None:
    tok = CancellationToken()
    gate = _GatedLock("task", where)
    tok._lock = gate  # type: ignore[assignment]  # the token's one lock, instrumented
    tok.arm_probe()
    caught: list[BaseException] = []
    stopper_done = threading.Event()

    def task() -> None:
        try:
            tok.checkpoint()  # answers the probe; the stop lands meanwhile
            assert stopper_done.wait(WAIT)
            tok.checkpoint()  # a stop that missed the first checkpoint lands here
        except TaskCancelled as exc:
            caught.append(exc)

    def stopper() -> None:
        tok.request_stop("raced")
        stopper_done.set()

    th = threading.Thread(target=task, name="task", daemon=True)
    th.start()
    assert gate.reached.wait(WAIT)  # the task thread is inside its probe answer
    st_th = threading.Thread(target=stopper, daemon=True)
    st_th.start()
    if where == "before":
        assert stopper_done.wait(WAIT)  # the stop completes before the answer's lock
    else:
        assert not stopper_done.is_set()  # the stop waits for the answer's lock
    gate.go.set()
    th.join(WAIT)
    st_th.join(WAIT)
    assert not th.is_alive() and stopper_done.is_set()
    assert len(caught) == 1 and "raced" in str(caught[0])
    assert tok.beats == 1 and tok.flag  # the probe answered once; the stop still pending


# ---------------------------------------------- every interleaving of whole requests

_OPS = ("arm", "stop", "pause", "resume", "checkpoint")


@given(st.lists(st.sampled_from(_OPS), max_size=40))
def test_flag_is_true_exactly_when_something_is_pending(ops: list[str]) -> None:
    """Requests and answers mutate the token under one lock, so any concurrent history is
    some serial order of whole operations; the unlocked reads of the slow path are
    covered above. In every order, ``flag`` mirrors what is pending, each armed probe is
    answered by exactly one checkpoint, and a stop is raised by every later checkpoint."""
    tok = CancellationToken()
    tok.on_pause_reached = lambda: False  # a withdrawn pause: checkpoints never block here
    armed = answered = 0
    stop = pause = probe = False
    for op in ops:
        if op == "arm":
            tok.arm_probe()
            armed += not probe
            probe = True
        elif op == "stop":
            tok.request_stop("x")
            stop = True
        elif op == "pause":
            tok.request_pause()
            pause = True
        elif op == "resume":
            tok.resume()
            pause = False
        else:
            before = tok.beats
            try:
                tok.checkpoint()
                raised = False
            except TaskCancelled:
                raised = True
            assert raised == stop
            answered += tok.beats - before
            probe = False
        assert (tok.flag, tok.probe_pending) == (stop or pause or probe, probe), ops
        assert (tok.stop_requested, tok.pause_requested) == (stop, pause)
    assert tok.beats == answered == armed - probe


def _until(predicate: Any) -> None:
    import time

    deadline = time.monotonic() + WAIT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)

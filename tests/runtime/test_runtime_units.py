"""Runtime units without a Controller: the cancellation token, TaskContext.track and
progress, heartbeats, pure timeout judgements, output capture, the thread executor."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading
from typing import Any

import pytest

from chongming_nb import CancellationToken, TaskCancelled, Timeout
from chongming_nb.core.models import FailureKind
from chongming_nb.runtime import timeouts
from chongming_nb.runtime.context import TaskContext
from chongming_nb.runtime.executors import ExecutionRequest, Outcome, ThreadExecutor
from chongming_nb.runtime.heartbeat import Heartbeat
from chongming_nb.runtime.output import StreamProxy, capture, install


class Recorder:
    """A Reporter that records what it is told (thread-safe enough for these tests)."""

    def __init__(self) -> None:
        self.progress_calls: list[tuple[Any, ...]] = []
        self.lines: list[tuple[str, str, str | None]] = []
        self.outcome: Outcome | None = None
        self.done = threading.Event()
        self.started_n = 0
        self.pause_ok = True
        self.thread_name: str | None = None

    def started(self, pid: int | None = None) -> None:
        self.started_n += 1
        self.thread_name = threading.current_thread().name

    def progress(self, done: Any, total: Any, unit: Any, message: Any) -> None:
        self.progress_calls.append((done, total, unit, message))

    def emit(self, kind: str, payload: Any) -> None:
        pass

    def log(self, stream: str, line: str, level: str | None) -> None:
        self.lines.append((stream, line, level))

    def pause_reached(self) -> bool:
        return self.pause_ok

    def resumed(self) -> None:
        pass

    def heartbeat(self) -> None:
        pass

    def upstream(self, key: Any) -> Any:
        raise KeyError(key)

    def finished(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.done.set()


def until(predicate: Any, timeout: float = 5.0) -> None:
    """Wait for a flag that has no event of its own (e.g. a checkpoint blocking in a
    pause), with a deadline so a bug fails the test instead of hanging it."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)


def make_ctx(token: CancellationToken | None = None, rep: Recorder | None = None) -> TaskContext:
    return TaskContext(
        task_id="t1", name="unit", attempt=1, token=token or CancellationToken(),
        reporter=rep or Recorder(),
    )  # fmt: skip


# --------------------------------------------------------------------- token


def test_checkpoint_fast_path_leaves_beats_alone() -> None:
    tok = CancellationToken()
    for _ in range(5):
        tok.checkpoint()
    assert tok.beats == 0 and tok.flag is False  # beats answer probes only (test_probe.py)


def test_stop_raises_at_the_next_checkpoint() -> None:
    tok = CancellationToken()
    tok.request_stop("enough")
    assert tok.flag and tok.stop_requested
    with pytest.raises(TaskCancelled, match="enough"):
        tok.checkpoint()
    tok.request_stop("second reason")  # the first reason stands
    assert tok.reason == "enough"


def test_task_cancelled_escapes_except_exception() -> None:
    tok = CancellationToken()
    tok.request_stop()
    with pytest.raises(TaskCancelled):
        try:
            tok.checkpoint()
        except Exception:  # user code that swallows errors must not swallow a stop
            pytest.fail("TaskCancelled was caught by except Exception")


def test_pause_blocks_until_resume() -> None:
    tok = CancellationToken()
    tok.request_pause()
    passed = threading.Event()

    def body() -> None:
        tok.checkpoint()
        passed.set()

    th = threading.Thread(target=body, daemon=True)
    th.start()
    until(lambda: tok.paused)
    assert tok.paused and not passed.is_set()
    tok.resume()
    assert passed.wait(5)
    assert tok.flag is False and not tok.paused


def test_stop_wakes_a_paused_checkpoint() -> None:
    tok = CancellationToken()
    tok.request_pause()
    errors: list[BaseException] = []

    def body() -> None:
        try:
            tok.checkpoint()
        except TaskCancelled as exc:
            errors.append(exc)

    th = threading.Thread(target=body, daemon=True)
    th.start()
    until(lambda: tok.paused)
    tok.request_stop("stop while paused")
    th.join(5)
    assert not th.is_alive() and len(errors) == 1


def test_withdrawn_pause_does_not_block() -> None:
    tok = CancellationToken()
    tok.on_pause_reached = lambda: False  # the controller already rolled the pause back
    tok.request_pause()
    tok.checkpoint()  # returns at once
    assert not tok.paused


def test_acheckpoint() -> None:
    tok = CancellationToken()

    async def main() -> None:
        await tok.acheckpoint()
        tok.request_stop("async stop")
        with pytest.raises(TaskCancelled):
            await tok.acheckpoint()

    tok.arm_probe()
    asyncio.run(main())
    assert tok.beats == 1  # the probe, answered once by the first acheckpoint


# ------------------------------------------------------------------- context


def test_track_yields_everything_in_order_and_reports_progress() -> None:
    rep = Recorder()
    ctx = make_ctx(rep=rep)
    items = list(range(10_000))
    assert list(ctx.track(items, unit="rows")) == items
    assert rep.progress_calls[0] == (0, 10_000, "rows", None)
    assert rep.progress_calls[-1][0] == 10_000
    dones = [c[0] for c in rep.progress_calls if c[0] is not None]
    assert dones == sorted(dones)


def test_track_generator_without_len() -> None:
    rep = Recorder()
    ctx = make_ctx(rep=rep)
    assert sum(ctx.track(x for x in range(100))) == sum(range(100))
    assert rep.progress_calls[0][1] is None  # total unknown


def test_track_stops_between_batches() -> None:
    tok = CancellationToken()
    ctx = make_ctx(tok)
    seen = []
    with pytest.raises(TaskCancelled):
        for i in ctx.track(range(1_000_000)):
            seen.append(i)
            if i == 10:
                tok.request_stop()
    assert seen == list(range(len(seen))) and len(seen) < 1_000_000


def test_progress_counts_as_a_sign_of_life() -> None:
    tok = CancellationToken()
    ctx = make_ctx(tok)
    ctx.progress(done=1, total=2)
    assert tok.beats == 1


def test_emit_needs_a_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        make_ctx().emit("", None)


def test_artifacts_per_attempt(tmp_path: Any) -> None:
    ctx = TaskContext(task_id="abc", name="n", attempt=2, token=CancellationToken(),
                      reporter=Recorder(), artifacts_root=tmp_path)  # fmt: skip
    assert ctx.artifacts == tmp_path / "abc" / "attempt-2" and ctx.artifacts.is_dir()


# ------------------------------------------------------ heartbeat, timeouts


def test_heartbeat_samples_the_beat_counter() -> None:
    tok = CancellationToken()
    hb = Heartbeat(tok, now=0.0)
    assert tok.probe_pending  # a new heartbeat asks for a sign of life at once
    assert hb.sample(1.0) is False and hb.last_beat == 0.0
    tok.checkpoint()
    tok.checkpoint()
    assert hb.sample(2.0) is True and hb.last_beat == 2.0
    assert hb.sample(2.5) is False  # no checkpoint since: the re-armed probe is unanswered
    tok.checkpoint()
    assert hb.sample(2.7) is True and hb.last_beat == 2.7
    tok.paused = True  # a paused task is alive, not stuck
    assert hb.sample(3.0) is True


@pytest.mark.parametrize(
    ("timeout", "starting", "started", "beat", "now", "fired"),
    [
        (Timeout(start=5), 0.0, None, None, 5.0, None),
        (Timeout(start=5), 0.0, None, None, 5.1, FailureKind.TIMEOUT_START),
        (Timeout(start=5), 0.0, 1.0, None, 100.0, None),  # started: start no longer applies
        (Timeout(per_attempt=10), 0.0, 1.0, 10.5, 11.5, FailureKind.TIMEOUT_ATTEMPT),
        (Timeout(idle=3), 0.0, 1.0, 8.0, 10.0, None),
        (Timeout(idle=3), 0.0, 1.0, 8.0, 11.5, FailureKind.TIMEOUT_IDLE),
        (Timeout(idle=3), 0.0, None, None, 100.0, None),  # idle only once started
        (Timeout(per_attempt=10, idle=3), 0.0, 0.0, 0.0, 20.0, FailureKind.TIMEOUT_ATTEMPT),
    ],
)
def test_timeout_judgements(timeout, starting, started, beat, now, fired) -> None:  # type: ignore[no-untyped-def]
    got = timeouts.judge(timeout, starting_since=starting, started=started, last_beat=beat, now=now)
    assert got is fired


def test_next_deadline() -> None:
    t = Timeout(start=5, per_attempt=60, idle=10)
    assert timeouts.next_deadline(t, starting_since=0.0, started=None, last_beat=None) == 5.0
    assert timeouts.next_deadline(t, starting_since=0.0, started=2.0, last_beat=30.0) == 40.0
    assert (
        timeouts.next_deadline(Timeout(), starting_since=0.0, started=1.0, last_beat=None) is None
    )


# -------------------------------------------------------------------- output


def test_capture_is_per_thread() -> None:
    install()
    assert isinstance(sys.stdout, StreamProxy)
    lines: list[tuple[str, str, str | None]] = []
    outside = io.StringIO()
    proxy = StreamProxy("stdout", outside)
    ready, go = threading.Event(), threading.Event()

    def task() -> None:
        with capture(lambda s, line, lvl: lines.append((s, line, lvl))):
            proxy.write("in task\npartial")
            ready.set()
            go.wait(5)
            logging.getLogger("any.lib").error("boom")

    th = threading.Thread(target=task)
    th.start()
    assert ready.wait(5)
    proxy.write("from main\n")  # another thread, at the same time: untouched
    go.set()
    th.join(5)
    assert outside.getvalue() == "from main\n"
    assert ("stdout", "in task", None) in lines
    assert ("stdout", "partial", None) in lines  # flushed at the end of the capture
    assert any(s == "log" and "boom" in line and lvl == "ERROR" for s, line, lvl in lines)


# ------------------------------------------------------------ thread executor


def _req(target: Any, *args: Any, inject: bool = True) -> ExecutionRequest:
    return ExecutionRequest(task_id="x", name="x", attempt=1, target=target, args=args,
                            inject_context=inject)  # fmt: skip


def test_thread_executor_reuses_idle_workers() -> None:
    ex = ThreadExecutor()
    try:
        names = []
        for i in range(3):
            rep = Recorder()
            h = ex.launch(_req(lambda ctx, v: v, i), rep)
            assert rep.done.wait(5)
            assert h.join(5) and not h.running
            assert rep.outcome is not None and rep.outcome.value == i
            names.append(rep.thread_name)
        assert len(set(names)) == 1
    finally:
        ex.shutdown()


def test_thread_executor_never_reuses_an_abandoned_worker() -> None:
    ex = ThreadExecutor()
    gate = threading.Event()
    try:
        rep1 = Recorder()
        h1 = ex.launch(_req(lambda ctx: gate.wait(5)), rep1)
        until(lambda: rep1.started_n > 0)
        assert h1.on_stop_timeout() == "abandoned"
        assert h1.running  # honest: it still runs
        gate.set()
        assert rep1.done.wait(5)
        rep2 = Recorder()
        ex.launch(_req(lambda ctx: 1), rep2)
        assert rep2.done.wait(5)
        assert rep2.thread_name != rep1.thread_name
        assert h1.on_stop_timeout() == "gone"
    finally:
        gate.set()
        ex.shutdown()


def test_thread_executor_idle_list_races_with_shutdown_and_retire() -> None:
    """The idle list has no lock: each of park, launch, retire and shutdown must still
    leave every worker either owned by exactly one party or gone."""
    from chongming_nb.runtime.executors.thread import _Worker

    ex = ThreadExecutor(max_idle=2)
    w1, w2, w3 = _Worker(ex), _Worker(ex), _Worker(ex)
    assert ex._park(w1) and ex._park(w2)
    assert not ex._park(w3)  # over max_idle: that worker exits instead
    # a launch popped w2, so w2's idle timeout must not retire it (its job is coming)
    popped = ex._idle.pop()
    assert popped is w2
    assert not ex._retire(w2)
    assert ex._retire(w1) and ex._idle == []
    # shutdown hands every parked worker its exit, and nobody parks afterwards
    assert ex._park(w1)
    ex.shutdown()
    assert w1.jobs.get_nowait() is None
    assert not ex._park(w2) and ex._idle == []


def test_thread_executor_runs_many_short_tasks_from_many_threads() -> None:
    """Launches and parks from several threads at once (the lock-free idle list):
    every attempt runs exactly once, and no worker is parked twice."""
    ex = ThreadExecutor()
    reps = [Recorder() for _ in range(400)]

    def body(ctx: TaskContext, i: int) -> int:
        return i

    def launcher(part: list[Recorder], offset: int) -> None:
        for k, rep in enumerate(part):
            ex.launch(_req(body, offset + k), rep)

    try:
        threads = [threading.Thread(target=launcher, args=(reps[j::4], j * 1000)) for j in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        for rep in reps:
            assert rep.done.wait(10)
        values = sorted(rep.outcome.value for rep in reps if rep.outcome is not None)
        assert len(values) == len(reps) and len(set(values)) == len(reps)
        assert all(rep.started_n == 1 for rep in reps)
        assert len(ex._idle) == len(set(map(id, ex._idle)))  # nobody parked twice
    finally:
        ex.shutdown()


def test_thread_executor_threads_are_daemons() -> None:
    ex = ThreadExecutor()
    rep = Recorder()
    seen: list[bool] = []
    ex.launch(_req(lambda ctx: seen.append(threading.current_thread().daemon)), rep)
    assert rep.done.wait(5)
    ex.shutdown()
    assert seen == [True]


def test_failed_attempt_keeps_traceback() -> None:
    ex = ThreadExecutor()
    rep = Recorder()

    def bad(ctx: TaskContext) -> None:
        raise KeyError("missing column")

    ex.launch(_req(bad), rep)
    assert rep.done.wait(5)
    ex.shutdown()
    o = rep.outcome
    assert o is not None and o.kind == "failed"
    assert isinstance(o.exception, KeyError)
    assert o.traceback is not None and "missing column" in o.traceback and "bad" in o.traceback
    assert o.exception_type == "builtins.KeyError"
    # it starts at the task's own code: the executor's frames above it are not the task's
    assert "chongming_nb" not in o.traceback, o.traceback
    assert o.traceback.splitlines()[1].endswith(", in bad")
    assert o.exception.__traceback__ is not None
    assert o.exception.__traceback__.tb_frame.f_code.co_name == "bad"

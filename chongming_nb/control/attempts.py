"""Attempts: what a running attempt reports, and how its end is settled.

Owns the live executions (``executing``) and the reports that found the lock busy
(``pending_starts`` / ``pending_finishes``, flat combining: a task thread never waits
for the lock; whoever holds it, or takes it next, settles them in arrival order).
Everything else it changes is a TaskEntry field under ``TaskBook.lock``.

Invariant: an execution's late report (after it was abandoned, or after its task was
forced or stopped while paused) never rewrites a recorded outcome (``exec_attempt`` is
the attempt a report must name to count).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections import deque
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from chongming_nb.control.admission import Admission
from chongming_nb.control.book import TaskBook, TaskEntry, history_row
from chongming_nb.control.dependencies import Dependencies
from chongming_nb.control.messages import AppendLog, SaveAttempt, TouchProgress, TrimLogs
from chongming_nb.control.recovery import ConvergePlan
from chongming_nb.control.timers import TICK_SECONDS, TimerKind, TimerQueue
from chongming_nb.core.errors import ConfigurationError, TaskTimeout
from chongming_nb.core.events import AttemptFailed, ProgressUpdated, TaskLogLine, TaskOutput
from chongming_nb.core.models import Failure, FailureKind
from chongming_nb.core.policies import Timeout, clip_text
from chongming_nb.core.states import STATUS, TERMINAL
from chongming_nb.core.validation import storable_text
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors import ExecutionRequest, Executor, Outcome
from chongming_nb.stores.protocol import LogRecord, log_size

log = logging.getLogger("chongming_nb.controller")

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: At most one ProgressUpdated event per task per this many seconds.
PROGRESS_EVENT_INTERVAL = 0.1
#: Log lines kept in memory per task (older ones stay in the store, if any).
LOG_RING = 2000  # (the default of HistoryLimits.memory_log_lines)
#: Log text waiting for the store beyond which a printing task waits for the recorder
#: (what the kernel holds for logs stays bounded however fast a task prints).
LOG_INFLIGHT_HIGH = 2_000_000
LOG_INFLIGHT_LOW = 500_000
#: What the kernel keeps of an ended task's log when a store holds it (``h.logs()``
#: reads the store; this tail answers while the store cannot be read).
ENDED_LOG_LINES = 20
ENDED_LOG_CHARS = 20_000


class Launch(NamedTuple):
    """One launch taken under the lock, run after it is released."""

    task: TaskEntry
    executor: Executor
    request: ExecutionRequest
    reporter: Reporter


class Pump(Protocol):
    """The launcher, as the rooms below it see it."""

    def pick_for_pump(self) -> list[Launch] | None: ...

    def pump(self, picked: list[Launch] | None = None) -> None: ...


class Reporter:
    """The controller's side of one attempt (see runtime.executors.base.Reporter)."""

    __slots__ = ("attempt", "room", "task")

    def __init__(self, room: Attempts, task: TaskEntry, attempt: int) -> None:
        self.room = room
        self.task = task
        self.attempt = attempt

    def started(self, pid: int | None = None) -> str | None:
        return self.room.on_started(self.task, self.attempt, pid)

    def progress(
        self, done: float | None, total: float | None, unit: str | None, message: str | None
    ) -> None:
        t = self.task
        # text from the task: saved whatever it holds (lone surrogates escaped)
        if unit is not None and not (type(unit) is str and unit.isascii()):
            unit = storable_text(str(unit))
        if message is not None and not (type(message) is str and message.isascii()):
            message = storable_text(str(message))
        prev = t.live
        if prev is None:
            t.live = (done or 0, total, unit, message)
        else:
            t.live = (
                prev[0] if done is None else done,
                prev[1] if total is None else total,
                prev[2] if unit is None else unit,
                prev[3] if message is None else message,
            )
        now = self.room.book.clock.monotonic()
        if now - t.progress_event_at >= PROGRESS_EVENT_INTERVAL or (
            t.live[1] is not None and t.live[0] >= t.live[1]
        ):
            t.progress_event_at = now
            self.room.on_progress_event(t)

    def emit(self, kind: str, payload: Any) -> None:
        self.room.on_emit(self.task, kind, payload)

    def log(self, stream: str, line: str, level: str | None) -> None:
        self.room.on_log(self.task, stream, line, level)

    def pause_reached(self) -> bool:
        return self.room.on_pause_reached(self.task, self.attempt)

    def resumed(self) -> None:
        pass

    def heartbeat(self) -> None:
        if self.task.hb is not None:
            self.task.hb.beat(self.room.book.clock.monotonic())

    def upstream(self, key: Any) -> Any:
        return self.room.deps.upstream_value(self.task, key)

    def sleep(self, seconds: float, token: CancellationToken) -> float:
        return self.room.sleep(self.task, self.attempt, seconds, token)

    def monotonic(self) -> float:
        """The controller's clock, which ``ctx.sleep`` measures its time by."""
        return self.room.book.clock.monotonic()

    def finished(self, outcome: Outcome) -> None:
        self.room.on_finished(self.task, self.attempt, outcome)


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Attempts:
    book: TaskBook
    admission: Admission
    deps: Dependencies
    timers: TimerQueue
    rng: random.Random
    #: the launcher, set when it is built (it sits above this room)
    pump: Pump = dataclasses.field(init=False)
    executing: set[TaskEntry] = dataclasses.field(init=False, default_factory=set)
    #: (task, attempt, wall time, monotonic) of starts reported while the lock was busy
    pending_starts: deque[tuple[TaskEntry, int, datetime, float]] = dataclasses.field(
        init=False, default_factory=deque
    )
    #: (task, attempt, outcome) of attempt ends reported while the lock was busy
    pending_finishes: deque[tuple[TaskEntry, int, Outcome]] = dataclasses.field(
        init=False, default_factory=deque
    )

    def reporter(self, t: TaskEntry, attempt: int) -> Reporter:
        return Reporter(self, t, attempt)

    # ------------------------------------------------ reports (task threads)

    def on_started(self, t: TaskEntry, attempt: int, pid: int | None) -> str | None:
        """A task thread: its attempt began. Returns why it must stop at once when the
        store settled the task while it was being launched (``Launcher._fenced``)."""
        if t.fenced_launch == attempt:  # (lock-free: set before the attempt began)
            failure = t.snap.failure
            return failure.message if failure else "settled by the store"
        book = self.book
        lock = book.lock
        if pid is None and not lock.acquire(blocking=False):
            # Contended: do not queue up behind the lock (on a free core that costs a
            # GIL hand-over per task). The start is noted, with its time, and recorded by
            # the next critical section that settles pending starts: the attempt's own
            # end, the next scheduling pass, a read, or the dispatcher's tick (<= 50 ms).
            self.pending_starts.append((t, attempt, book.clock.now(), book.clock.monotonic()))
            return None
        if pid is not None:
            lock.acquire()
        try:
            if self.pending_starts or self.pending_finishes:
                self.settle_pending()
            self.started(t, attempt, pid, None, book.clock.monotonic())
            book.flush_outbox()  # same critical section: one lock round-trip
        finally:
            lock.release()
        return None

    def on_progress_event(self, t: TaskEntry) -> None:
        book = self.book
        p = book.live_progress(t)
        if p is None:
            return
        ev = book.new_event(ProgressUpdated, t, at=p.updated_at, progress=p)
        with book.lock:
            book.outbox.append(ev)
            if book.store is not None:
                book.outbox.append(TouchProgress(t.snap.task_id, p))
        self.unlocked()

    def on_emit(self, t: TaskEntry, kind: str, payload: Any) -> None:
        book = self.book
        with book.lock:
            book.event(t, book.new_event(TaskOutput, t, kind=kind, payload=payload))
        self.unlocked()

    def on_log(self, t: TaskEntry, stream: str, line: str, level: str | None) -> None:
        book = self.book
        with book.lock:
            self.log_line(t, stream, line, level)
        self.unlocked()
        # a task printing faster than the store writes waits (never under the lock)
        # until the recorder has written most of what is queued
        book.wait_log_drained(LOG_INFLIGHT_HIGH, LOG_INFLIGHT_LOW, timeout=10.0)

    def note(self, task_id: str, message: str) -> None:
        """Under the lock: a warning line in a task's log (shown in its row)."""
        t = self.book.tasks.get(task_id)
        if t is not None:
            self.log_line(t, "chongming", message, "WARNING")

    def adopt(self, t: TaskEntry, plan: ConvergePlan) -> None:
        """Under the lock: the store settled this task without us (a reconciler found
        our lease lost): take its snapshot and history, ask the execution to stop and
        abandon it — memory and store agree again."""
        book = self.book
        reason = plan.snapshot.failure.message if plan.snapshot.failure else "settled"
        h = t.handle
        attempt = t.exec_attempt
        if attempt and h is None and t.held_launch == attempt:
            # its launch waited for the store, which settled the task first: the work
            # never began (the attempt's record says so; nothing is abandoned)
            t.held_launch = 0
            self.end_execution(t)
            kind = plan.snapshot.failure.kind if plan.snapshot.failure else FailureKind.CANCELLED
            book.end_attempt(t, plan.snapshot.status, Failure(kind, f"never launched: {reason}"))
        elif attempt:  # an execution is live (or being launched): abandon it
            if h is not None:
                try:
                    h.request_stop(reason)
                except Exception:
                    log.exception("asking the execution of %s to stop failed", t.snap.task_id)
                t.abandoned = h
            else:  # inside the executor's launch: told to stop when it returns
                t.fenced_launch = attempt
            self.end_execution(t)
            book.end_attempt(t, plan.snapshot.status, plan.snapshot.failure, abandoned=True)
        elif t.attempts and book.store is not None:
            # the attempt ended before we knew; its record was among the writes the
            # store refused: written as it happened (the store's status stands)
            book.outbox.append(SaveAttempt(t.attempts[-1]))
        t.history = [row for row in t.history if row[6] <= plan.common_version]
        t.history.extend(history_row(tr) for tr in plan.transitions)
        t.snap = plan.snapshot
        for tr in plan.transitions:  # its watchers and its pipeline run learn it too
            book.announce(plan.snapshot, tr)
        if plan.snapshot.status in TERMINAL:  # (TaskBook.evict takes it in its turn)
            book.finished[t.snap.task_id] = None
        else:
            book.finished.pop(t.snap.task_id, None)
        book.warn(t, f"the store settled this task without its owner: {reason}")
        if book.awaited and t in book.awaited:
            book.terminal.notify_all()
        self.deps.after_status(t)

    def log_line(self, t: TaskEntry, stream: str, line: str, level: str | None) -> None:
        """Under the lock: one line of the task's log (kept, published, stored)."""
        book = self.book
        now = book.clock.now()
        line = storable_text(line)  # a line with lone surrogates is saved, not dropped
        rec = LogRecord(now, stream, line, level)
        lim = book.limits
        # the kernel's copy: the newest lines, bounded in count and in text
        logs = t.logs
        if logs is None:
            logs = t.logs = deque()
        logs.append(rec)
        t.log_bytes += len(line)
        while len(logs) > 1 and (
            len(logs) > lim.memory_log_lines or t.log_bytes > lim.memory_log_bytes
        ):
            t.log_bytes -= len(logs.popleft().line)
            t.log_dropped += 1
        book.outbox.append(
            book.new_event(TaskLogLine, t, at=now, stream=stream, line=line, level=level)
        )
        if book.store is not None:
            book.outbox.append(AppendLog(t.snap.task_id, rec))
            size = log_size(line)
            book.log_queued(size)
            cap = lim.store_log_bytes
            if cap is not None:
                # the store keeps the newest ``cap``: trimmed when 2% over, to 2% under
                t.store_log_bytes += size
                if t.store_log_bytes > cap + cap // 50:
                    t.store_log_bytes = cap - cap // 50
                    book.outbox.append(TrimLogs(t.snap.task_id, t.store_log_bytes))

    def on_pause_reached(self, t: TaskEntry, attempt: int) -> bool:
        book = self.book
        with book.lock:
            if t.exec_attempt != attempt or t.snap.status is not S.PAUSING:
                return False
            book.apply(t, book.sm.confirm_paused(t.snap))
        self.unlocked()
        return True

    def on_finished(self, t: TaskEntry, attempt: int, outcome: Outcome) -> None:
        # Flat combining: the report is queued, and whoever holds the lock settles it.
        # A worker that finds the lock busy does not wait for it (on a free core every
        # wait is a GIL hand-over); the holder settles queued reports before its next
        # scheduling pass and re-checks after releasing (see Launcher.pump), and the
        # dispatcher's tick (<= 50 ms) settles whatever is left.
        self.pending_finishes.append((t, attempt, outcome))
        lock = self.book.lock
        if not lock.acquire(blocking=False):
            return
        try:
            self.settle_pending()
            picked = self.pump.pick_for_pump()
        finally:
            lock.release()
        self.pump.pump(picked)

    def sleep(self, t: TaskEntry, attempt: int, seconds: float, token: CancellationToken) -> float:
        """``ctx.sleep`` of an in-process attempt: its slot is free for other tasks until
        a timer (on this controller's clock) wakes it, or a stop or pause does; then it
        takes a slot again, before any queued task. Returns the seconds left (> 0 when a
        stop or a pause ended the sleep early)."""
        book = self.book
        admission = self.admission
        clock = book.clock
        with book.lock:
            if t.exec_attempt != attempt:
                return 0.0
            wake_at = clock.monotonic() + seconds
            had_slot = t.holds_slot
            admission.free_slot(t)
            t.sleeper = token
            self.timers.push(wake_at, TimerKind.WAKE, t.snap.task_id, attempt)
            picked = self.pump.pick_for_pump()
        self.pump.pump(picked)
        try:
            token.sleep(None)
        finally:
            with book.lock:
                t.sleeper = None
                if had_slot and not token.stop_requested:
                    admission.waking += 1
                    try:
                        while not token.stop_requested and not (
                            admission.running < admission.concurrency.max_parallel
                            and admission.fits(t)
                        ):
                            admission.slot_freed.wait(TICK_SECONDS)
                    finally:
                        admission.waking -= 1
                    if not token.stop_requested:
                        admission.take_slot(t)
        return max(0.0, wake_at - clock.monotonic())

    # ------------------------------------------------ settling queued reports

    def catch_up(self) -> None:
        """For readers: settle what was reported while the lock was busy (and schedule
        what that frees), so a read shows every report made before it."""
        if self.pending_starts or self.pending_finishes:
            with self.book.lock:
                self.settle_pending()
                picked = self.pump.pick_for_pump()
            self.pump.pump(picked)

    def unlocked(self) -> None:
        """Right after a thread that does not pump released the lock: settle the
        reports queued while it held it (and launch what they free), else they wait
        for the dispatcher's tick; and hand the outbox over either way."""
        if self.pending_starts or self.pending_finishes:
            self.catch_up()  # flushes the outbox too
        else:
            self.book.flush_outbox()

    def settle_pending(self) -> None:
        """Under the lock: record the starts, then the ends, reported while the lock
        was busy (each queue in arrival order; a task's start precedes its end)."""
        starts = self.pending_starts
        while starts:
            t, attempt, at, mono = starts.popleft()
            self.started(t, attempt, None, at, mono)
        finishes = self.pending_finishes
        while finishes:
            t, attempt, outcome = finishes.popleft()
            self.finished(t, attempt, outcome)

    def started(
        self, t: TaskEntry, attempt: int, pid: int | None, at: datetime | None, mono: float
    ) -> None:
        # under the lock
        if t.exec_attempt != attempt:
            return
        t.started_mono = mono
        if t.hb is not None:
            t.hb.beat(mono)  # idle time counts from the start, not the launch
        if pid is not None:
            t.snap = t.snap.evolve(pid=pid)
        if t.snap.status is S.STARTING:
            self.book.apply(t, self.book.sm.mark_running(t.snap, pid=pid, at=at))
        self.timers.arm_timeouts(t)

    def end_execution(self, t: TaskEntry) -> None:
        """Under the lock: the live execution is over (ended, failed to launch, or
        abandoned); its slot is free."""
        t.exec_attempt = 0
        self.executing.discard(t)
        t.handle = None
        t.hb = None  # frees the attempt's token and reporter (memory per finished task)
        self.admission.free_slot(t)

    def finished(self, t: TaskEntry, attempt: int, outcome: Outcome) -> None:
        # under the lock
        book = self.book
        if t.exec_attempt != attempt:
            # abandoned earlier: its record is sticky; only note that it came back
            if t.abandoned is not None:
                book.warn(
                    t,
                    f"abandoned attempt {attempt} returned later ({outcome.kind}); "
                    "its LOST record stands",
                )
            book.flush_outbox()  # safe under the lock: the bus never calls back in
            return
        self.end_execution(t)
        if t.live is not None:
            t.snap = t.snap.evolve(progress=book.live_progress(t))
        st = t.snap.status
        if st in TERMINAL:
            # stopped while paused in place, or forced: the status stands
            book.end_attempt(t, st, t.snap.failure)
        else:
            if st is S.PAUSING:
                book.apply(
                    t, book.sm.abort_pause(t.snap, reason="the attempt ended before pausing")
                )
            if st is S.STARTING:
                book.apply(t, book.sm.mark_running(t.snap))
            self._settle_outcome(t, outcome)
        if t.snap.status in TERMINAL:
            self.release_logs(t)
        self.deps.after_status(t)

    def release_logs(self, t: TaskEntry) -> None:
        """Under the lock: the task ended. With a store (which has its log, or has it
        queued) the kernel lets go of its tail but for the last few lines; ``logs()``
        reads the store from now on. Without a store the bounded tail stays: it is all
        there is."""
        logs = t.logs
        if self.book.store is None or logs is None:
            return
        t.logs_in_store = True
        while len(logs) > ENDED_LOG_LINES or (len(logs) > 1 and t.log_bytes > ENDED_LOG_CHARS):
            t.log_bytes -= len(logs.popleft().line)
            t.log_dropped += 1

    def _settle_outcome(self, t: TaskEntry, outcome: Outcome) -> None:
        book = self.book
        st = t.snap.status
        if outcome.kind == "succeeded":
            t.result = outcome.value
            t.exception = None
            now = book.clock.now()  # one reading for the attempt's end and the status
            book.end_attempt(t, S.SUCCEEDED, None, now=now)
            book.apply(t, book.sm.mark_succeeded(t.snap, outcome=describe(outcome.value), now=now))
            return
        if outcome.kind == "cancelled":
            if st is S.STOPPING:
                fail = t.stop_failure  # None for a stop: a stop is not a failure
                book.end_attempt(t, S.STOPPED, fail)
                book.apply(t, book.sm.confirm_stopped(t.snap, failure=fail, reason=t.stop_reason))
                return
            kind = t.timeout_kind or FailureKind.CANCELLED
            exc: BaseException = (
                timeout_error(t.spec.timeout, kind)
                if t.timeout_kind
                else ConfigurationError("TaskCancelled raised without a stop request")
            )
            retryable = t.timeout_kind is not None and t.spec.retry.is_retryable(exc)
            fail = Failure(kind, str(exc), retryable=retryable, exception_type=type(exc).__name__)
            t.exception = exc
            self.fail(t, fail)
            return
        if book.shutting_down is not None:
            # the process is going away and tears down what the task uses (IPython
            # clears its globals): an exception now says nothing true about its code
            why = f"{book.shutting_down}; result unknown"
            book.end_attempt(t, S.LOST, Failure(FailureKind.LOST, why))
            book.apply(t, book.sm.mark_lost(t.snap, reason=why))
            return
        # failed or crashed
        exc2 = outcome.exception
        t.exception = exc2
        kind = FailureKind.EXCEPTION if outcome.kind == "failed" else FailureKind.NONZERO_EXIT
        retryable = st is not S.STOPPING and (
            t.spec.retry.is_retryable(exc2) if exc2 is not None else outcome.kind == "crashed"
        )
        chars = self.book.limits.text_chars
        fail = Failure(
            kind,
            task_text(outcome.message, chars) or "failed",
            traceback=task_text(outcome.traceback, chars),
            retryable=retryable,
            exit_code=outcome.exit_code,
            exception_type=task_text(outcome.exception_type, chars),
        )
        self.fail(t, fail)

    def fail(self, t: TaskEntry, fail: Failure) -> None:
        """Under the lock: record a failed attempt; RETRY_WAIT (with its timer) when the
        failure is retryable and attempts are left, else FAILED."""
        book = self.book
        s = t.snap
        retry_at = None
        delay = 0.0
        if fail.retryable and s.attempt < s.max_attempts and s.status is not S.STOPPING:
            delay = t.spec.retry.delay(max(1, s.attempt), self.rng)
            retry_at = book.clock.now() + timedelta(seconds=delay)
        book.end_attempt(t, S.FAILED, fail)
        book.apply(t, book.sm.mark_failed(t.snap, fail, retry_at=retry_at))
        record = t.attempts[-1] if t.attempts else None
        book.event(
            t, book.new_event(AttemptFailed, t, attempt=s.attempt, failure=fail, record=record)
        )
        if t.snap.status is S.RETRY_WAIT:
            self.timers.push(
                book.clock.monotonic() + delay,
                TimerKind.RETRY,
                s.task_id,
                t.snap.status_version,
            )


_SCOPES = {
    FailureKind.TIMEOUT_START: "start",
    FailureKind.TIMEOUT_ATTEMPT: "attempt",
    FailureKind.TIMEOUT_IDLE: "idle",
}


def timeout_error(t: Timeout, kind: FailureKind) -> TaskTimeout:
    """The TaskTimeout for a fired timeout of ``kind``."""
    v = {
        FailureKind.TIMEOUT_START: t.start,
        FailureKind.TIMEOUT_ATTEMPT: t.per_attempt,
        FailureKind.TIMEOUT_IDLE: t.idle,
    }.get(kind)
    return TaskTimeout(_SCOPES.get(kind, "attempt"), float(v or 0))


def describe(value: Any) -> dict[str, Any] | None:
    """A small JSON-able description of a result for the snapshot's ``outcome``."""
    if value is None:
        return None
    cls = type(value)
    if cls is bool or cls is float or (cls is int and -(10**18) < value < 10**18):
        # the common case, without probing (what the general path below gives them)
        return {"type": f"builtins.{cls.__qualname__}", "value": value}
    # anything the result does may raise (a property, __len__, __repr__): the outcome
    # says what could be read, and the attempt still succeeds
    out: dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}"}
    try:
        shape = getattr(value, "shape", None)
    except Exception:
        shape = None
    if isinstance(shape, tuple):
        with contextlib.suppress(Exception):
            out["shape"] = [int(n) for n in shape]
    else:
        with contextlib.suppress(Exception):
            out["len"] = len(value)
    with contextlib.suppress(Exception):
        if isinstance(value, int | float | bool | str) and len(repr(value)) <= 200:
            out["value"] = storable_text(value) if isinstance(value, str) else value
    return out


def task_text(text: str | None, limit: int) -> str | None:
    """A text from the task (a failure message, a traceback) as the stores keep it: cut
    to ``limit`` characters with its full size given, lone surrogates escaped."""
    if text is None:
        return None
    return storable_text(clip_text(str(text), limit) or "")

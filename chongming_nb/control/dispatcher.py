"""The dispatcher thread: fires timers, samples heartbeats, ticks the store link.

Timers (``timers.TimerQueue``): a retry's backoff, a pause's and a stop's grace window,
a task's start / per-attempt / idle timeouts. A timeout asks the execution to stop and
arms a stop window; a stop window that runs out abandons a thread (LOST, result
unknown) or kills a process (a known outcome). The dispatcher is also the backstop
that settles reports queued while the lock was busy (at least every ``TICK_SECONDS``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from chongming_nb.control import timers as timers_module
from chongming_nb.control.admission import Admission
from chongming_nb.control.attempts import Attempts, timeout_error
from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.control.dependencies import Dependencies
from chongming_nb.control.launcher import Launcher
from chongming_nb.control.messages import TouchHeartbeat
from chongming_nb.control.timers import TimerKind, TimerQueue
from chongming_nb.core.models import Failure, FailureKind
from chongming_nb.core.states import OCCUPIED, STATUS, TERMINAL
from chongming_nb.runtime import timeouts

log = logging.getLogger("chongming_nb.controller")

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: How often the dispatcher wakes at the latest (a module global: tests move it).
TICK_SECONDS = timers_module.TICK_SECONDS


# no slots: tests/control/test_locking.py wraps _fire on the instance
@dataclasses.dataclass(eq=False, repr=False)
class Dispatcher:
    book: TaskBook
    timers: TimerQueue
    admission: Admission
    deps: Dependencies
    attempts: Attempts
    launcher: Launcher
    store_tick: Callable[[float], None] | None
    thread: threading.Thread = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="chongming-dispatcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def poke(self) -> None:
        """Wake the dispatcher (a fake clock moved, a timer was armed)."""
        with self.book.wake:
            self.book.wake.notify()

    def _loop(self) -> None:
        book = self.book
        clock = book.clock
        attempts = self.attempts
        next_hb = 0.0
        while True:
            with book.wake:
                if book.closed:
                    return
                now = clock.monotonic()
                wait = TICK_SECONDS
                first = self.timers.next_deadline()
                if first is not None:
                    wait = max(0.0, min(wait, first - now))
                if wait > 0:
                    book.wake.wait(wait)
                if book.closed:
                    return
                if attempts.pending_starts or attempts.pending_finishes:
                    attempts.settle_pending()
                now = clock.monotonic()
                for _, _, kind, tid, marker in self.timers.pop_due(now):
                    t = book.tasks.get(tid)
                    if t is not None:
                        try:
                            self._fire(kind, t, marker)
                        except Exception:
                            log.exception("timer %s for task %s failed", kind.value, tid)
                if now >= next_hb:
                    next_hb = now + TICK_SECONDS
                    self._sample_heartbeats(now)
            book.flush_outbox()
            try:
                self.launcher.pump()
            except Exception:  # the dispatcher must outlive any one bad launch
                log.exception("dispatching failed")
            if self.store_tick is not None:
                self.store_tick(clock.monotonic())
            if self.launcher.held:
                try:
                    self.launcher.launch_held()
                except Exception:
                    log.exception("launching held tasks failed")

    def _sample_heartbeats(self, now: float) -> None:
        """Under the book's lock. A sign of life is kept in the task's snapshot too: the
        store's copy gets it by a touch of that column alone, and the next full write of
        the snapshot (a pause, a resume) must not put an older time back."""
        # only tasks with a live execution: the cost must not grow with history
        book = self.book
        for t in self.attempts.executing:
            hb = t.hb
            if hb is None or t.exec_attempt == 0 or not hb.sample(now):
                continue
            at = book.clock.now()
            t.snap = t.snap.evolve(last_heartbeat_at=at)
            if book.store is not None:
                book.outbox.append(TouchHeartbeat(t.snap.task_id, at))

    def _fire(self, kind: TimerKind, t: TaskEntry, marker: int) -> None:
        book = self.book
        sm = book.sm
        s = t.snap
        if kind is TimerKind.RETRY:
            if s.status is S.RETRY_WAIT and s.status_version == marker:
                book.apply(t, sm.mark_queued(t.snap, trigger="retry:backoff_elapsed"))
                self.admission.enqueue(t)
        elif kind is TimerKind.PAUSE:
            if s.status is S.PAUSING and s.status_version == marker:
                book.apply(t, sm.abort_pause(t.snap, reason="no checkpoint reached in time"))
                if t.handle is not None:
                    t.handle.resume()
                book.warn(
                    t,
                    "pause rolled back: the task did not reach a checkpoint in time "
                    "(it keeps running)",
                )
        elif kind is TimerKind.START:
            if s.status is S.BLOCKED and s.status_version == marker:
                self.deps.release(t)
                if t.snap.status in TERMINAL:  # when= was false: its dependants settle
                    self.deps.settle(list(t.dependants or ()))
        elif kind is TimerKind.WAKE:
            token = t.sleeper
            if t.exec_attempt == marker and token is not None:
                token.wake()
        elif kind is TimerKind.STOP:
            if t.exec_attempt == marker and (s.status is S.STOPPING or t.timeout_kind is not None):
                self.stop_window_expired(t)
        elif kind is TimerKind.TIMEOUT:
            if t.exec_attempt != marker or t.timeout_kind is not None or s.status in TERMINAL:
                return
            hb = t.hb
            now = book.clock.monotonic()
            if hb is not None:
                hb.sample(now)
            if s.status in (S.PAUSED, S.PAUSING) and hb is not None:
                # a paused task is not stuck; only the per-attempt budget still counts
                hb.beat(now)
            fired = timeouts.judge(
                t.spec.timeout,
                starting_since=t.starting_since,
                started=t.started_mono,
                last_beat=hb.last_beat if hb else None,
                now=now,
            )
            if fired is None:
                self.timers.arm_timeouts(t)
                return
            t.timeout_kind = fired
            if t.handle is not None:
                t.handle.request_stop(fired.value)
            self.timers.push(
                now + self.timers.stop_grace, TimerKind.STOP, s.task_id, t.exec_attempt
            )

    def stop_window_expired(self, t: TaskEntry) -> None:
        """Under the lock: a stop window ran out (its timer, or the process exits)."""
        book = self.book
        sm = book.sm
        h = t.handle
        if h is None and t.held_launch and t.held_launch == t.exec_attempt:
            # its launch was waiting for the store: the work never began
            t.held_launch = 0
            self.attempts.end_execution(t)
            if t.snap.status is S.STOPPING:
                book.end_attempt(t, S.STOPPED, t.stop_failure)
                book.apply(
                    t,
                    sm.confirm_stopped(
                        t.snap, failure=t.stop_failure, reason="stopped before launch"
                    ),
                )
            else:  # a start timeout
                kind = t.timeout_kind or FailureKind.CANCELLED
                exc = timeout_error(t.spec.timeout, kind)
                why = f"{exc}; never launched: the store had not taken its start"
                self.attempts.fail(t, Failure(kind, why, retryable=t.spec.retry.is_retryable(exc)))
            self.deps.after_status(t)
            return
        verdict = "abandoned" if h is None else h.on_stop_timeout()
        if verdict == "gone":
            return  # its finished() report is on the way
        s = t.snap
        self.attempts.end_execution(t)
        if verdict == "abandoned":
            t.abandoned = h
            why = (
                "did not reach a checkpoint within the stop window; "
                "thread abandoned, result unknown"
            )
            if t.timeout_kind is not None:
                why = f"{t.timeout_kind.value}: {why}"
            if book.shutting_down is not None:
                why = f"{book.shutting_down}; {why}"
            fail = Failure(FailureKind.LOST, why)
            book.end_attempt(t, S.LOST, fail, abandoned=True)
            if s.status is S.PAUSING:
                book.apply(t, sm.abort_pause(t.snap, reason="stop window expired"))
            if t.snap.status in OCCUPIED:
                book.apply(t, sm.mark_lost(t.snap, reason=why))
        else:  # killed: a known outcome
            if s.status is S.STOPPING:
                fail = t.stop_failure
                book.end_attempt(t, S.STOPPED, fail)
                book.apply(
                    t,
                    sm.confirm_stopped(
                        t.snap,
                        failure=fail,
                        reason=t.stop_reason,
                        detail="terminated after the stop window",
                    ),
                )
            else:
                kind = t.timeout_kind or FailureKind.CANCELLED
                if s.status is S.PAUSING:
                    book.apply(t, sm.abort_pause(t.snap, reason="terminated"))
                if t.snap.status is S.STARTING:
                    book.apply(t, sm.mark_running(t.snap))
                exc = timeout_error(t.spec.timeout, kind)
                fail = Failure(
                    kind, f"{exc}; process terminated", retryable=t.spec.retry.is_retryable(exc)
                )
                self.attempts.fail(t, fail)
        self.deps.after_status(t)

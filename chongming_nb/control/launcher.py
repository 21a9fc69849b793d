"""The launcher: turns admitted tasks into running attempts.

Owns the executors (by name, made on first use) and the per-thread pump state. A pass
takes the launches under ``TaskBook.lock`` (admission decides which) and calls
``Executor.launch`` after releasing it; an inline launch finishes inside ``launch``,
so the pump is not re-entrant per thread (a nested call asks the outer loop for another
pass instead).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import timedelta
from pathlib import Path
from typing import Protocol

from chongming_nb.control.admission import Admission
from chongming_nb.control.attempts import Attempts, Launch
from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.control.dependencies import Dependencies
from chongming_nb.control.messages import SaveAttempt
from chongming_nb.control.timers import TimerQueue
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.events import AttemptStarted
from chongming_nb.core.models import Failure, FailureKind, new_attempt_record
from chongming_nb.core.states import STATUS, TERMINAL, TaskStatus
from chongming_nb.runtime.executors import (
    ExecutionHandle,
    ExecutionRequest,
    Executor,
    make_executor,
)
from chongming_nb.runtime.heartbeat import Heartbeat

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: The states of a launched attempt in which no request awaits delivery to its handle.
_LAUNCHED_QUIETLY = frozenset({TaskStatus.STARTING, TaskStatus.RUNNING})

log = logging.getLogger("chongming_nb.controller")


class Standing(Protocol):
    """The owner's standing in its store (``lifecycle.OwnerLeases``)."""

    def in_doubt(self, mono: float) -> bool:
        """Might a reconciler elsewhere have settled this owner's tasks by ``mono``
        (its heartbeat or its leases are not known to be valid then)?"""
        ...


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Launcher:
    book: TaskBook
    admission: Admission
    deps: Dependencies
    attempts: Attempts
    timers: TimerQueue
    default_executor: str | Executor
    artifacts_root: Path | None
    #: the executors by name, made on first use
    executors: dict[str, Executor] = dataclasses.field(init=False, default_factory=dict)
    _default_pair: tuple[str, Executor] | None = dataclasses.field(init=False, default=None)
    _pumping: threading.local = dataclasses.field(init=False, default_factory=threading.local)
    #: the owner's standing in the store (None without a store)
    standing: Standing | None = None
    #: launches waiting for the store to take their STARTING: task id -> (launch, the
    #: STARTING version); under the book's lock
    held: dict[str, tuple[Launch, int]] = dataclasses.field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.attempts.pump = self

    # --------------------------------------------------------------- executors

    def executor_for(self, choice: str | Executor | None) -> tuple[str, Executor]:
        if choice is None:
            pair = self._default_pair  # twice per task: once resolved, kept
            if pair is not None:
                return pair
            if self.default_executor is None:
                raise ConfigurationError("executor must be a name or an Executor, got None")
            self._default_pair = pair = self.executor_for(self.default_executor)
            return pair
        if isinstance(choice, str):
            ex = self.executors.get(choice)
            if ex is None:
                ex = make_executor(choice)
                self.executors[choice] = ex
            return choice, ex
        if not callable(getattr(choice, "launch", None)):
            raise ConfigurationError(f"executor must be a name or an Executor, got {choice!r}")
        name = str(getattr(choice, "name", type(choice).__name__))
        self.executors.setdefault(f"{name}@{id(choice)}", choice)
        return name, choice

    # --------------------------------------------------------------- pumping

    def pump(self, picked: list[Launch] | None = None) -> None:
        """Start as many queued tasks as the policy allows (launch outside the lock).

        ``picked``: launches a caller already took with ``pick_launches`` in its own
        critical section (one lock round-trip instead of two).

        Not re-entrant per thread: an inline launch finishes inside ``launch`` and its
        ``finished`` report pumps again; that nested call returns at once and this loop
        picks the next task up (else N queued inline tasks nest N deep and hit the
        recursion limit)."""
        attempts = self.attempts
        if picked is not None and not (
            picked or attempts.pending_finishes or attempts.pending_starts
        ):
            # nothing to launch (e.g. a submit while every slot is busy) and no report
            # to settle: the caller's pick flushed the outbox already
            return
        pumping = self._pumping
        if getattr(pumping, "active", False):
            pumping.again = True  # the outer loop takes another pass
            self.book.flush_outbox()
            return
        pumping.active = True
        lock = self.book.lock
        try:
            self._pump_loop(picked)
            # reports queued by threads that found the lock busy while this thread
            # held it: settle them now (if another thread holds the lock, it does)
            while (attempts.pending_finishes or attempts.pending_starts) and lock.acquire(
                blocking=False
            ):
                try:
                    attempts.settle_pending()
                    more = self.pick_launches()
                finally:
                    lock.release()
                self._pump_loop(more)
        finally:
            pumping.active = False

    def pick_for_pump(self) -> list[Launch] | None:
        """Under the lock, for a caller that pumps right after releasing it: the
        launches to hand to ``pump`` (None when this thread is already pumping; the
        outbox is flushed either way by ``pump``)."""
        if getattr(self._pumping, "active", False):
            return None
        return self.pick_launches()

    def pick_launches(self) -> list[Launch]:
        """Under the lock: take what may start now, and flush the outbox."""
        attempts = self.attempts
        if attempts.pending_starts or attempts.pending_finishes:
            attempts.settle_pending()
        if self.book.shutting_down is not None:
            launches = []  # the process is going away: nothing new starts
        else:
            launches = self.admission.admit(self._prepare_launch)
        self.book.flush_outbox()  # same critical section: one lock round-trip
        return launches

    def launch_now(self, task_id: str) -> None:
        """Launch a queued task now, in this thread, whatever admission says (a loop in a
        cell: control/loops.py). Its stale entry in the ready heap is skipped by status
        later."""
        book = self.book
        with book.lock:
            t = book.tasks[task_id]
            launch = self._prepare_launch(t) if t.snap.status is S.QUEUED else None
            book.flush_outbox()
        if launch is not None:
            self._launch(launch)

    def _pump_loop(self, picked: list[Launch] | None = None) -> None:
        pumping = self._pumping
        while True:
            if picked is not None:
                launches, picked = picked, None
            else:
                with self.book.lock:
                    launches = self.pick_launches()
            if not launches:
                return
            # Another pass only when this thread freed something meanwhile (an inline
            # attempt finished, a launch failed): a slot freed on another thread is
            # pumped by that thread. Saves one lock round-trip per launch.
            pumping.again = False
            for launch in launches:
                if not self._launch(launch):
                    pumping.again = True
            if not pumping.again:
                return

    def _prepare_launch(self, t: TaskEntry) -> Launch:
        book = self.book
        exec_name, ex = self.executor_for(t.executor)
        book.apply(t, book.sm.mark_starting(t.snap, executor=exec_name))
        self.admission.take_slot(t)
        attempt = t.snap.attempt
        t.exec_attempt = attempt
        self.attempts.executing.add(t)
        t.handle = None
        t.live = None
        t.timeout_kind = None
        t.stop_reason = None
        t.stop_failure = None
        t.held_launch = t.fenced_launch = 0
        mono = book.clock.monotonic()
        t.starting_since = mono
        t.started_mono = None
        started_at = t.snap.started_at
        assert started_at is not None
        t.attempts.append(
            new_attempt_record(t.snap.task_id, attempt, started_at, executor=exec_name)
        )
        if book.bus.listened:
            book.outbox.append(
                book.new_event(
                    AttemptStarted, t, at=started_at, attempt=attempt, executor=exec_name
                )
            )
        if book.store is not None:
            book.outbox.append(SaveAttempt(t.attempts[-1]))
        deadline = None
        if t.spec.timeout.per_attempt is not None:
            deadline = started_at + timedelta(seconds=t.spec.timeout.per_attempt)
        self.timers.arm_timeouts(t)
        snap = t.snap
        assert t.fn is not None  # only a task adopted from a store has none; never queued
        req = ExecutionRequest(
            task_id=snap.task_id,
            name=snap.name,
            attempt=attempt,
            target=t.fn,
            args=t.args,
            kwargs=t.kwargs,
            inject_context=t.inject,
            pipeline_run_id=snap.pipeline_run_id,
            deadline=deadline,
            artifacts_root=self.artifacts_root,
            upstream=self.deps.upstream_payload(t) if t.deps else None,
        )
        return Launch(t, ex, req, self.attempts.reporter(t, attempt))

    def _launch(self, launch: Launch) -> bool:
        """False when the launch failed (its slot is free again).

        When the owner's standing in the store is in doubt (``Standing.in_doubt``: a
        reconciler elsewhere may have settled the task since it was queued), the
        work does not begin until the store has taken its STARTING — the write that
        fences it: held here, launched by ``launch_held``, or never when the store
        refuses it (the task converges to the store's state)."""
        t = launch.task
        standing = self.standing
        if (
            standing is not None
            and t.starting_since is not None
            and standing.in_doubt(t.starting_since)
            and getattr(launch.executor, "fenced_start", True)
            and self._hold(launch)
        ):
            return True
        return self._go(launch)

    def _hold(self, launch: Launch) -> bool:
        """Hold a launch until the store has its STARTING (False: launch it now)."""
        t, _, req, _ = launch
        with self.book.lock:
            if t.exec_attempt != req.attempt or t.snap.status is not S.STARTING:
                return False
            t.held_launch = req.attempt
            self.held[t.snap.task_id] = (launch, t.snap.status_version)
        return True

    def launch_held(self) -> bool:
        """Launch the held launches whose STARTING the store has (dispatcher thread,
        ``flush``); the ones the store settled first are left to converge, the ones
        stopped meanwhile are STOPPED at once (their work never began). True when
        something was recorded."""
        book = self.book
        store = book.store
        if not self.held or store is None:
            return False
        wrote = False
        with book.lock:
            for tid, (launch, _) in list(self.held.items()):
                t, attempt = launch.task, launch.request.attempt
                if t.exec_attempt != attempt or t.held_launch != attempt:
                    del self.held[tid]  # settled meanwhile (adopted, failed)
                elif t.snap.status is S.STOPPING:  # stopped while it waited
                    del self.held[tid]
                    t.held_launch = 0
                    self.attempts.end_execution(t)
                    book.end_attempt(t, S.STOPPED, t.stop_failure)
                    book.apply(
                        t,
                        book.sm.confirm_stopped(
                            t.snap, failure=t.stop_failure, reason="stopped before launch"
                        ),
                    )
                    self.deps.after_status(t)
                    wrote = True
            waiting = list(self.held.items())
            book.flush_outbox()
        for tid, (launch, version) in waiting:
            t, attempt = launch.task, launch.request.attempt
            try:
                snap = store.get(tid)
            except Exception as exc:  # unreadable now (health() tells): next tick
                log.debug("reading task %s back before its launch failed: %s", tid, exc)
                continue
            if snap is None or snap.status_version < version or snap.status in TERMINAL:
                continue  # not written yet; or settled first: converging adopts it
            with book.lock:
                if self.held.get(tid, (None, 0))[0] is not launch:
                    continue
                if t.exec_attempt != attempt or t.held_launch != attempt:
                    del self.held[tid]
                    continue
                del self.held[tid]
                t.held_launch = 0
            self._go(launch)  # (a stop meanwhile is delivered once the handle exists)
        return wrote

    def _go(self, launch: Launch) -> bool:
        t, ex, req, rep = launch
        book = self.book
        try:
            handle = ex.launch(req, rep)
        except Exception as exc:
            with book.lock:
                if t.exec_attempt == req.attempt:
                    self.attempts.end_execution(t)
                    fail = Failure(
                        FailureKind.EXCEPTION,
                        f"executor could not launch: {exc}",
                        traceback=None,
                        retryable=False,
                        exception_type=type(exc).__name__,
                    )
                    book.end_attempt(t, S.FAILED, fail)
                    if t.snap.status is S.STARTING:
                        book.apply(t, book.sm.mark_failed(t.snap, fail))
                    elif t.snap.status is S.STOPPING:
                        book.apply(
                            t, book.sm.confirm_stopped(t.snap, reason="stopped before launch")
                        )
                    self.deps.after_status(t)
            book.flush_outbox()
            if isinstance(exc, ConfigurationError):
                raise
            return False
        if t.exec_attempt != req.attempt:
            # finished (inline), or settled before launch returned
            if t.fenced_launch == req.attempt:
                self._fenced(t, req.attempt, handle)
            return True
        # Publish the handle without the lock, then look: whoever changes the task
        # under the lock (a stop, a pause, a timeout, the end of the attempt) stores
        # first and then reads t.handle, and this thread stores t.handle first and then
        # reads their state. Each step is atomic under the GIL, so at least one side
        # sees the other; a request seen by both is delivered twice (idempotent). Only
        # when something did happen is the lock taken.
        hb = Heartbeat(handle.token, book.clock.monotonic())
        t.handle = handle
        t.hb = hb
        if (
            t.exec_attempt == req.attempt
            and t.timeout_kind is None
            and t.snap.status in _LAUNCHED_QUIETLY
        ):
            return True
        with book.lock:
            if t.exec_attempt != req.attempt:
                # it ended (or was abandoned) meanwhile: drop what was published here
                if t.handle is handle:
                    t.handle = None
                if t.hb is hb:
                    t.hb = None
                if t.fenced_launch == req.attempt:
                    self._fenced(t, req.attempt, handle)
                return True
            st = t.snap.status
            if st is S.STOPPING:
                handle.request_stop(t.stop_reason)
            elif st is S.PAUSING:
                self.deliver_pause(t)
            elif t.timeout_kind is not None:
                handle.request_stop(t.timeout_kind.value)
        return True

    def _fenced(self, t: TaskEntry, attempt: int, handle: ExecutionHandle) -> None:
        """The store settled the task while its execution was being launched (memory
        adopted that): the execution is told to stop — at its first checkpoint — and
        abandoned; the store's state stands."""
        book = self.book
        with book.lock:
            if t.fenced_launch != attempt:
                return
            t.abandoned = handle
            failure = t.snap.failure
        try:
            handle.request_stop(failure.message if failure else "settled by the store")
        except Exception:
            log.exception("asking the execution of %s to stop failed", t.snap.task_id)
        with book.lock:  # (cleared after the stop: the attempt's start reads it too)
            if t.fenced_launch == attempt:
                t.fenced_launch = 0

    def deliver_pause(self, t: TaskEntry) -> None:
        """Under the lock: hand a PAUSING task's pause request to its execution (or
        roll the pause back when the executor cannot pause)."""
        book = self.book
        h = t.handle
        assert h is not None
        if h.supports_pause:
            h.request_pause()
            return
        book.apply(
            t, book.sm.abort_pause(t.snap, reason=f"the {t.snap.executor} executor cannot pause")
        )
        book.warn(
            t, f"pause rolled back: the {t.snap.executor} executor cannot pause a running task"
        )

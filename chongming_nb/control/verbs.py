"""Verbs: start, pause, resume, stop, cancel, retry, skip, reset, force_transition,
and the control plane's one entry (``apply``) with its ``can`` predicates.

Owns the control plane's request keys (one click that arrives twice, over the widget
comm and through the store, is applied once). A verb runs under ``TaskBook.lock``:
idempotent repeats return at once, anything else is checked by the StateMachine first
(InvalidTransition names current, requested and allowed states, and changes nothing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from chongming_nb.control.admission import Admission
from chongming_nb.control.attempts import Attempts
from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.control.dependencies import Dependencies
from chongming_nb.control.launcher import Launcher
from chongming_nb.control.queries import Queries
from chongming_nb.control.timers import TimerKind, TimerQueue
from chongming_nb.core.errors import ConfigurationError, InvalidTransition, TaskNotFound
from chongming_nb.core.events import AdminOverride
from chongming_nb.core.models import Failure, FailureKind, TaskSnapshot
from chongming_nb.core.state_machine import CONTROL_VERBS, VERBS
from chongming_nb.core.states import STATUS, TERMINAL, UNOCCUPIED, TaskStatus
from chongming_nb.core.validation import check_reason, check_seconds, check_text

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: Request keys remembered (oldest forgotten first).
REQUEST_KEYS_KEPT = 10_000

#: What a control-plane option may hold (after validation).
ControlOptions = dict[str, float | bool | str | None]


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Verbs:
    book: TaskBook
    admission: Admission
    deps: Dependencies
    attempts: Attempts
    launcher: Launcher
    timers: TimerQueue
    queries: Queries
    #: the control plane's request keys applied, oldest first (a dict as an ordered set)
    _request_keys: dict[str, None] = dataclasses.field(init=False, default_factory=dict)

    def _verb(self, task_id: object, fn: Callable[[TaskEntry], None]) -> TaskSnapshot:
        book = self.book
        with book.lock:
            attempts = self.attempts
            if attempts.pending_starts or attempts.pending_finishes:
                attempts.settle_pending()
            t = book.task(task_id)
            fn(t)
            snap = t.snap
        book.flush_outbox()
        self.launcher.pump()
        return snap

    def _raise(self, t: TaskEntry, verb: str, force: bool = False) -> None:
        err = self.book.sm.check(t.snap, verb, force=force)
        if err is not None:
            raise err
        why = refused(t, verb)
        if why is not None:
            raise InvalidTransition(t.snap.status, verb, (), detail=why, task_id=t.snap.task_id)

    def start(self, task_id: object, *, actor: str = "user") -> TaskSnapshot:
        check_text("actor", actor)

        def go(t: TaskEntry) -> None:
            if t.snap.status in (S.QUEUED, S.STARTING, S.RUNNING):
                return
            self._raise(t, "start")
            if t.snap.retry_at is not None:  # a delayed start: now instead
                t.snap = t.snap.evolve(retry_at=None)
            if t.deps and t.snap.status is S.PENDING:
                self.book.apply(t, self.book.sm.mark_blocked(t.snap))
                self.deps.settle([t.snap.task_id])
            elif t.deps:
                self.deps.settle([t.snap.task_id])
            else:
                self.deps.release(t)

        return self._verb(task_id, go)

    def pause(
        self, task_id: object, grace: float, *, actor: str, wait: bool = False
    ) -> TaskSnapshot:
        """``grace``: the seconds a running task has to reach a checkpoint (the caller
        resolves ``timeout=`` against ``pause_grace``, as for ``stop``)."""
        check_text("actor", actor)
        book = self.book

        def go(t: TaskEntry) -> None:
            if t.snap.status in (S.PAUSING, S.PAUSED):
                return
            self._raise(t, "pause")
            book.apply(t, book.sm.request_pause(t.snap, actor=actor))
            if t.snap.status is S.PAUSING:
                self.timers.push(
                    book.clock.monotonic() + grace,
                    TimerKind.PAUSE,
                    t.snap.task_id,
                    t.snap.status_version,
                )
                if t.handle is not None:
                    self.launcher.deliver_pause(t)

        snap = self._verb(task_id, go)
        if wait:
            return self.queries.wait_settled(task_id, {S.PAUSING}, grace + 5)
        return snap

    def resume(self, task_id: object, *, actor: str = "user") -> TaskSnapshot:
        check_text("actor", actor)
        book = self.book

        def go(t: TaskEntry) -> None:
            st = t.snap.status
            if st in (S.RUNNING, S.QUEUED, S.STARTING):
                return
            if st is S.PAUSING:
                book.apply(
                    t, book.sm.abort_pause(t.snap, reason="resumed before the pause took effect")
                )
                if t.handle is not None:
                    t.handle.resume()
                return
            self._raise(t, "resume")
            book.apply(t, book.sm.resume(t.snap, actor=actor))
            if t.snap.status is S.QUEUED:
                self.admission.enqueue(t)
            elif t.handle is not None:
                t.handle.resume()

        return self._verb(task_id, go)

    def stop(
        self,
        task_id: object,
        grace: float,
        *,
        actor: str,
        reason: str | None,
        wait: bool,
        cancel: bool = False,
        kind: FailureKind | None = None,
    ) -> TaskSnapshot:
        """Stop (or, ``cancel=True``, cancel) with a stop window of ``grace`` seconds."""
        check_text("actor", actor)
        check_reason(reason)
        book = self.book

        def go(t: TaskEntry) -> None:
            st = t.snap.status
            if st in (S.STOPPING, S.STOPPED) or (cancel and st is S.CANCELLED):
                return
            if cancel:
                self._raise(t, "cancel")
                book.apply(
                    t,
                    book.sm.cancel(
                        t.snap,
                        reason=reason or "cancelled",
                        actor=actor,
                        kind=kind or FailureKind.CANCELLED,
                    ),
                )
            else:
                self._raise(t, "stop")
                book.apply(t, book.sm.request_stop(t.snap, actor=actor, reason=reason))
            t.stop_reason = reason or ("cancelled" if cancel else f"stopped by {actor}")
            t.stop_failure = (
                Failure(kind or FailureKind.CANCELLED, t.stop_reason) if cancel else None
            )
            if t.snap.status is S.STOPPING:
                if t.handle is not None:
                    t.handle.request_stop(t.stop_reason)
                self.timers.push(
                    book.clock.monotonic() + grace, TimerKind.STOP, t.snap.task_id, t.exec_attempt
                )
            elif t.handle is not None:
                # stopped while paused in place: wake the checkpoint so the thread exits
                t.handle.request_stop(t.stop_reason)
            self.deps.after_status(t)

        snap = self._verb(task_id, go)
        if wait:
            return self.queries.wait_settled(task_id, {S.STOPPING}, grace + 5)
        return snap

    def retry(self, task_id: object, force: bool = False, *, actor: str = "user") -> TaskSnapshot:
        check_text("actor", actor)
        book = self.book

        def go(t: TaskEntry) -> None:
            if t.snap.status in (S.QUEUED, S.STARTING, S.RUNNING):
                return
            self._raise(t, "retry", force)
            book.apply(t, book.sm.retry(t.snap, force=force, actor=actor))
            t.result = None
            t.exception = None
            t.abandoned = None
            t.live = None
            self.admission.enqueue(t)

        return self._verb(task_id, go)

    def skip(
        self, task_id: object, reason: str | None = None, *, actor: str = "user"
    ) -> TaskSnapshot:
        check_text("actor", actor)
        check_reason(reason)
        book = self.book

        def go(t: TaskEntry) -> None:
            if t.snap.status is S.SKIPPED:
                return
            self._raise(t, "skip")
            book.apply(t, book.sm.skip(t.snap, reason=reason, actor=actor))
            self.deps.after_status(t)

        return self._verb(task_id, go)

    def reset(self, task_id: object, *, confirm: bool, actor: str = "user") -> TaskSnapshot:
        check_text("actor", actor)
        if confirm is not True:
            raise ConfigurationError(
                "reset() erases the attempt history; call reset(id, confirm=True)"
            )
        book = self.book

        def go(t: TaskEntry) -> None:
            if t.snap.status is S.PENDING and t.snap.attempt == 0:
                return
            self._raise(t, "reset")  # names current, requested and allowed states
            if t.exec_attempt:
                raise InvalidTransition(
                    t.snap.status,
                    "reset",
                    [s.value for s in TERMINAL | UNOCCUPIED],
                    detail="its execution is still alive; stop it first",
                    task_id=t.snap.task_id,
                )
            book.apply(t, book.sm.reset(t.snap, actor=actor))
            book.clear_attempts(t)
            t.result = None
            t.exception = None
            t.live = None

        return self._verb(task_id, go)

    def force_transition(
        self, task_id: object, to: TaskStatus | str, *, reason: str, actor: str
    ) -> TaskSnapshot:
        if isinstance(actor, str) and isinstance(reason, str):
            # (empty ones are refused by the state machine, with its own message)
            check_text("actor", actor, empty=True)
            check_text("reason", reason, empty=True)
        try:
            target = TaskStatus(to)
        except ValueError:
            raise ConfigurationError(f"unknown status {to!r}") from None
        book = self.book

        def go(t: TaskEntry) -> None:
            before = t.snap.status
            book.apply(t, book.sm.force_transition(t.snap, target, actor=actor, reason=reason))
            override = book.new_event(
                AdminOverride,
                t,
                from_status=before,
                to_status=target,
                actor=actor,
                reason=reason,
                version=t.snap.status_version,
            )
            book.event(t, override)
            if target in TERMINAL and t.handle is not None:
                t.handle.request_stop(f"forced to {target}")
            if target is S.QUEUED:
                self.admission.enqueue(t)
            self.deps.after_status(t)

        return self._verb(task_id, go)

    # -------------------------------------------------------- control plane

    def can(self, task_id: object, verb: str, *, force: bool = False) -> tuple[bool, str | None]:
        if verb not in VERBS:
            return False, f"unknown verb {verb!r}; known verbs: {', '.join(VERBS)}"
        book = self.book
        with book.lock:
            try:
                t = book.task(task_id)
            except TaskNotFound as exc:
                return False, str(exc)
            ok, why = book.sm.can(t.snap, verb, force=force)
            if ok and verb == "reset" and t.exec_attempt:
                return False, "its execution is still alive; stop it first"
            if ok:
                why_not = refused(t, verb)
                if why_not is not None:
                    return False, why_not
            return ok, why

    def apply(
        self, task_id: object, verb: object, *, actor: str, args: object
    ) -> tuple[bool, str | None]:
        if not isinstance(verb, str) or verb not in CONTROL_VERBS:
            return False, f"unknown verb {verb!r}; allowed: {', '.join(CONTROL_VERBS)}"
        if not isinstance(task_id, str):
            return False, f"task_id must be a string, got {type(task_id).__name__}"
        opts, bad = control_args(args)
        if bad:
            return False, bad
        key = opts.get("request_key")
        lock = self.book.lock
        if isinstance(key, str):
            # the same click may arrive twice: over the widget's comm and, when the
            # kernel's main thread is busy, through the server and the store
            with lock:
                if key in self._request_keys:
                    return True, "already applied"
                self._request_keys[key] = None
                while len(self._request_keys) > REQUEST_KEYS_KEPT:
                    self._request_keys.pop(next(iter(self._request_keys)))
        ok, why = self.can(task_id, verb, force=(verb == "retry"))
        if not ok:
            if isinstance(key, str):
                with lock:
                    self._request_keys.pop(key, None)
            return False, why
        timeout = opts.get("timeout")
        reason = opts.get("reason")
        assert timeout is None or isinstance(timeout, float)
        assert reason is None or isinstance(reason, str)
        try:
            if verb == "pause":
                grace = self.timers.pause_grace if timeout is None else timeout
                self.pause(task_id, grace, actor=actor)
            elif verb == "resume":
                self.resume(task_id, actor=actor)
            elif verb == "stop":
                grace = 0.0
                if opts.get("graceful", True):
                    grace = self.timers.stop_grace if timeout is None else timeout
                self.stop(task_id, grace, actor=actor, reason=reason, wait=False)
            elif verb == "retry":
                self.retry(task_id, force=True, actor=actor)
            else:
                self.skip(task_id, reason=reason, actor=actor)  # who: the outcome
        except Exception as exc:  # raced with another change: report, do not raise
            return False, str(exc)
        return True, None


def refused(t: TaskEntry, verb: str) -> str | None:
    """Why ``t``'s executor refuses ``verb`` although its state allows it (e.g. a loop in
    a cell cannot be retried: control/loops.py), or None."""
    refuse = getattr(t.executor, "refuse", None)
    return refuse(verb) if callable(refuse) else None


def control_args(args: object) -> tuple[ControlOptions, str | None]:
    """Validate the plain-data options a control-plane verb may carry."""
    if args is None:
        return {}, None
    if not isinstance(args, Mapping):
        return {}, f"args must be a mapping, got {type(args).__name__}"
    out: ControlOptions = {}
    for key, value in args.items():
        if key == "timeout":
            if value is None:
                continue
            try:
                out[key] = check_seconds("timeout", value)
            except ConfigurationError as exc:
                return {}, str(exc)
        elif key == "graceful":
            if not isinstance(value, bool):
                return {}, f"graceful must be true or false, got {value!r}"
            out[key] = value
        elif key == "reason":
            try:
                out[key] = check_reason(value)
            except ConfigurationError as exc:
                return {}, str(exc)
        elif key == "force":
            continue  # a control-plane retry is always a human decision (forced)
        elif key == "request_key":
            if not isinstance(value, str) or not 0 < len(value) <= 100:
                return {}, f"request_key must be a string of 1-100 characters, got {value!r}"
            out[key] = value
        else:
            return {}, f"unknown option {key!r}; allowed: timeout, graceful, reason, request_key"
    return out, None

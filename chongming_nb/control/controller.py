"""The Controller: submit, schedule, control and observe tasks inside the kernel.

Threads:
* the caller's threads (cells, widget comm handlers on a kernel subshell, ...) call the
  public methods;
* task threads report through a per-attempt reporter;
* one dispatcher thread fires timers (retry backoff, stop/pause grace windows,
  timeouts), samples heartbeats and claims store commands;
* one recorder thread writes to the store and then publishes events (see bus.py).

Everything about tasks is guarded by one lock. Invariants (checked by the tests):
* only the StateMachine changes a status; the controller decides which event applies;
* a task holds a slot from STARTING until its execution ends or is abandoned, pause
  included (pause does not free a slot);
* an execution's late report (after it was abandoned, or after its task was forced or
  stopped while paused) never rewrites a recorded outcome.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import random
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from chongming_nb.control.bus import EventBus, EventFilter, RunNote, RunObserver
from chongming_nb.control.spec import (
    TaskRegistry,
    TaskSpec,
    _validate,
    check_arguments,
    submit_facts,
)
from chongming_nb.core.clock import Clock
from chongming_nb.core.errors import (
    ConfigurationError,
    InvalidTransition,
    TaskNotFound,
    TaskTimeout,
)
from chongming_nb.core.events import (
    AdminOverride,
    AttemptFailed,
    AttemptStarted,
    Event,
    ProgressUpdated,
    TaskCreated,
    TaskLogLine,
    TaskOutput,
    TaskStatusChanged,
    TaskWarning,
)
from chongming_nb.core.models import (
    AttemptRecord,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
    submitted_snapshot,
)
from chongming_nb.core.policies import (
    BucketPolicy,
    ConcurrencyPolicy,
    JoinMode,
    RetryPolicy,
    Timeout,
)
from chongming_nb.core.state_machine import CONTROL_VERBS, VERBS, StateMachine
from chongming_nb.core.states import OCCUPIED, TERMINAL, UNOCCUPIED, TaskStatus
from chongming_nb.core.validation import (
    check_int64,
    check_reason,
    check_same_call,
    check_seconds,
    check_text,
)
from chongming_nb.runtime import timeouts
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.clock import SYSTEM_CLOCK
from chongming_nb.runtime.executors import (
    ExecutionHandle,
    ExecutionRequest,
    Executor,
    Outcome,
    make_executor,
)
from chongming_nb.runtime.heartbeat import Heartbeat
from chongming_nb.stores.protocol import EventRecord, LogRecord

log = logging.getLogger("chongming_nb.controller")

S = TaskStatus

#: How often the dispatcher wakes at the latest (heartbeats, store commands).
TICK_SECONDS = 0.05
#: At most one ProgressUpdated event per task per this many seconds.
PROGRESS_EVENT_INTERVAL = 0.1
#: Log lines kept in memory per task (older ones stay in the store, if any).
LOG_RING = 2000

#: The states of a launched attempt in which no request awaits delivery to its handle.
_LAUNCHED_QUIETLY = frozenset({TaskStatus.STARTING, TaskStatus.RUNNING})

#: Terminal states other than success: an upstream in one fails an all_succeeded join.
_UNSUCCESSFUL = TERMINAL - {TaskStatus.SUCCEEDED}

#: ``submit(after=)``'s default: no dependencies (compared by identity on the hot path).
_NO_DEPS: tuple[Any, ...] = ()

_HANDLE: Any = None


def _handle_class() -> Any:
    """TaskHandle, imported once (handle.py imports this module)."""
    global _HANDLE
    if _HANDLE is None:
        from chongming_nb.control.handle import TaskHandle

        _HANDLE = TaskHandle
    return _HANDLE


@dataclass(eq=False, slots=True)
class _Task:
    snap: TaskSnapshot
    fn: Callable[..., Any] | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inject: bool
    spec: TaskSpec
    executor: Any
    deps: tuple[str, ...] = ()
    dependants: list[str] | None = None  # made at the first dependant (most have none)
    join: JoinMode = JoinMode.ALL_SUCCEEDED
    when: Callable[[Mapping[str, Any]], bool] | None = None
    # plain-value tuples (written by _apply, read back by _transitions), not Transition
    # objects: the collector stops tracking a tuple of plain values, so a finished task
    # leaves 4 fewer objects for every later collection to walk
    history: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: list[AttemptRecord] = field(default_factory=list)
    extra_events: list[Event] | None = None
    logs: deque[LogRecord] | None = None
    result: Any = None
    exception: BaseException | None = None
    handle: ExecutionHandle | None = None
    abandoned: ExecutionHandle | None = None
    exec_attempt: int = 0  # attempt number of the live execution, 0 = none
    holds_slot: bool = False
    sleeper: CancellationToken | None = None  # in ctx.sleep: the token its timer wakes
    live: tuple[Any, Any, Any, Any] | None = None
    progress_event_at: float = -1e18
    hb: Heartbeat | None = None
    starting_since: float | None = None
    started_mono: float | None = None
    timeout_kind: FailureKind | None = None
    stop_reason: str | None = None
    stop_failure: Failure | None = None  # a cancel's failure; None for a stop (no failure)
    upstream: dict[str, Any] | None = None
    node: str | None = None


class _Reporter:
    """The controller's side of one attempt (see runtime.executors.base.Reporter)."""

    __slots__ = ("attempt", "ctl", "task")

    def __init__(self, ctl: Controller, task: _Task, attempt: int) -> None:
        self.ctl = ctl
        self.task = task
        self.attempt = attempt

    def started(self, pid: int | None = None) -> None:
        self.ctl._on_started(self.task, self.attempt, pid)

    def progress(
        self, done: float | None, total: float | None, unit: str | None, message: str | None
    ) -> None:
        t = self.task
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
        now = self.ctl._clock.monotonic()
        if now - t.progress_event_at >= PROGRESS_EVENT_INTERVAL or (
            t.live[1] is not None and t.live[0] >= t.live[1]
        ):
            t.progress_event_at = now
            self.ctl._on_progress_event(t)

    def emit(self, kind: str, payload: Any) -> None:
        self.ctl._on_emit(self.task, kind, payload)

    def log(self, stream: str, line: str, level: str | None) -> None:
        self.ctl._on_log(self.task, stream, line, level)

    def pause_reached(self) -> bool:
        return self.ctl._on_pause_reached(self.task, self.attempt)

    def resumed(self) -> None:
        pass

    def heartbeat(self) -> None:
        if self.task.hb is not None:
            self.task.hb.beat(self.ctl._clock.monotonic())

    def upstream(self, key: Any) -> Any:
        return self.ctl._upstream_value(self.task, key)

    def sleep(self, seconds: float, token: CancellationToken) -> float:
        return self.ctl._sleep(self.task, self.attempt, seconds, token)

    def finished(self, outcome: Outcome) -> None:
        self.ctl._on_finished(self.task, self.attempt, outcome)


#: One launch taken under the lock, run after it is released.
_Launch = tuple[_Task, Executor, ExecutionRequest, _Reporter]


class Controller:
    """Runs tasks in the background of the kernel and lets you control them.

    ``store``: None keeps everything in memory; a TaskStore (or a URL/path for
    ``open_store``) makes every transition durable and lets other processes (the
    JupyterLab sidebar, the ``chongming`` CLI) see and control the tasks.
    """

    def __init__(
        self,
        store: Any = None,
        concurrency: ConcurrencyPolicy | None = None,
        executor: str | Executor = "thread",
        clock: Clock | None = None,
        *,
        buckets: BucketPolicy | None = None,
        stop_grace: float = 10.0,
        pause_grace: float = 30.0,
        artifacts_root: str | Path | None = None,
        owner: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if concurrency is not None and not isinstance(concurrency, ConcurrencyPolicy):
            raise ConfigurationError(
                f"concurrency must be a ConcurrencyPolicy, got {concurrency!r}"
            )
        check_seconds("stop_grace", stop_grace)
        check_seconds("pause_grace", pause_grace)
        if stop_grace is None or pause_grace is None:
            raise ConfigurationError("stop_grace and pause_grace are numbers of seconds, not None")
        self._clock: Clock = clock or SYSTEM_CLOCK
        self._sm = StateMachine(self._clock)
        self.concurrency = concurrency or ConcurrencyPolicy()
        self.buckets = buckets
        self.stop_grace = float(stop_grace)
        self.pause_grace = float(pause_grace)
        self.artifacts_root = Path(artifacts_root) if artifacts_root is not None else None
        self.registry = TaskRegistry()
        self._rng = rng or random.Random()
        self._default_executor = executor
        self._executors: dict[str, Executor] = {}
        self._default_pair: tuple[str, Executor] | None = None
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        # one condition for every wait(): a threading.Event per task would cost ~600
        # bytes per finished task (Condition + locks + deque) for nothing
        self._terminal = threading.Condition(self._lock)
        # ctx.sleep: a woken sleeper waits here for a slot; it goes before queued tasks
        self._slot_freed = threading.Condition(self._lock)
        self._waking = 0
        # tasks someone is in wait() for (and how many threads): only their ends notify,
        # so a thread waiting for one task is not woken by every other task's end
        self._awaited: dict[_Task, int] = {}
        # (task, attempt, wall time, monotonic) of starts reported while the lock was busy
        self._pending_starts: deque[tuple[_Task, int, Any, float]] = deque()
        # (task, attempt, outcome) of attempt ends reported while the lock was busy
        self._pending_finishes: deque[tuple[_Task, int, Outcome]] = deque()
        self._pumping = threading.local()
        self._tasks: dict[str, _Task] = {}
        self._by_key: dict[str, str] = {}
        self._ready: list[tuple[int, int, str]] = []
        self._seq = itertools.count()
        self._timers: list[tuple[float, int, str, str, int]] = []
        self._running = 0
        self._tag_use: Counter[str] = Counter()
        self._bucket_use: Counter[int] = Counter()
        # pipeline runs (control/pipeline.py): extra tag limits, held runs whose queued
        # tasks are parked instead of dispatched, and statuses that hold a run at once
        self._run_limits: dict[str, int] = {}
        self._held_runs: set[str] = set()
        self._parked: dict[str, list[tuple[int, int, str]]] = {}
        self._hold_on: dict[str, frozenset[TaskStatus]] = {}
        self._task_seq = itertools.count(1)
        self._outbox: list[Any] = []
        self._request_keys: dict[str, None] = {}
        self._executing: set[_Task] = set()
        self._id_prefix = secrets.token_hex(4)
        self._event_seq = itertools.count(1)
        self._closed = False
        self.owner = owner
        self.persist_failures = 0
        self._store: Any = None
        if store is not None:
            self._attach_store(store)
        self._bus = EventBus(persist=self._persist if self._store is not None else None)
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name="chongming-dispatcher", daemon=True
        )
        self._dispatcher.start()
        subscribe = getattr(self._clock, "subscribe", None)
        if callable(subscribe):
            subscribe(self._poke)

    # ------------------------------------------------------------------ helpers

    def _attach_store(self, store: Any) -> None:
        if isinstance(store, str | Path):
            from chongming_nb.stores import open_store

            store = open_store(str(store))
        self._store = store
        from chongming_nb.control.persistence import StoreLink

        self._link = StoreLink(self, store)
        self._link.beat_owner()

    @property
    def store(self) -> Any:
        return self._store

    def _new_event_id(self) -> str:
        return f"{self._id_prefix}-{next(self._event_seq)}"

    def _poke(self) -> None:
        with self._wake:
            self._wake.notify()

    def _task(self, task_id: Any) -> _Task:
        tid = getattr(task_id, "id", task_id)
        t = self._tasks.get(tid) if isinstance(tid, str) else None
        if t is None:
            raise TaskNotFound(str(tid))
        return t

    def _executor_for(self, choice: Any) -> tuple[str, Executor]:
        if choice is None:
            pair = self._default_pair  # twice per task: once resolved, kept
            if pair is not None:
                return pair
            if self._default_executor is None:
                raise ConfigurationError("executor must be a name or an Executor, got None")
            self._default_pair = pair = self._executor_for(self._default_executor)
            return pair
        if isinstance(choice, str):
            ex = self._executors.get(choice)
            if ex is None:
                ex = make_executor(choice)
                self._executors[choice] = ex
            return choice, ex
        if not callable(getattr(choice, "launch", None)):
            raise ConfigurationError(f"executor must be a name or an Executor, got {choice!r}")
        name = str(getattr(choice, "name", type(choice).__name__))
        self._executors.setdefault(f"{name}@{id(choice)}", choice)
        return name, choice

    # Every accepted transition goes through here (under the lock).
    def _apply(
        self, t: _Task, method: Callable[..., tuple[TaskSnapshot, Transition]], *a: Any, **kw: Any
    ) -> None:
        prev_version = t.snap.status_version
        new, tr = method(t.snap, *a, **kw)
        t.snap = new
        t.history.append(
            (_VALUE_OF[tr.from_status], _VALUE_OF[tr.to_status], tr.trigger, tr.actor,
             tr.reason, tr.at, tr.version, tr.override)
        )  # fmt: skip
        if self._store is not None:
            self._outbox.append(("save", new, prev_version, tr))
        # the event is seen only by subscribers and hooks (the store keeps transitions,
        # and ``ctl.events()`` rebuilds status events from the history)
        if self._bus.listened:
            self._outbox.append(_status_event(tr, self._new_event_id()))
        run = new.pipeline_run_id
        if run is not None and run in self._bus.runs:
            self._outbox.append(RunNote(run, tr.task_id, tr.version, tr.to_status))
        if self._awaited and t in self._awaited and new.status in TERMINAL:
            self._terminal.notify_all()

    def _event(self, t: _Task, ev: Event, keep: bool = True) -> None:
        if keep:
            if t.extra_events is None:
                t.extra_events = []
            t.extra_events.append(ev)
        self._outbox.append(ev)

    def _warn(self, t: _Task, message: str) -> None:
        """Under the lock: a TaskWarning kept with the task and published."""
        self._event(
            t,
            TaskWarning(
                event_id=self._new_event_id(),
                at=self._clock.now(),
                task_id=t.snap.task_id,
                message=message,
            ),
        )

    def _flush_outbox(self) -> None:
        """Hand what was recorded under the lock to the recorder.

        The hand-over happens under the lock: two threads flushing at once must not
        deliver their batches out of order (a task's STOPPED before its STOPPING, or a
        store write ahead of the version it expects). Reading ``_outbox`` without the
        lock is a safe fast path: whoever appends under the lock flushes afterwards.
        """
        if not self._outbox:
            return
        with self._lock:
            items, self._outbox = self._outbox, []
            self._bus.put_many(items)

    def _push_timer(self, deadline: float, kind: str, task_id: str, marker: int) -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), kind, task_id, marker))
        self._wake.notify()

    # --------------------------------------------------------------- submission

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        after: Iterable[Any] | Any = _NO_DEPS,
        name: str | None = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        retry: RetryPolicy | int | None = None,
        timeout: Timeout | float | None = None,
        executor: Any = None,
        idempotency_key: str | None = None,
        bucket_key: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start ``fn(ctx, *args, **kwargs)`` in the background; returns a TaskHandle at once.

        ``after=`` takes handles or task ids: the task waits BLOCKED until they all
        succeed, and is cancelled (dependency_failed) if one does not.
        """
        # positional, in _submit's parameter order (a keyword call costs per submit)
        return self._submit(
            fn, args, kwargs, after, name, tags, priority, retry, timeout, executor,
            idempotency_key, bucket_key,
        )  # fmt: skip

    def _submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        after: Iterable[Any] | Any = _NO_DEPS,
        name: str | None = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        retry: RetryPolicy | int | None = None,
        timeout: Timeout | float | None = None,
        executor: Any = None,
        idempotency_key: str | None = None,
        bucket_key: str | None = None,
        *,
        pipeline_run_id: str | None = None,
        join: JoinMode = JoinMode.ALL_SUCCEEDED,
        when: Callable[[Mapping[str, Any]], bool] | None = None,
        node: str | None = None,
        compensate: Callable[..., Any] | None = None,
        upstream_names: Mapping[str, str] | None = None,
        prepared: tuple[TaskSpec, bool] | None = None,
    ) -> Any:
        """``prepared``: ``(final spec, inject)`` from a caller that has already validated
        the spec and bound the arguments (pipelines do it once per node at ``add``)."""
        TaskHandle = _HANDLE or _handle_class()
        if not callable(fn):
            raise ConfigurationError(f"submit() needs a callable, got {fn!r}")
        if self._closed:
            raise ConfigurationError("this controller is closed")
        arity: int | None = None
        if prepared is not None:
            spec, inject = prepared
        else:
            spec, inject, arity = submit_facts(fn)
        if prepared is None and (
            name is not None
            or retry is not None
            or timeout is not None
            or tags is not None
            or priority is not None
            or compensate is not None
            or executor is not None
        ):
            spec = spec.merged(
                **_validate(name, retry, timeout, tags, priority, compensate), executor=executor
            )
        if idempotency_key is not None:
            check_text("idempotency_key", idempotency_key, empty=True)
        if bucket_key is not None:
            check_text("bucket_key", bucket_key, empty=True)
        if prepared is None and (kwargs or len(args) + inject != arity):
            check_arguments(fn, args, kwargs, inject)  # (else: plain and complete)
        if after is None or after is _NO_DEPS:
            after = _NO_DEPS
        elif isinstance(after, str) or not isinstance(after, Iterable):
            after = (after,)
        exec_name, ex = self._executor_for(spec.executor)
        validate = getattr(ex, "validate", None)
        if callable(validate):  # e.g. the process executor: picklable, importable target
            validate(fn, tuple(args), dict(kwargs))
        self.registry.register(fn, spec.name)
        prio = spec.priority if spec.priority is not None else self.concurrency.default_priority
        bucket = None
        if bucket_key is not None and self.buckets is not None:
            bucket = self.buckets.bucket_for(bucket_key)
        with self._lock:
            if idempotency_key is not None and idempotency_key in self._by_key:
                first_id = self._by_key[idempotency_key]
                first = self._tasks[first_id]
                check_same_call(
                    idempotency_key,
                    first_id,
                    (first.fn, first.args, first.kwargs, first.inject),
                    fn,
                    tuple(args),
                    kwargs,
                )
                return TaskHandle(self, first_id)
            deps: list[str] = []
            for d in after:
                tid = getattr(d, "id", d)
                if not isinstance(tid, str) or tid not in self._tasks:
                    raise ConfigurationError(f"after=: unknown task {tid!r}")
                if tid not in deps:
                    deps.append(tid)
            # this controller's random prefix + a sequence: unique across controllers
            # sharing a store (32 random bits apart), and one controller's ids sort in
            # creation order, so a store's task_id indexes grow at one end instead of
            # at random pages (~3x fewer pages written per task with SQLite)
            task_id = f"{self._id_prefix}{next(self._task_seq):06x}"
            while task_id in self._tasks:  # only after a reconcile adopted foreign ids
                task_id = f"{self._id_prefix}{next(self._task_seq):06x}"
            now = self._clock.now()
            dep_ids = tuple(deps)
            # built from a blank template through the layout twin: positional slot
            # stores, no 32-parameter keyword call (once per task)
            snap = submitted_snapshot(  # the order of SUBMIT_FIELDS
                task_id,
                spec.name,
                pipeline_run_id,
                spec.tags,
                spec.retry.max_attempts,
                now,
                exec_name,
                prio,
                dep_ids,
                idempotency_key,
                bucket,
                bucket_key,
                self.owner,
            )
            t = _Task(snap, fn, tuple(args), dict(kwargs), inject, spec, spec.executor, dep_ids)
            if join is not JoinMode.ALL_SUCCEEDED:
                t.join = join
            if when is not None:
                t.when = when
            if node is not None:
                t.node = node
            if upstream_names:
                t.upstream = {"__names__": dict(upstream_names)}
            self._tasks[task_id] = t
            if idempotency_key is not None:
                self._by_key[idempotency_key] = task_id
            for d in deps:
                up = self._tasks[d]
                if up.dependants is None:
                    up.dependants = [task_id]
                else:
                    up.dependants.append(task_id)
            if self._store is not None:
                self._outbox.append(("create", snap))
                call = _recorded_call(task_id, now, args, kwargs)
                if call is not None:
                    self._outbox.append(call)
            if self._bus.listened:
                self._outbox.append(
                    TaskCreated(
                        event_id=self._new_event_id(), at=now, task_id=task_id, snapshot=snap
                    )
                )
            if deps:
                self._apply(t, self._sm.mark_blocked, reason="waiting for " + ", ".join(deps))
                self._settle([task_id])
            else:
                self._release(t, now)
            picked = self._pick_for_pump()
        self._pump(picked)  # the outbox is flushed before anything launches
        return TaskHandle(self, task_id)

    # ------------------------------------------------------------ dependencies

    def _settle(self, ids: list[str]) -> None:
        """Re-evaluate BLOCKED tasks in ``ids`` (and, transitively, what they unblock)."""
        work = deque(ids)  # FIFO: dependants are released in the order they were submitted
        while work:
            t = self._tasks[work.popleft()]
            if t.snap.status is not S.BLOCKED:
                continue
            tasks = self._tasks
            ups = [tasks[d].snap.status for d in t.deps]
            if t.join is JoinMode.ALL_SUCCEEDED:
                if all(s is S.SUCCEEDED for s in ups):
                    self._release(t)  # the common case: every upstream succeeded
                    if t.snap.status in TERMINAL:
                        work.extend(t.dependants or ())
                    continue
                bad = [d for d, s in zip(t.deps, ups, strict=True) if s in _UNSUCCESSFUL]
                if bad:
                    names = ", ".join(
                        f"{self._tasks[d].snap.name} ({self._tasks[d].snap.status})" for d in bad
                    )
                    self._apply(
                        t,
                        self._sm.cancel,
                        reason=f"upstream did not succeed: {names}",
                        kind=FailureKind.DEPENDENCY_FAILED,
                    )
                    work.extend(t.dependants or ())
                    continue
                ready = False  # some upstream is still open
            elif t.join is JoinMode.ALL_DONE:
                ready = all(s in TERMINAL for s in ups)
            else:  # ANY_SUCCEEDED
                ready = any(s is S.SUCCEEDED for s in ups)
                if not ready and all(s in TERMINAL for s in ups):
                    self._apply(
                        t,
                        self._sm.cancel,
                        reason="no upstream succeeded",
                        kind=FailureKind.DEPENDENCY_FAILED,
                    )
                    work.extend(t.dependants or ())
                    continue
            if ready:
                self._release(t)
                if t.snap.status in TERMINAL:
                    work.extend(t.dependants or ())

    def _upstream_map(self, t: _Task) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for d in t.deps:
            u = self._tasks[d]
            if u.snap.status is S.SUCCEEDED:
                out[d] = u.result
        return out

    def _release(self, t: _Task, now: Any = None) -> None:
        """Dependencies are met: inject upstream results, test ``when``, queue."""
        if t.deps:
            values = self._upstream_map(t)
            names = (t.upstream or {}).get("__names__", {})
            t.upstream = {"__names__": names, **values}
            if t.when is not None:
                try:
                    go = bool(t.when(_UpstreamView(self, t)))
                except Exception as exc:
                    self._apply(
                        t,
                        self._sm.cancel,
                        reason=f"when= raised {type(exc).__name__}: {exc}",
                        kind=FailureKind.EXCEPTION,
                    )
                    return
                if not go:
                    self._apply(
                        t,
                        self._sm.skip,
                        reason="when= condition is false",
                        actor="orchestrator",
                        kind=FailureKind.CONDITION_FALSE,
                    )
                    return
        self._apply(t, self._sm.mark_queued, now=now)
        heapq.heappush(self._ready, (-t.snap.priority, next(self._seq), t.snap.task_id))

    def _upstream_value(self, t: _Task, key: Any) -> Any:
        with self._lock:
            ups = t.upstream or {}
            tid = getattr(key, "id", None) or getattr(key, "task_id", None) or key
            if isinstance(tid, str) and tid in ups and tid != "__names__":
                return ups[tid]
            names: dict[str, str] = ups.get("__names__", {})
            node = getattr(key, "name", None) if not isinstance(key, str) else key
            if isinstance(node, str):
                if node in names and names[node] in ups:
                    return ups[names[node]]
                for d in t.deps:
                    if self._tasks[d].snap.name == node and d in ups:
                        return ups[d]
            known = [self._tasks[d].snap.name for d in t.deps]
            raise KeyError(
                f"{key!r} is not a succeeded upstream of {t.snap.name!r} (upstreams: {known})"
            )

    # --------------------------------------------------------------- scheduling

    def _fits(self, t: _Task) -> bool:
        pol = self.concurrency
        for tag in t.snap.tags:
            lim = pol.limits.get(tag) or self._run_limits.get(tag)
            if lim is not None and self._tag_use[tag] >= lim:
                return False
        b = t.snap.bucket
        return not (
            pol.per_bucket is not None and b is not None and self._bucket_use[b] >= pol.per_bucket
        )

    def _take_slot(self, t: _Task) -> None:
        if t.executor is not None and getattr(t.executor, "takes_slot", True) is False:
            return  # a loop in a cell (control/loops.py): it runs in its caller's thread
        t.holds_slot = True
        self._running += 1
        for tag in t.snap.tags:
            if tag in self.concurrency.limits or tag in self._run_limits:
                self._tag_use[tag] += 1
        if t.snap.bucket is not None:
            self._bucket_use[t.snap.bucket] += 1

    def _free_slot(self, t: _Task) -> None:
        if not t.holds_slot:
            return
        t.holds_slot = False
        self._running -= 1
        if self._waking:
            self._slot_freed.notify_all()
        for tag in t.snap.tags:
            if tag in self.concurrency.limits or tag in self._run_limits:
                self._tag_use[tag] -= 1
        if t.snap.bucket is not None:
            self._bucket_use[t.snap.bucket] -= 1

    def _pump(self, picked: list[_Launch] | None = None) -> None:
        """Start as many queued tasks as the policy allows (launch outside the lock).

        ``picked``: launches a caller already took with ``_pick_launches`` in its own
        critical section (one lock round-trip instead of two).

        Not re-entrant per thread: an inline launch finishes inside ``_launch`` and its
        ``finished`` report pumps again; that nested call returns at once and this loop
        picks the next task up (else N queued inline tasks nest N deep and hit the
        recursion limit)."""
        if picked is not None and not (picked or self._pending_finishes or self._pending_starts):
            # nothing to launch (e.g. a submit while every slot is busy) and no report
            # to settle: the caller's pick flushed the outbox already
            return
        if getattr(self._pumping, "active", False):
            self._pumping.again = True  # the outer loop takes another pass
            self._flush_outbox()
            return
        self._pumping.active = True
        try:
            self._pump_loop(picked)
            # reports queued by threads that found the lock busy while this thread
            # held it: settle them now (if another thread holds the lock, it does)
            while (self._pending_finishes or self._pending_starts) and self._lock.acquire(
                blocking=False
            ):
                try:
                    self._settle_pending()
                    more = self._pick_launches()
                finally:
                    self._lock.release()
                self._pump_loop(more)
        finally:
            self._pumping.active = False

    def _pick_for_pump(self) -> list[_Launch] | None:
        """Under the lock, for a caller that pumps right after releasing it: the
        launches to hand to ``_pump`` (None when this thread is already pumping; the
        outbox is flushed either way by ``_pump``)."""
        if getattr(self._pumping, "active", False):
            return None
        return self._pick_launches()

    def _pick_launches(self) -> list[_Launch]:
        """Under the lock: take what may start now, and flush the outbox."""
        if self._pending_starts or self._pending_finishes:
            self._settle_pending()
        launches: list[_Launch] = []
        skipped: list[tuple[int, int, str]] = []
        while self._ready and self._running + self._waking < self.concurrency.max_parallel:
            item = heapq.heappop(self._ready)
            t = self._tasks[item[2]]
            if t.snap.status is not S.QUEUED:
                continue  # stale entry (paused, stopped, skipped meanwhile)
            run = t.snap.pipeline_run_id
            if run is not None and run in self._held_runs:
                self._parked.setdefault(run, []).append(item)
                continue
            if not self._fits(t):
                skipped.append(item)  # no head-of-line blocking: look further
                continue
            launches.append(self._prepare_launch(t))
        for item in skipped:
            heapq.heappush(self._ready, item)
        if self._outbox:
            self._flush_outbox()  # same critical section: one lock round-trip
        return launches

    def _pump_loop(self, picked: list[_Launch] | None = None) -> None:
        while True:
            if picked is not None:
                launches, picked = picked, None
            else:
                with self._lock:
                    launches = self._pick_launches()
            if not launches:
                return
            # Another pass only when this thread freed something meanwhile (an inline
            # attempt finished, a launch failed): a slot freed on another thread is
            # pumped by that thread. Saves one lock round-trip per launch.
            self._pumping.again = False
            for t, ex, req, rep in launches:
                if not self._launch(t, ex, req, rep):
                    self._pumping.again = True
            if not self._pumping.again:
                return

    def _prepare_launch(self, t: _Task) -> tuple[_Task, Executor, ExecutionRequest, _Reporter]:
        exec_name, ex = self._executor_for(t.executor)
        self._apply(t, self._sm.mark_starting, executor=exec_name)
        self._take_slot(t)
        attempt = t.snap.attempt
        t.exec_attempt = attempt
        self._executing.add(t)
        t.handle = None
        t.live = None
        t.timeout_kind = None
        t.stop_reason = None
        t.stop_failure = None
        mono = self._clock.monotonic()
        t.starting_since = mono
        t.started_mono = None
        started_at = t.snap.started_at
        assert started_at is not None
        t.attempts.append(AttemptRecord(t.snap.task_id, attempt, started_at, executor=exec_name))
        if self._bus.listened:
            self._outbox.append(
                AttemptStarted(
                    event_id=self._new_event_id(),
                    at=started_at,
                    task_id=t.snap.task_id,
                    attempt=attempt,
                    executor=exec_name,
                )
            )
        if self._store is not None:
            self._outbox.append(("attempt", t.attempts[-1]))
        deadline = None
        if t.spec.timeout.per_attempt is not None:
            deadline = started_at + timedelta(seconds=t.spec.timeout.per_attempt)
        self._arm_timeouts(t)
        snap = t.snap
        req = ExecutionRequest(  # positional (in field order): once per attempt
            snap.task_id,
            snap.name,
            attempt,
            t.fn,  # type: ignore[arg-type]
            t.args,
            t.kwargs,
            t.inject,
            snap.pipeline_run_id,
            deadline,
            self.artifacts_root,
            self._upstream_payload(t) if t.deps else None,
        )
        return t, ex, req, _Reporter(self, t, attempt)

    def _upstream_payload(self, t: _Task) -> dict[str, Any] | None:
        """Upstream values and names for executors that run the task elsewhere."""
        if not t.deps:
            return None
        ups = dict(t.upstream or {})
        names = dict(ups.get("__names__", {}))
        for d in t.deps:
            names.setdefault(self._tasks[d].snap.name, d)
        ups["__names__"] = names
        return ups

    def _arm_timeouts(self, t: _Task) -> None:
        tmo = t.spec.timeout
        if tmo.start is None and tmo.per_attempt is None and tmo.idle is None:
            return  # no limits: nothing to arm (most tasks)
        hb = t.hb
        d = timeouts.next_deadline(
            t.spec.timeout,
            starting_since=t.starting_since,
            started=t.started_mono,
            last_beat=hb.last_beat if hb else None,
        )
        if d is not None:
            self._push_timer(d, "timeout", t.snap.task_id, t.exec_attempt)

    def _launch(self, t: _Task, ex: Executor, req: ExecutionRequest, rep: _Reporter) -> bool:
        """False when the launch failed (its slot is free again)."""
        try:
            handle = ex.launch(req, rep)
        except Exception as exc:
            with self._lock:
                if t.exec_attempt == req.attempt:
                    t.exec_attempt = 0
                    self._executing.discard(t)
                    self._free_slot(t)
                    fail = Failure(
                        FailureKind.EXCEPTION,
                        f"executor could not launch: {exc}",
                        traceback=None,
                        retryable=False,
                        exception_type=type(exc).__name__,
                    )
                    self._end_attempt(t, S.FAILED, fail)
                    if t.snap.status is S.STARTING:
                        self._apply(t, self._sm.mark_failed, fail)
                    elif t.snap.status is S.STOPPING:
                        self._apply(t, self._sm.confirm_stopped, reason="stopped before launch")
                    self._after_status(t)
            self._flush_outbox()
            if isinstance(exc, ConfigurationError):
                raise
            return False
        if t.exec_attempt != req.attempt:
            return True  # finished (inline) or settled before launch returned
        # Publish the handle without the lock, then look: whoever changes the task
        # under the lock (a stop, a pause, a timeout, the end of the attempt) stores
        # first and then reads t.handle, and this thread stores t.handle first and then
        # reads their state. Each step is atomic under the GIL, so at least one side
        # sees the other; a request seen by both is delivered twice (idempotent). Only
        # when something did happen is the lock taken.
        hb = Heartbeat(handle.token, self._clock.monotonic())
        t.handle = handle
        t.hb = hb
        if (
            t.exec_attempt == req.attempt
            and t.timeout_kind is None
            and t.snap.status in _LAUNCHED_QUIETLY
        ):
            return True
        with self._lock:
            if t.exec_attempt != req.attempt:
                # it ended (or was abandoned) meanwhile: drop what was published here
                if t.handle is handle:
                    t.handle = None
                if t.hb is hb:
                    t.hb = None
                return True
            st = t.snap.status
            if st is S.STOPPING:
                handle.request_stop(t.stop_reason)
            elif st is S.PAUSING:
                self._deliver_pause(t)
            elif t.timeout_kind is not None:
                handle.request_stop(t.timeout_kind.value)
        return True

    # ---------------------------------------------------------- reporter hooks

    def _on_started(self, t: _Task, attempt: int, pid: int | None) -> None:
        if pid is None and not self._lock.acquire(blocking=False):
            # Contended: do not queue up behind the lock (on a free core that costs a
            # GIL hand-over per task). The start is noted, with its time, and recorded by
            # the next critical section that settles pending starts: the attempt's own
            # end, the next scheduling pass, a read, or the dispatcher's tick (<= 50 ms).
            self._pending_starts.append((t, attempt, self._clock.now(), self._clock.monotonic()))
            return
        if pid is not None:
            self._lock.acquire()
        try:
            if self._pending_starts or self._pending_finishes:
                self._settle_pending()
            self._started(t, attempt, pid, None, self._clock.monotonic())
            if self._outbox:
                self._flush_outbox()  # same critical section: one lock round-trip
        finally:
            self._lock.release()

    def _started(self, t: _Task, attempt: int, pid: int | None, at: Any, mono: float) -> None:
        # under the lock
        if t.exec_attempt != attempt:
            return
        t.started_mono = mono
        if t.hb is not None:
            t.hb.beat(mono)  # idle time counts from the start, not the launch
        if pid is not None:
            t.snap = t.snap.evolve(pid=pid)
        if t.snap.status is S.STARTING:
            self._apply(t, self._sm.mark_running, pid=pid, at=at)
        self._arm_timeouts(t)

    def _on_progress_event(self, t: _Task) -> None:
        p = self._live_progress(t)
        if p is None:
            return
        ev = ProgressUpdated(
            event_id=self._new_event_id(),
            at=p.updated_at or self._clock.now(),
            task_id=t.snap.task_id,
            progress=p,
        )
        with self._lock:
            self._outbox.append(ev)
            if self._store is not None:
                self._outbox.append(("touch", t.snap.task_id, p))
        self._unlocked()

    def _live_progress(self, t: _Task) -> Progress | None:
        live = t.live
        if live is None:
            return t.snap.progress
        return Progress(
            done=live[0], total=live[1], unit=live[2], message=live[3], updated_at=self._clock.now()
        )

    def _on_emit(self, t: _Task, kind: str, payload: Any) -> None:
        with self._lock:
            self._event(
                t,
                TaskOutput(
                    event_id=self._new_event_id(),
                    at=self._clock.now(),
                    task_id=t.snap.task_id,
                    kind=kind,
                    payload=payload,
                ),
            )
        self._unlocked()

    def _on_log(self, t: _Task, stream: str, line: str, level: str | None) -> None:
        now = self._clock.now()
        rec = LogRecord(now, stream, line, level)
        with self._lock:
            if t.logs is None:
                t.logs = deque(maxlen=LOG_RING)
            t.logs.append(rec)
            self._outbox.append(
                TaskLogLine(
                    event_id=self._new_event_id(),
                    at=now,
                    task_id=t.snap.task_id,
                    stream=stream,
                    line=line,
                    level=level,
                )
            )
            if self._store is not None:
                self._outbox.append(("log", t.snap.task_id, rec))
        self._unlocked()

    def _on_pause_reached(self, t: _Task, attempt: int) -> bool:
        with self._lock:
            if t.exec_attempt != attempt or t.snap.status is not S.PAUSING:
                return False
            self._apply(t, self._sm.confirm_paused)
        self._unlocked()
        return True

    def _on_finished(self, t: _Task, attempt: int, outcome: Outcome) -> None:
        # Flat combining: the report is queued, and whoever holds the lock settles it.
        # A worker that finds the lock busy does not wait for it (on a free core every
        # wait is a GIL hand-over); the holder settles queued reports before its next
        # scheduling pass and re-checks after releasing (see _pump), and the
        # dispatcher's tick (<= 50 ms) settles whatever is left.
        self._pending_finishes.append((t, attempt, outcome))
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._settle_pending()
            picked = self._pick_for_pump()
        finally:
            self._lock.release()
        self._pump(picked)

    def _catch_up(self) -> None:
        """For readers: settle what was reported while the lock was busy (and schedule
        what that frees), so a read shows every report made before it."""
        if self._pending_starts or self._pending_finishes:
            with self._lock:
                self._settle_pending()
                picked = self._pick_for_pump()
            self._pump(picked)

    def _unlocked(self) -> None:
        """Right after a thread that does not pump released the lock: settle the
        reports queued while it held it (and launch what they free), else they wait
        for the dispatcher's tick; and hand the outbox over either way."""
        if self._pending_starts or self._pending_finishes:
            self._catch_up()  # flushes the outbox too
        else:
            self._flush_outbox()

    def _settle_pending(self) -> None:
        """Under the lock: record the starts, then the ends, reported while the lock
        was busy (each queue in arrival order; a task's start precedes its end)."""
        starts = self._pending_starts
        while starts:
            t, attempt, at, mono = starts.popleft()
            self._started(t, attempt, None, at, mono)
        finishes = self._pending_finishes
        while finishes:
            t, attempt, outcome = finishes.popleft()
            self._finished(t, attempt, outcome)

    def _finished(self, t: _Task, attempt: int, outcome: Outcome) -> None:
        # under the lock
        if t.exec_attempt != attempt:
            # abandoned earlier: its record is sticky; only note that it came back
            if t.abandoned is not None:
                self._warn(
                    t,
                    f"abandoned attempt {attempt} returned later ({outcome.kind}); "
                    "its LOST record stands",
                )
            self._flush_outbox()  # safe under the lock: the bus never calls back in
            return
        t.exec_attempt = 0
        self._executing.discard(t)
        t.handle = None
        t.hb = None  # frees the attempt's token and reporter (memory per finished task)
        self._free_slot(t)
        if t.live is not None:
            t.snap = t.snap.evolve(progress=self._live_progress(t))
        st = t.snap.status
        if st in TERMINAL:
            # stopped while paused in place, or forced: the status stands
            self._end_attempt(t, st, t.snap.failure)
        else:
            if st is S.PAUSING:
                self._apply(t, self._sm.abort_pause, reason="the attempt ended before pausing")
            if st is S.STARTING:
                self._apply(t, self._sm.mark_running)
            self._settle_outcome(t, outcome)
        self._after_status(t)

    def _settle_outcome(self, t: _Task, outcome: Outcome) -> None:
        st = t.snap.status
        if outcome.kind == "succeeded":
            t.result = outcome.value
            t.exception = None
            now = self._clock.now()  # one reading for the attempt's end and the status
            self._end_attempt(t, S.SUCCEEDED, None, now=now)
            self._apply(t, self._sm.mark_succeeded, outcome=_describe(outcome.value), now=now)
            return
        if outcome.kind == "cancelled":
            if st is S.STOPPING:
                fail = t.stop_failure  # None for a stop: a stop is not a failure
                self._end_attempt(t, S.STOPPED, fail)
                self._apply(t, self._sm.confirm_stopped, failure=fail, reason=t.stop_reason)
                return
            kind = t.timeout_kind or FailureKind.CANCELLED
            exc: BaseException = (
                TaskTimeout(_SCOPES.get(kind, "attempt"), _timeout_seconds(t.spec.timeout, kind))
                if t.timeout_kind
                else ConfigurationError("TaskCancelled raised without a stop request")
            )
            retryable = t.timeout_kind is not None and t.spec.retry.is_retryable(exc)
            fail = Failure(kind, str(exc), retryable=retryable, exception_type=type(exc).__name__)
            t.exception = exc
            self._fail(t, fail)
            return
        # failed or crashed
        exc2 = outcome.exception
        t.exception = exc2
        kind = FailureKind.EXCEPTION if outcome.kind == "failed" else FailureKind.NONZERO_EXIT
        retryable = st is not S.STOPPING and (
            t.spec.retry.is_retryable(exc2) if exc2 is not None else outcome.kind == "crashed"
        )
        fail = Failure(
            kind,
            outcome.message or "failed",
            traceback=outcome.traceback,
            retryable=retryable,
            exit_code=outcome.exit_code,
            exception_type=outcome.exception_type,
        )
        self._fail(t, fail)

    def _fail(self, t: _Task, fail: Failure) -> None:
        s = t.snap
        retry_at = None
        delay = 0.0
        if fail.retryable and s.attempt < s.max_attempts and s.status is not S.STOPPING:
            delay = t.spec.retry.delay(max(1, s.attempt), self._rng)
            retry_at = self._clock.now() + timedelta(seconds=delay)
        self._end_attempt(t, S.FAILED, fail)
        self._apply(t, self._sm.mark_failed, fail, retry_at=retry_at)
        self._event(
            t,
            AttemptFailed(
                event_id=self._new_event_id(),
                at=self._clock.now(),
                task_id=s.task_id,
                attempt=s.attempt,
                failure=fail,
                record=t.attempts[-1] if t.attempts else None,
            ),
        )
        if t.snap.status is S.RETRY_WAIT:
            self._push_timer(
                self._clock.monotonic() + delay, "retry", s.task_id, t.snap.status_version
            )

    def _end_attempt(
        self,
        t: _Task,
        outcome: TaskStatus,
        fail: Failure | None,
        abandoned: bool = False,
        now: Any = None,
    ) -> None:
        if not t.attempts:
            return
        rec = t.attempts[-1]
        if rec.ended_at is not None:
            return
        # built directly, not with dataclasses.replace (which inspects the fields on
        # every call): once per attempt on the hot path
        if now is None:
            now = self._clock.now()
        if fail is None:
            rec = AttemptRecord(
                rec.task_id, rec.attempt, rec.started_at, now, outcome, None, None, None,
                rec.executor, abandoned, None,
            )  # fmt: skip
        else:
            rec = AttemptRecord(
                rec.task_id, rec.attempt, rec.started_at, now, outcome, fail.kind,
                fail.message, fail.traceback, rec.executor, abandoned, fail.exit_code,
            )  # fmt: skip
        t.attempts[-1] = rec
        if self._store is not None:
            self._outbox.append(("attempt", rec))

    def _after_status(self, t: _Task) -> None:
        """Consequences of a status change: dependants, callbacks."""
        run = t.snap.pipeline_run_id
        if run is not None and t.snap.status in self._hold_on.get(run, ()):
            self._held_runs.add(run)  # e.g. fail-fast: nothing of the run starts any more
        if t.dependants and t.snap.status in TERMINAL:
            self._settle(list(t.dependants))

    # ---------------------------------------------------------------- timers

    def _sleep(self, t: _Task, attempt: int, seconds: float, token: CancellationToken) -> float:
        """``ctx.sleep`` of an in-process attempt: its slot is free for other tasks until
        a timer (on this controller's clock) wakes it, or a stop or pause does; then it
        takes a slot again, before any queued task. Returns the seconds left (> 0 when a
        stop or a pause ended the sleep early)."""
        clock = self._clock
        with self._lock:
            if t.exec_attempt != attempt:
                return 0.0
            wake_at = clock.monotonic() + seconds
            had_slot = t.holds_slot
            self._free_slot(t)
            t.sleeper = token
            self._push_timer(wake_at, "wake", t.snap.task_id, attempt)
            picked = self._pick_for_pump()
        self._pump(picked)
        try:
            token.sleep(None)
        finally:
            with self._lock:
                t.sleeper = None
                if had_slot and not token.stop_requested:
                    self._waking += 1
                    try:
                        while not token.stop_requested and not (
                            self._running < self.concurrency.max_parallel and self._fits(t)
                        ):
                            self._slot_freed.wait(TICK_SECONDS)
                    finally:
                        self._waking -= 1
                    if not token.stop_requested:
                        self._take_slot(t)
        return max(0.0, wake_at - clock.monotonic())

    def _dispatch_loop(self) -> None:
        next_hb = 0.0
        while True:
            with self._wake:
                if self._closed:
                    return
                now = self._clock.monotonic()
                wait = TICK_SECONDS
                if self._timers:
                    wait = max(0.0, min(wait, self._timers[0][0] - now))
                if wait > 0:
                    self._wake.wait(wait)
                if self._closed:
                    return
                if self._pending_starts or self._pending_finishes:
                    self._settle_pending()
                now = self._clock.monotonic()
                due = []
                while self._timers and self._timers[0][0] <= now:
                    due.append(heapq.heappop(self._timers))
                for _, _, kind, tid, marker in due:
                    t = self._tasks.get(tid)
                    if t is not None:
                        try:
                            self._fire(kind, t, marker)
                        except Exception:
                            log.exception("timer %s for task %s failed", kind, tid)
                if now >= next_hb:
                    next_hb = now + TICK_SECONDS
                    self._sample_heartbeats(now)
            self._flush_outbox()
            try:
                self._pump()
            except Exception:  # the dispatcher must outlive any one bad launch
                log.exception("dispatching failed")
            if self._store is not None:
                try:
                    self._link.tick(self._clock.monotonic())
                except Exception:
                    self.persist_failures += 1
                    log.exception("store tick failed")

    def _sample_heartbeats(self, now: float) -> None:
        # only tasks with a live execution: the cost must not grow with history
        for t in self._executing:
            hb = t.hb
            if hb is None or t.exec_attempt == 0:
                continue
            if hb.sample(now) and self._store is not None:
                self._outbox.append(("beat", t.snap.task_id, self._clock.now()))

    def _fire(self, kind: str, t: _Task, marker: int) -> None:
        s = t.snap
        if kind == "retry":
            if s.status is S.RETRY_WAIT and s.status_version == marker:
                self._apply(t, self._sm.mark_queued, trigger="retry:backoff_elapsed")
                heapq.heappush(self._ready, (-s.priority, next(self._seq), s.task_id))
        elif kind == "pause":
            if s.status is S.PAUSING and s.status_version == marker:
                self._apply(t, self._sm.abort_pause, reason="no checkpoint reached in time")
                if t.handle is not None:
                    t.handle.resume()
                self._warn(
                    t,
                    "pause rolled back: the task did not reach a checkpoint in time "
                    "(it keeps running)",
                )
        elif kind == "wake":
            token = t.sleeper
            if t.exec_attempt == marker and token is not None:
                token.wake()
        elif kind == "stop":
            if t.exec_attempt == marker and (s.status is S.STOPPING or t.timeout_kind is not None):
                self._stop_window_expired(t)
        elif kind == "timeout":
            if t.exec_attempt != marker or t.timeout_kind is not None or s.status in TERMINAL:
                return
            hb = t.hb
            now = self._clock.monotonic()
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
                self._arm_timeouts(t)
                return
            t.timeout_kind = fired
            if t.handle is not None:
                t.handle.request_stop(fired.value)
            self._push_timer(now + self.stop_grace, "stop", s.task_id, t.exec_attempt)

    def _stop_window_expired(self, t: _Task) -> None:
        h = t.handle
        verdict = "abandoned" if h is None else h.on_stop_timeout()
        if verdict == "gone":
            return  # its finished() report is on the way
        s = t.snap
        t.exec_attempt = 0
        self._executing.discard(t)
        t.handle = None
        t.hb = None
        self._free_slot(t)
        if verdict == "abandoned":
            t.abandoned = h
            why = (
                "did not reach a checkpoint within the stop window; "
                "thread abandoned, result unknown"
            )
            if t.timeout_kind is not None:
                why = f"{t.timeout_kind.value}: {why}"
            fail = Failure(FailureKind.LOST, why)
            self._end_attempt(t, S.LOST, fail, abandoned=True)
            if s.status is S.PAUSING:
                self._apply(t, self._sm.abort_pause, reason="stop window expired")
            if t.snap.status in OCCUPIED:
                self._apply(t, self._sm.mark_lost, reason=why)
        else:  # killed: a known outcome
            if s.status is S.STOPPING:
                fail = t.stop_failure
                self._end_attempt(t, S.STOPPED, fail)
                self._apply(
                    t,
                    self._sm.confirm_stopped,
                    failure=fail,
                    reason=t.stop_reason,
                    detail="terminated after the stop window",
                )
            else:
                kind = t.timeout_kind or FailureKind.CANCELLED
                if s.status is S.PAUSING:
                    self._apply(t, self._sm.abort_pause, reason="terminated")
                if t.snap.status is S.STARTING:
                    self._apply(t, self._sm.mark_running)
                exc = TaskTimeout(
                    _SCOPES.get(kind, "attempt"), _timeout_seconds(t.spec.timeout, kind)
                )
                fail = Failure(
                    kind, f"{exc}; process terminated", retryable=t.spec.retry.is_retryable(exc)
                )
                self._fail(t, fail)
        self._after_status(t)

    # ------------------------------------------------------------------ verbs

    def _verb(self, task_id: Any, fn: Callable[[_Task], None]) -> TaskSnapshot:
        with self._lock:
            if self._pending_starts or self._pending_finishes:
                self._settle_pending()
            t = self._task(task_id)
            fn(t)
            snap = t.snap
        self._flush_outbox()
        self._pump()
        return snap

    def start(self, task_id: Any, *, actor: str = "user") -> TaskSnapshot:
        """PENDING/BLOCKED -> QUEUED (e.g. after ``reset``). Idempotent."""
        check_text("actor", actor)

        def go(t: _Task) -> None:
            if t.snap.status in (S.QUEUED, S.STARTING, S.RUNNING):
                return
            self._raise(t, "start")
            if t.deps and t.snap.status is S.PENDING:
                self._apply(t, self._sm.mark_blocked)
                self._settle([t.snap.task_id])
            elif t.deps:
                self._settle([t.snap.task_id])
            else:
                self._release(t)

        return self._verb(task_id, go)

    def _raise(self, t: _Task, verb: str, force: bool = False) -> None:
        err = self._sm.check(t.snap, verb, force=force)
        if err is not None:
            raise err
        why = _refused(t, verb)
        if why is not None:
            raise InvalidTransition(t.snap.status, verb, (), detail=why, task_id=t.snap.task_id)

    def pause(
        self, task_id: Any, timeout: float | None = None, *, actor: str = "user", wait: bool = False
    ) -> TaskSnapshot:
        """Pause: QUEUED/RETRY_WAIT -> PAUSED at once; a running task -> PAUSING until it
        reaches a checkpoint (-> PAUSED) or ``timeout`` runs out (-> back to RUNNING with a
        warning). Idempotent on PAUSING/PAUSED."""
        grace = self.pause_grace if timeout is None else check_seconds("timeout", timeout)
        check_text("actor", actor)

        def go(t: _Task) -> None:
            if t.snap.status in (S.PAUSING, S.PAUSED):
                return
            self._raise(t, "pause")
            self._apply(t, self._sm.request_pause, actor=actor)
            if t.snap.status is S.PAUSING:
                self._push_timer(
                    self._clock.monotonic() + grace, "pause", t.snap.task_id, t.snap.status_version
                )
                if t.handle is not None:
                    self._deliver_pause(t)

        snap = self._verb(task_id, go)
        if wait:
            return self._wait_settled(task_id, {S.PAUSING}, grace + 5)
        return snap

    def _deliver_pause(self, t: _Task) -> None:
        h = t.handle
        assert h is not None
        if h.supports_pause:
            h.request_pause()
            return
        self._apply(t, self._sm.abort_pause, reason=f"the {t.snap.executor} executor cannot pause")
        self._warn(
            t, f"pause rolled back: the {t.snap.executor} executor cannot pause a running task"
        )

    def resume(self, task_id: Any, *, actor: str = "user") -> TaskSnapshot:
        """PAUSED -> RUNNING (paused in place) or -> QUEUED (paused before it started);
        PAUSING -> RUNNING (the pause is withdrawn). Idempotent on RUNNING/QUEUED."""
        check_text("actor", actor)

        def go(t: _Task) -> None:
            st = t.snap.status
            if st in (S.RUNNING, S.QUEUED, S.STARTING):
                return
            if st is S.PAUSING:
                self._apply(t, self._sm.abort_pause, reason="resumed before the pause took effect")
                if t.handle is not None:
                    t.handle.resume()
                return
            self._raise(t, "resume")
            self._apply(t, self._sm.resume, actor=actor)
            if t.snap.status is S.QUEUED:
                heapq.heappush(self._ready, (-t.snap.priority, next(self._seq), t.snap.task_id))
            elif t.handle is not None:
                t.handle.resume()

        return self._verb(task_id, go)

    def stop(
        self,
        task_id: Any,
        graceful: bool = True,
        timeout: float | None = None,
        *,
        actor: str = "user",
        reason: str | None = None,
        wait: bool = False,
    ) -> TaskSnapshot:
        """Stop. Not running yet -> STOPPED at once. Running -> STOPPING: the task stops at
        its next checkpoint (-> STOPPED); if it does not within ``timeout`` seconds
        (``graceful=False``: at once) a thread is abandoned (-> LOST, result unknown) and a
        process is terminated (-> STOPPED). Idempotent on STOPPING/STOPPED."""
        seconds = check_seconds("timeout", timeout)
        check_text("actor", actor)
        check_reason(reason)
        grace = 0.0 if not graceful else (self.stop_grace if seconds is None else seconds)
        return self._stop(task_id, grace, actor=actor, reason=reason, wait=wait)

    def _stop(
        self,
        task_id: Any,
        grace: float,
        *,
        actor: str,
        reason: str | None,
        wait: bool,
        cancel: bool = False,
        kind: FailureKind | None = None,
    ) -> TaskSnapshot:
        def go(t: _Task) -> None:
            st = t.snap.status
            if st in (S.STOPPING, S.STOPPED) or (cancel and st is S.CANCELLED):
                return
            if cancel:
                self._raise(t, "cancel")
                self._apply(
                    t,
                    self._sm.cancel,
                    reason=reason or "cancelled",
                    actor=actor,
                    kind=kind or FailureKind.CANCELLED,
                )
            else:
                self._raise(t, "stop")
                self._apply(t, self._sm.request_stop, actor=actor, reason=reason)
            t.stop_reason = reason or ("cancelled" if cancel else f"stopped by {actor}")
            t.stop_failure = (
                Failure(kind or FailureKind.CANCELLED, t.stop_reason) if cancel else None
            )
            if t.snap.status is S.STOPPING:
                if t.handle is not None:
                    t.handle.request_stop(t.stop_reason)
                self._push_timer(
                    self._clock.monotonic() + grace, "stop", t.snap.task_id, t.exec_attempt
                )
            elif t.handle is not None:
                # stopped while paused in place: wake the checkpoint so the thread exits
                t.handle.request_stop(t.stop_reason)
            self._after_status(t)

        snap = self._verb(task_id, go)
        if wait:
            return self._wait_settled(task_id, {S.STOPPING}, grace + 5)
        return snap

    def cancel(
        self,
        task_id: Any,
        reason: str = "cancelled",
        *,
        actor: str = "orchestrator",
        kind: FailureKind | None = None,
    ) -> TaskSnapshot:
        """Cascade cancel (what the orchestration layer does). Idempotent. ``kind``:
        the Failure.kind recorded (default cancelled; pipelines pass dependency_failed)."""
        check_text("actor", actor)
        check_reason(reason)
        return self._stop(
            task_id, self.stop_grace, actor=actor, reason=reason, wait=False, cancel=True, kind=kind
        )

    # ------------------------------------------------------------ pipeline runs

    def hold_run(self, run_id: str, held: bool = True) -> None:
        """Stop (``held=True``) or restart dispatching the queued tasks of a pipeline run.
        Held tasks stay QUEUED and take no slot; running ones are not touched."""
        with self._lock:
            if held:
                self._held_runs.add(run_id)
                return
            self._held_runs.discard(run_id)
            for item in self._parked.pop(run_id, ()):
                heapq.heappush(self._ready, item)
        self._pump()

    def hold_run_on(self, run_id: str, statuses: Iterable[TaskStatus | str]) -> None:
        """Hold the run at once (under the controller lock) as soon as one of its tasks
        enters one of ``statuses``: fail-fast without a window for another dispatch."""
        with self._lock:
            self._hold_on[run_id] = frozenset(TaskStatus(s) for s in statuses)

    def set_run_limit(self, tag: str, limit: int | None) -> None:
        """A concurrency limit for ``tag`` beside the policy's (e.g. a map's
        max_parallel); None removes it."""
        with self._lock:
            if limit is None:
                self._run_limits.pop(tag, None)
            else:
                self._run_limits[tag] = int(limit)
        self._pump()

    def forget_run(self, run_id: str) -> None:
        """Drop a finished run's scheduling state (holds, parked entries)."""
        with self._lock:
            self._held_runs.discard(run_id)
            self._hold_on.pop(run_id, None)
            for item in self._parked.pop(run_id, ()):
                heapq.heappush(self._ready, item)

    def record_event(self, event: Event) -> None:
        """Publish an event from a layer above (pipelines). One that names a task of this
        controller is also kept with that task (``events(task_id)``)."""
        if not isinstance(event, Event):
            raise ConfigurationError(f"record_event() needs an Event, got {event!r}")
        with self._lock:
            t = self._tasks.get(event.task_id) if event.task_id else None
            if t is not None:
                self._event(t, event)
            else:
                self._outbox.append(event)
        self._flush_outbox()

    def new_event_id(self) -> str:
        """A fresh event id of this controller's sequence."""
        return self._new_event_id()

    def retry(self, task_id: Any, force: bool = False, *, actor: str = "user") -> TaskSnapshot:
        """FAILED/STOPPED/CANCELLED/LOST -> QUEUED; the attempt history is kept.
        ``force=True`` grants an attempt beyond ``max_attempts``. Idempotent on
        QUEUED/STARTING/RUNNING."""
        check_text("actor", actor)

        def go(t: _Task) -> None:
            if t.snap.status in (S.QUEUED, S.STARTING, S.RUNNING):
                return
            self._raise(t, "retry", force)
            self._apply(t, self._sm.retry, force=force, actor=actor)
            t.result = None
            t.exception = None
            t.abandoned = None
            t.live = None
            heapq.heappush(self._ready, (-t.snap.priority, next(self._seq), t.snap.task_id))

        return self._verb(task_id, go)

    def skip(self, task_id: Any, reason: str | None = None, *, actor: str = "user") -> TaskSnapshot:
        """PENDING/BLOCKED/QUEUED -> SKIPPED. Idempotent."""
        check_text("actor", actor)
        check_reason(reason)

        def go(t: _Task) -> None:
            if t.snap.status is S.SKIPPED:
                return
            self._raise(t, "skip")
            self._apply(t, self._sm.skip, reason=reason, actor=actor)
            self._after_status(t)

        return self._verb(task_id, go)

    def reset(self, task_id: Any, *, confirm: bool = False, actor: str = "user") -> TaskSnapshot:
        """Back to PENDING with the attempt history cleared. Destroys history: needs
        ``confirm=True``. Refused while an execution is alive (stop it first)."""
        check_text("actor", actor)
        if confirm is not True:
            raise ConfigurationError(
                "reset() erases the attempt history; call reset(id, confirm=True)"
            )

        def go(t: _Task) -> None:
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
            self._apply(t, self._sm.reset, actor=actor)
            t.attempts.clear()
            t.result = None
            t.exception = None
            t.live = None
            if self._store is not None:
                self._outbox.append(("clear_attempts", t.snap.task_id))

        return self._verb(task_id, go)

    def force_transition(
        self, task_id: Any, to: TaskStatus | str, *, reason: str, actor: str
    ) -> TaskSnapshot:
        """The escape hatch: set any status, bypassing the table. Needs actor and reason;
        writes an AdminOverride audit event and marks the snapshot ``overridden``."""
        if isinstance(actor, str) and isinstance(reason, str):
            # (empty ones are refused by the state machine, with its own message)
            check_text("actor", actor, empty=True)
            check_text("reason", reason, empty=True)
        try:
            target = TaskStatus(to)
        except ValueError:
            raise ConfigurationError(f"unknown status {to!r}") from None

        def go(t: _Task) -> None:
            before = t.snap.status
            self._apply(t, self._sm.force_transition, target, actor=actor, reason=reason)
            self._event(
                t,
                AdminOverride(
                    event_id=self._new_event_id(),
                    at=self._clock.now(),
                    task_id=t.snap.task_id,
                    from_status=before,
                    to_status=target,
                    actor=actor,
                    reason=reason,
                    version=t.snap.status_version,
                ),
            )
            if target in TERMINAL and t.handle is not None:
                t.handle.request_stop(f"forced to {target}")
            if target is S.QUEUED:
                heapq.heappush(self._ready, (-t.snap.priority, next(self._seq), t.snap.task_id))
            self._after_status(t)

        return self._verb(task_id, go)

    def wait(self, task_id: Any, timeout: float | None = None) -> TaskSnapshot:
        """Block until the task is terminal. TimeoutError after ``timeout``; no side effects."""
        check_seconds("timeout", timeout)
        t = self._task(task_id)
        # real time, like the Condition underneath (a FakeClock does not move by itself)
        deadline = None if timeout is None else time.monotonic() + timeout
        pending_starts, pending_finishes = self._pending_starts, self._pending_finishes

        def woken() -> bool:
            # also wake for reports a worker queued because this thread held the lock:
            # they are settled below, not left to the dispatcher's tick
            return t.snap.status in TERMINAL or bool(pending_finishes or pending_starts)

        while True:
            # Reports queued while this thread held the lock (a worker never waits for
            # it) are settled here, and what they free is launched, before looking.
            self._catch_up()
            with self._lock:
                done = t.snap.status in TERMINAL
                if done:
                    if t.live is None or not t.exec_attempt:
                        snap = t.snap  # what get() returns, without taking the lock again
                        break
                    snap = None
                    break
                if pending_finishes or pending_starts:
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    snap = None
                    break
                awaited = self._awaited
                awaited[t] = awaited.get(t, 0) + 1
                try:
                    self._terminal.wait_for(woken, left)
                finally:
                    if awaited[t] == 1:
                        del awaited[t]
                    else:
                        awaited[t] -= 1
        if pending_finishes or pending_starts:
            self._catch_up()  # queued while this thread held the lock above
        if done and snap is not None:
            return snap
        if not done:
            raise TimeoutError(
                f"task {t.snap.task_id} ({t.snap.name}) still {t.snap.status} after {timeout}s"
            )
        return self.get(task_id)

    def _wait_settled(
        self, task_id: Any, transient: set[TaskStatus], timeout: float
    ) -> TaskSnapshot:
        """Wait (really: on a condition, woken by status changes) until the task leaves
        ``transient`` states."""
        t = self._task(task_id)
        ev = threading.Event()

        def on(e: Event) -> None:
            if e.task_id == t.snap.task_id:
                ev.set()

        unsub = self._bus.subscribe(on, (TaskStatusChanged,))
        try:
            deadline = self._clock.monotonic() + timeout
            while t.snap.status in transient:
                left = deadline - self._clock.monotonic()
                if left <= 0:
                    break
                ev.wait(min(left, 0.5))
                ev.clear()
        finally:
            unsub()
        return self.get(task_id)

    # -------------------------------------------------------- control plane

    def can(self, task_id: Any, verb: str, *, force: bool = False) -> tuple[bool, str | None]:
        """``(True, None)`` if ``verb`` would change the task now, else ``(False, why)``.
        The predicates the UI binds its buttons to."""
        if verb not in VERBS:
            return False, f"unknown verb {verb!r}; known verbs: {', '.join(VERBS)}"
        with self._lock:
            try:
                t = self._task(task_id)
            except TaskNotFound as exc:
                return False, str(exc)
            ok, why = self._sm.can(t.snap, verb, force=force)
            if ok and verb == "reset" and t.exec_attempt:
                return False, "its execution is still alive; stop it first"
            if ok:
                refused = _refused(t, verb)
                if refused is not None:
                    return False, refused
            return ok, why

    def can_all(self, task_id: Any) -> dict[str, tuple[bool, str | None]]:
        """``can`` for every control-plane verb (``retry`` as a human decision: forced)."""
        return {v: self.can(task_id, v, force=(v == "retry")) for v in CONTROL_VERBS}

    def apply(
        self, task_id: Any, verb: Any, *, actor: str = "ui", args: Any = None
    ) -> tuple[bool, str | None]:
        """The one entry for the control plane (widget clicks, store commands, REST):
        a task id, a verb and plain-data options (``timeout``, ``graceful``,
        ``reason``), never code. Never raises for bad input."""
        if not isinstance(verb, str) or verb not in CONTROL_VERBS:
            return False, f"unknown verb {verb!r}; allowed: {', '.join(CONTROL_VERBS)}"
        if not isinstance(task_id, str):
            return False, f"task_id must be a string, got {type(task_id).__name__}"
        opts, bad = _control_args(args)
        if bad:
            return False, bad
        key = opts.get("request_key")
        if key is not None:
            # the same click may arrive twice: over the widget's comm and, when the
            # kernel's main thread is busy, through the server and the store
            with self._lock:
                if key in self._request_keys:
                    return True, "already applied"
                self._request_keys[key] = None
                while len(self._request_keys) > 10_000:
                    self._request_keys.pop(next(iter(self._request_keys)))
        ok, why = self.can(task_id, verb, force=(verb == "retry"))
        if not ok:
            if key is not None:
                with self._lock:
                    self._request_keys.pop(key, None)
            return False, why
        try:
            if verb == "pause":
                self.pause(task_id, opts.get("timeout"), actor=actor)
            elif verb == "resume":
                self.resume(task_id, actor=actor)
            elif verb == "stop":
                self.stop(
                    task_id,
                    opts.get("graceful", True),
                    opts.get("timeout"),
                    actor=actor,
                    reason=opts.get("reason"),
                )
            elif verb == "retry":
                self.retry(task_id, force=True, actor=actor)
            else:
                self.skip(task_id, reason=opts.get("reason"), actor=actor)  # who: the outcome
        except Exception as exc:  # raced with another change: report, do not raise
            return False, str(exc)
        return True, None

    def can_pause(self, task_id: Any) -> tuple[bool, str | None]:
        return self.can(task_id, "pause")

    def can_resume(self, task_id: Any) -> tuple[bool, str | None]:
        return self.can(task_id, "resume")

    def can_stop(self, task_id: Any) -> tuple[bool, str | None]:
        return self.can(task_id, "stop")

    def can_retry(self, task_id: Any, force: bool = False) -> tuple[bool, str | None]:
        return self.can(task_id, "retry", force=force)

    def can_skip(self, task_id: Any) -> tuple[bool, str | None]:
        return self.can(task_id, "skip")

    def can_cancel(self, task_id: Any) -> tuple[bool, str | None]:
        return self.can(task_id, "cancel")

    # ---------------------------------------------------------------- queries

    def get(self, task_id: Any) -> TaskSnapshot:
        """The task's snapshot, with the latest progress."""
        self._catch_up()
        with self._lock:
            t = self._task(task_id)
            snap = t.snap
            if t.live is not None and t.exec_attempt:
                snap = snap.evolve(progress=self._live_progress(t))
            return snap

    def list_tasks(
        self,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        tag: str | None = None,
        name_prefix: str | None = None,
        pipeline_run_id: str | None = None,
        limit: int | None = None,
        ids: Iterable[str] | None = None,
    ) -> list[TaskSnapshot]:
        """Snapshots, newest first, filtered."""
        statuses = _status_set(status)
        if limit is not None and (check_int64("limit", limit) < 0):
            raise ConfigurationError(f"limit must be an int >= 0, got {limit!r}")
        self._catch_up()
        with self._lock:
            if ids is not None:
                pool = [self._tasks[i] for i in ids if i in self._tasks]
            else:
                pool = list(self._tasks.values())
            out: list[TaskSnapshot] = []
            for t in reversed(pool):
                s = t.snap
                if statuses is not None and s.status not in statuses:
                    continue
                if tag is not None and tag not in s.tags:
                    continue
                if name_prefix is not None and not s.name.startswith(name_prefix):
                    continue
                if pipeline_run_id is not None and s.pipeline_run_id != pipeline_run_id:
                    continue
                if t.live is not None and t.exec_attempt:
                    s = s.evolve(progress=self._live_progress(t))
                out.append(s)
                if limit is not None and len(out) >= limit:
                    break
            return out

    def stats(self, **filters: Any) -> dict[str, int]:
        """Counts per status value (every status present, zeros included)."""
        counts = dict.fromkeys((s.value for s in TaskStatus), 0)
        for s in self.list_tasks(**filters):
            counts[s.status.value] += 1
        return counts

    def history(self, task_id: Any) -> list[Transition]:
        with self._lock:
            t = self._task(task_id)
            return _transitions(t.snap.task_id, t.history)

    def events(
        self, task_id: Any, since: Any = None, types: Iterable[type[Event]] | None = None
    ) -> list[Event]:
        """Recorded events of one task, oldest first: status changes, attempt failures,
        warnings, outputs, overrides. (Progress and heartbeats are transient and logs
        are in ``logs``.)"""
        with self._lock:
            t = self._task(task_id)
            evs: list[Event] = [
                _status_event(tr, f"{tr.task_id}:v{tr.version}")
                for tr in _transitions(t.snap.task_id, t.history)
            ]
            evs.extend(t.extra_events or ())
        evs.sort(key=lambda e: e.at)
        if since is not None:
            evs = [e for e in evs if e.at >= since]
        if types is not None:
            tt = tuple(types)
            evs = [e for e in evs if isinstance(e, tt)]
        return evs

    def attempts(self, task_id: Any) -> list[AttemptRecord]:
        with self._lock:
            return list(self._task(task_id).attempts)

    def logs(self, task_id: Any, limit: int | None = None) -> list[LogRecord]:
        """The lines the task printed or logged (newest ``limit`` if given)."""
        with self._lock:
            t = self._task(task_id)
            lines = list(t.logs or ())
        return lines[-limit:] if limit else lines

    def result(self, task_id: Any) -> Any:
        with self._lock:
            return self._task(task_id).result

    def exception(self, task_id: Any) -> BaseException | None:
        with self._lock:
            return self._task(task_id).exception

    def running(self, task_id: Any) -> bool:
        """Is an execution of this task still alive (an abandoned thread counts)?"""
        with self._lock:
            t = self._task(task_id)
            h = t.handle or t.abandoned
            return bool(h is not None and h.running)

    def handle(self, task_id: str) -> Any:
        from chongming_nb.control.handle import TaskHandle

        self._task(task_id)
        return TaskHandle(self, task_id)

    def watch(
        self, callback: Callable[[Event], None], filter: EventFilter = None
    ) -> Callable[[], None]:
        """Call ``callback(event)`` for every event from now on (from the recorder
        thread, after the event is recorded; earlier history is in ``events(id)``).
        Returns an unsubscribe function. A failing callback is counted in
        ``subscriber_failures`` and never affects a task."""
        return self._bus.subscribe(callback, filter)

    def _observe_run(self, run_id: str, observer: RunObserver) -> Callable[[], None]:
        """For pipeline runs: ``observer(task_id, version, status)`` on every status
        change of the run's tasks, from the recorder thread (cheaper than ``watch``:
        no event is built for it)."""
        return self._bus.observe_run(run_id, observer)

    def add_hook(self, hook: Any) -> None:
        """Lifecycle plugin: an object with any of on_start, on_success, on_failure,
        on_retry, on_cancel (each gets the event). Failures are isolated and counted."""
        if not any(
            hasattr(hook, n)
            for n in ("on_start", "on_success", "on_failure", "on_retry", "on_cancel")
        ):
            raise ConfigurationError(
                "a hook needs at least one of on_start, on_success, on_failure, on_retry, on_cancel"
            )
        self._bus.add_hook(hook)

    @property
    def subscriber_failures(self) -> int:
        return self._bus.subscriber_failures

    @property
    def hook_failures(self) -> int:
        return self._bus.hook_failures

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event so far is recorded (and persisted) and published."""
        self._flush_outbox()
        return self._bus.flush(timeout)

    def graph(self) -> dict[str, Any]:
        """Nodes and edges of everything submitted, including the implicit DAG built cell
        by cell with ``after=``."""
        with self._lock:
            nodes = [
                {
                    "id": t.snap.task_id,
                    "name": t.snap.name,
                    "status": t.snap.status.value,
                    "pipeline_run_id": t.snap.pipeline_run_id,
                }
                for t in self._tasks.values()
            ]
            edges = [(d, t.snap.task_id) for t in self._tasks.values() for d in t.deps]
        return {"nodes": nodes, "edges": edges}

    # ------------------------------------------------------------- dataframes

    def snapshots_df(self, **filters: Any) -> Any:
        """One row per task, newest first; filters as ``list_tasks`` plus ``since`` /
        ``until`` on ``created_at`` (since <= created_at < until)."""
        from chongming_nb.frames import between, snapshots_frame

        since, until = filters.pop("since", None), filters.pop("until", None)
        return between(snapshots_frame(self.list_tasks(**filters)), "created_at", since, until)

    def attempts_df(self, **filters: Any) -> Any:
        """One row per attempt of the tasks matching ``filters`` (``since`` / ``until``
        on ``started_at``), oldest task first."""
        from chongming_nb.frames import attempts_frame, between

        since, until = filters.pop("since", None), filters.pop("until", None)
        snaps = self.list_tasks(**filters)
        with self._lock:
            recs = [r for s in reversed(snaps) for r in self._tasks[s.task_id].attempts]
            names = {s.task_id: s.name for s in snaps}
        return between(attempts_frame(recs, names), "started_at", since, until)

    def transitions_df(self, **filters: Any) -> Any:
        """One row per status transition of the tasks matching ``filters`` (``since``
        / ``until`` on ``at``), oldest task first."""
        from chongming_nb.frames import between, history_rows_frame

        since, until = filters.pop("since", None), filters.pop("until", None)
        snaps = self.list_tasks(**filters)
        with self._lock:
            # the history rows themselves (immutable tuples; a list copy per task)
            tasks = [(s.task_id, list(self._tasks[s.task_id].history)) for s in reversed(snaps)]
            names = {s.task_id: s.name for s in snaps}
        return between(history_rows_frame(tasks, names), "at", since, until)

    def events_df(self, **filters: Any) -> Any:
        """The status changes of the tasks matching ``filters``: ``transitions_df``."""
        return self.transitions_df(**filters)

    # ------------------------------------------------------------------ store

    def _persist(self, batch: list[Any]) -> None:
        """Recorder thread: write a batch to the store, in order, grouped."""
        store = self._store
        if store is None:
            return
        from chongming_nb.control.persistence import write_batch

        try:
            self.persist_failures += write_batch(store, batch)
        except Exception:
            self.persist_failures += 1
            log.exception("store write failed; the task goes on")

    def reconcile(self, on_orphan: str = "fail") -> dict[str, list[str]]:
        """Settle tasks in the store whose owner is gone or whose lease expired:
        ``fail`` (default) -> LOST; ``requeue`` -> run again here when registered by
        name with a recorded call; ``manual`` -> only report them."""
        if self._store is None:
            raise ConfigurationError("reconcile() needs a controller with a store")
        return self._link.reconcile(on_orphan)

    def verify(self, task_id: Any) -> tuple[bool, str]:
        """Replay the task's transitions (from the store when there is one) and check
        that they rebuild its snapshot."""
        from chongming_nb.control.persistence import verify

        tid = getattr(task_id, "id", task_id)
        if self._store is not None:
            self.flush()
            snap = self._store.get(tid)
            if snap is None:
                raise TaskNotFound(str(tid))
            return verify(self._store.history(tid), snap)
        with self._lock:
            t = self._task(tid)
            return verify(_transitions(t.snap.task_id, t.history), t.snap)

    # --------------------------------------------------------------- lifecycle

    def close(self, timeout: float = 5.0) -> None:
        """Stop the background threads (running tasks are not stopped)."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._flush_outbox()
        self._bus.flush(timeout)
        self._bus.close()
        for ex in self._executors.values():
            try:
                ex.shutdown()
            except Exception:
                log.exception("executor shutdown failed")

    def board(self, **filters: Any) -> Any:
        """A live table of tasks (a widget) for the notebook."""
        from chongming_nb.control import display

        return display.board(self, **filters)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        from chongming_nb.control import display

        return display.bundle(self, self, kind="board", title="tasks")

    def __repr__(self) -> str:
        counts = {k: v for k, v in self.stats().items() if v}
        return f"<Controller tasks={sum(counts.values())} {counts}>"


class _UpstreamView(Mapping[Any, Any]):
    """What ``when=`` sees: upstream results by handle, node, name or id."""

    def __init__(self, ctl: Controller, t: _Task) -> None:
        self._ctl = ctl
        self._t = t

    def __getitem__(self, key: Any) -> Any:
        return self._ctl._upstream_value(self._t, key)

    def __iter__(self) -> Any:
        return iter(self._t.deps)

    def __len__(self) -> int:
        return len(self._t.deps)


_SCOPES = {
    FailureKind.TIMEOUT_START: "start",
    FailureKind.TIMEOUT_ATTEMPT: "attempt",
    FailureKind.TIMEOUT_IDLE: "idle",
}


def _refused(t: _Task, verb: str) -> str | None:
    """Why ``t``'s executor refuses ``verb`` although its state allows it (e.g. a loop in
    a cell cannot be retried: control/loops.py), or None."""
    refuse = getattr(t.executor, "refuse", None)
    return refuse(verb) if callable(refuse) else None


def _timeout_seconds(t: Timeout, kind: FailureKind) -> float:
    v = {
        FailureKind.TIMEOUT_START: t.start,
        FailureKind.TIMEOUT_ATTEMPT: t.per_attempt,
        FailureKind.TIMEOUT_IDLE: t.idle,
    }.get(kind)
    return float(v or 0)


#: A task's history keeps statuses as their plain string values (see _Task.history).
_VALUE_OF: dict[TaskStatus, str] = {s: s.value for s in TaskStatus}
_STATUS_OF: dict[str, TaskStatus] = {s.value: s for s in TaskStatus}


def _transitions(task_id: str, rows: list[tuple[Any, ...]]) -> list[Transition]:
    """A task's history rows as the Transition objects they were made from."""
    status = _STATUS_OF
    return [
        Transition(task_id, status[f], status[to], trigger, actor, reason, at, version, over)
        for f, to, trigger, actor, reason, at, version, over in rows
    ]


def _status_event(tr: Transition, event_id: str) -> TaskStatusChanged:
    """The event that publishes one accepted transition."""
    return TaskStatusChanged(
        event_id=event_id,
        at=tr.at,
        task_id=tr.task_id,
        from_status=tr.from_status,
        to_status=tr.to_status,
        trigger=tr.trigger,
        actor=tr.actor,
        reason=tr.reason,
        version=tr.version,
    )


def _describe(value: Any) -> dict[str, Any] | None:
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
            out["value"] = value
    return out


def _control_args(args: Any) -> tuple[dict[str, Any], str | None]:
    """Validate the plain-data options a control-plane verb may carry."""
    if args is None:
        return {}, None
    if not isinstance(args, Mapping):
        return {}, f"args must be a mapping, got {type(args).__name__}"
    out: dict[str, Any] = {}
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


def _status_set(status: Any) -> frozenset[TaskStatus] | None:
    if status is None:
        return None
    if isinstance(status, str):
        status = [status]
    try:
        return frozenset(TaskStatus(s) for s in status)
    except ValueError as exc:
        raise ConfigurationError(
            f"{exc}; statuses are {', '.join(s.value for s in TaskStatus)}"
        ) from None


#: Argument types that are JSON as they are (the common case needs no trial encoding).
_PLAIN_JSON = frozenset({str, int, float, bool, type(None)})


def _recorded_call(task_id: str, now: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A TaskCall record when the arguments are plain JSON (so ``reconcile(requeue)`` can
    run the task again by name); None otherwise. A name and data, never code."""
    plain = _PLAIN_JSON
    # once per submit with a store: scalars (and no arguments at all) are JSON without
    # a trial json.dumps; anything else is tried
    if not all(type(a) in plain for a in args) or not all(
        type(k) is str and type(v) in plain for k, v in kwargs.items()
    ):
        try:
            json.dumps([list(args), kwargs])
        except (TypeError, ValueError):
            return None
    rec = EventRecord(
        event_id=f"call-{task_id}",
        task_id=task_id,
        at=now,
        type="TaskCall",
        payload={"args": list(args), "kwargs": kwargs},
    )
    return ("record", rec)

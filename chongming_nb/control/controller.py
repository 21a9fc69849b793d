"""The Controller: submit, schedule, control and observe tasks inside the kernel.

A façade: it builds the rooms, wires them and forwards each public method to the room
that owns it. The rooms, what each owns and the path of one click through them are in
docs/architecture.md; the locking rules in the docstring of ``control/book.py``.

Invariants (checked by the tests):
* only the StateMachine changes a status (``TaskBook.apply``); rooms pick the event;
* a task holds a slot from STARTING until its execution ends or is abandoned, pause
  included (pause does not free a slot);
* an execution's late report (after it was abandoned, or after its task was forced or
  stopped while paused) never rewrites a recorded outcome.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chongming_nb.control import display
from chongming_nb.control.admission import Admission, concurrency_policy
from chongming_nb.control.attempts import Attempts
from chongming_nb.control.book import TaskBook, TaskEntry
from chongming_nb.control.bus import EventBus, EventFilter, RunObserver
from chongming_nb.control.dependencies import Dependencies
from chongming_nb.control.dispatcher import Dispatcher
from chongming_nb.control.handle import TaskHandle, TaskRef
from chongming_nb.control.intake import NO_DEPS, Intake
from chongming_nb.control.launcher import Launcher
from chongming_nb.control.lifecycle import Lifecycle, OwnerLeases, check_settings
from chongming_nb.control.ownership import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_LEASE_SECONDS,
    kernel_id,
    this_process,
)
from chongming_nb.control.persistence import StoreLink
from chongming_nb.control.queries import Queries, TaskLister, status_set
from chongming_nb.control.recovery import ConvergePlan
from chongming_nb.control.spec import TaskRegistry
from chongming_nb.control.timers import TimerQueue, TimerSeconds
from chongming_nb.control.verbs import Verbs
from chongming_nb.core.clock import Clock
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.events import Event
from chongming_nb.core.models import AttemptRecord, FailureKind, TaskSnapshot, Transition
from chongming_nb.core.policies import (
    BucketPolicy,
    ConcurrencyPolicy,
    HistoryLimits,
    RetentionPolicy,
    RetryPolicy,
    Timeout,
)
from chongming_nb.core.state_machine import CONTROL_VERBS
from chongming_nb.core.states import TaskStatus
from chongming_nb.core.validation import check_seconds
from chongming_nb.pictures import Timeline, from_source
from chongming_nb.runtime.clock import SYSTEM_CLOCK
from chongming_nb.runtime.executors import Executor
from chongming_nb.stores.protocol import LogRecord, TaskQuery, TaskStore

if TYPE_CHECKING:
    import pandas as pd


class Controller(TaskLister):
    """Runs tasks in the background of the kernel and lets you control them.

    ``store``: None keeps everything in memory; a TaskStore (or a URL/path for
    ``open_store``) makes every transition durable and lets other processes (the
    JupyterLab sidebar, the ``chongming`` CLI) see and control the tasks.
    ``max_parallel``: how many tasks run at once (default 4), a shortcut for
    ``concurrency=ConcurrencyPolicy(max_parallel=...)``.
    """

    def __init__(
        self,
        store: TaskStore | str | Path | None = None,
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
        retention: RetentionPolicy | None = None,
        max_parallel: int | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        history: HistoryLimits | None = None,
    ) -> None:
        policy = concurrency_policy(concurrency, max_parallel)
        check_settings(retention, history, stop_grace, pause_grace, lease_seconds)
        self._clock: Clock = clock or SYSTEM_CLOCK
        if isinstance(store, str | Path):
            from chongming_nb.stores import open_store

            store = open_store(str(store))
        if store is not None and owner is None:
            # every controller with a store has an owner; in a kernel, the owner id names
            # the kernel, so the Tasks sidebar files these tasks under their notebook
            owner = str(this_process(kernel_id()))
        self.owner = owner
        self.lease_seconds = float(lease_seconds)
        self.persist_failures = 0
        self._store: TaskStore | None = store
        self._bus = bus = EventBus()
        self._book = book = TaskBook(self._clock, bus, store)
        #: what each task keeps (log lines in memory and in the store, failure texts)
        self.history_limits = book.limits = history or HistoryLimits()
        self._link: StoreLink | None = None
        leases: OwnerLeases | None = None
        if store is not None:
            self._link = StoreLink(self, book, store, lease_seconds=lease_seconds)
            bus.persist_with(self._link.persist)
            leases = OwnerLeases(self._link, owner, lease_seconds)
            leases.beat_owner()
        self._leases = leases
        self._timers = timers = TimerQueue(book, float(stop_grace), float(pause_grace))
        self._admission = admission = Admission(book, policy, buckets)
        self._deps = deps = Dependencies(book, admission, timers)
        self._attempts = attempts = Attempts(book, admission, deps, timers, rng or random.Random())
        root = Path(artifacts_root) if artifacts_root is not None else None
        self._launcher = launcher = Launcher(
            book, admission, deps, attempts, timers, executor, root, leases
        )
        lease = timedelta(seconds=self.lease_seconds) if leases is not None and owner else None
        self._intake = Intake(book, admission, deps, launcher, owner, lease)
        self.registry: TaskRegistry = self._intake.registry
        self._queries = queries = Queries(book, attempts)
        self._verbs = Verbs(book, admission, deps, attempts, launcher, timers, queries)
        tick = leases.safe_tick if leases is not None else None
        self._dispatcher = Dispatcher(book, timers, admission, deps, attempts, launcher, tick)
        self._life = Lifecycle(
            book, bus, attempts, self._verbs, queries, launcher, self._dispatcher, self._link, owner
        )
        self._dispatcher.start()
        subscribe = getattr(self._clock, "subscribe", None)
        if callable(subscribe):
            subscribe(self._dispatcher.poke)
        if retention is not None and store is not None:
            self.prune(timedelta(days=retention.days), status=retention.status)

    # ------------------------------------------------------------- settings

    @property
    def store(self) -> TaskStore | None:
        return self._store

    @property
    def concurrency(self) -> ConcurrencyPolicy:
        return self._admission.concurrency

    @property
    def buckets(self) -> BucketPolicy | None:
        return self._admission.buckets

    @property
    def artifacts_root(self) -> Path | None:
        return self._launcher.artifacts_root

    stop_grace = TimerSeconds(
        "Seconds a stop (or a fired timeout) gives its task to reach a checkpoint, "
        "before a thread is abandoned and a process terminated."
    )
    pause_grace = TimerSeconds(
        "Seconds a pause may take to reach a checkpoint before it is rolled back."
    )

    # --------------------------------------------------------------- submission

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        after: Iterable[Any] | Any = NO_DEPS,
        name: str | None = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        retry: RetryPolicy | int | None = None,
        timeout: Timeout | float | None = None,
        executor: str | Executor | None = None,
        idempotency_key: str | None = None,
        bucket_key: str | None = None,
        delay: float | None = None,
        not_before: datetime | None = None,
        **kwargs: Any,
    ) -> TaskHandle:
        """Start ``fn(ctx, *args, **kwargs)`` in the background; returns a TaskHandle at once.

        ``after=`` takes handles or task ids: the task waits BLOCKED until they all
        succeed, and is cancelled (dependency_failed) if one does not.
        ``delay=`` seconds or ``not_before=`` a datetime: it waits BLOCKED, slotless, until then.
        """
        task_id = self._intake.submit(
            fn,
            args,
            kwargs,
            after=after,
            name=name,
            tags=tags,
            priority=priority,
            retry=retry,
            timeout=timeout,
            executor=executor,
            idempotency_key=idempotency_key,
            bucket_key=bucket_key,
            start=None if delay is None and not_before is None else (delay, not_before),
        )
        return TaskHandle(self, task_id)

    # ------------------------------------------------------------------ verbs

    def start(self, task_id: TaskRef, *, actor: str = "user") -> TaskSnapshot:
        """PENDING/BLOCKED -> QUEUED (e.g. after ``reset``). Idempotent."""
        return self._verbs.start(task_id, actor=actor)

    def pause(
        self,
        task_id: TaskRef,
        timeout: float | None = None,
        *,
        actor: str = "user",
        wait: bool = False,
    ) -> TaskSnapshot:
        """Pause: QUEUED/RETRY_WAIT -> PAUSED at once; a running task -> PAUSING until it
        reaches a checkpoint (-> PAUSED) or ``timeout`` runs out (-> back to RUNNING with a
        warning). Idempotent on PAUSING/PAUSED."""
        seconds = check_seconds("timeout", timeout)
        grace = self.pause_grace if seconds is None else seconds
        return self._verbs.pause(task_id, grace, actor=actor, wait=wait)

    def resume(self, task_id: TaskRef, *, actor: str = "user") -> TaskSnapshot:
        """PAUSED -> RUNNING (paused in place) or -> QUEUED (paused before it started);
        PAUSING -> RUNNING (the pause is withdrawn). Idempotent on RUNNING/QUEUED."""
        return self._verbs.resume(task_id, actor=actor)

    def stop(
        self,
        task_id: TaskRef,
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
        grace = 0.0 if not graceful else (self.stop_grace if seconds is None else seconds)
        return self._verbs.stop(task_id, grace, actor=actor, reason=reason, wait=wait)

    def cancel(
        self,
        task_id: TaskRef,
        reason: str = "cancelled",
        *,
        actor: str = "user",
        kind: FailureKind | None = None,
    ) -> TaskSnapshot:
        """Cancel: like stop, the status CANCELLED (what the orchestration layer does, with
        ``actor="orchestrator"``; called from Python, the row says "cancelled from
        Python"). Idempotent. ``kind``: the Failure.kind recorded (default cancelled;
        pipelines pass dependency_failed)."""
        return self._verbs.stop(
            task_id, self.stop_grace, actor=actor, reason=reason, wait=False, cancel=True, kind=kind
        )

    def retry(self, task_id: TaskRef, force: bool = False, *, actor: str = "user") -> TaskSnapshot:
        """FAILED/STOPPED/CANCELLED/LOST -> QUEUED; the attempt history is kept.
        ``force=True`` grants an attempt beyond ``max_attempts``. Idempotent on
        QUEUED/STARTING/RUNNING."""
        return self._verbs.retry(task_id, force, actor=actor)

    def skip(
        self, task_id: TaskRef, reason: str | None = None, *, actor: str = "user"
    ) -> TaskSnapshot:
        """PENDING/BLOCKED/QUEUED -> SKIPPED. Idempotent."""
        return self._verbs.skip(task_id, reason, actor=actor)

    def reset(
        self, task_id: TaskRef, *, confirm: bool = False, actor: str = "user"
    ) -> TaskSnapshot:
        """Back to PENDING with the attempt history cleared. Destroys history: needs
        ``confirm=True``. Refused while an execution is alive (stop it first)."""
        return self._verbs.reset(task_id, confirm=confirm, actor=actor)

    def force_transition(
        self, task_id: TaskRef, to: TaskStatus | str, *, reason: str, actor: str
    ) -> TaskSnapshot:
        """The escape hatch: set any status, bypassing the table. Needs actor and reason;
        writes an AdminOverride audit event and marks the snapshot ``overridden``."""
        return self._verbs.force_transition(task_id, to, reason=reason, actor=actor)

    def wait(self, task_id: TaskRef, timeout: float | None = None) -> TaskSnapshot:
        """Block until the task is terminal. TimeoutError after ``timeout``; no side effects."""
        return self._queries.wait(task_id, timeout)

    # -------------------------------------------------------- control plane

    def can(self, task_id: TaskRef, verb: str, *, force: bool = False) -> tuple[bool, str | None]:
        """``(True, None)`` if ``verb`` would change the task now, else ``(False, why)``.
        The predicates the UI binds its buttons to."""
        return self._verbs.can(task_id, verb, force=force)

    def can_all(self, task_id: TaskRef) -> dict[str, tuple[bool, str | None]]:
        """``can`` for every control-plane verb (``retry`` as a human decision: forced)."""
        return {v: self.can(task_id, v, force=(v == "retry")) for v in CONTROL_VERBS}

    def apply(
        self, task_id: object, verb: object, *, actor: str = "ui", args: object = None
    ) -> tuple[bool, str | None]:
        """The one entry for the control plane (widget clicks, store commands, REST):
        a task id, a verb and plain-data options (``timeout``, ``graceful``,
        ``reason``), never code. Never raises for bad input."""
        return self._verbs.apply(task_id, verb, actor=actor, args=args)

    def can_pause(self, task_id: TaskRef) -> tuple[bool, str | None]:
        return self.can(task_id, "pause")

    def can_resume(self, task_id: TaskRef) -> tuple[bool, str | None]:
        return self.can(task_id, "resume")

    def can_stop(self, task_id: TaskRef) -> tuple[bool, str | None]:
        return self.can(task_id, "stop")

    def can_retry(self, task_id: TaskRef, force: bool = False) -> tuple[bool, str | None]:
        return self.can(task_id, "retry", force=force)

    def can_skip(self, task_id: TaskRef) -> tuple[bool, str | None]:
        return self.can(task_id, "skip")

    def can_cancel(self, task_id: TaskRef) -> tuple[bool, str | None]:
        return self.can(task_id, "cancel")

    # ------------------------------------------------------------ pipeline runs

    def hold_run(self, run_id: str, held: bool = True) -> None:
        """Stop (``held=True``) or restart dispatching the queued tasks of a pipeline run.
        Held tasks stay QUEUED and take no slot; running ones are not touched."""
        self._admission.hold_run(run_id, held)
        if not held:
            self._launcher.pump()

    def hold_run_on(self, run_id: str, statuses: Iterable[TaskStatus | str]) -> None:
        """Hold the run at once (under the controller lock) as soon as one of its tasks
        enters one of ``statuses``: fail-fast without a window for another dispatch."""
        self._admission.hold_run_on(run_id, statuses)

    def set_run_limit(self, tag: str, limit: int | None) -> None:
        """A concurrency limit for ``tag`` beside the policy's (e.g. a map's
        max_parallel); None removes it."""
        self._admission.set_run_limit(tag, limit)
        self._launcher.pump()

    def forget_run(self, run_id: str) -> None:
        """Drop a finished run's scheduling state (holds, parked entries)."""
        self._admission.forget_run(run_id)

    def record_event(self, event: Event) -> None:
        """Publish an event from a layer above (pipelines). One that names a task of this
        controller is also kept with that task (``events(task_id)``)."""
        self._book.record_event(event)

    def new_event_id(self) -> str:
        """A fresh event id of this controller's sequence."""
        return self._book.new_event_id()

    def _launch_now(self, task_id: str) -> None:
        """For a loop in a cell (control/loops.py): launch its queued task now."""
        self._launcher.launch_now(task_id)

    def _observe_run(self, run_id: str, observer: RunObserver) -> Callable[[], None]:
        """For pipeline runs: ``observer(task_id, version, status)`` on every status
        change of the run's tasks, from the recorder thread (cheaper than ``watch``:
        no event is built for it)."""
        return self._bus.observe_run(run_id, observer)

    # ---------------------------------------------------------------- queries

    def get(self, task_id: TaskRef) -> TaskSnapshot:
        """The task's snapshot, with the latest progress."""
        return self._queries.get(task_id)

    def _matching(self, query: TaskQuery, ids: list[str] | None) -> list[TaskSnapshot]:
        # list_tasks (TaskLister's, one signature for every task source) reads here
        return self._queries._matching(query, ids)

    def stats(self, **filters: Any) -> dict[str, int]:
        """Counts per status value (every status present, zeros included)."""
        return self._queries.stats(**filters)

    def history(self, task_id: TaskRef) -> list[Transition]:
        return self._queries.history(task_id)

    def events(
        self,
        task_id: TaskRef,
        since: datetime | None = None,
        types: Iterable[type[Event]] | None = None,
    ) -> list[Event]:
        """Recorded events of one task, oldest first: status changes, attempt failures,
        warnings, outputs, overrides. (Progress and heartbeats are transient and logs
        are in ``logs``.)"""
        return self._queries.events(task_id, since, types)

    def attempts(self, task_id: TaskRef) -> list[AttemptRecord]:
        return self._queries.attempts_of(task_id)

    def logs(self, task_id: TaskRef, limit: int | None = None) -> list[LogRecord]:
        """The lines the task printed or logged (newest ``limit`` if given)."""
        return self._queries.logs(task_id, limit)

    def result(self, task_id: TaskRef) -> Any:
        return self._queries.result(task_id)

    def exception(self, task_id: TaskRef) -> BaseException | None:
        return self._queries.exception(task_id)

    def running(self, task_id: TaskRef) -> bool:
        """Is an execution of this task still alive (an abandoned thread counts)?"""
        return self._queries.running(task_id)

    def handle(self, task_id: str) -> TaskHandle:
        if task_id not in self._book.departed:  # a finished task out of memory has one too
            self._book.task(task_id)
        return TaskHandle(self, task_id)

    def graph(self) -> dict[str, Any]:
        """Nodes and edges of the tasks in memory, including the implicit DAG built cell
        by cell with ``after=`` (an edge may name a finished upstream that left memory)."""
        return self._queries.graph()

    def snapshots_df(self, **filters: Any) -> pd.DataFrame:
        """One row per task, newest first; filters as ``list_tasks`` plus ``since`` /
        ``until`` on ``created_at`` (since <= created_at < until)."""
        return self._queries.snapshots_df(**filters)

    def attempts_df(self, **filters: Any) -> pd.DataFrame:
        """One row per attempt of the tasks matching ``filters`` (``since`` / ``until``
        on ``started_at``), oldest task first."""
        return self._queries.attempts_df(**filters)

    def transitions_df(self, **filters: Any) -> pd.DataFrame:
        """One row per status transition of the tasks matching ``filters`` (``since``
        / ``until`` on ``at``), oldest task first."""
        return self._queries.transitions_df(**filters)

    def events_df(self, **filters: Any) -> pd.DataFrame:
        """The status changes of the tasks matching ``filters``: ``transitions_df``."""
        return self._queries.transitions_df(**filters)

    def timeline(self, **filters: Any) -> Timeline:
        """The attempt timeline of the tasks matching ``filters`` (the DataFrame filters;
        ``since`` / ``until`` keep the attempts that overlap the window): one lane per
        task, retry waits, pauses, stops and timeouts marked, the slots in use below.
        Attempts still running end at the controller's now."""
        return from_source(
            self,
            title="attempts",
            now=self._clock.now(),
            refresh=lambda: self.timeline(**filters),
            show_live=display.live_timeline,
            **filters,
        )

    # ------------------------------------------------------------ observing

    def watch(
        self, callback: Callable[[Event], None], filter: EventFilter = None
    ) -> Callable[[], None]:
        """Call ``callback(event)`` for every event from now on (from the recorder
        thread, after the event is recorded; earlier history is in ``events(id)``).
        Returns an unsubscribe function. A failing callback is counted in
        ``subscriber_failures`` and never affects a task."""
        return self._bus.subscribe(callback, filter)

    def add_hook(self, hook: object) -> None:
        """Lifecycle plugin: an object with any of on_start, on_success, on_failure,
        on_retry, on_cancel (each gets the event). Failures are isolated and counted."""
        self._bus.add_hook(hook)

    @property
    def subscriber_failures(self) -> int:
        return self._bus.subscriber_failures

    @property
    def hook_failures(self) -> int:
        return self._bus.hook_failures

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event so far is recorded (and persisted) and published.
        With a store, memory and store agree afterwards: a task the store settled
        without this controller (its lease was lost) has been adopted."""
        return self._life.flush(timeout)

    # ------------------------------------------------------------------ store

    def prune(
        self,
        older_than: timedelta | datetime,
        *,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, int]:
        """Retention: delete from the store the finished tasks (``status``: only these)
        that ended more than ``older_than`` ago (an age, or an aware cutoff time), with
        their transitions, attempts, events, logs and commands, in one transaction,
        then give the space back. Tasks this controller holds are kept (they are live
        or this session's), and so is every unfinished task. Returns the rows deleted
        per table (``dry_run``: counted, nothing deleted)."""
        if self._link is None:
            raise ConfigurationError("prune() needs a controller with a store")
        cutoff = self._link.cutoff(older_than)
        statuses = status_set(status)
        self.flush()
        return self._link.prune(cutoff, statuses, dry_run)

    # for the store link (persistence.py): wake the dispatcher, note a line in a task's
    # log, adopt what the store settled without us (Attempts.adopt)
    def _poke(self) -> None:
        self._dispatcher.poke()

    def _note(self, task_id: str, message: str) -> None:
        self._attempts.note(task_id, message)

    def _adopt(self, t: TaskEntry, plan: ConvergePlan) -> None:
        self._attempts.adopt(t, plan)

    def health(self) -> dict[str, Any]:
        """Is task state reaching the store? ``saved`` False (and ``not_saved`` giving
        the reason) while the store refuses writes; ``held_writes`` are kept in memory
        and written when it takes writes again (``dropped_writes`` beyond the bound);
        ``unconverged``: tasks the store settled without us, not adopted yet -> why;
        the owner id, its lease, the counts of failed writes, subscribers, hooks."""
        return self._life.health(self.persist_failures)

    def reconcile(
        self, on_orphan: str = "fail", *, grace: float = DEFAULT_GRACE_SECONDS
    ) -> dict[str, list[str]]:
        """Settle tasks in the store whose owner is provably gone (docs/store-guide.md,
        "Owners, leases and fencing"): same host, its process is dead or its pid
        reused; another host, its lease ended more than ``grace`` seconds ago.
        ``fail`` (default) -> LOST (CANCELLED if it never started); ``requeue`` -> also
        run again here when registered by name with a recorded call; ``manual`` ->
        only report them. Returns ids under ``lost``, ``requeued``, ``manual`` and
        ``unowned`` (no owner and no lease recorded: left alone)."""
        if self._link is None:
            raise ConfigurationError("reconcile() needs a controller with a store")
        return self._link.reconcile(on_orphan, grace=grace)

    def verify(self, task_id: TaskRef) -> tuple[bool, str]:
        """Replay the task's transitions (from the store when there is one) and check
        that they rebuild its snapshot."""
        return self._life.verify(task_id)

    # --------------------------------------------------------------- lifecycle

    def close(self, timeout: float = 5.0) -> None:
        """Stop the background threads (running tasks are not stopped).

        Drains first: the dispatcher finishes what it is doing (a store command it
        applied is completed in the store) and is joined, then everything recorded so
        far is written, and the executors' idle worker threads have ended (a thread
        still running a task ends with it). A controller with a store is also closed this
        way when the interpreter exits, so a script that ends right after its last task
        loses nothing."""
        self._life.close(timeout)

    def board(self, **filters: Any) -> Any:
        """A live table of tasks (a widget) for the notebook."""
        return display.board(self, **filters)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return display.bundle(self, self, kind="board", title="tasks")

    def _ipython_display_(self) -> None:
        """``ctl`` as a cell's value: the live board, in an output kept up to date (its
        saved snapshot is rewritten as tasks change status, like a handle's)."""
        display.show(self, self, kind="board", title="tasks")

    def __repr__(self) -> str:
        counts = {k: v for k, v in self.stats().items() if v}
        return f"<Controller tasks={sum(counts.values())} {counts}>"

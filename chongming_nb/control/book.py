"""The task book: every task of one controller, the lock that guards them, and the
outbox that carries what happened to the recorder. The other rooms of the controller
(intake, admission, dependencies, attempts, launcher, dispatcher, verbs, queries,
lifecycle) share one book and change tasks only through it.

Locking rules (the one place they are written; ``tests/control/test_locking.py`` holds
the controller to them):

* ``TaskBook.lock`` (an RLock) guards every ``TaskEntry`` field, ``TaskBook.tasks``, the
  outbox, and the state of the rooms: admission's ready heap, slot counts and run holds,
  the dispatcher's timer heap, intake's idempotency keys, the control plane's request
  keys. ``wake`` (the dispatcher sleeps on it) and ``terminal`` (``wait()`` sleeps on
  it) are conditions of that same lock.
* Only ``TaskBook.apply`` changes a status, and only under the lock; the StateMachine
  decides whether the change is legal, from the snapshot the task holds then.
* Which thread calls what:
  - caller threads (cells, widget comm handlers on a kernel subshell, the store
    command poller): the public Controller methods;
  - task threads: only their attempt's Reporter (``attempts.Reporter``); a report never
    waits for a busy lock: starts and ends are queued (``Attempts.pending_*``, flat
    combining) and settled by whoever holds or next takes the lock;
  - the dispatcher thread: timers, heartbeat sampling, the store tick
    (``lifecycle.OwnerLeases.tick``: commands, the owner's heartbeat and leases,
    fencing; without the lock, it calls the store), the backstop settling of queued
    reports;
  - the recorder thread (``bus.EventBus``): store writes (``StoreLink.persist``), then
    subscribers and hooks;
    it never takes this lock, so handing it a batch under the lock cannot deadlock.
* Lock-free reads are allowed where a stale answer is harmless and is re-checked under
  the lock: ``outbox`` emptiness before a flush, the pending report queues, a launch
  publishing ``TaskEntry.handle`` (see ``Launcher._go``), the entry ``wait()``
  looks up (a task evicted meanwhile was finished: its entry still says so).
* Nothing that can block on another thread (an executor launch, a store call, a user
  callback) runs under the lock, except the ``when=`` predicate of a pipeline node.
* Order: a thread holding the lock never waits for the recorder (``flush`` is called
  without it).

Ownership: the Controller owns its rooms, and a room refers only to rooms built before
it, with two exceptions that point back up: ``Attempts.pump`` (the launcher) and
``StoreLink.ctl`` (the controller), plus the recorder's hold on ``StoreLink.persist``.
``Lifecycle.close`` lets go of all three at its end (``ClosedPump``,
``StoreLink.detach``, the recorder on its way out), so a closed controller holds no
reference cycle and is freed as soon as its user drops it
(``tests/control/test_freed_without_collector.py``). Garbage left to the cyclic
collector would stay in memory until a full collection, which then lands on whatever
runs at that moment.

Bounded memory (``HistoryLimits.memory_finished_tasks``): ``TaskBook.finished`` holds the
ids of the finished tasks in the order they finished; past the cap, ``evict`` (at the
end of ``flush_outbox``, under the lock) moves the oldest out of ``tasks`` into
``departed`` (one byte of status each). A task is kept while it is live, while its
execution is alive (an abandoned thread included), while a dependant of it is not
finished, while a thread waits for it, and while its pipeline run is observed. Every
room looks a task id up with ``tasks.get`` (an evicted id is gone) or ``status_of``.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from chongming_nb.control.bus import EventBus, RunNote
from chongming_nb.control.messages import (
    ClearAttempts,
    CreateTask,
    Outgoing,
    SaveAttempt,
    SaveSnapshot,
)
from chongming_nb.control.spec import TaskSpec
from chongming_nb.core.clock import Clock
from chongming_nb.core.errors import ConfigurationError, TaskEvicted, TaskNotFound
from chongming_nb.core.events import Event, TaskStatusChanged, TaskWarning
from chongming_nb.core.models import (
    AttemptRecord,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
    new_attempt_record,
)
from chongming_nb.core.policies import HistoryLimits, JoinMode
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors import ExecutionHandle, Executor
from chongming_nb.runtime.heartbeat import Heartbeat
from chongming_nb.stores.protocol import LogRecord

if TYPE_CHECKING:
    from chongming_nb.stores.protocol import TaskStore

E = TypeVar("E", bound=Event)

#: Live progress of a running attempt: (done, total, unit, message).
LiveProgress = tuple[float, float | None, str | None, str | None]


@dataclass(eq=False, slots=True)
class TaskEntry:
    """One task as the controller holds it (guarded by ``TaskBook.lock``)."""

    snap: TaskSnapshot
    fn: Callable[..., Any] | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inject: bool
    spec: TaskSpec
    executor: str | Executor | None
    deps: tuple[str, ...] = ()
    dependants: list[str] | None = None  # made at the first dependant (most have none)
    join: JoinMode = JoinMode.ALL_SUCCEEDED
    when: Callable[[Mapping[str, Any]], bool] | None = None
    # plain-value tuples (written by TaskBook.apply, read back by transitions()), not
    # Transition objects: the collector stops tracking a tuple of plain values, so a
    # finished task leaves 4 fewer objects for every later collection to walk
    history: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: list[AttemptRecord] = field(default_factory=list)
    extra_events: list[Event] | None = None
    logs: deque[LogRecord] | None = None
    log_bytes: int = 0  # text of ``logs``
    log_dropped: int = 0  # lines dropped from ``logs`` (oldest first)
    store_log_bytes: int = 0  # what the store holds of this task's log (an upper bound)
    logs_in_store: bool = False  # ended: ``logs`` is a short tail, the store has the log
    result: Any = None
    exception: BaseException | None = None
    handle: ExecutionHandle | None = None
    abandoned: ExecutionHandle | None = None
    exec_attempt: int = 0  # attempt number of the live execution, 0 = none
    holds_slot: bool = False
    sleeper: CancellationToken | None = None  # in ctx.sleep: the token its timer wakes
    live: LiveProgress | None = None
    progress_event_at: float = -1e18
    hb: Heartbeat | None = None
    starting_since: float | None = None
    started_mono: float | None = None
    timeout_kind: FailureKind | None = None
    stop_reason: str | None = None
    stop_failure: Failure | None = None  # a cancel's failure; None for a stop (no failure)
    upstream: dict[str, Any] | None = None
    node: str | None = None
    #: the attempt whose launch waits for the store to take its STARTING (the owner's
    #: standing was in doubt: ``Launcher.launch_held``); 0 = none
    held_launch: int = 0
    #: the attempt the store settled while the executor was launching it (no handle
    #: yet): told to stop as soon as the launch returns; 0 = none
    fenced_launch: int = 0


class TaskBook:
    """The tasks, their lock, and the outbox (see the module docstring for the rules)."""

    def __init__(self, clock: Clock, bus: EventBus, store: TaskStore | None) -> None:
        self.clock = clock
        self.sm = StateMachine(clock)
        self.bus = bus
        self.store = store
        self.lock = threading.RLock()
        self.wake = threading.Condition(self.lock)
        # one condition for every wait(): a threading.Event per task would cost ~600
        # bytes per finished task (Condition + locks + deque) for nothing
        self.terminal = threading.Condition(self.lock)
        # tasks someone is in wait() for (and how many threads): only their ends notify,
        # so a thread waiting for one task is not woken by every other task's end
        self.awaited: dict[TaskEntry, int] = {}
        self.tasks: dict[str, TaskEntry] = {}
        self.outbox: list[Outgoing] = []
        self.id_prefix = secrets.token_hex(4)
        #: ids of the finished tasks in memory, oldest finished first (see ``evict``)
        self.finished: OrderedDict[str, None] = OrderedDict()
        #: the finished tasks that left memory
        self.departed = Departed(self.id_prefix)
        self._event_seq = itertools.count(1)
        self.closed = False
        #: Why the process is going away, once it is (``Lifecycle.shut_down``): from
        #: then on an attempt's end is never recorded as a failure of its code, and
        #: nothing new is launched.
        self.shutting_down: str | None = None
        #: what each task may keep (set by the Controller)
        self.limits = HistoryLimits()
        #: log text queued for the store and not written yet (``log_size`` units; see
        #: Attempts.on_log). Guarded by ``log_drained``'s own lock, not the book's: the
        #: recorder lowers it (``log_written``) and never takes the book's lock.
        self.log_inflight = 0
        self.log_drained = threading.Condition(threading.Lock())

    def log_queued(self, size: int) -> None:
        """A line of ``size`` went into the outbox for the store (any thread)."""
        with self.log_drained:
            self.log_inflight += size

    def log_written(self, size: int) -> None:
        """Recorder thread: ``size`` of queued log text left the kernel's queue."""
        with self.log_drained:
            self.log_inflight -= size
            self.log_drained.notify_all()

    def wait_log_drained(self, high: int, low: int, timeout: float) -> None:
        """Without the book's lock: if more than ``high`` log text is queued for the
        store, wait until at most ``low`` is (or the book closes, or ``timeout``)."""
        if self.log_inflight <= high:  # lock-free read: a stale answer only waits less
            return
        with self.log_drained:
            self.log_drained.wait_for(
                lambda: self.log_inflight <= low or self.closed, timeout=timeout
            )

    def new_event_id(self) -> str:
        return f"{self.id_prefix}-{next(self._event_seq)}"

    def new_event(
        self, cls: type[E], t: TaskEntry, *, at: datetime | None = None, **fields: Any
    ) -> E:
        """An event of ``cls`` about task ``t``: a new id, at ``at`` (default: now)."""
        return cls(
            event_id=self.new_event_id(),
            at=self.clock.now() if at is None else at,
            task_id=t.snap.task_id,
            **fields,
        )

    def record_event(self, event: Event) -> None:
        """An event from a layer above (pipelines), kept with its task when it names one
        of this book's, published either way. Takes the lock; flushes after it."""
        if not isinstance(event, Event):
            raise ConfigurationError(f"record_event() needs an Event, got {event!r}")
        with self.lock:
            t = self.tasks.get(event.task_id) if event.task_id else None
            if t is not None:
                self.event(t, event)
            else:
                self.outbox.append(event)
        self.flush_outbox()

    def task(self, task_id: object, what: str = "it can no longer be changed") -> TaskEntry:
        """The entry of a task id or handle; TaskEvicted (saying ``what`` is not
        possible) for a finished task that left memory, TaskNotFound otherwise."""
        tid = getattr(task_id, "id", task_id)
        t = self.tasks.get(tid) if isinstance(tid, str) else None
        if t is None:
            raise self.missing(tid, what)
        return t

    def entry(self, task_id: object) -> TaskEntry | None:
        """The entry of a task id or handle in memory, else None."""
        tid = getattr(task_id, "id", task_id)
        return self.tasks.get(tid) if isinstance(tid, str) else None

    def missing(self, task_id: object, what: str) -> TaskNotFound:
        """The error for a task id not in memory: TaskEvicted if it left, else TaskNotFound."""
        status = self.departed.get(task_id) if isinstance(task_id, str) else None
        if status is None:
            return TaskNotFound(str(task_id))
        assert isinstance(task_id, str)
        return TaskEvicted(task_id, status, self.limits.memory_finished_tasks or 0, what)

    def status_of(self, task_id: str) -> TaskStatus | None:
        """The status of a task in memory or evicted (None: unknown id)."""
        t = self.tasks.get(task_id)
        return t.snap.status if t is not None else self.departed.get(task_id)

    def evict(self) -> None:
        """Under the lock: move the oldest finished tasks past the cap out of memory
        (the module docstring says which are kept)."""
        cap = self.limits.memory_finished_tasks
        finished = self.finished
        if cap is None or len(finished) <= cap:
            return
        tasks = self.tasks
        departed = self.departed
        runs = self.bus.runs
        awaited = self.awaited
        # a kept task goes to the end of the line: at most one look at each per call
        for _ in range(len(finished)):
            if len(finished) <= cap:
                return
            tid, _ = finished.popitem(last=False)
            t = tasks.get(tid)
            if t is None:
                continue
            if _pinned(t, tasks, runs, awaited):
                finished[tid] = None
                continue
            del tasks[tid]
            departed.add(tid, t.snap.status)

    # Every accepted transition goes through here (under the lock).
    def apply(self, t: TaskEntry, change: tuple[TaskSnapshot, Transition]) -> None:
        """Record ``change``: a StateMachine method's answer for the task's snapshot,
        asked under this lock (``book.apply(t, book.sm.mark_running(t.snap))``)."""
        prev = t.snap
        prev_version = prev.status_version
        new, tr = change
        # the change was decided on the snapshot the task holds (not an older one)
        assert tr.version == prev_version + 1 and tr.task_id == prev.task_id, (tr, prev)
        if t.live is not None and t.exec_attempt:
            # the live progress runs ahead of the snapshot: a status change is kept (and
            # saved) with the count reached, so the store's copy of a paused or stopped
            # loop says how far it got (the Tasks sidebar, `chongming ps`)
            new = new.evolve(progress=self.live_progress(t))
        t.snap = new
        if (new.status in TERMINAL) is not (prev.status in TERMINAL):
            if new.status in TERMINAL:
                self.finished[new.task_id] = None
            else:
                self.finished.pop(new.task_id, None)
        t.history.append(history_row(tr))
        if self.store is not None:
            self.outbox.append(SaveSnapshot(new, prev_version, tr))
        self.announce(new, tr)
        if self.awaited and t in self.awaited and new.status in TERMINAL:
            self.terminal.notify_all()

    def announce(self, snap: TaskSnapshot, tr: Transition) -> None:
        """Under the lock: tell the subscribers and the task's pipeline run of a status
        change ``tr`` that led to ``snap`` (applied here, or adopted from the store)."""
        # the event is seen only by subscribers and hooks (the store keeps transitions,
        # and ``ctl.events()`` rebuilds status events from the history)
        bus = self.bus
        if bus.listened:
            self.outbox.append(status_event(tr, self.new_event_id()))
        run = snap.pipeline_run_id
        if run is not None and run in bus.runs:
            self.outbox.append(RunNote(run, tr.task_id, tr.version, tr.to_status))

    def event(self, t: TaskEntry, ev: Event, keep: bool = True) -> None:
        """Under the lock: publish ``ev`` (and keep it with the task for ``events()``)."""
        if keep:
            if t.extra_events is None:
                t.extra_events = []
            t.extra_events.append(ev)
        self.outbox.append(ev)

    def warn(self, t: TaskEntry, message: str) -> None:
        """Under the lock: a TaskWarning kept with the task and published."""
        self.event(t, self.new_event(TaskWarning, t, message=message))

    def created(self, snap: TaskSnapshot) -> None:
        """Under the lock: a new task for the store."""
        if self.store is not None:
            self.outbox.append(CreateTask(snap))

    def end_attempt(
        self,
        t: TaskEntry,
        outcome: TaskStatus,
        fail: Failure | None,
        abandoned: bool = False,
        now: datetime | None = None,
    ) -> None:
        """Under the lock: close the task's open attempt record (once)."""
        if not t.attempts:
            return
        rec = t.attempts[-1]
        if rec.ended_at is not None:
            return
        if now is None:
            now = self.clock.now()
        t.attempts[-1] = rec = new_attempt_record(
            task_id=rec.task_id,
            attempt=rec.attempt,
            started_at=rec.started_at,
            ended_at=now,
            outcome=outcome,
            failure_kind=None if fail is None else fail.kind,
            failure_message=None if fail is None else fail.message,
            traceback=None if fail is None else fail.traceback,
            executor=rec.executor,
            abandoned=abandoned,
            exit_code=None if fail is None else fail.exit_code,
        )
        if self.store is not None:
            self.outbox.append(SaveAttempt(rec))

    def clear_attempts(self, t: TaskEntry) -> None:
        t.attempts.clear()
        if self.store is not None:
            self.outbox.append(ClearAttempts(t.snap.task_id))

    def live_progress(self, t: TaskEntry) -> Progress | None:
        live = t.live
        if live is None:
            return t.snap.progress
        return Progress(
            done=live[0], total=live[1], unit=live[2], message=live[3], updated_at=self.clock.now()
        )

    def flush_outbox(self) -> None:
        """Hand what was recorded under the lock to the recorder, then evict the
        finished tasks past the cap (``evict``).

        The hand-over happens under the lock: two threads flushing at once must not
        deliver their batches out of order (a task's STOPPED before its STOPPING, or a
        store write ahead of the version it expects). Reading ``outbox`` without the
        lock is a safe fast path: whoever appends under the lock flushes afterwards.
        """
        cap = self.limits.memory_finished_tasks
        # (lock-free length: whoever makes a task finished flushes afterwards)
        over = cap is not None and len(self.finished) > cap
        if not self.outbox and not over:
            return
        with self.lock:
            if self.outbox:
                items, self.outbox = self.outbox, []
                self.bus.put_many(items)
            if over:
                self.evict()

    def hand_over(self) -> None:
        """``flush_outbox``, and also wait for a hand-over another thread is in the
        middle of: for a caller about to wait for the recorder (``bus.flush``).

        ``flush_outbox``'s lock-free look can find the outbox empty while another
        thread, holding the lock, has taken the items out and not yet queued them;
        a flush marker queued then would overtake them, and "everything recorded so
        far" would not hold (a write the store refuses would be converged only after
        the flush returned). Taking the lock waits for that hand-over to finish."""
        with self.lock:
            self.flush_outbox()


def _pinned(
    t: TaskEntry, tasks: dict[str, TaskEntry], runs: Mapping[str, Any], awaited: Mapping[Any, int]
) -> bool:
    """Must this finished task stay in memory (see the module docstring)?"""
    if t.snap.status not in TERMINAL or t.exec_attempt or t.holds_slot:
        return True
    if t.abandoned is not None and t.abandoned.running:
        return True
    if t in awaited:
        return True
    run = t.snap.pipeline_run_id
    if run is not None and run in runs:
        return True
    for d in t.dependants or ():
        u = tasks.get(d)
        if u is not None and u.snap.status not in TERMINAL:
            return True
    return False


#: A departed task's status as one byte (0: not departed).
_CODE: dict[TaskStatus, int] = {s: i + 1 for i, s in enumerate(TaskStatus)}
_OF_CODE: tuple[TaskStatus | None, ...] = (None, *TaskStatus)


class Departed:
    """The finished tasks that left memory: the status of each, and counts per status.

    An id this controller made (its prefix and a hex sequence number) is one byte at
    its number in a bytearray; any other id (adopted from the store) is a dict entry.
    """

    __slots__ = ("_codes", "_other", "_prefix", "counts")

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._codes = bytearray()
        self._other: dict[str, int] = {}
        #: departed tasks per status
        self.counts: dict[TaskStatus, int] = dict.fromkeys(TaskStatus, 0)

    def __len__(self) -> int:
        return sum(self.counts.values())

    def _number(self, task_id: str) -> int | None:
        prefix = self._prefix
        if not task_id.startswith(prefix):
            return None
        rest = task_id[len(prefix) :]
        try:
            n = int(rest, 16)
        except ValueError:
            return None
        return n if f"{n:06x}" == rest else None

    def add(self, task_id: str, status: TaskStatus) -> None:
        n = self._number(task_id)
        if n is None:
            self._other[task_id] = _CODE[status]
        else:
            codes = self._codes
            if n >= len(codes):
                codes.extend(bytes(max(n + 1 - len(codes), len(codes) // 2, 1024)))
            codes[n] = _CODE[status]
        self.counts[status] += 1

    def get(self, task_id: str) -> TaskStatus | None:
        n = self._number(task_id)
        if n is None:
            return _OF_CODE[self._other.get(task_id, 0)]
        codes = self._codes
        return _OF_CODE[codes[n]] if n < len(codes) else None

    def __contains__(self, task_id: object) -> bool:
        return isinstance(task_id, str) and self.get(task_id) is not None


#: A task's history keeps statuses as their plain string values (see TaskEntry.history).
_VALUE_OF: dict[TaskStatus, str] = {s: s.value for s in TaskStatus}
_STATUS_OF: dict[str, TaskStatus] = {s.value: s for s in TaskStatus}


def history_row(tr: Transition) -> tuple[Any, ...]:
    """One accepted transition as a task's history keeps it (see TaskEntry.history)."""
    return (
        _VALUE_OF[tr.from_status],
        _VALUE_OF[tr.to_status],
        tr.trigger,
        tr.actor,
        tr.reason,
        tr.at,
        tr.version,
        tr.override,
    )


def transitions(task_id: str, rows: list[tuple[Any, ...]]) -> list[Transition]:
    """A task's history rows as the Transition objects they were made from."""
    status = _STATUS_OF
    return [
        Transition(task_id, status[f], status[to], trigger, actor, reason, at, version, over)
        for f, to, trigger, actor, reason, at, version, over in rows
    ]


def status_event(tr: Transition, event_id: str) -> TaskStatusChanged:
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

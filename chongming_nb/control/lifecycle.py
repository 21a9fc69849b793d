"""The controller's life: its owner's heartbeat and leases, its health, its shutdown
and close, and the drain at interpreter exit.

* ``OwnerLeases`` (dispatcher thread) — the store tick: the owner's heartbeat row in
  the store and the leases of its unfinished tasks, between the store link's command
  polling and its fencing and held-write work;
* ``Lifecycle`` — ``health()``; ``shut_down`` when the process goes away (the truth
  about the attempts still running); ``close`` (drain, then stop the threads); the
  registry of controllers with a store that ``_drain_at_exit`` closes at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from chongming_nb.control.book import transitions
from chongming_nb.control.messages import TouchLease
from chongming_nb.control.ownership import OwnerId
from chongming_nb.control.persistence import verify
from chongming_nb.core.errors import ConfigurationError, TaskNotFound
from chongming_nb.core.policies import HistoryLimits, RetentionPolicy
from chongming_nb.core.states import NON_TERMINAL, TERMINAL, TaskStatus
from chongming_nb.core.validation import check_seconds
from chongming_nb.stores.protocol import OwnerRecord, TaskQuery

if TYPE_CHECKING:
    from chongming_nb.control.attempts import Attempts, Launch
    from chongming_nb.control.book import TaskBook
    from chongming_nb.control.bus import EventBus
    from chongming_nb.control.dispatcher import Dispatcher
    from chongming_nb.control.handle import TaskRef
    from chongming_nb.control.launcher import Launcher
    from chongming_nb.control.persistence import StoreLink
    from chongming_nb.control.queries import Queries
    from chongming_nb.control.verbs import Verbs
    from chongming_nb.stores.protocol import TaskStore

log = logging.getLogger("chongming_nb.controller")

#: How often an owner records its heartbeat in the owners table (at most; as often as
#: it renews its leases when that is more often).
OWNER_BEAT_EVERY = 2.0

#: Seconds the tasks still running when the interpreter exits get to reach a
#: checkpoint and stop (STOPPED); a thread that does not is abandoned (LOST, result
#: unknown). Short: jupyter_client kills a kernel 5 s after a graceful shutdown request.
EXIT_GRACE_SECONDS = 1.0

#: Controllers with a store that are not closed yet (their lifecycles): closed (drained)
#: at exit.
_DURABLE: weakref.WeakSet[Lifecycle] = weakref.WeakSet()


def _exit_reason() -> str:
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    app = getattr(kernelapp, "IPKernelApp", None)
    if app is not None and app.initialized():
        return "the kernel shut down while it ran"
    return "the process exited while it ran"


def _drain_at_exit() -> None:
    reason = _exit_reason()
    for life in list(_DURABLE):
        try:
            life.shut_down(reason, EXIT_GRACE_SECONDS)
            life.close(timeout=5.0)
        except Exception:  # exiting anyway: report, then let the others drain
            log.exception("closing a controller at exit failed")


def _drain_first_at_exit() -> None:
    """(Re-)register the exit drain so that it runs before every exit hook registered
    so far (atexit runs hooks last-in first-out): IPython's shell registers one at its
    start that clears the user namespace, and tasks still running then die of made-up
    errors (``NameError``: their globals are gone). The drain must see them first."""
    atexit.unregister(_drain_at_exit)
    atexit.register(_drain_at_exit)


def check_settings(
    retention: object, history: object, stop_grace: object, pause_grace: object, lease: object
) -> None:
    """The Controller's ``retention=``, ``history=`` and seconds settings, checked:
    ConfigurationError naming the one that is wrong."""
    if retention is not None and not isinstance(retention, RetentionPolicy):
        raise ConfigurationError(f"retention must be a RetentionPolicy, got {retention!r}")
    if history is not None and not isinstance(history, HistoryLimits):
        raise ConfigurationError(f"history must be a HistoryLimits, got {history!r}")
    check_seconds("stop_grace", stop_grace)
    check_seconds("pause_grace", pause_grace)
    if stop_grace is None or pause_grace is None:
        raise ConfigurationError("stop_grace and pause_grace are numbers of seconds, not None")
    if lease is None:
        raise ConfigurationError("lease_seconds is a number of seconds, not None")
    check_seconds("lease_seconds", lease, positive=True)


atexit.register(_drain_at_exit)


class ClosedPump:
    """The pump of a closed controller: nothing launches any more; an attempt that
    reports its end after the close (a task that outlived its stop) still has its
    records handed to the recorder. It replaces the launcher at the close, so that the
    launcher and this room stop referring to each other (see Lifecycle.close)."""

    __slots__ = ("book",)

    def __init__(self, book: TaskBook) -> None:
        self.book = book

    def pick_for_pump(self) -> list[Launch] | None:
        return None

    def pump(self, picked: list[Launch] | None = None) -> None:
        self.book.flush_outbox()


class OwnerLeases:
    """The owner's liveness in the store (dispatcher thread, and once at start): its
    heartbeat row, and the lease of each unfinished task, renewed six times per lease
    (a missed renewal or two is harmless)."""

    def __init__(self, link: StoreLink, owner: str | None, lease_seconds: float) -> None:
        self.link = link
        self.owner = owner
        self.lease_seconds = float(lease_seconds)
        self.renew_every = self.lease_seconds / 6
        # (a lease shorter than the beat interval would lapse between two beats)
        self.beat_every = min(OWNER_BEAT_EVERY, self.renew_every)
        self._next_owner_beat = 0.0
        self._next_renew = 0.0
        self._started_at = link.book.clock.now()
        # (monotonic) the last heartbeat the store took, the last lease renewal: a
        # reconciler elsewhere may settle this owner's tasks one lease after the
        # older of the two (``in_doubt``)
        start = link.book.clock.monotonic()
        self._beat_ok = start
        self._renewed = start

    def safe_tick(self, mono: float) -> None:
        """Dispatcher thread, every tick: ``tick``, a failure counted and logged."""
        try:
            self.tick(mono)
        except Exception:
            self.link.ctl.persist_failures += 1
            log.exception("store tick failed")

    def tick(self, mono: float) -> None:
        """Claim and apply commands; beat and renew; converge the tasks the store
        settled without us; mark rows and retry held writes (``StoreLink``)."""
        link = self.link
        link.poll_commands()
        if mono >= self._next_owner_beat:
            self._next_owner_beat = mono + self.beat_every
            self.beat_owner()
        if mono >= self._next_renew:
            self._next_renew = mono + self.renew_every
            self.renew_leases()
        link.settle(mono)

    def in_doubt(self, mono: float) -> bool:
        """Might this owner's tasks have been settled by a reconciler elsewhere by
        ``mono``? True once more than a lease has passed since the last heartbeat
        the store took, or since the last lease renewal less what a renewal leaves
        a lease at the least (a frozen process, a store that could not be reached):
        then a launch waits for the store to take its
        STARTING before the work begins (``Launcher._launch``). Also once the store
        has refused the recorder's writes for more than a lease: the renewals are
        among the writes held, whatever the heartbeats say."""
        # a renewal leaves alone the leases that run at least lease - renew_every past
        # it: those are the shortest the store may hold since
        renewed_until = self._renewed + self.lease_seconds - self.renew_every
        if mono >= min(self._beat_ok + self.lease_seconds, renewed_until):
            return True
        since = self.link.health.failing_since
        return since is not None and self.link.book.clock.now() >= since + timedelta(
            seconds=self.lease_seconds
        )

    def beat_owner(self) -> None:
        owner = self.owner
        if not owner:
            return
        oid = OwnerId.parse(owner)
        mono = self.link.book.clock.monotonic()
        try:
            self.link.store.upsert_owner(
                OwnerRecord(
                    owner_id=owner,
                    host=oid.host if oid is not None else socket.gethostname(),
                    pid=oid.pid if oid is not None and oid.pid is not None else os.getpid(),
                    kernel_id=oid.kernel if oid is not None else None,
                    started_at=self._started_at,
                    heartbeat_at=self.link.book.clock.now(),
                )
            )
        except Exception:
            self.link.ctl.persist_failures += 1
            log.exception("owner heartbeat failed")
            return
        self._beat_ok = mono

    def renew_leases(self) -> None:
        """Renew the lease of every unfinished task, then look for ones the store
        settled meanwhile (a reconciler took them while we were frozen)."""
        owner = self.owner
        if not owner:
            return
        link = self.link
        book = link.book
        until = book.clock.now() + timedelta(seconds=self.lease_seconds)
        # A lease of this owner that still runs past this is left as it is: it
        # outlasts the next renewal with room to spare (in_doubt counts from here). A
        # task is created with a whole lease (Intake), so a burst of submits is not
        # written twice, once to create each task and again to lease it.
        fresh = until - timedelta(seconds=self.renew_every)
        self._renewed = book.clock.monotonic()
        ids: list[str] = []
        with book.lock:
            for tid, t in book.tasks.items():
                s = t.snap
                if s.status not in NON_TERMINAL:
                    continue
                ids.append(tid)
                mine = s.lease_owner == owner
                if mine and s.lease_until is not None and s.lease_until > fresh:
                    continue
                t.snap = s.evolve(lease_owner=owner, lease_until=until)
                book.outbox.append(TouchLease(tid, None if mine else owner, until))
        book.flush_outbox()
        if not ids:
            return
        try:
            there = link.store.query(TaskQuery(ids=frozenset(ids)))
        except Exception:
            log.exception("reading this owner's tasks back failed")
            return
        # Converged: the ones the store holds settled, or under another owner, while
        # memory still has them open. Not the ones it does not hold yet (the recorder
        # is behind, e.g. just after a burst of submits), nor the ones that finished
        # here too since the ids were taken (a conflicting write of theirs is refused
        # and converged on the write path): a read back of each of those found nothing.
        with book.lock:
            settled = {
                s.task_id
                for s in there
                if (s.status in TERMINAL or s.lease_owner != owner)
                and (t := book.tasks.get(s.task_id)) is not None
                and t.snap.status in NON_TERMINAL
            }
        link.converge(settled, refused=False)


@dataclass(eq=False)
class Lifecycle:
    """Health, shutdown and close of one controller; registered for the exit drain
    when it has a store."""

    book: TaskBook
    bus: EventBus
    attempts: Attempts
    verbs: Verbs
    queries: Queries
    launcher: Launcher
    dispatcher: Dispatcher
    link: StoreLink | None
    owner: str | None

    def __post_init__(self) -> None:
        if self.link is not None:
            _DURABLE.add(self)  # drained at interpreter exit
            _drain_first_at_exit()

    def health(self, persist_failures: int) -> dict[str, Any]:
        """See ``Controller.health``."""
        store: TaskStore | None = self.book.store
        out: dict[str, Any] = {
            "store": None if store is None else getattr(store, "url", None),
            "owner": self.owner,
            "lease_seconds": None if self.link is None else self.link.lease_seconds,
            "saved": True,
            "not_saved": None,
            "failing_since": None,
            "held_writes": 0,
            "dropped_writes": 0,
            "outages": 0,
            "first_failure": None,
            "unconverged": {},
        }
        if self.link is not None:
            out.update(self.link.health.report())
            # tasks the store settled without us whose convergence is still to come:
            # memory and store disagree about them, and their writes wait
            unconverged = dict(self.link.unconverged)
            out["unconverged"] = unconverged
            if unconverged:
                out["saved"] = False
                if out["not_saved"] is None:
                    tid, why = next(iter(sorted(unconverged.items())))
                    more = f" (and {len(unconverged) - 1} more)" if len(unconverged) > 1 else ""
                    out["not_saved"] = f"not saved: task {tid}{more}: {why}"
        out["persist_failures"] = persist_failures
        out["subscriber_failures"] = self.bus.subscriber_failures
        out["hook_failures"] = self.bus.hook_failures
        return out

    def flush(self, timeout: float) -> bool:
        """See ``Controller.flush``."""
        book, bus, link = self.book, self.bus, self.link
        converged = link.converged if link is not None else 0
        book.hand_over()  # (not flush_outbox: its lock-free look may miss a hand-over)
        done = bus.flush(timeout)
        if link is not None:
            if link.health.held:  # once more now (e.g. a connection just reset)
                link.retry_held()
                done = bus.flush(timeout)
            link.converge_refused()
            marked = link.mark_rows()
            marked = self.launcher.launch_held() or marked
            # what converging (here, or on the dispatcher meanwhile) and marking wrote
            # is recorded too
            if marked or link.converged != converged:
                book.hand_over()
                done = bus.flush(timeout) and done
        return done

    def verify(self, task_id: TaskRef) -> tuple[bool, str]:
        """See ``Controller.verify``: from the store when there is one."""
        tid = getattr(task_id, "id", task_id)
        store = self.book.store
        if store is not None:
            self.flush(10.0)
            snap = store.get(tid)
            if snap is None:
                raise TaskNotFound(str(tid))
            return verify(store.history(tid), snap)
        with self.book.lock:
            t = self.book.task(tid)
            return verify(transitions(t.snap.task_id, t.history), t.snap)

    def shut_down(self, reason: str, grace: float) -> None:
        """The process is going away (at exit, before anything tears the tasks' world
        down): record the truth about the attempts still running.

        From here on no attempt's end is recorded as a failure of its code
        (``TaskBook.shutting_down``: an exception now may be the teardown's, e.g. the
        namespace IPython clears) and nothing new starts. Each live execution is asked to
        stop with ``reason``; one that reaches a checkpoint within ``grace`` seconds is
        STOPPED, one that does not is handled as an expired stop window (a thread is
        abandoned: LOST, result unknown; a process is killed: STOPPED)."""
        book = self.book
        with book.lock:
            book.shutting_down = reason
            live = [t.snap.task_id for t in self.attempts.executing]
        for task_id in live:
            try:
                self.verbs.stop(task_id, grace, actor="shutdown", reason=reason, wait=False)
            except Exception:  # not stoppable now (e.g. it just ended): settled below
                log.debug("stopping %s at shutdown", task_id, exc_info=True)
        deadline = time.monotonic() + grace  # real time, like Queries.wait
        for task_id in live:
            with contextlib.suppress(TimeoutError):
                self.queries.wait(task_id, max(0.0, deadline - time.monotonic()))
        with book.lock:
            for task_id in live:
                t = book.tasks.get(task_id)  # (None: it finished and left memory)
                if t is not None and t.exec_attempt and t.snap.status is TaskStatus.STOPPING:
                    self.dispatcher.stop_window_expired(t)
            book.flush_outbox()

    def close(self, timeout: float) -> None:
        """See ``Controller.close``."""
        book = self.book
        _DURABLE.discard(self)
        with book.wake:
            book.closed = True
            book.wake.notify_all()
        with book.log_drained:  # a task waiting for the recorder to write its log
            book.log_drained.notify_all()
        thread = self.dispatcher.thread
        if thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout)
        book.hand_over()
        self.bus.flush(timeout)
        self.bus.close()
        for ex in self.launcher.executors.values():
            try:
                ex.shutdown()
            except Exception:
                log.exception("executor shutdown failed")
        # the end of life: the two references that point back up the rooms (the
        # attempts room to the launcher, the store link to the controller) are let go,
        # so a closed controller has no reference cycle and is freed as soon as its
        # user drops it, not at the next full garbage collection
        self.attempts.pump = ClosedPump(book)
        if self.link is not None:
            self.link.detach()

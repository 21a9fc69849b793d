"""The controller's link to a durable store (``StoreLink``): recording batches through
``writes.write_batch`` (held while the store refuses them), the command poller,
fencing (a task the store settled without us converges), retention and
reconciliation, and ``verify``. The owner's heartbeat and leases are
``lifecycle.OwnerLeases``.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from chongming_nb.control.book import transitions
from chongming_nb.control.messages import AppendLog, Outgoing, RetryHeld, Unfence
from chongming_nb.control.ownership import DEFAULT_GRACE_SECONDS, DEFAULT_LEASE_SECONDS
from chongming_nb.control.recovery import converge_plan, reconcile_store
from chongming_nb.control.writes import StoreHealth, StoreOutage, task_of, write_batch
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.models import CommandState, TaskSnapshot, Transition
from chongming_nb.core.state_machine import replay
from chongming_nb.stores.protocol import log_size

if TYPE_CHECKING:
    from chongming_nb.control.book import TaskBook, TaskEntry
    from chongming_nb.control.handle import HasId, TaskRef
    from chongming_nb.control.recovery import ConvergePlan
    from chongming_nb.control.spec import TaskRegistry
    from chongming_nb.core.states import TaskStatus
    from chongming_nb.stores.protocol import TaskStore

__all__ = ["PersistenceWarning", "StoreControlled", "StoreLink", "verify", "write_batch"]


class StoreControlled(Protocol):
    """What the store link asks of its controller (``control.controller.Controller``;
    a Protocol so that this module does not import the controller, which imports it)."""

    owner: str | None
    persist_failures: int
    registry: TaskRegistry

    def apply(
        self, task_id: object, verb: object, *, actor: str = ..., args: object = ...
    ) -> tuple[bool, str | None]: ...
    def get(self, task_id: TaskRef) -> TaskSnapshot: ...
    def submit(
        self, fn: Callable[..., Any], *args: Any, name: str | None = ..., **kwargs: Any
    ) -> HasId: ...
    def _poke(self) -> None: ...
    def _note(self, task_id: str, message: str) -> None: ...
    def _adopt(self, t: TaskEntry, plan: ConvergePlan) -> None: ...


log = logging.getLogger("chongming_nb.persistence")

#: How often writes held while the store refused them are tried again.
HELD_RETRY_EVERY = 1.0
COMMAND_LEASE_SECONDS = 10.0


class _Detached:
    """What a store link refers to once its controller has closed (``StoreLink.detach``):
    anything asked of it says so."""

    def __getattr__(self, name: str) -> Any:
        raise ConfigurationError("this controller is closed")

    def __setattr__(self, name: str, value: object) -> None:
        raise ConfigurationError("this controller is closed")


class StoreLink:
    """What the controller does with its store: recording batches (recorder thread),
    the command poller and fencing (dispatcher thread), retention, reconciliation."""

    def __init__(
        self,
        ctl: StoreControlled,
        book: TaskBook,
        store: TaskStore,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.ctl = ctl
        self.book = book
        self.store = store
        self.lease_seconds = float(lease_seconds)
        self.health = StoreHealth()
        self._next_retry = 0.0
        # task ids whose writes the store refused (recorder thread adds, dispatcher takes)
        self._fenced: deque[str] = deque()
        # ... and, until they are converged, nothing more of theirs is written
        self._refused: set[str] = set()
        # refused tasks whose convergence has not succeeded yet (the store's row could
        # not be read, or it holds nothing to adopt): id -> why; tried again, and told
        # by health(), until memory and store agree
        self.unconverged: dict[str, str] = {}
        self._next_converge = 0.0
        #: how many convergences queued writes so far (``flush`` waits for them)
        self.converged = 0
        self._converging = threading.RLock()

    def detach(self) -> None:
        """At the end of ``close``, once the dispatcher has ended and the recorder has
        been told to: let go of the controller, so that the controller and its link do
        not keep each other (and every task the controller holds) alive."""
        self.ctl = _Detached()  # type: ignore[assignment]

    # ------------------------------------------------------------ retention

    def cutoff(self, older_than: timedelta | datetime) -> datetime:
        """``prune``'s age (a positive timedelta) or aware cutoff time, as a cutoff."""
        if isinstance(older_than, timedelta):
            if older_than <= timedelta(0):
                raise ConfigurationError(f"older_than must be a positive age, got {older_than}")
            return self.book.clock.now() - older_than
        if isinstance(older_than, datetime) and older_than.tzinfo is not None:
            return older_than
        raise ConfigurationError(
            f"older_than must be a timedelta or an aware datetime, got {older_than!r}"
        )

    def prune(
        self, cutoff: datetime, statuses: frozenset[TaskStatus] | None, dry_run: bool
    ) -> dict[str, int]:
        """Delete the finished tasks that ended before ``cutoff``, except the ones this
        controller holds (live, or this session's)."""
        with self.book.lock:
            keep = frozenset(self.book.tasks)
        return dict(
            self.store.purge(older_than=cutoff, status=statuses, keep=keep, dry_run=dry_run)
        )

    # ------------------------------------------------------------ recording
    def persist(self, batch: list[Outgoing]) -> None:
        """Recorder thread: write a batch (after any held ones), in order, grouped;
        then the log text it carried no longer counts as queued (written, or held
        within the outage's own limit), and a task waiting to print goes on."""
        try:
            self._persist(batch)
        finally:
            queued = sum(log_size(i.line.line) for i in batch if i.__class__ is AppendLog)
            if queued:
                self.book.log_written(queued)

    def _persist(self, batch: list[Outgoing]) -> None:
        ctl = self.ctl
        health = self.health
        held: list[Outgoing] = health.peek() if health.held else []
        conflicts: set[str] = set()
        refused = self._refused  # the recorder's own (no other thread touches it)
        if refused:
            # in order: a refused task's writes are dropped up to its Unfence marker
            # (queued when memory adopted the store's state); the ones after it are new.
            # (A stale write could otherwise expect, by coincidence, exactly the
            # version the reconciler wrote, and pass.) Its log lines are kept: they
            # are what the task printed, versioned by nothing.
            kept: list[Outgoing] = []
            for item in batch:
                cls = item.__class__
                if cls is Unfence:
                    refused.discard(item.task_id)
                elif not refused or cls is AppendLog or task_of(item) not in refused:
                    kept.append(item)
            batch = kept
        try:
            ctl.persist_failures += write_batch(
                self.store,
                [*held, *batch] if held else batch,
                conflicts=conflicts,
                raise_outage=True,
            )
        except StoreOutage as exc:
            ctl.persist_failures += 1
            now = self.book.clock.now()
            keep = batch
            if exc.remainder is not None:  # the rest landed, the held writes included
                if held:
                    health.written(len(held))
                keep = exc.remainder
            self._fence(conflicts)
            if health.hold(keep, str(exc.cause), now):
                log.warning("the store refuses writes; kept in memory: %s", exc.cause)
                warnings.warn(
                    f"chongming: task state is not being saved to {self.store.url}: "
                    f"{exc.cause}. It is kept in memory (up to {health.limit} writes) and "
                    "written when the store takes writes again; ctl.health() tells.",
                    PersistenceWarning,
                    stacklevel=2,
                )
            self.ctl._poke()
            return
        except Exception:
            ctl.persist_failures += 1
            log.exception("store write failed; the task goes on")
            return
        if held:
            health.written(len(held))
        if health.failing_since is not None:
            log.warning("the store takes writes again; %d held writes written", len(held))
            health.recovered()
            self.ctl._poke()
        self._fence(conflicts)

    def _fence(self, conflicts: set[str]) -> None:
        """Recorder thread: the tasks whose writes the store refused (it holds another
        version) get nothing more written until they converge (dispatcher thread)."""
        if conflicts:
            self._refused |= conflicts
            self._fenced.extend(conflicts)
            self.ctl._poke()

    def settle(self, mono: float) -> None:
        """Dispatcher thread, every tick after the commands and the owner's leases
        (``lifecycle.OwnerLeases.tick``): converge the tasks the store settled without
        us, mark the rows of an outage, try held writes again."""
        again = bool(self.unconverged) and mono >= self._next_converge
        if again:
            self._next_converge = mono + HELD_RETRY_EVERY
        self.converge_refused(again=again)
        if self.health._to_mark or self.health._to_unmark:
            self.mark_rows()
        if self.health.held and mono >= self._next_retry:
            self._next_retry = mono + HELD_RETRY_EVERY
            self.retry_held()

    def retry_held(self) -> None:
        """Have the recorder try the held writes again, in order (no new batch needed)."""
        self.book.bus.put_many([RetryHeld()])

    def mark_rows(self) -> bool:
        """A line in each affected task's log (the row shows it): "not saved: <reason>"
        while the store refuses its writes, "saved again" once they are written.
        True when a line was added."""
        mark, unmark, reason = self.health.take_marks()
        if not (mark or unmark):
            return False
        note = self.ctl._note
        with self.book.lock:
            for tid in mark:
                note(tid, f"not saved: {reason}")
            for tid in unmark:
                note(tid, "saved again: the writes held in memory reached the store")
        self.book.flush_outbox()
        return True

    def converge_refused(self, *, again: bool = True) -> None:
        """Converge the tasks whose writes the store refused so far (any thread that
        does not hold the book's lock: the dispatcher's tick, ``flush``), and, with
        ``again``, the ones whose convergence failed before."""
        # one at a time: a flush() returns only after a convergence the dispatcher began
        with self._converging:
            ids: set[str] = set()
            while self._fenced:
                ids.add(self._fenced.popleft())
            if again:
                ids.update(self.unconverged)
            if ids:
                self.converge(ids, refused=True)

    def converge(self, ids: set[str], *, refused: bool) -> None:
        """Adopt the store's settled state for tasks it settled without us (fencing):
        their execution is asked to stop and abandoned, memory takes the store's
        snapshot and history. ``refused``: the store refused our writes of these —
        until they converge nothing more of theirs is written, so one that cannot be
        converged now (its row cannot be read, or holds nothing to adopt) stays in
        ``unconverged``: tried again, and reported by ``health()``."""
        book = self.book
        with self._converging:
            for tid in sorted(ids):
                with book.lock:
                    t = book.tasks.get(tid)
                    if t is None:
                        self.unconverged.pop(tid, None)
                        continue
                    mine = transitions(tid, list(t.history))
                try:
                    plan = converge_plan(self.store, tid, mine)
                except Exception as exc:
                    if refused:
                        self._not_converged(tid, f"its row could not be read back: {exc}")
                    else:  # (the next lease renewal looks again)
                        log.warning("reading task %s back failed: %s", tid, exc)
                    continue
                if plan is None:
                    if refused:
                        self._not_converged(
                            tid,
                            "the store holds no settled state to adopt "
                            f"(store: {self._describe(tid)}; memory: v{len(mine)})",
                        )
                    continue
                self.unconverged.pop(tid, None)
                with book.lock:
                    # what this task writes from here on is new (the adoption's own
                    # records too: the attempt it ends, its warning)
                    book.outbox.append(Unfence(tid))
                    if plan.transitions:
                        self.ctl._adopt(t, plan)
                    self.converged += 1
                book.flush_outbox()

    def _not_converged(self, tid: str, why: str) -> None:
        """A refused task that cannot converge now: kept (tried again), counted, said
        once in the log and in its row."""
        first = tid not in self.unconverged
        self.unconverged[tid] = why
        if not first:
            return
        self.ctl.persist_failures += 1
        log.error("the store refused a write of task %s and it cannot converge yet: %s", tid, why)
        with self.book.lock:
            self.ctl._note(tid, f"not saved: the store refused its writes; {why}")
            self.converged += 1
        self.book.flush_outbox()

    def _describe(self, tid: str) -> str:
        try:
            snap = self.store.get(tid)
            hist = self.store.history(tid)
        except Exception as exc:
            return f"unreadable: {exc}"
        if snap is None:
            return "no such task"
        versions = [t.version for t in hist]
        return f"{snap.status.value} v{snap.status_version}, transitions {versions}"

    def poll_commands(self) -> int:
        """Claim the commands addressed to this controller's tasks and apply them as if
        called locally. Returns how many were applied."""
        ctl = self.ctl
        store = self.store
        try:
            pending = store.commands(state=CommandState.PENDING)
        except Exception:
            ctl.persist_failures += 1
            log.exception("reading the command queue failed")
            return 0
        with self.book.lock:
            # (a task that left memory is ours too: its command is refused, saying why)
            book = self.book
            mine = frozenset(
                c.task_id for c in pending if c.task_id in book.tasks or c.task_id in book.departed
            )
        if not mine:
            return 0
        now = self.book.clock.now()
        try:
            claimed = store.claim_commands(
                owner=ctl.owner or "controller",
                now=now,
                lease_seconds=COMMAND_LEASE_SECONDS,
                task_ids=mine,
            )
        except Exception:
            ctl.persist_failures += 1
            log.exception("claiming commands failed")
            return 0
        for cmd in claimed:
            ok, why = ctl.apply(cmd.task_id, cmd.verb, actor=cmd.actor or "store", args=cmd.args)
            try:
                snap = ctl.get(cmd.task_id)
                status = snap.status.value
            except Exception:
                status = None
            message = f"applied: {cmd.verb} (now {status})" if ok else f"refused: {why}"
            outcome = {"ok": ok, "reason": why, "status": status, "message": message}
            try:
                store.complete_command(
                    cmd.command_id,
                    now=self.book.clock.now(),
                    outcome=outcome,
                    state=CommandState.DONE if ok else CommandState.REJECTED,
                )
            except Exception:
                ctl.persist_failures += 1
                log.exception("completing command %s failed", cmd.command_id)
        return len(claimed)

    # ------------------------------------------------------------ recovery
    def reconcile(
        self, on_orphan: str = "fail", *, grace: float = DEFAULT_GRACE_SECONDS
    ) -> dict[str, list[str]]:
        """Settle the store's tasks whose owner is provably gone (``ownership.judge``):
        ``fail`` -> LOST / CANCELLED, ``requeue`` -> also run again here when the task
        is registered by name and its call was recorded, ``manual`` -> only report."""
        with self.book.lock:
            local = set(self.book.tasks)
        return reconcile_store(
            self.store,
            self.book.clock,
            me=self.ctl.owner,
            local_ids=local,
            on_orphan=on_orphan,
            lease_seconds=self.lease_seconds,
            grace=grace,
            requeue=self._requeue,
        )

    def _requeue(self, snap: TaskSnapshot) -> str | None:
        """Run a settled orphan again here; its new id, or None when it cannot be."""
        ctl = self.ctl
        if snap.name not in ctl.registry:
            return None
        calls = self.store.events(snap.task_id, types=frozenset({"TaskCall"}))
        if not calls:
            return None
        payload = calls[-1].payload
        fn = ctl.registry.get(snap.name)
        h = ctl.submit(fn, *payload.get("args", []), name=snap.name, **payload.get("kwargs", {}))
        return h.id


class PersistenceWarning(UserWarning):
    """The controller's store refuses writes (task state is kept in memory meanwhile)."""


def verify(history: Sequence[Transition], snap: TaskSnapshot) -> tuple[bool, str]:
    """Replay a task's transitions from its creation and compare with the snapshot."""
    initial = TaskSnapshot(task_id=snap.task_id, name=snap.name)
    try:
        status, version = replay(initial, list(history))
    except Exception as exc:
        return False, f"history does not replay: {exc}"
    if status is not snap.status or version != snap.status_version:
        return False, (
            f"history leads to {status.value} v{version}, snapshot says "
            f"{snap.status.value} v{snap.status_version}"
        )
    return True, f"{len(history)} transitions rebuild {status.value} v{version}"

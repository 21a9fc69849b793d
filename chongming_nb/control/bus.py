"""The event bus: record first, then publish.

One recorder thread drains the controller's outbox in order: it writes each batch to the
store (when there is one) and only then hands the events to subscribers and lifecycle
hooks. A subscriber or hook that raises is isolated: counted, logged, never propagated
to a task.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.events import Event
from chongming_nb.core.states import TaskStatus

log = logging.getLogger("chongming_nb.bus")

#: While records stream in (a round of at least _BUSY_ITEMS), the recorder rests this
#: long before the next round, so the next one is bigger: fewer thread switches for
#: the producers (the recorder competes with them for the GIL on every wake-up) and,
#: with a store, fewer and larger transactions. A round that answers a ``flush`` never
#: rests, and a quiet bus wakes at once: latency is added only under load.
_LINGER = 0.002
_BUSY_ITEMS = 8

Callback = Callable[[Event], None]

#: What a lifecycle hook (``Controller.add_hook``) may define; each gets the event.
HOOK_METHODS = ("on_start", "on_success", "on_failure", "on_retry", "on_cancel")
EventFilter = Callable[[Event], bool] | Iterable[type[Event]] | None


def _compile_filter(flt: EventFilter) -> Callable[[Event], bool] | None:
    if flt is None:
        return None
    if callable(flt) and not isinstance(flt, type):
        return flt
    types = tuple(flt)  # type: ignore[arg-type]
    if not all(isinstance(t, type) and issubclass(t, Event) for t in types):
        raise TypeError("filter must be a callable(event) -> bool or an iterable of Event types")
    return lambda ev: isinstance(ev, types)


class RunNote:
    """A status change of a task that belongs to an observed pipeline run: what a run
    needs to follow its tasks, without building a full event (see ``observe_run``)."""

    __slots__ = ("run_id", "status", "task_id", "version")

    def __init__(self, run_id: str, task_id: str, version: int, status: TaskStatus) -> None:
        self.run_id = run_id
        self.task_id = task_id
        self.version = version
        self.status = status


RunObserver = Callable[[str, int, TaskStatus], None]


class _Flush:
    """A marker queued behind everything put so far: set when the recorder reaches it."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class EventBus:
    """Ordered, isolated delivery on one background thread.

    The hand-off is a ``queue.SimpleQueue`` of batches (one C-level put per flush of
    the controller's outbox, no Python condition variable on the hot path). ``flush``
    queues a marker behind everything put so far and waits for the recorder to reach
    it, so "recorded" means exactly "everything put before the call".

    With no store to write and nobody listening (no subscriber, no hook), a batch has
    no consumer: ``put_many`` drops it instead of waking the recorder. A subscriber sees
    the events put after it subscribed.
    """

    def __init__(self, persist: Callable[[list[Any]], None] | None = None) -> None:
        self._subs: dict[int, tuple[Callback, Callable[[Event], bool] | None]] = {}
        self._next = 0
        self._queue: queue.SimpleQueue[list[Any] | _Flush | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _subs and _next
        self._persist = persist
        self.subscriber_failures = 0
        #: run id -> observer of its tasks' status changes (RunNote items)
        self.runs: dict[str, RunObserver] = {}
        self._hooks: tuple[object, ...] = ()
        self.hook_failures = 0
        #: Does anything consume what is put here (a store, a subscriber, a hook)?
        self.consumed = persist is not None
        #: Does anything listen to events (a subscriber, a hook)? Producers may skip
        #: building events that only listeners see (the store keeps its own records).
        self.listened = False
        self._thread = threading.Thread(target=self._run, name="chongming-recorder", daemon=True)
        self._thread.start()

    def persist_with(self, persist: Callable[[list[Any]], None]) -> None:
        """Write every batch with ``persist`` before publishing it (set before the
        first ``put_many``)."""
        self._persist = persist
        self.consumed = True

    def subscribe(self, callback: Callback, flt: EventFilter = None) -> Callable[[], None]:
        if not callable(callback):
            raise TypeError(f"watch() needs a callable, got {callback!r}")
        compiled = _compile_filter(flt)
        with self._lock:
            key = self._next
            self._next += 1
            self._subs = {**self._subs, key: (callback, compiled)}  # copy-on-write
            self._recount()

        def unsubscribe() -> None:
            with self._lock:
                if key in self._subs:
                    self._subs = {k: v for k, v in self._subs.items() if k != key}
                    self._recount()

        return unsubscribe

    def observe_run(self, run_id: str, observer: RunObserver) -> Callable[[], None]:
        """Call ``observer(task_id, version, status)`` (recorder thread, after the batch
        is recorded) for every status change of a task of pipeline run ``run_id``.
        The producer queues a RunNote for it; returns an unsubscribe function."""
        with self._lock:
            self.runs = {**self.runs, run_id: observer}  # copy-on-write
            self._recount()

        def unsubscribe() -> None:
            with self._lock:
                if self.runs.get(run_id) is observer:
                    self.runs = {k: v for k, v in self.runs.items() if k != run_id}
                    self._recount()

        return unsubscribe

    def _recount(self) -> None:
        # under self._lock
        self.listened = bool(self._subs) or bool(self._hooks)
        self.consumed = self._persist is not None or self.listened or bool(self.runs)

    @property
    def hooks(self) -> tuple[Any, ...]:
        return self._hooks

    def add_hook(self, hook: object) -> None:
        """A lifecycle hook: an object with at least one of ``HOOK_METHODS``."""
        if not any(hasattr(hook, n) for n in HOOK_METHODS):
            raise ConfigurationError(f"a hook needs at least one of {', '.join(HOOK_METHODS)}")
        with self._lock:
            self._hooks = (*self._hooks, hook)
            self._recount()

    def put_many(self, items: list[Any]) -> None:
        """Queue outbox items (``messages.Outgoing``: events, store writes, markers) in
        order."""
        if items and self.consumed:
            self._queue.put(items)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Block until everything queued so far has been recorded and published."""
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            return True
        marker = _Flush()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def close(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        q = self._queue
        while True:
            first = q.get()
            # take whatever else is already queued: one store write for many batches
            batch: list[Any] = []
            markers: list[_Flush] = []
            stop = False
            item = first
            while True:
                if item is None:
                    stop = True
                elif isinstance(item, _Flush):
                    markers.append(item)
                else:
                    batch.extend(item)
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._deliver(batch)
            for m in markers:
                m.done.set()
            if stop:
                # the last batch is written: let go of the persister (the controller's
                # store link, which refers back to the book that holds this bus), so a
                # closed controller is freed by reference counting
                self._persist = None
                return
            if len(batch) >= _BUSY_ITEMS and not markers:
                time.sleep(_LINGER)

    def _deliver(self, batch: list[Any]) -> None:
        if self._persist is not None:
            try:
                self._persist(batch)
            except Exception:  # persistence failures are counted by the persister
                log.exception("persisting a batch of %d records failed", len(batch))
        subs = list(self._subs.values())
        hooks = self._hooks
        runs = self.runs
        if not subs and not hooks and not runs:
            return  # nobody listens: nothing to publish
        for item in batch:
            if item.__class__ is RunNote:
                observer = runs.get(item.run_id)
                if observer is not None:
                    try:
                        observer(item.task_id, item.version, item.status)
                    except Exception:
                        self.subscriber_failures += 1
                        log.exception("run observer of %s failed", item.run_id)
                continue
            if not isinstance(item, Event):
                continue
            for cb, flt in subs:
                try:
                    if flt is None or flt(item):
                        cb(item)
                except Exception:
                    self.subscriber_failures += 1
                    log.exception("event subscriber %r failed on %s", cb, item.type)
            for hook in hooks:
                self._call_hook(hook, item)

    def _call_hook(self, hook: object, ev: Event) -> None:
        from chongming_nb.core.events import AttemptStarted, TaskStatusChanged

        name: str | None = None
        if isinstance(ev, AttemptStarted):
            name = "on_start"
        elif isinstance(ev, TaskStatusChanged):
            name = {
                TaskStatus.SUCCEEDED: "on_success",
                TaskStatus.FAILED: "on_failure",
                TaskStatus.RETRY_WAIT: "on_retry",
                TaskStatus.CANCELLED: "on_cancel",
                TaskStatus.STOPPED: "on_cancel",
            }.get(ev.to_status)
        if name is None:
            return
        fn = getattr(hook, name, None)
        if fn is None:
            return
        try:
            fn(ev)
        except Exception:
            self.hook_failures += 1
            log.exception("hook %s.%s failed", type(hook).__name__, name)

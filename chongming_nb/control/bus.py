"""The event bus: record first, then publish.

One recorder thread drains the controller's outbox in order: it writes each batch to the
store (when there is one) and only then hands the events to subscribers and lifecycle
hooks. A subscriber or hook that raises is isolated: counted, logged, never propagated
to a task.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from chongming_nb.core.events import Event

log = logging.getLogger("chongming_nb.bus")

Callback = Callable[[Event], None]
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


class EventBus:
    """Ordered, isolated delivery on one background thread."""

    def __init__(self, persist: Callable[[list[Any]], None] | None = None) -> None:
        self._subs: dict[int, tuple[Callback, Callable[[Event], bool] | None]] = {}
        self._next = 0
        self._queue: deque[Any] = deque()
        self._cond = threading.Condition()
        self._persist = persist
        self._closed = False
        self._idle = threading.Event()
        self._idle.set()
        self.subscriber_failures = 0
        self.hooks: list[Any] = []
        self.hook_failures = 0
        self._thread = threading.Thread(target=self._run, name="chongming-recorder", daemon=True)
        self._thread.start()

    def subscribe(self, callback: Callback, flt: EventFilter = None) -> Callable[[], None]:
        if not callable(callback):
            raise TypeError(f"watch() needs a callable, got {callback!r}")
        compiled = _compile_filter(flt)
        with self._cond:
            key = self._next
            self._next += 1
            self._subs[key] = (callback, compiled)

        def unsubscribe() -> None:
            with self._cond:
                self._subs.pop(key, None)

        return unsubscribe

    def put_many(self, items: list[Any]) -> None:
        """Queue items (events, or store writes tagged as tuples) in order."""
        if not items:
            return
        with self._cond:
            self._queue.extend(items)
            if self._idle.is_set():  # both flips happen under _cond: no race
                self._idle.clear()
            self._cond.notify()

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Block until everything queued so far has been recorded and published."""
        if threading.current_thread() is self._thread:
            return True
        return self._idle.wait(timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle.set()
                    self._cond.wait()
                if not self._queue and self._closed:
                    self._idle.set()
                    return
                batch = list(self._queue)
                self._queue.clear()
            if self._persist is not None:
                try:
                    self._persist(batch)
                except Exception:  # persistence failures are counted by the persister
                    log.exception("persisting a batch of %d records failed", len(batch))
            with self._cond:
                subs = list(self._subs.values())
            hooks = list(self.hooks)
            if not subs and not hooks:
                batch = []  # nobody listens: nothing to publish
            for item in batch:
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
            with self._cond:
                if not self._queue:
                    self._idle.set()

    def _call_hook(self, hook: Any, ev: Event) -> None:
        from chongming_nb.core.events import AttemptStarted, TaskStatusChanged
        from chongming_nb.core.states import TaskStatus

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

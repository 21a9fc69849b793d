"""Test doubles for the widget layer, so a widget (``TaskTable``) can run without a kernel
or a browser:

* :class:`FakeController` — an in-memory controller with the methods the widget and the
  magics use; its verbs go through the real state machine;
* :class:`RecordingComm` and :func:`recording_comms` — a comm that records what the widget
  sends instead of sending it;
* :func:`measure_update_traffic` — the widget's update traffic for a board of many busy
  tasks, in simulated time (the benchmark hook).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import comm
from comm.base_comm import BaseComm

from chongming_nb.control.book import status_event as _status_event
from chongming_nb.control.queries import TaskLister
from chongming_nb.core.clock import Clock
from chongming_nb.core.errors import TaskError, TaskNotFound
from chongming_nb.core.events import (
    Event,
    ProgressUpdated,
    TaskCreated,
    TaskLogLine,
)
from chongming_nb.core.models import Failure, FailureKind, Progress, TaskSnapshot, Transition
from chongming_nb.core.state_machine import CONTROL_VERBS, StateMachine
from chongming_nb.core.states import TaskStatus
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.stores.memory import matches
from chongming_nb.stores.protocol import LogRecord, TaskQuery
from chongming_nb.testing.clock import FakeClock

__all__ = [
    "FakeController",
    "FakeLog",
    "RecordingComm",
    "measure_update_traffic",
    "recording_comms",
]


#: A log line of ``FakeController.logs``: the store's own record.
FakeLog = LogRecord


@dataclass
class _Task:
    snap: TaskSnapshot
    logs: list[LogRecord] = field(default_factory=list)
    history: list[Transition] = field(default_factory=list)


class FakeController(TaskLister):
    """In-memory stand-in with the Controller methods the widget and magics use.

    Verbs go through the real core StateMachine, so ``can`` is the real rule. Events are
    delivered to watchers while the controller's lock is held (the harshest case for
    lock ordering in subscribers).
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.sm = StateMachine(clock)
        self._lock = threading.RLock()
        self._tasks: dict[str, _Task] = {}
        self._watchers: dict[int, Callable[[Event], None]] = {}
        self._ids = itertools.count(1)
        self._events = itertools.count(1)
        self.applied: list[tuple[str, str, str]] = []

    # ----------------------------------------------------------------- helpers

    def _emit(self, event: Event) -> None:
        for cb in list(self._watchers.values()):
            cb(event)

    def _eid(self) -> str:
        return f"e{next(self._events)}"

    def add(
        self,
        name: str,
        *,
        status: str = "queued",
        total: float | None = None,
        unit: str | None = "items",
        tags: frozenset[str] = frozenset(),
        pipeline_run_id: str | None = None,
        max_attempts: int = 1,
    ) -> TaskSnapshot:
        now = self.clock.now()
        st = TaskStatus(status)
        started = st in {
            TaskStatus.STARTING,
            TaskStatus.RUNNING,
            TaskStatus.PAUSING,
            TaskStatus.STOPPING,
            TaskStatus.SUCCEEDED,
            TaskStatus.FAILED,
        }
        with self._lock:
            tid = f"t{next(self._ids):06d}"
            snap = TaskSnapshot(
                task_id=tid,
                name=name,
                status=st,
                tags=tags,
                pipeline_run_id=pipeline_run_id,
                attempt=1 if started else 0,
                max_attempts=max_attempts,
                created_at=now,
                started_at=now if started else None,
                ended_at=now if st in {TaskStatus.SUCCEEDED, TaskStatus.FAILED} else None,
                progress=Progress(0, total, unit, None, now) if total is not None else None,
            )
            self._tasks[tid] = _Task(snap)
            self._emit(TaskCreated(event_id=self._eid(), at=now, task_id=tid, snapshot=snap))
            return snap

    def bump(self, task_id: str, by: float = 1.0, message: str | None = None) -> None:
        now = self.clock.now()
        with self._lock:
            t = self._tasks[task_id]
            p = t.snap.progress or Progress(0, None, None, None, now)
            prog = Progress(p.done + by, p.total, p.unit, message or p.message, now)
            t.snap = t.snap.evolve(progress=prog)
            self._emit(
                ProgressUpdated(event_id=self._eid(), at=now, task_id=task_id, progress=prog)
            )

    def log_line(self, task_id: str, line: str, stream: str = "stdout") -> None:
        now = self.clock.now()
        with self._lock:
            self._tasks[task_id].logs.append(LogRecord(now, stream, line))
            self._emit(
                TaskLogLine(event_id=self._eid(), at=now, task_id=task_id, stream=stream, line=line)
            )

    def fail(self, task_id: str, message: str, traceback: str | None = None) -> None:
        with self._lock:
            t = self._tasks[task_id]
            failure = Failure(FailureKind.EXCEPTION, message, traceback=traceback)
            self._set(t, *self.sm.mark_failed(t.snap, failure))

    def settle(self, task_id: str) -> None:
        """What the executor would do at the next checkpoint: PAUSING -> PAUSED,
        STOPPING -> STOPPED."""
        with self._lock:
            t = self._tasks[task_id]
            if t.snap.status is TaskStatus.PAUSING:
                self._set(t, *self.sm.confirm_paused(t.snap))
            elif t.snap.status is TaskStatus.STOPPING:
                self._set(t, *self.sm.confirm_stopped(t.snap))

    def _set(self, t: _Task, snap: TaskSnapshot, tr: Transition) -> None:
        t.snap = snap
        t.history.append(tr)
        self._emit(_status_event(tr, self._eid()))

    # ----------------------------------------------------------------- Controller API

    def get(self, task_id: str) -> TaskSnapshot:
        with self._lock:
            t = self._tasks.get(task_id)
            if t is None:
                raise TaskNotFound(task_id)
            return t.snap

    def _matching(self, query: TaskQuery, ids: list[str] | None) -> list[TaskSnapshot]:
        with self._lock:
            snaps = [t.snap for t in self._tasks.values()]
        if ids is not None:
            wanted = set(ids)
            snaps = [s for s in snaps if s.task_id in wanted]
        snaps = [s for s in reversed(snaps) if matches(query, s)]  # newest first
        return snaps if query.limit is None else snaps[: query.limit]

    def history(self, task_id: str) -> list[Transition]:
        """The transitions of a task made through this fake (its verbs, ``fail``,
        ``settle``), oldest first."""
        with self._lock:
            t = self._tasks.get(task_id)
            if t is None:
                raise TaskNotFound(task_id)
            return list(t.history)

    def can(self, task_id: str, verb: str) -> tuple[bool, str | None]:
        if verb not in CONTROL_VERBS:
            return False, f"unknown verb {verb!r}"
        with self._lock:
            t = self._tasks.get(task_id)
            if t is None:
                return False, f"no task {task_id!r}"
            return self.sm.can(t.snap, verb, force=verb == "retry")

    def can_all(self, task_id: str) -> dict[str, tuple[bool, str | None]]:
        return {verb: self.can(task_id, verb) for verb in CONTROL_VERBS}

    def apply(
        self, task_id: str, verb: str, *, actor: str = "ui", args: Any = None
    ) -> tuple[bool, str | None]:
        with self._lock:
            ok, why = self.can(task_id, verb)
            if not ok:
                return False, why
            t = self._tasks[task_id]
            try:
                if verb == "pause":
                    res = self.sm.request_pause(t.snap, actor=actor)
                elif verb == "resume":
                    res = self.sm.resume(t.snap, actor=actor)
                elif verb == "stop":
                    res = self.sm.request_stop(t.snap, actor=actor)
                elif verb == "retry":
                    res = self.sm.retry(t.snap, force=True, actor=actor)
                else:
                    res = self.sm.skip(t.snap, actor=actor)
            except TaskError as exc:
                return False, str(exc)
            self._set(t, *res)
            self.applied.append((task_id, verb, actor))
            return True, None

    def watch(self, callback: Callable[[Event], None], filter: Any = None) -> Callable[[], None]:
        with self._lock:
            key = id(callback) ^ next(self._events)
            self._watchers[key] = callback

        def unsubscribe() -> None:
            with self._lock:
                self._watchers.pop(key, None)

        return unsubscribe

    @property
    def watcher_count(self) -> int:
        with self._lock:
            return len(self._watchers)

    def logs(self, task_id: str, limit: int | None = None) -> list[LogRecord]:
        with self._lock:
            t = self._tasks.get(task_id)
            if t is None:
                raise TaskNotFound(task_id)
            out = list(t.logs)
        return out if limit is None else out[-limit:]

    def stats(self, **filter: Any) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.list_tasks(**filter):
            counts[s.status.value] = counts.get(s.status.value, 0) + 1
        return counts


# --------------------------------------------------------------------------- comms


class RecordingComm(BaseComm):
    """A comm that records what it would publish (thread-safe)."""

    def __init__(self, **kwargs: Any) -> None:
        self.published: list[tuple[str, Any]] = []
        self._rec_lock = threading.Lock()
        super().__init__(**kwargs)

    def publish_msg(
        self,
        msg_type: str,
        data: Any = None,
        metadata: Any = None,
        buffers: Any = None,
        **keys: Any,
    ) -> None:
        with self._rec_lock:
            self.published.append((msg_type, data))

    def custom_messages(self) -> list[dict[str, Any]]:
        """Contents of the custom messages sent to the front end, in order."""
        return self._sent("custom", "content")

    def state_updates(self) -> list[dict[str, Any]]:
        """The trait updates sent to the front end, in order."""
        return self._sent("update", "state")

    def _sent(self, method: str, key: str) -> list[dict[str, Any]]:
        with self._rec_lock:
            return [
                d[key]
                for t, d in self.published
                if t == "comm_msg" and isinstance(d, dict) and d.get("method") == method
            ]

    @property
    def is_closed(self) -> bool:
        return bool(self._closed)


@contextlib.contextmanager
def recording_comms() -> Iterator[list[RecordingComm]]:
    """Within the block, every new widget gets a :class:`RecordingComm`; the list
    collects them in creation order."""
    made: list[RecordingComm] = []
    original = comm.create_comm

    def create(**kwargs: Any) -> RecordingComm:
        c = RecordingComm(**kwargs)
        made.append(c)
        return c

    comm.create_comm = create
    try:
        yield made
    finally:
        comm.create_comm = original


def measure_update_traffic(
    n_tasks: int = 10_000,
    *,
    seconds: float = 10.0,
    tick: float = 0.02,
    updates_per_task_per_second: float = 10.0,
    max_rate: float = 10.0,
) -> dict[str, float]:
    """Benchmark hook: ``n_tasks`` tasks all reporting progress at once into one board,
    in simulated time (a FakeClock, a recording comm, a fake controller).

    Returns messages/s and bytes/s the widget sent (patches only), the mean patch size,
    the kernel CPU seconds spent per simulated second on the widget side (event intake
    plus flushing), and the number of events fed in.
    """
    clock = FakeClock()
    ctl = FakeController(clock=clock)
    ids = [ctl.add(f"task-{i}", status="running", total=1000.0).task_id for i in range(n_tasks)]
    with recording_comms():
        table = TaskTable(ctl, kind="board", clock=clock, max_rate=max_rate, autoflush=False)
        table.flush(force=True)
        rec = table.comm
        assert isinstance(rec, RecordingComm)
        base = len(rec.custom_messages())
        per_tick = max(1, int(n_tasks * updates_per_task_per_second * tick))
        steps = int(seconds / tick)
        cursor = 0
        events = 0
        cpu0 = time.process_time()
        for _ in range(steps):
            for _ in range(per_tick):
                ctl.bump(ids[cursor % n_tasks], 1.0)
                cursor += 1
                events += 1
            clock.advance(tick)
            table.flush()
        cpu = time.process_time() - cpu0
        sent = [m for m in rec.custom_messages()[base:] if m["type"] == "patch"]
        msgs = len(sent)
        nbytes = sum(len(json.dumps(m, separators=(",", ":"))) for m in sent)
        table.close()
    return {
        "n_tasks": float(n_tasks),
        "simulated_seconds": seconds,
        "events": float(events),
        "messages_per_s": msgs / seconds,
        "bytes_per_s": nbytes / seconds,
        "mean_patch_bytes": nbytes / msgs if msgs else 0.0,
        "cpu_s_per_s": cpu / seconds,
    }

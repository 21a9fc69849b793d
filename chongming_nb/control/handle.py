"""TaskHandle: a Future-like view of one task, plus its control verbs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator
from typing import Any, Protocol

from chongming_nb.control.bus import EventFilter
from chongming_nb.core.errors import TaskEvicted, TaskExecutionError
from chongming_nb.core.events import Event, TaskStatusChanged
from chongming_nb.core.models import AttemptRecord, Progress, TaskSnapshot
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores.protocol import LogRecord


class HasId(Protocol):
    """Anything that names a task by its ``id`` (a TaskHandle)."""

    @property
    def id(self) -> str: ...


#: A task, as the Controller's methods take it: its id or its handle.
TaskRef = str | HasId


class TaskControl(Protocol):
    """What a handle asks of its controller (``control.controller.Controller``; a
    Protocol here so that this module does not import the controller, which imports it)."""

    def get(self, task_id: TaskRef) -> TaskSnapshot: ...
    def running(self, task_id: TaskRef) -> bool: ...
    def wait(self, task_id: TaskRef, timeout: float | None = None) -> TaskSnapshot: ...
    def result(self, task_id: TaskRef) -> Any: ...
    def exception(self, task_id: TaskRef) -> BaseException | None: ...
    def watch(
        self, callback: Callable[[Event], None], filter: EventFilter = None
    ) -> Callable[[], None]: ...
    def pause(
        self, task_id: TaskRef, timeout: float | None = None, *, actor: str = ..., wait: bool = ...
    ) -> TaskSnapshot: ...
    def resume(self, task_id: TaskRef, *, actor: str = ...) -> TaskSnapshot: ...
    def stop(
        self,
        task_id: TaskRef,
        graceful: bool = True,
        timeout: float | None = None,
        *,
        actor: str = ...,
        reason: str | None = ...,
        wait: bool = ...,
    ) -> TaskSnapshot: ...
    def cancel(self, task_id: TaskRef, reason: str = ..., *, actor: str = ...) -> TaskSnapshot: ...
    def retry(self, task_id: TaskRef, force: bool = ..., *, actor: str = ...) -> TaskSnapshot: ...
    def skip(
        self, task_id: TaskRef, reason: str | None = ..., *, actor: str = ...
    ) -> TaskSnapshot: ...
    def reset(self, task_id: TaskRef, *, confirm: bool = ..., actor: str = ...) -> TaskSnapshot: ...
    def can(self, task_id: TaskRef, verb: str, *, force: bool = ...) -> tuple[bool, str | None]: ...
    def logs(self, task_id: TaskRef, limit: int | None = None) -> list[LogRecord]: ...
    def attempts(self, task_id: TaskRef) -> list[AttemptRecord]: ...
    def events(self, task_id: TaskRef) -> list[Event]: ...


class TaskHandle:
    """What ``submit`` returns. Cheap: it holds only the controller and the task id.

    It stays valid after its task finished and left the controller's memory
    (``HistoryLimits.memory_finished_tasks``): ``status`` and ``done()`` always answer;
    the snapshot, attempts, history and log are read from the store; the result is not
    kept (``result()`` raises TaskEvicted, naming the limit)."""

    __slots__ = ("_ctl", "id")

    def __init__(self, ctl: TaskControl, task_id: str) -> None:
        self._ctl = ctl
        self.id = task_id

    # --------------------------------------------------------------- state
    @property
    def controller(self) -> TaskControl:
        """The controller that runs this task."""
        return self._ctl

    @property
    def snapshot(self) -> TaskSnapshot:
        return self._ctl.get(self.id)

    @property
    def status(self) -> TaskStatus:
        try:
            return self._ctl.get(self.id).status
        except TaskEvicted as gone:  # finished, out of memory, no store: its status is kept
            return gone.status

    @property
    def name(self) -> str:
        return self._ctl.get(self.id).name

    @property
    def progress(self) -> Progress | None:
        return self._ctl.get(self.id).progress

    @property
    def running(self) -> bool:
        """True while an execution of this task is alive — including a thread that was
        abandoned after ignoring a stop (its status is LOST, but it still runs)."""
        return self._ctl.running(self.id)

    def done(self) -> bool:
        return self.status in TERMINAL

    # --------------------------------------------------------- future-like
    def wait(self, timeout: float | None = None) -> TaskSnapshot:
        """Block until terminal; TimeoutError after ``timeout``. No side effects."""
        return self._ctl.wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The return value; raises TaskExecutionError (with the task's exception as
        ``__cause__``) if it did not succeed."""
        snap = self._ctl.wait(self.id, timeout)
        if snap.status is TaskStatus.SUCCEEDED:
            return self._ctl.result(self.id)
        try:
            exc = self._ctl.exception(self.id)
        except TaskEvicted:  # out of memory: the failure below is all that is kept
            exc = None
        why = snap.failure.message if snap.failure else snap.status.value
        raise TaskExecutionError(
            f"task {snap.name} ({self.id}) {snap.status.value}: {why}"
        ) from exc

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._ctl.wait(self.id, timeout)
        return self._ctl.exception(self.id)

    def add_done_callback(self, fn: Callable[[TaskHandle], Any]) -> None:
        """Call ``fn(handle)`` once the task is terminal (at once if it already is)."""
        fired = threading.Event()

        def fire() -> None:
            if not fired.is_set():
                fired.set()
                fn(self)

        def on(ev: Event) -> None:
            if (
                isinstance(ev, TaskStatusChanged)
                and ev.task_id == self.id
                and ev.to_status in TERMINAL
            ):
                unsub()
                fire()

        unsub = self._ctl.watch(on, (TaskStatusChanged,))
        if self.done():
            unsub()
            fire()

    def __await__(self) -> Generator[Any, None, Any]:
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.result).__await__()

    # --------------------------------------------------------------- verbs
    def pause(self, timeout: float | None = None, *, wait: bool = False) -> TaskSnapshot:
        return self._ctl.pause(self.id, timeout, wait=wait)

    def resume(self) -> TaskSnapshot:
        return self._ctl.resume(self.id)

    def stop(
        self, graceful: bool = True, timeout: float | None = None, *, wait: bool = False
    ) -> TaskSnapshot:
        return self._ctl.stop(self.id, graceful, timeout, wait=wait)

    def cancel(self, reason: str = "cancelled") -> TaskSnapshot:
        return self._ctl.cancel(self.id, reason)

    def retry(self, force: bool = False) -> TaskSnapshot:
        return self._ctl.retry(self.id, force)

    def skip(self, reason: str | None = None) -> TaskSnapshot:
        return self._ctl.skip(self.id, reason)

    def reset(self, *, confirm: bool = False) -> TaskSnapshot:
        return self._ctl.reset(self.id, confirm=confirm)

    def can(self, verb: str) -> tuple[bool, str | None]:
        return self._ctl.can(self.id, verb)

    # ------------------------------------------------------------- history
    def logs(self, limit: int | None = None) -> list[LogRecord]:
        return self._ctl.logs(self.id, limit)

    def attempts(self) -> list[AttemptRecord]:
        return self._ctl.attempts(self.id)

    def events(self) -> list[Event]:
        return self._ctl.events(self.id)

    # ------------------------------------------------------------- display
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        from chongming_nb.control import display

        return display.bundle(self, self._ctl, task_ids=[self.id], kind="task", title=self.name)

    def _ipython_display_(self) -> None:
        from chongming_nb.control import display

        display.show(self, self._ctl, task_ids=[self.id], kind="task", title=self.name)

    def __repr__(self) -> str:
        try:
            s = self._ctl.get(self.id)
        except TaskEvicted as gone:
            return f"<TaskHandle id={self.id} {gone.status.value} (out of memory)>"
        prog = ""
        if s.progress is not None:
            total = f"/{s.progress.total:g}" if s.progress.total is not None else ""
            prog = f" {s.progress.done:g}{total}"
        att = f"attempt {s.attempt}/{s.max_attempts}"
        return f"<TaskHandle {s.name} id={self.id} {s.status.value}{prog} {att}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskHandle) and other.id == self.id and other._ctl is self._ctl

    def __hash__(self) -> int:
        return hash(self.id)

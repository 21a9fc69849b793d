"""The exception tree. Everything the library raises on purpose derives from TaskError::

    TaskError
     ├── InvalidTransition          (current, requested, allowed)
     ├── AttemptsExhausted          (attempt, max_attempts)
     ├── DependencyFailed           (upstream_ids)
     ├── TaskTimeout                (scope: start | attempt | idle)
     ├── TaskExecutionError         (wraps a user exception; keeps __cause__)
     ├── ConcurrencyConflict        (expected, actual)
     ├── StoreError                 (path or url)
     ├── TaskNotFound               (task_id)
     │    └── TaskEvicted           (status, kept): finished, out of the kernel's memory
     ├── ConfigurationError
     │    ├── UnknownDependency     (node, missing)
     │    └── CircularDependency    (cycle)
     ├── RetryableError             (raise from a task: always retried while budget lasts)
     └── FatalError                 (raise from a task: never retried)

    BaseException
     └── TaskCancelled              (raised by ctx.checkpoint() when a stop was requested)
          └── Stopped               (a tracked loop in a cell stopped at an item boundary)

``TaskCancelled`` deliberately sits outside the tree, under ``BaseException`` like
``KeyboardInterrupt`` and trio's ``Cancelled``: task code very often says
``except Exception:`` to log-and-continue, and a stop request swallowed there would
turn a cooperative stop into an abandoned thread. Code that must clean up on a stop
uses ``finally`` or ``except TaskCancelled: ...; raise``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chongming_nb.core.states import TaskStatus


class TaskError(Exception):
    """Root of every error chongming_nb raises on purpose."""


class InvalidTransition(TaskError):
    """A requested change is not allowed from the current state. Nothing was changed."""

    def __init__(
        self,
        current: TaskStatus,
        requested: str,
        allowed: Iterable[str],
        detail: str | None = None,
        task_id: str | None = None,
    ) -> None:
        self.current = current
        self.requested = requested
        self.allowed = tuple(sorted(str(a) for a in allowed))
        self.detail = detail
        self.task_id = task_id
        where = f"task {task_id}: " if task_id else ""
        allowed_txt = ", ".join(self.allowed) if self.allowed else "nothing"
        msg = f"{where}cannot {requested} from {current.value} (allowed from here: {allowed_txt})"
        if detail:
            msg += f"; {detail}"
        super().__init__(msg)


class AttemptsExhausted(TaskError):
    """Starting another attempt would exceed ``max_attempts``."""

    def __init__(self, attempt: int, max_attempts: int, task_id: str | None = None) -> None:
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.task_id = task_id
        where = f"task {task_id}: " if task_id else ""
        super().__init__(
            f"{where}attempts exhausted ({attempt}/{max_attempts}); "
            "retry(force=True) grants one more"
        )


class DependencyFailed(TaskError):
    """An upstream task did not succeed, so this one will not run."""

    def __init__(self, upstream_ids: Sequence[str], message: str = "") -> None:
        self.upstream_ids = tuple(upstream_ids)
        super().__init__(message or f"upstream did not succeed: {', '.join(self.upstream_ids)}")


class TaskTimeout(TaskError):
    """A timeout fired. ``scope`` is one of ``start``, ``attempt`` or ``idle``."""

    def __init__(self, scope: str, seconds: float) -> None:
        self.scope = scope
        self.seconds = seconds
        super().__init__(f"{scope} timeout after {seconds:g}s")


class TaskExecutionError(TaskError):
    """Wraps an exception raised by user code; the original is ``__cause__``."""


class ConcurrencyConflict(TaskError):
    """An optimistic write found another version than expected (a bug: one writer per task)."""

    def __init__(self, task_id: str, expected: int, actual: int | None) -> None:
        self.task_id = task_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"task {task_id}: expected status_version {expected}, store has {actual}")


class StoreError(TaskError):
    """The store could not do what was asked (corrupt, unwritable, newer schema, ...)."""


class TaskNotFound(TaskError, KeyError):
    """No task with this id."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        TaskError.__init__(self, f"no task with id {task_id!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class TaskEvicted(TaskNotFound):
    """A finished task left the controller's memory (it keeps the newest ``kept``
    finished tasks: ``HistoryLimits.memory_finished_tasks``). Its ``status`` is still
    known; the rest is read from the store if there is one; its result is not kept."""

    def __init__(self, task_id: str, status: TaskStatus, kept: int, what: str) -> None:
        self.task_id = task_id
        self.status = status
        self.kept = kept
        TaskError.__init__(
            self,
            f"task {task_id} {status.value} and left the controller's memory (it keeps the "
            f"newest {kept:,} finished tasks: HistoryLimits(memory_finished_tasks=...)); "
            f"{what}",
        )


class ConfigurationError(TaskError):
    """Bad definition or arguments: caught before any work starts."""


class UnknownDependency(ConfigurationError):
    """A node depends on something that is not defined."""

    def __init__(self, node: str, missing: Sequence[str]) -> None:
        self.node = node
        self.missing = tuple(missing)
        super().__init__(f"{node!r} depends on unknown {', '.join(repr(m) for m in self.missing)}")


class CircularDependency(ConfigurationError):
    """The dependencies form a cycle; ``cycle`` is the path, first node repeated at the end."""

    def __init__(self, cycle: Sequence[str]) -> None:
        self.cycle = tuple(cycle)
        super().__init__("dependency cycle: " + " -> ".join(self.cycle))


class RetryableError(TaskError):
    """Raise from a task to ask for a retry (while the attempt budget lasts)."""


class FatalError(TaskError):
    """Raise from a task to fail it at once, whatever the retry policy says."""


class TaskCancelled(BaseException):
    """Raised inside a task by ``checkpoint()`` when a stop was requested.

    Derives from BaseException on purpose; see the module docstring.
    """


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def _count(n: float) -> str:
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.2f}"


@dataclass(eq=False, repr=False)
class Stopped(TaskCancelled):
    """A tracked loop (``cn.track``, ``cn.tqdm``) was stopped at an item boundary.

    Raised in the loop's own thread before the next item, so no item is half done.
    IPython shows ``_render_traceback_()`` instead of a traceback: one neutral line.
    """

    name: str
    done: float
    total: float | None
    elapsed: float
    by: str = "you"
    task_id: str | None = None

    def __post_init__(self) -> None:
        at = _count(self.done)
        if self.total:
            at += f" / {_count(self.total)} ({100.0 * self.done / self.total:.0f}%)"
        super().__init__(
            f"{self.name}: stopped by {self.by} at {at} after {_duration(self.elapsed)}"
        )

    def _render_traceback_(self) -> list[str]:
        return [str(self)]

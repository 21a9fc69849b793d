"""chongming_nb: a task controller inside the Jupyter kernel, and the notebook UI around it.

The curated public namespace. Everything a user or a test relies on is here and in
``__all__`` (a test keeps the two in step).
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

from chongming_nb.control import display as _display
from chongming_nb.core.errors import (
    AttemptsExhausted,
    CircularDependency,
    ConcurrencyConflict,
    ConfigurationError,
    DependencyFailed,
    FatalError,
    InvalidTransition,
    RetryableError,
    Stopped,
    StoreError,
    TaskCancelled,
    TaskError,
    TaskEvicted,
    TaskExecutionError,
    TaskNotFound,
    TaskTimeout,
    UnknownDependency,
)
from chongming_nb.core.models import (
    AttemptRecord,
    Command,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.core.states import (
    REVIVABLE,
    TERMINAL,
    TRANSITIONS,
    RequestedAction,
    TaskStatus,
)

if TYPE_CHECKING:
    from chongming_nb.control.controller import Controller
    from chongming_nb.control.handle import TaskHandle
    from chongming_nb.control.kernel import get_controller
    from chongming_nb.control.pipeline import Node, Pipeline, PipelineRun, PipelineRunStatus
    from chongming_nb.control.reader import StoreReader, open_store
    from chongming_nb.control.spec import TaskRegistry, TaskSpec, task
    from chongming_nb.core.events import (
        AdminOverride,
        AttemptFailed,
        AttemptStarted,
        CompensationRan,
        Event,
        PipelineRunStatusChanged,
        ProgressUpdated,
        TaskCreated,
        TaskHeartbeat,
        TaskLogLine,
        TaskOutput,
        TaskStatusChanged,
        TaskWarning,
    )
    from chongming_nb.core.graph import Graph
    from chongming_nb.core.policies import (
        AggregationPolicy,
        BucketPolicy,
        ConcurrencyPolicy,
        Exponential,
        HistoryLimits,
        JoinMode,
        RetentionPolicy,
        RetryPolicy,
        Timeout,
    )
    from chongming_nb.notebook.track import tqdm, track, trange
    from chongming_nb.pictures.timeline import Timeline
    from chongming_nb.runtime.cancellation import CancellationToken
    from chongming_nb.runtime.context import TaskContext
    from chongming_nb.runtime.executors import InlineExecutor, ThreadExecutor
    from chongming_nb.runtime.executors.dask import DaskExecutor as DaskExecutor
    from chongming_nb.runtime.executors.process import ProcessExecutor
    from chongming_nb.stores import InMemoryStore, SqliteStore
    from chongming_nb.stores.postgres import PostgresStore as PostgresStore

#: Names loaded on first use, by module. The states, models, errors and state machine
#: above are all the ``chongming`` CLI needs: it must not pay for the controller, the
#: executors and asyncio at every start (command-to-applied latency, issue 5).
_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    "chongming_nb.control.controller": ("Controller",),
    "chongming_nb.control.handle": ("TaskHandle",),
    "chongming_nb.control.kernel": ("get_controller",),
    "chongming_nb.control.pipeline": ("Node", "Pipeline", "PipelineRun", "PipelineRunStatus"),
    "chongming_nb.control.reader": ("StoreReader", "open_store"),
    "chongming_nb.control.spec": ("TaskRegistry", "TaskSpec", "task"),
    "chongming_nb.core.events": (
        "AdminOverride",
        "AttemptFailed",
        "AttemptStarted",
        "CompensationRan",
        "Event",
        "PipelineRunStatusChanged",
        "ProgressUpdated",
        "TaskCreated",
        "TaskHeartbeat",
        "TaskLogLine",
        "TaskOutput",
        "TaskStatusChanged",
        "TaskWarning",
    ),
    "chongming_nb.core.graph": ("Graph",),
    "chongming_nb.notebook.track": ("track", "tqdm", "trange"),
    "chongming_nb.core.policies": (
        "AggregationPolicy",
        "BucketPolicy",
        "ConcurrencyPolicy",
        "Exponential",
        "HistoryLimits",
        "JoinMode",
        "RetentionPolicy",
        "RetryPolicy",
        "Timeout",
    ),
    "chongming_nb.runtime.cancellation": ("CancellationToken",),
    "chongming_nb.runtime.context": ("TaskContext",),
    "chongming_nb.runtime.executors": ("InlineExecutor", "ThreadExecutor"),
    "chongming_nb.stores": ("InMemoryStore", "SqliteStore"),
}
_LAZY: dict[str, str] = {n: m for m, names in _LAZY_MODULES.items() for n in names}

__version__ = "0.1.0"


def _bundle(ctl: object, **kw: object) -> object:
    from chongming_nb.notebook.display import task_bundle

    return task_bundle(ctl, **kw)


def _board(ctl: object, **filters: object) -> object:
    from chongming_nb.notebook.display import board

    return board(ctl, **filters)


def _show(ctl: object, **kw: object) -> None:
    from chongming_nb.notebook.display import show

    show(ctl, **kw)


def _show_timeline(first: "Timeline", refresh: Callable[[], "Timeline"]) -> None:
    from chongming_nb.notebook.pictures import show_live_timeline

    show_live_timeline(first, refresh)


_display.set_renderer(_bundle, _board, _show, _show_timeline)


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext chongming_nb``: the %%task, %tasks and %task magics."""
    from chongming_nb.notebook.magics import load_ipython_extension as _load

    _load(ipython)


def __getattr__(name: str) -> object:
    lazy = _LAZY.get(name)
    if lazy is not None:
        import importlib

        value = getattr(importlib.import_module(lazy), name)
        globals()[name] = value  # once loaded, a plain module attribute
        return value
    # optional backends load their dependencies only when asked for
    if name == "PostgresStore":
        from chongming_nb.stores.postgres import PostgresStore

        return PostgresStore
    if name == "ProcessExecutor":
        from chongming_nb.runtime.executors.process import ProcessExecutor

        return ProcessExecutor
    if name == "DaskExecutor":
        from chongming_nb.runtime.executors.dask import DaskExecutor

        return DaskExecutor
    if name == "Pipeline":
        from chongming_nb.control.pipeline import Pipeline

        return Pipeline
    raise AttributeError(f"module 'chongming_nb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "REVIVABLE",
    "TERMINAL",
    "TRANSITIONS",
    "AdminOverride",
    "AggregationPolicy",
    "AttemptFailed",
    "AttemptRecord",
    "AttemptStarted",
    "AttemptsExhausted",
    "BucketPolicy",
    "CancellationToken",
    "CircularDependency",
    "Command",
    "CompensationRan",
    "ConcurrencyConflict",
    "ConcurrencyPolicy",
    "ConfigurationError",
    "Controller",
    "DependencyFailed",
    "Event",
    "Exponential",
    "Failure",
    "FailureKind",
    "FatalError",
    "Graph",
    "HistoryLimits",
    "InMemoryStore",
    "InlineExecutor",
    "InvalidTransition",
    "JoinMode",
    "Node",
    "Pipeline",
    "PipelineRun",
    "PipelineRunStatus",
    "PipelineRunStatusChanged",
    "ProcessExecutor",
    "Progress",
    "ProgressUpdated",
    "RequestedAction",
    "RetentionPolicy",
    "RetryPolicy",
    "RetryableError",
    "SqliteStore",
    "StateMachine",
    "Stopped",
    "StoreError",
    "StoreReader",
    "TaskCancelled",
    "TaskContext",
    "TaskCreated",
    "TaskError",
    "TaskEvicted",
    "TaskExecutionError",
    "TaskHandle",
    "TaskHeartbeat",
    "TaskLogLine",
    "TaskNotFound",
    "TaskOutput",
    "TaskRegistry",
    "TaskSnapshot",
    "TaskSpec",
    "TaskStatus",
    "TaskStatusChanged",
    "TaskTimeout",
    "TaskWarning",
    "ThreadExecutor",
    "Timeout",
    "Transition",
    "UnknownDependency",
    "__version__",
    "get_controller",
    "open_store",
    "task",
    "tqdm",
    "track",
    "trange",
]

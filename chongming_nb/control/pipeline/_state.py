"""What the modules below ``_run.py`` share of a pipeline run (a Protocol, so that they
need not import ``_run``, which imports them): ``RunState``, the per-task and per-node
records (``TaskInfo``, ``NodeRun``) and the run's compensations (``Compensations``).

``_run.PipelineRun`` is the one implementation; every field is guarded by its ``_lock``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chongming_nb.control.pipeline._node import Node, PipelineShape
from chongming_nb.control.pipeline._serializer import Serializer
from chongming_nb.control.pipeline._status import PipelineRunStatus
from chongming_nb.core.policies import AggregationPolicy
from chongming_nb.core.states import TaskStatus

if TYPE_CHECKING:
    from chongming_nb.control.controller import Controller

__all__ = ["Compensations", "NodeRun", "RunState", "TaskInfo"]


@dataclass(slots=True)
class TaskInfo:
    node: str
    role: str  # node | expander | child | collector
    deps: tuple[str, ...]
    index: int | None = None


@dataclass(slots=True)
class NodeRun:
    node: Node
    task_id: str | None = None  # the node's task (a map: its collector)
    expander: str | None = None
    children: list[str] = field(default_factory=list)
    restored: bool = False
    output: Path | None = None
    saved: bool = False


class Compensations(Protocol):
    """What a run's record reads of its rollback (``_rollback.Rollback``)."""

    compensated: set[str]  # task ids
    entries: list[dict[str, Any]]  # node, task_id, ok, error — in order


class RunState(Protocol):
    """The fields and lookups of one run that building, recording, resuming, rolling
    back and sleeping use (``_run.PipelineRun``)."""

    @property
    def pipeline(self) -> PipelineShape: ...
    @property
    def _rollback(self) -> Compensations: ...

    name: str
    ctl: Controller
    mode: str | None
    rollback_on_failure: bool
    policy: AggregationPolicy
    resumed_from: str | None
    id: str
    created_at: datetime
    outputs_dir: Path | None
    _lock: threading.RLock
    _now: Callable[[], datetime]
    _nodes: dict[str, NodeRun]
    _tasks: dict[str, TaskInfo]
    _dependants: dict[str, list[str]]
    _status: dict[str, tuple[int, TaskStatus]]
    _counts: Counter[TaskStatus]
    _open: int
    _waiting: list[str]
    _first_failure: str | None
    _success_order: dict[str, None]
    _wakes: dict[str, datetime]
    _run_status: PipelineRunStatus
    _done: threading.Event
    _record_at: float
    _limit_tags: list[str]

    def _serializer(self, node: Node) -> Serializer: ...
    def _downstream(self, tid: str) -> set[str]: ...
    def _node_status(self, name: str) -> TaskStatus | None: ...
    def _count_values(self) -> dict[str, int]: ...
    def _label(self, tid: str) -> str: ...

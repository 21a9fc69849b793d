"""``PipelineRun``: one run of a Pipeline on a Controller.

It creates the run's tasks as their dependencies come to exist, folds every status change
of them into the run (fail-fast, map expansion, the aggregated status) and passes run-level
pause / resume / stop on to its tasks.

Locking: ``_lock`` (re-entrant) guards every field of the run; the controller calls
``_on_status`` on its recorder thread and the run takes the lock there. ``RunWhen`` is
called under the controller's lock at release and takes no run lock.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chongming_nb.control import display
from chongming_nb.control.pipeline._build import expand, materialize
from chongming_nb.control.pipeline._node import Node, PipelineShape
from chongming_nb.control.pipeline._record import (
    append_manifest,
    run_frame,
    run_summary,
    save_record,
)
from chongming_nb.control.pipeline._resume import RUNS, Previous, artifacts_root
from chongming_nb.control.pipeline._rollback import Rollback
from chongming_nb.control.pipeline._serializer import Serializer
from chongming_nb.control.pipeline._state import NodeRun, TaskInfo
from chongming_nb.control.pipeline._status import FAILURES, RUN_TERMINAL, PipelineRunStatus
from chongming_nb.core.errors import ConfigurationError, InvalidTransition, TaskNotFound
from chongming_nb.core.events import PipelineRunStatusChanged, TaskWarning
from chongming_nb.core.models import FailureKind
from chongming_nb.core.policies import AggregationKind
from chongming_nb.core.states import STATUS, TERMINAL, UNOCCUPIED, TaskStatus
from chongming_nb.pictures import GraphPicture, Timeline, from_source, layout, nodes_of
from chongming_nb.pictures.graph import node_spec

if TYPE_CHECKING:
    import pandas as pd

    from chongming_nb.control.controller import Controller
    from chongming_nb.control.handle import TaskHandle

__all__ = ["PipelineRun"]

log = logging.getLogger("chongming_nb.pipeline")

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)


class PipelineRun:
    """One run of a Pipeline on a Controller (what ``Pipeline.submit`` returns)."""

    def __init__(
        self,
        pipeline: PipelineShape,
        ctl: Controller,
        nodes: list[Node],
        mode: str | None,
        rollback: bool,
        previous: Previous | None,
    ) -> None:
        self.pipeline = pipeline
        self.name = pipeline.name
        self.ctl = ctl
        self.mode = mode
        self.rollback_on_failure = rollback
        self.policy = pipeline.on_failure
        self.resumed_from = previous.run_id if previous else None
        self._previous = previous
        self.id = f"run-{secrets.token_hex(5)}"
        self._lock = threading.RLock()
        self._now = ctl._clock.now
        self._nodes: dict[str, NodeRun] = {n.name: NodeRun(n) for n in nodes}
        self._tasks: dict[str, TaskInfo] = {}
        self._dependants: dict[str, list[str]] = {}
        self._status: dict[str, tuple[int, TaskStatus]] = {}
        self._counts: Counter[TaskStatus] = Counter()
        self._open = 0
        self._waiting: list[str] = [n.name for n in nodes]
        self._submitting = True
        self._halted = False
        self._paused = False
        self._stop_requested = False
        self._stop_args: tuple[bool, float | None] = (True, None)
        self._first_failure: str | None = None
        self._success_order: dict[str, None] = {}
        self._rollback = Rollback(self)
        # node -> the time it waits until, fixed once (here or in the run resumed from):
        # a sleep step's wake time (when it first started), a delayed step's start time
        # (when the run first created its task)
        self._wakes: dict[str, datetime] = dict(previous.wakes) if previous else {}
        self._run_status = PipelineRunStatus.RUNNING
        self._published: PipelineRunStatus | None = None
        self._done = threading.Event()
        self._record_at = 0.0
        self._unsub: Callable[[], None] | None = None
        self._limit_tags: list[str] = []
        self.created_at = self._now()
        self.outputs_dir: Path | None = (
            artifacts_root(ctl) / "pipelines" / self.id if pipeline.persist_outputs else None
        )

    # ------------------------------------------------------------ starting

    def _start(self) -> None:
        ctl = self.ctl
        restored: dict[str, Any] = {}
        warnings: dict[str, str] = {}
        if self._previous is not None:
            for name, nr in self._nodes.items():
                path = self._previous.outputs.get(name)
                if path is None:
                    continue
                try:
                    restored[name] = self._serializer(nr.node).load(path)
                    nr.restored = True
                    nr.output = path
                except Exception as exc:
                    warnings[name] = (
                        f"could not restore the output of node {name!r} from run "
                        f"{self._previous.run_id} ({type(exc).__name__}: {exc}); running it again"
                    )
                    log.warning("%s", warnings[name])
        RUNS[self.id] = self
        self._unsub = ctl._observe_run(self.id, self._on_status)
        ctl.hold_run(self.id)
        if self.policy.kind is AggregationKind.FAIL_FAST:
            ctl.hold_run_on(self.id, FAILURES)
        try:
            with self._lock:
                materialize(self, restored)
                for name, msg in warnings.items():
                    tid = self._nodes[name].task_id or self._nodes[name].expander
                    ctl.record_event(
                        TaskWarning(
                            event_id=ctl.new_event_id(), at=self._now(), task_id=tid, message=msg
                        )
                    )
                self._submitting = False
                for tid in list(self._tasks):
                    snap = ctl.get(tid)
                    self._observe(tid, snap.status_version, snap.status)
                append_manifest(self, {"event": "run", "run_id": self.id, "name": self.name})
                self._refresh()
                save_record(self, force=True)
        except BaseException:
            # nothing was validated wrong (that happened before): e.g. a closed controller
            self._abort()
            raise
        ctl.hold_run(self.id, held=self._paused or self._stop_requested or self._halted)

    def _abort(self) -> None:
        self._stop_requested = True
        for tid in reversed(list(self._tasks)):
            with contextlib.suppress(Exception):
                self.ctl.stop(tid, graceful=False)
        self._cleanup()

    def _serializer(self, node: Node) -> Serializer:
        return node.serializer or self.pipeline.serializer

    # ------------------------------------------------------------ observing

    def _on_status(self, tid: str, version: int, status: TaskStatus) -> None:
        """The controller's recorder thread: one status change of one of our tasks."""
        if self._submitting or tid not in self._tasks:
            # the submit holds the run lock while it creates the tasks; it reads their
            # snapshots once done, which covers this change: do not stall the bus
            return
        try:
            with self._lock:
                self._observe(tid, version, status)
        except Exception:
            log.exception("pipeline run %s: handling a status change of %s failed", self.id, tid)

    def _observe(self, tid: str, version: int, status: TaskStatus) -> None:
        """Fold one (task, version, status) into the run and react to it."""
        if self._submitting:
            return  # synced from snapshots once every task of the submit exists
        prev = self._status.get(tid)
        if prev is not None and prev[0] >= version:
            return
        self._status[tid] = (version, status)
        old = prev[1] if prev is not None else None
        if old is not None:
            self._counts[old] -= 1
        self._counts[status] += 1
        was_open = old is None or old not in TERMINAL
        if was_open and status in TERMINAL:
            self._open -= 1
        elif not was_open and status not in TERMINAL:
            self._open += 1  # revived by hand (retry) while the run is busy
        info = self._tasks[tid]
        ctl = self.ctl
        if status is S.SUCCEEDED:
            self._success_order.pop(tid, None)
            self._success_order[tid] = None
            if info.role == "expander":
                expand(self, info.node, tid)
                materialize(self)
            elif info.role in ("node", "collector"):
                self._node_succeeded(info.node)
                materialize(self)
        elif status in TERMINAL and info.role == "expander":
            materialize(self)  # dependants are created against the expander: they see why
        if status in FAILURES:
            if self._first_failure is None:
                self._first_failure = tid
            if self.policy.kind is AggregationKind.FAIL_FAST and not self._halted:
                self._halted = True
                self._fail_fast(tid)
        if status in UNOCCUPIED and status is not S.PENDING:
            if self._halted:
                self._cancel(tid, self._first_failure)
            elif self._stop_requested:
                graceful, grace = self._stop_args
                with contextlib.suppress(InvalidTransition, TaskNotFound):
                    ctl.stop(tid, graceful, grace, reason=f"pipeline run {self.id} stopped")
            elif self._paused and status is S.QUEUED:
                with contextlib.suppress(InvalidTransition, TaskNotFound):
                    ctl.pause(tid)
        self._refresh()

    def _downstream(self, tid: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self._dependants.get(tid, ()))
        while stack:
            t = stack.pop()
            if t not in seen:
                seen.add(t)
                stack.extend(self._dependants.get(t, ()))
        return seen

    def _fail_fast(self, failed: str) -> None:
        """FAIL_FAST: the controller already holds the run; cancel what has not started,
        downstream of the failure first (dependency_failed), the rest as cancelled."""
        below = self._downstream(failed)
        for tid in reversed(list(self._tasks)):
            st = self._status.get(tid)
            if st is not None and st[1] in UNOCCUPIED:
                self._cancel(tid, failed, below)

    def _cancel(self, tid: str, failed: str | None, below: set[str] | None = None) -> None:
        fname = self._label(failed) if failed else "a node"
        if below is None and failed is not None:
            below = self._downstream(failed)
        down = below is not None and tid in below
        kind = FailureKind.DEPENDENCY_FAILED if down else FailureKind.CANCELLED
        reason = (
            f"fail_fast: upstream {fname!r} failed"
            if down
            else f"fail_fast: pipeline run stopped after {fname!r} failed"
        )
        with contextlib.suppress(InvalidTransition, TaskNotFound):
            # the run is held, so an unoccupied task cannot start meanwhile; a running
            # one is left to finish (fail-fast stops dispatching, it does not kill)
            if self.ctl.get(tid).status in UNOCCUPIED:
                self.ctl.cancel(tid, reason, actor="orchestrator", kind=kind)

    def _node_succeeded(self, name: str) -> None:
        nr = self._nodes[name]
        if nr.output is not None and not nr.saved:
            if nr.restored:
                nr.saved = True
            else:
                nr.saved = nr.output.exists()
        if nr.saved and nr.output is not None:
            append_manifest(self, {"event": "succeeded", "node": name, "output": str(nr.output)})
        save_record(self)

    # ------------------------------------------------------------ aggregate

    def _node_status(self, name: str) -> TaskStatus | None:
        nr = self._nodes[name]
        tid = nr.task_id or nr.expander
        if tid is None:
            return None
        st = self._status.get(tid)
        return st[1] if st else None

    def _compute(self) -> PipelineRunStatus:
        R = PipelineRunStatus
        if self._submitting or self._open > 0 or self._waiting:
            if self._stop_requested:
                return R.STOPPING
            if self._paused:
                return R.PAUSED
            return R.RUNNING
        if self._stop_requested:
            return R.STOPPED
        if self.policy.kind is AggregationKind.QUORUM:
            ok = sum(1 for n in self._nodes if self._node_status(n) is S.SUCCEEDED)
            return R.SUCCEEDED if ok >= (self.policy.n or 0) else R.FAILED
        good = self._counts[S.SUCCEEDED] + self._counts[S.SKIPPED]
        return R.SUCCEEDED if good == len(self._tasks) else R.FAILED

    def _refresh(self) -> None:
        new = self._compute()
        if new == self._published:
            return
        before = self._published
        self._published = new
        self._run_status = new
        self.ctl.record_event(
            PipelineRunStatusChanged(
                event_id=self.ctl.new_event_id(),
                at=self._now(),
                run_id=self.id,
                from_status=before.value if before else None,
                to_status=new.value,
                counts=self._count_values(),
            )
        )
        if new in RUN_TERMINAL:
            self._finish(new)
        else:
            save_record(self, force=True)

    def _count_values(self) -> dict[str, int]:
        return {s.value: n for s, n in self._counts.items() if n}

    def _finish(self, status: PipelineRunStatus) -> None:
        self._cleanup()
        save_record(self, force=True)
        if status is PipelineRunStatus.FAILED and self.rollback_on_failure:
            self._rollback.start()
        else:
            self._done.set()

    def _cleanup(self) -> None:
        # a finished run stops listening: retrying one of its tasks by hand is that
        # task's business; to run the pipeline again, submit(resume_from=run.id)
        if self._unsub is not None:
            self._unsub()
            self._unsub = None
        self.ctl.forget_run(self.id)
        for tag in self._limit_tags:
            self.ctl.set_run_limit(tag, None)
        self._limit_tags = []

    # ---------------------------------------------------------- compensation

    def rollback(self, wait: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Run the compensations of the succeeded nodes now (reverse order of success,
        each at most once), e.g. after ``stop()`` or an ALL_SETTLED failure. Refused
        while the run is still busy."""
        with self._lock:
            if self._run_status not in RUN_TERMINAL:
                raise ConfigurationError(
                    f"run {self.id} is {self._run_status.value}: stop it or wait before rollback"
                )
            self._done.clear()
            self._rollback.start()
        if wait:
            self.wait(timeout)
        return self.compensations

    @property
    def compensations(self) -> list[dict[str, Any]]:
        """What rollback did, in order: node, task_id, ok, error."""
        with self._lock:
            return [dict(c) for c in self._rollback.entries]

    # ---------------------------------------------------------------- public

    @property
    def status(self) -> PipelineRunStatus:
        return self._run_status

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> PipelineRunStatus:
        """Block until the run is over (compensations included); TimeoutError after
        ``timeout`` seconds. No side effects."""
        if not self._done.wait(timeout):
            raise TimeoutError(
                f"pipeline run {self.id} ({self.name}) still {self._run_status.value} "
                f"after {timeout}s: {self._count_values()}"
            )
        return self._run_status

    def task_ids(self) -> list[str]:
        """Every task of the run, in creation order."""
        with self._lock:
            return list(self._tasks)

    def handle(self, node: Node | str) -> TaskHandle:
        """The TaskHandle standing for a node (a map: its collector)."""
        name = node.name if isinstance(node, Node) else node
        with self._lock:
            if name not in self._nodes:
                raise KeyError(f"run {self.id} has no node {name!r}")
            nr = self._nodes[name]
            tid = nr.task_id or nr.expander
        if tid is None:
            raise KeyError(f"node {name!r} has no task yet (its items are not known)")
        return self.ctl.handle(tid)

    def result(self, node: Node | str, timeout: float | None = None) -> Any:
        return self.handle(node).result(timeout)

    def pause(self) -> None:
        """Stop dispatching the run's tasks and pause every one that can be paused
        (queued ones at once, running ones at their next checkpoint)."""
        with self._lock:
            if self._run_status in RUN_TERMINAL or self._stop_requested:
                return
            self._paused = True
            self.ctl.hold_run(self.id)
            for tid in list(self._tasks):
                if self.ctl.can(tid, "pause")[0]:
                    with contextlib.suppress(InvalidTransition, TaskNotFound):
                        self.ctl.pause(tid)
            self._refresh()

    def resume(self) -> None:
        """Undo ``pause()``: resume every paused task and dispatch again."""
        with self._lock:
            if not self._paused:
                return
            self._paused = False
            for tid in list(self._tasks):
                st = self.ctl.get(tid).status
                if st in (S.PAUSED, S.PAUSING):
                    with contextlib.suppress(InvalidTransition, TaskNotFound):
                        self.ctl.resume(tid)
            if not self._halted:
                self.ctl.hold_run(self.id, held=False)
            self._refresh()

    def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stop every non-terminal task of the run (downstream first, so each ends
        STOPPED) and dispatch nothing more."""
        with self._lock:
            if self._run_status in RUN_TERMINAL:
                return
            self._stop_requested = True
            self._stop_args = (graceful, timeout)
            self.ctl.hold_run(self.id)
            for tid in reversed(list(self._tasks)):
                if self.ctl.get(tid).status not in TERMINAL:
                    with contextlib.suppress(InvalidTransition, TaskNotFound):
                        self.ctl.stop(
                            tid, graceful, timeout, reason=f"pipeline run {self.id} stopped"
                        )
            self._refresh()

    def stats(self) -> dict[str, int]:
        """Tasks of the run per status (only statuses present)."""
        with self._lock:
            return self._count_values()

    def summary(self) -> dict[str, Any]:
        """Counts per status, the first failure and the chain it caused."""
        return run_summary(self)

    def _label(self, tid: str) -> str:
        info = self._tasks[tid]
        if info.role == "child":
            return f"{info.node}[{info.index}]"
        if info.role == "expander":
            return f"{info.node}.items"
        return info.node

    def timeline(self, **filters: Any) -> Timeline:
        """The attempt timeline of this run's tasks (compensations and map items included):
        one lane per task, retry waits, pauses and stops marked, slots underneath."""
        return from_source(
            self.ctl,
            pipeline_run_id=self.id,
            title=f"run {self.name}",
            now=self._now(),
            refresh=lambda: self.timeline(**filters),
            show_live=display.live_timeline,
            **filters,
        )

    def _node_states(self) -> tuple[list[NodeRun], dict[str, dict[str, Any]]]:
        """The run's nodes and, per node, what a picture of it shows now."""
        with self._lock:
            node_runs = list(self._nodes.values())
        undone = {e["node"]: ("ok" if e["ok"] else "failed") for e in self.compensations}
        state: dict[str, dict[str, Any]] = {}
        for nr in node_runs:
            tid = nr.task_id or nr.expander
            entry: dict[str, Any] = {}
            if tid is not None:
                snap = self.ctl.get(tid)
                entry["status"] = snap.status.value
                if snap.progress is not None:
                    entry["done"] = snap.progress.done
                    entry["total"] = snap.progress.total
            if nr.node.is_map and nr.children:
                children = self.ctl.list_tasks(ids=list(nr.children))
                entry["items"] = len(nr.children)
                entry["items_done"] = sum(c.status in TERMINAL for c in children)
            if nr.node.name in undone:
                entry["compensation"] = undone[nr.node.name]
            state[nr.node.name] = entry
        return node_runs, state

    def graph(self) -> GraphPicture:
        """The run's DAG as it stands: each node toned by its status, with its progress, a
        map's fan-out and done count, and whether its compensation ran."""
        node_runs, state = self._node_states()
        return layout(nodes_of([nr.node for nr in node_runs], state), title=f"run {self.name}")

    def graph_spec(self) -> dict[str, Any]:
        """The run's graph as plain data, for the front end that lays it out and draws it
        above the run's table: per node its structure, the task standing for it (a map:
        its expander, and its item tasks) and its state now."""
        node_runs, state = self._node_states()
        graph_nodes = nodes_of([nr.node for nr in node_runs], state)
        nodes = [
            node_spec(g, nr.task_id or nr.expander, nr.children)
            for g, nr in zip(graph_nodes, node_runs, strict=True)
        ]
        return {"title": f"run {self.name}", "nodes": nodes}

    def to_frame(self) -> pd.DataFrame:
        """One row per task of the run (map children and item tasks included) plus one
        per node not created yet: node, task_id, role, status, attempts, started, ended,
        duration, restored."""
        return run_frame(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        from chongming_nb.control import display

        return display.bundle(
            self, self.ctl, pipeline_run_id=self.id, kind="run", title=self.name, run=self
        )

    def _ipython_display_(self) -> None:
        """In a notebook: the run's live table with its live graph above it; the output
        keeps the final state of both for the saved notebook."""
        from chongming_nb.control import display

        display.show(self, self.ctl, pipeline_run_id=self.id, kind="run", title=self.name, run=self)

    def __repr__(self) -> str:
        counts = " ".join(f"{k}={v}" for k, v in sorted(self._count_values().items()))
        return f"<PipelineRun {self.name!r} id={self.id} {self._run_status.value} {counts}>"

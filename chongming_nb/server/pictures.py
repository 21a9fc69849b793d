"""The pictures the sidebar shows, built from the store alone: one task's attempt timeline
(the data of ``TIMELINE_MIME``, drawn by the same canvas renderer as ``ctl.timeline()``)
and a pipeline run's graph (the ``GraphSpec`` the run table's graph draws).

Pure functions of what the store answers: the timeline reads the task's attempt and
transition records (two store queries of one task), the graph reads the
run's ``RunRecord`` (its nodes, their dependency edges, joins and conditions, written by
the run) and the run's task snapshots for the statuses now."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from chongming_nb.control.pipeline._status import RUN_TERMINAL
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.pictures.graph import GraphNode, node_spec
from chongming_nb.pictures.timeline import build, to_json
from chongming_nb.stores.protocol import RunRecord, TaskStore

_FINISHED = frozenset(s.value for s in RUN_TERMINAL)


def task_timeline(store: TaskStore, snap: TaskSnapshot, *, now: datetime) -> dict[str, Any]:
    """The attempt timeline of one task (one lane: its attempts, retry waits, pauses,
    stops and timeouts), as the front end's timeline data. Built from the task's attempt
    and transition records with the columns of ``attempts_df()`` / ``events_df()`` (the
    same picture as ``cn.open_store(...).timeline(ids=[task_id])``, without pandas in the
    server). ``now`` ends a running bar."""
    tid, name = snap.task_id, snap.name
    attempts = [
        {
            "task_id": tid,
            "name": name,
            "attempt": a.attempt,
            "started_at": a.started_at,
            "ended_at": a.ended_at,
            "outcome": a.outcome,
            "failure_kind": a.failure_kind,
            "failure_message": a.failure_message,
            "executor": a.executor,
        }
        for a in store.attempts(tid)
    ]
    transitions = [
        {
            "task_id": tid,
            "name": name,
            "version": t.version,
            "to_status": t.to_status,
            "actor": t.actor,
            "reason": t.reason,
            "at": t.at,
        }
        for t in store.history(tid)
    ]
    return to_json(build(attempts, transitions, now=now, title=name))


def _child_pattern(node: str) -> re.Pattern[str]:
    # a map's item tasks are named ``node[i]`` (control/pipeline/_build.py ``expand``)
    return re.compile(rf"{re.escape(node)}\[\d+\]")


def run_graph(run: RunRecord, snaps: Sequence[TaskSnapshot]) -> dict[str, Any]:
    """The graph of ``run`` (``GraphSpec``: ``title``, ``nodes``) with each node's status
    and progress from its task's snapshot in ``snaps`` (the run's tasks), else from the
    record; plus the run's ``id``, ``name``, ``status``, whether it is ``finished``
    (as its record says) and, for a run recovery settled ``lost``, the ``reason``."""
    by_id: Mapping[str, TaskSnapshot] = {s.task_id: s for s in snaps}
    nodes = [n for n in run.spec.get("nodes", ()) if isinstance(n, Mapping) and "name" in n]
    standing = {str(n["task_id"]) for n in nodes if n.get("task_id")}
    out = []
    for n in nodes:
        name = str(n["name"])
        task = str(n["task_id"]) if n.get("task_id") else None
        snap = by_id.get(task) if task else None
        is_map = bool(n.get("map"))
        children: list[str] = []
        if is_map:
            pattern = _child_pattern(name)
            children = [
                s.task_id
                for s in snaps
                if s.task_id not in standing and pattern.fullmatch(s.name) is not None
            ]
        status = snap.status.value if snap is not None else n.get("status")
        progress = snap.progress if snap is not None else None
        g = GraphNode(
            name=name,
            deps=tuple(str(d) for d in n.get("deps", ())),
            join=str(n.get("join") or "all_succeeded"),
            condition=bool(n.get("condition")),
            compensate=bool(n.get("compensate")),
            is_map=is_map,
            status=None if status is None else str(status),
            done=progress.done if progress is not None else None,
            total=progress.total if progress is not None else None,
            items=len(children) if children else None,
            items_done=sum(by_id[c].is_terminal for c in children),
            compensation=n.get("compensation"),
        )
        out.append(node_spec(g, task, children))
    return {
        "id": run.run_id,
        "name": run.name,
        "status": run.status,
        "finished": run.status in _FINISHED,
        # why recovery settled it (a run whose owner went away): None otherwise
        "reason": (run.spec.get("recovery") or {}).get("reason"),
        "title": f"run {run.name}",
        "nodes": out,
    }

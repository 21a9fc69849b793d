"""What a run writes down and shows: its RunRecord (``spec``) in the store, the manifest
next to its outputs, ``summary()`` and ``to_frame()``.

``run_spec``, ``save_record`` and ``append_manifest`` expect the run's lock held;
``run_summary`` and ``run_frame`` take it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chongming_nb.core.models import TaskSnapshot
from chongming_nb.core.states import STATUS
from chongming_nb.stores.protocol import RunRecord

if TYPE_CHECKING:
    import pandas as pd

    from chongming_nb.control.pipeline._state import RunState

__all__ = [
    "RECORD_INTERVAL",
    "append_manifest",
    "run_frame",
    "run_spec",
    "run_summary",
    "save_record",
]

log = logging.getLogger("chongming_nb.pipeline")

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

#: RunRecord saves while a run is busy happen at most this often (and always at the end).
RECORD_INTERVAL = 0.5


def run_spec(run: RunState) -> dict[str, Any]:
    """The RunRecord's ``spec``: the run's options and, per node, its structure (deps,
    join, condition, compensation step, map), the task standing for it and its state,
    so a reader of the store alone (the sidebar's run graph) can draw the run."""
    undone = {e["node"]: ("ok" if e["ok"] else "failed") for e in run._rollback.entries}
    nodes = []
    for name, nr in run._nodes.items():
        st = run._node_status(name)
        nodes.append(
            {
                "name": name,
                "deps": list(nr.node.deps),
                # how the node waits on them: what the sidebar's run graph draws
                "join": nr.node.join.value,
                "condition": nr.node.when is not None,
                "compensate": nr.node.compensate is not None,
                "map": nr.node.is_map,
                "task_id": nr.task_id or nr.expander,
                "status": st.value if st else None,
                "output": str(nr.output) if nr.saved and nr.output else None,
                "restored": nr.restored,
                "compensation": undone.get(name),
            }
        )
    comp_nodes = sorted(
        {run._tasks[t].node for t in run._rollback.compensated if run._tasks[t].role == "node"}
    )
    return {
        "pipeline": run.name,
        # whose run it is: recovery settles it once this owner is gone
        "owner": run.ctl.owner,
        "mode": run.mode,
        "on_failure": repr(run.policy),
        "rollback": run.rollback_on_failure,
        "resumed_from": run.resumed_from,
        "outputs_dir": str(run.outputs_dir) if run.outputs_dir else None,
        "serializer": type(run.pipeline.serializer).__qualname__,
        "nodes": nodes,
        "succeeded": [
            run._tasks[t].node
            for t in run._success_order
            if run._tasks[t].role in ("node", "collector")
        ],
        "compensated": comp_nodes,
        "wakes": {n: w.isoformat() for n, w in run._wakes.items()},
        "counts": run._count_values(),
    }


def save_record(run: RunState, force: bool = False) -> None:
    store = getattr(run.ctl, "store", None)
    if store is None:
        return
    now = time.monotonic()
    if not force and now - run._record_at < RECORD_INTERVAL:
        return
    run._record_at = now

    try:
        store.save_run(
            RunRecord(
                run_id=run.id,
                name=run.name,
                status=run._run_status.value,
                created_at=run.created_at,
                updated_at=run._now(),
                spec=run_spec(run),
            )
        )
    except Exception:
        log.exception("pipeline run %s: saving the RunRecord failed", run.id)


def append_manifest(run: RunState, entry: Mapping[str, Any]) -> None:
    if run.outputs_dir is None:
        return
    try:
        run.outputs_dir.mkdir(parents=True, exist_ok=True)
        with open(run.outputs_dir / "manifest.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(entry)) + "\n")
    except OSError as exc:
        log.warning("pipeline run %s: manifest not written: %s", run.id, exc)


def run_summary(run: RunState) -> dict[str, Any]:
    """Counts per status, the first failure and the chain it caused."""
    with run._lock:
        first = run._first_failure
        chain: list[dict[str, Any]] = []
        failure: dict[str, Any] | None = None
        if first is not None:
            down = run._downstream(first)
            ids = [first] + [t for t in run._tasks if t in down]
            snaps = {s.task_id: s for s in run.ctl.list_tasks(ids=ids)}
            for t in ids:
                s = snaps[t]
                if t != first and s.status is S.SUCCEEDED:
                    continue
                chain.append(failure_row(run._label(t), s))
            failure = chain[0]
        return {
            "run_id": run.id,
            "pipeline": run.name,
            "mode": run.mode,
            "status": run._run_status.value,
            "on_failure": repr(run.policy),
            "nodes": len(run._nodes),
            "tasks": len(run._tasks),
            "counts": run._count_values(),
            "first_failure": failure,
            "failure_chain": chain,
            "restored": [n for n, nr in run._nodes.items() if nr.restored],
            "resumed_from": run.resumed_from,
            "compensations": [dict(c) for c in run._rollback.entries],
        }


def run_frame(run: RunState) -> pd.DataFrame:
    """One row per task of the run (map children and item tasks included) plus one
    per node not created yet: node, task_id, role, status, attempts, started, ended,
    duration, restored."""
    import pandas as pd

    from chongming_nb.frames import STATUS_DTYPE

    with run._lock:
        infos = list(run._tasks.items())
        pending = [n for n, nr in run._nodes.items() if nr.task_id is None and not nr.expander]
        restored = {n for n, nr in run._nodes.items() if nr.restored}
    snaps: dict[str, TaskSnapshot] = {
        s.task_id: s for s in run.ctl.list_tasks(ids=[t for t, _ in infos])
    }
    rows: dict[str, list[Any]] = {
        k: []
        for k in (
            "node",
            "task_id",
            "role",
            "status",
            "attempts",
            "started",
            "ended",
            "restored",
        )
    }
    for tid, info in infos:
        s = snaps[tid]
        atts = run.ctl.attempts(tid)
        rows["node"].append(run._label(tid))
        rows["task_id"].append(tid)
        rows["role"].append(info.role)
        rows["status"].append(s.status.value)
        rows["attempts"].append(len(atts))
        rows["started"].append(atts[0].started_at if atts else None)
        rows["ended"].append(s.ended_at)
        rows["restored"].append(info.role == "node" and info.node in restored)
    for n in pending:
        rows["node"].append(n)
        rows["task_id"].append(None)
        rows["role"].append("node")
        rows["status"].append(None)
        rows["attempts"].append(0)
        rows["started"].append(None)
        rows["ended"].append(None)
        rows["restored"].append(False)
    started = pd.to_datetime(pd.Series(rows["started"], dtype="object"), utc=True)
    ended = pd.to_datetime(pd.Series(rows["ended"], dtype="object"), utc=True)
    return pd.DataFrame(
        {
            "node": pd.Series(rows["node"], dtype="string"),
            "task_id": pd.Series(rows["task_id"], dtype="string"),
            "role": pd.Series(rows["role"], dtype="string"),
            "status": pd.Categorical(rows["status"], dtype=STATUS_DTYPE),
            "attempts": pd.Series(rows["attempts"], dtype="int64"),
            "started": started,
            "ended": ended,
            "duration": ended - started,
            "restored": pd.Series(rows["restored"], dtype="bool"),
        }
    )


def failure_row(label: str, s: TaskSnapshot) -> dict[str, Any]:
    f = s.failure
    return {
        "node": label,
        "task_id": s.task_id,
        "status": s.status.value,
        "kind": f.kind.value if f else None,
        "message": f.message if f else None,
        "exception_type": f.exception_type if f else None,
    }

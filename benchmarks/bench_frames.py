"""DataFrames: ``ctl.attempts_df()`` in the kernel, and the frames read from a store.

1. ``ctl.attempts_df()`` over N attempts beside ``pd.DataFrame(list_of_dicts)``.

The controller is filled by really running tasks (each fails and is retried until its
attempts are used up; inline executor, no backoff), so the records are the real ones.
The baseline gets its list of dicts (one dict per attempt, the same columns) for free:
only ``pd.DataFrame(rows)`` is timed, while ``attempts_df()`` is timed end to end
(collecting the records under the controller's lock, typing every column: categorical
statuses, tz-aware UTC times, timedeltas). Best of a few repeats each.

2. ``cn.open_store(db).snapshots_df()`` / ``attempts_df()`` / ``transitions_df()`` on a
SQLite store holding a generated history (``chongming_nb.testing.history``; ``store_tasks``
tasks, one in ten failed after 3 attempts), each beside ``pd.read_sql`` of the same rows
(the same join and order, times and JSON left as stored text, nothing typed) and the
``sqlite3`` shell printing those rows as CSV to /dev/null, in the same run; best of
``repeats``, the three measured in turn each round. Target: <= 1.2x ``pd.read_sql``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from typing import Any

import pandas as pd

from benchmarks.common import best_of, generated_store, result, timed
from benchmarks.sizes import size_of
from chongming_nb import Controller, Exponential, HistoryLimits, RetryPolicy, TaskContext


def always_fails(ctx: TaskContext) -> None:
    raise ConnectionError(f"attempt {ctx.attempt} failed")


def _fill(ctl: Controller, attempts: int, per_task: int) -> int:
    pol = RetryPolicy(max_attempts=per_task, backoff=Exponential(base=0))
    handles = [
        ctl.submit(always_fails, retry=pol, executor="inline")
        for _ in range(max(1, attempts // per_task))
    ]
    for h in handles:
        h.wait(timeout=3600)
    return sum(len(ctl.attempts(h.id)) for h in handles)


def _as_dicts(ctl: Controller) -> list[dict[str, Any]]:
    names = {s.task_id: s.name for s in ctl.list_tasks()}
    rows: list[dict[str, Any]] = []
    for s in ctl.list_tasks():
        for r in ctl.attempts(s.task_id):
            rows.append(
                {
                    "task_id": r.task_id,
                    "name": names[r.task_id],
                    "attempt": r.attempt,
                    "started_at": r.started_at,
                    "ended_at": r.ended_at,
                    "duration": r.duration,
                    "outcome": None if r.outcome is None else r.outcome.value,
                    "failure_kind": None if r.failure_kind is None else r.failure_kind.value,
                    "failure_message": r.failure_message,
                    "traceback": r.traceback,
                    "executor": r.executor,
                    "abandoned": r.abandoned,
                    "exit_code": r.exit_code,
                }
            )
    return rows


#: The rows of each frame as stored: what ``pd.read_sql`` and the shell read.
_PLAIN = {
    "snapshots_df": "SELECT * FROM tasks ORDER BY created_at DESC, seq DESC",
    "attempts_df": (
        "SELECT r.*, t.name FROM (SELECT seq, task_id, name, created_at FROM tasks) AS t "
        "JOIN attempts AS r ON r.task_id = t.task_id ORDER BY t.created_at, t.seq, r.attempt"
    ),
    "transitions_df": (
        "SELECT r.*, t.name FROM (SELECT seq, task_id, name, created_at FROM tasks) AS t "
        "JOIN transitions AS r ON r.task_id = t.task_id "
        "ORDER BY t.created_at, t.seq, r.version"
    ),
}


def store_rows(
    tasks: int, repeats: int, methods: tuple[str, ...] = tuple(_PLAIN)
) -> list[dict[str, Any]]:
    """The frames of a generated store of ``tasks`` tasks beside read_sql and the shell
    (the store is made once and kept: ``common.generated_store``)."""
    import chongming_nb as cn

    shell = shutil.which("sqlite3")
    rows = []
    t0 = time.perf_counter()
    path = generated_store(tasks)
    fill_s = time.perf_counter() - t0
    reader = cn.open_store(str(path))
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for method in methods:
            plain = _PLAIN[method]
            ours, base, sh = [], [], []
            for _ in range(repeats):
                ours.append(timed(getattr(reader, method)))
                base.append(timed(lambda plain=plain: pd.read_sql(plain, conn)))
                if shell:
                    cmd = [shell, "-batch", "-readonly", "-csv", str(path), plain]
                    sh.append(timed(lambda cmd=cmd: subprocess.run(cmd, stdout=subprocess.DEVNULL)))
            n = len(getattr(reader, method)())
            o, b = min(ours), min(base)
            rows.append(
                result(
                    f"open_store().{method}() over {n:,} rows ({tasks:,} tasks)",
                    round(o * 1e3, 1),
                    "ms",
                    peer={
                        "pd.read_sql": round(b * 1e3, 1),
                        "sqlite3 shell": round(min(sh) * 1e3, 1) if sh else None,
                    },
                    ratio=o / b if b else None,
                    target="<= 1.2x pd.read_sql",
                    passed=o <= 1.2 * b,
                    rows=n,
                    fill_seconds=round(fill_s, 1),
                    load_1min=round(os.getloadavg()[0], 2),
                )
            )
    finally:
        conn.close()
        reader.close()
    return rows


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "frames")
    n, per_task, repeats = int(p["attempts"]), int(p["attempts_per_task"]), int(p["repeats"])
    # every task kept in memory: the frame is built from the kernel's records
    ctl = Controller(executor="inline", history=HistoryLimits(memory_finished_tasks=None))
    try:
        t0 = time.perf_counter()
        total = _fill(ctl, n, per_task)
        fill_s = time.perf_counter() - t0
        rows = _as_dicts(ctl)
        ours = best_of(repeats, lambda: timed(ctl.attempts_df))
        base = best_of(repeats, lambda: timed(lambda: pd.DataFrame(rows)))
        df = ctl.attempts_df()
        if len(df) != total or len(rows) != total:
            raise RuntimeError(f"expected {total} rows, got {len(df)} and {len(rows)}")
    finally:
        ctl.close()
    return [
        result(
            f"attempts_df() over {total:,} attempts",
            round(ours * 1e3, 1),
            "ms",
            peer={"pd.DataFrame(list_of_dicts)": round(base * 1e3, 1)},
            ratio=ours / base if base else None,
            target="faster than the baseline (< 1x)",
            passed=ours < base,
            attempts=total,
            fill_seconds=round(fill_s, 1),
        ),
        *store_rows(int(p["store_tasks"]), repeats),
    ]

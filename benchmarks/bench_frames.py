"""``ctl.attempts_df()`` over N attempts beside ``pd.DataFrame(list_of_dicts)``.

The controller is filled by really running tasks (each fails and is retried until its
attempts are used up; inline executor, no backoff), so the records are the real ones.
The baseline gets its list of dicts (one dict per attempt, the same columns) for free:
only ``pd.DataFrame(rows)`` is timed, while ``attempts_df()`` is timed end to end
(collecting the records under the controller's lock, typing every column: categorical
statuses, tz-aware UTC times, timedeltas). Best of a few repeats each.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from benchmarks.common import best_of, result, timed
from benchmarks.sizes import size_of
from chongming_nb import Controller, Exponential, RetryPolicy, TaskContext


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


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "frames")
    n, per_task, repeats = int(p["attempts"]), int(p["attempts_per_task"]), int(p["repeats"])
    ctl = Controller(executor="inline")
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
        )
    ]

"""Every benchmark size in one place.

``tiny`` is the smoke size the test suite runs (seconds); ``full`` is what
``docs/performance.md`` reports. Each benchmark module reads its own section with
``size_of(size, "<module>")``.
"""

from __future__ import annotations

from typing import Any

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {
        "overhead": {"items": 20_000, "calls": 20_000, "repeats": 3},
        "throughput": {"tasks": 300, "workers": 4, "repeats": 1},
        "latency": {"trials": 3, "interval": 0.002, "item_seconds": 0.0001},
        "memory": {"tasks": 500},
        "memory_bounded": {"from": 1_000, "to": 3_000, "cap": 500, "peer_tasks": 1_000},
        "frames": {"attempts": 2_000, "attempts_per_task": 5, "repeats": 2, "store_tasks": 500},
        # read by bench_dag.py, bench_executors.py and the notebook's widget benchmark
        "dag": {"nodes": 50},
        "executors": {"tasks": 4, "work": 20_000},
        "widget": {"tasks": 100, "seconds": 1.0},
        "pictures": {"attempts": 1_000, "nodes": 50, "repeats": 2},
        "output": {"megabytes": 1, "repeats": 1},
        "cell_loop": {"items": 20_000, "repeats": 2, "stop_trials": 3},
        "history": {"tasks": [500, 2_000], "repeats": 1, "list_repeats": 3, "bytes_tasks": 300},
    },
    "full": {
        "overhead": {"items": 2_000_000, "calls": 2_000_000, "repeats": 5},
        "throughput": {"tasks": 10_000, "workers": 4, "repeats": 3},
        "latency": {"trials": 21, "interval": 0.002, "item_seconds": 0.0001},
        "memory": {"tasks": 100_000},
        "memory_bounded": {"from": 10_000, "to": 1_000_000, "cap": 10_000, "peer_tasks": 50_000},
        "frames": {
            "attempts": 100_000,
            "attempts_per_task": 5,
            "repeats": 3,
            "store_tasks": 100_000,
        },
        "dag": {"nodes": 1_000},
        "executors": {"tasks": 8, "work": 2_000_000},
        "widget": {"tasks": 10_000, "seconds": 10.0},
        "pictures": {"attempts": 10_000, "nodes": 300, "repeats": 5},
        "output": {"megabytes": 8, "repeats": 3},
        "cell_loop": {"items": 2_000_000, "repeats": 5, "stop_trials": 21},
        "history": {
            "tasks": [100_000, 1_000_000],
            "repeats": 3,
            "list_repeats": 15,
            "bytes_tasks": 5_000,
        },
    },
}


def size_of(size: str, bench: str) -> dict[str, Any]:
    """The parameters of ``bench`` at ``size`` (``tiny`` or ``full``)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    return dict(SIZES[size].get(bench, {}))

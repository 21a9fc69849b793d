"""A random DAG of no-op tasks through the Controller, beside dask's threaded scheduler
on the same graph in the same process.

    python -m benchmarks.bench_dag [tiny|full]

``run(size)`` returns one dict per metric: metric, ours, peer, ratio, target, pass,
unit. ``full`` is the issue's 1,000-node DAG; ``tiny`` a quick 200-node smoke run.
Node outputs are not persisted here (``persist_outputs=False``): the benchmark measures
scheduling, like dask's, which keeps results in memory too.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

from benchmarks.common import interleaved

TARGET_NODES_PER_S = 5000.0
SIZES = {"tiny": 200, "full": 1000}


def noop(*_: Any) -> None:
    return None


def random_dag(n: int, seed: int = 13, max_deps: int = 3) -> list[list[int]]:
    """deps[i] is a list of earlier nodes (so the graph is acyclic by construction)."""
    rng = random.Random(seed)
    return [sorted(rng.sample(range(i), rng.randint(0, min(i, max_deps)))) for i in range(n)]


def time_pipeline(deps: list[list[int]], executor: str) -> float:
    from chongming_nb import ConcurrencyPolicy, Controller
    from chongming_nb.control.pipeline import Pipeline

    ctl = Controller(executor=executor, concurrency=ConcurrencyPolicy(max_parallel=4))
    try:
        t0 = time.perf_counter()
        p = Pipeline("bench", persist_outputs=False)
        nodes: list[Any] = []
        for i, ds in enumerate(deps):
            nodes.append(p.add(noop, name=f"n{i}", deps=[nodes[d] for d in ds]))
        run = p.submit(ctl)
        status = run.wait(300)
        dt = time.perf_counter() - t0
        if status != "succeeded":
            raise RuntimeError(f"benchmark run ended {status}: {run.summary()}")
        return dt
    finally:
        ctl.close()


def time_after(deps: list[list[int]], executor: str) -> float:
    """The same DAG built cell-by-cell style: ``ctl.submit(fn, after=[...])``."""
    from chongming_nb import ConcurrencyPolicy, Controller

    ctl = Controller(executor=executor, concurrency=ConcurrencyPolicy(max_parallel=4))
    try:
        t0 = time.perf_counter()
        hs: list[Any] = []
        for ds in deps:
            hs.append(ctl.submit(noop, after=[hs[d] for d in ds]))
        for h in hs:
            h.wait(300)
        return time.perf_counter() - t0
    finally:
        ctl.close()


def time_dask(deps: list[list[int]]) -> float:
    import dask.threaded

    dsk = {f"n{i}": (noop, *[f"n{d}" for d in ds]) for i, ds in enumerate(deps)}
    keys = list(dsk)
    t0 = time.perf_counter()
    dask.threaded.get(dsk, keys, num_workers=4)
    return time.perf_counter() - t0


def run(size: str = "tiny") -> list[dict[str, Any]]:
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    n = SIZES[size]
    deps = random_dag(n)
    repeat = 5 if size == "full" else 2
    # the peer and the three of ours in turn, round after round (common.interleaved):
    # each run is a fraction of a second, so a burst of load would otherwise fall on
    # one side of a ratio only
    seconds = interleaved(
        {
            "dask": lambda: time_dask(deps),
            "pipeline_dag_thread": lambda: time_pipeline(deps, "thread"),
            "pipeline_dag_inline": lambda: time_pipeline(deps, "inline"),
            "submit_after_dag_thread": lambda: time_after(deps, "thread"),
        },
        repeat,
    )
    peer = n / min(seconds.pop("dask"))
    out: list[dict[str, Any]] = []
    for metric, runs in seconds.items():
        ours = n / min(runs)
        out.append(
            {
                "metric": f"{metric}_{n}_nodes",
                "ours": round(ours, 1),
                "peer": round(peer, 1),
                "ratio": round(ours / peer, 3),
                "target": TARGET_NODES_PER_S,
                "pass": ours >= TARGET_NODES_PER_S,
                "unit": "nodes/s",
                "runs_s": [round(v, 4) for v in runs],
            }
        )
    return out


if __name__ == "__main__":
    for row in run(sys.argv[1] if len(sys.argv) > 1 else "tiny"):
        print(json.dumps(row))

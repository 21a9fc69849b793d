"""Task throughput: N no-op tasks submitted at once and waited for, through the Controller
(in memory, and with the SQLite store, and PostgreSQL when a URL is given in
``CHONGMING_BENCH_POSTGRES``) beside ``concurrent.futures.ThreadPoolExecutor`` and dask's
threaded scheduler with the same number of workers.

The Controller's clock stops when every task is terminal *and* every event has been
recorded (and, with a store, written): that is when ``ctl.snapshots_df()`` and the
sidebar agree. Every contender runs ``repeats`` times and reports its best run (as
``timeit`` does): the machine is shared, and the best run is the least disturbed one.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import result, safe_ratio
from benchmarks.sizes import size_of
from chongming_nb import ConcurrencyPolicy, Controller


def noop(i: int) -> int:
    return i


def controller_rate(n: int, workers: int, store: Any = None) -> float:
    ctl = Controller(store=store, concurrency=ConcurrencyPolicy(max_parallel=workers))
    try:
        t0 = time.perf_counter()
        handles = [ctl.submit(noop, i) for i in range(n)]
        for h in handles:
            ctl.wait(h, timeout=600)
        if not ctl.flush(timeout=600):
            raise RuntimeError("events were not recorded within 600 s")
        dt = time.perf_counter() - t0
        bad = [s for s in ctl.list_tasks() if s.status.value != "succeeded"]
        if bad:
            raise RuntimeError(f"{len(bad)} tasks did not succeed, e.g. {bad[0]}")
        return n / dt
    finally:
        ctl.close()


def pool_rate(n: int, workers: int) -> float:
    with ThreadPoolExecutor(max_workers=workers) as ex:
        t0 = time.perf_counter()
        futures = [ex.submit(noop, i) for i in range(n)]
        for f in futures:
            f.result()
        return n / (time.perf_counter() - t0)


def dask_rate(n: int, workers: int) -> float | None:
    try:
        import dask
    except ImportError:
        return None
    t0 = time.perf_counter()
    parts = [dask.delayed(noop)(i) for i in range(n)]
    dask.compute(*parts, scheduler="threads", num_workers=workers)
    return n / (time.perf_counter() - t0)


def best(rate: Any, repeats: int) -> Any:
    """The best of ``repeats`` runs of ``rate()`` (None if it is unavailable). Each run
    starts without the previous run's garbage; the collector stays on during a run."""
    runs = []
    for _ in range(max(1, repeats)):
        gc.collect()
        runs.append(rate())
    return None if runs[0] is None else max(runs)


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "throughput")
    n, workers, repeats = int(p["tasks"]), int(p["workers"]), int(p.get("repeats", 1))
    pool = best(lambda: pool_rate(n, workers), repeats)
    dsk = best(lambda: dask_rate(n, workers), repeats)
    ours = best(lambda: controller_rate(n, workers), repeats)
    peers = {
        "ThreadPoolExecutor": round(pool),
        "dask threaded": None if dsk is None else round(dsk),
    }
    rows = [
        result(
            f"throughput: {n:,} no-op tasks, in-memory Controller",
            round(ours),
            "tasks/s",
            peer=peers,
            ratio=safe_ratio(ours, pool),
            target=">= 10,000 tasks/s",
            passed=ours >= 10_000,
            workers=workers,
        )
    ]
    note = None
    sqlite: float | None = None
    try:
        from chongming_nb.stores import SqliteStore

        def sqlite_rate() -> float:
            with tempfile.TemporaryDirectory() as tmp:  # a fresh database per run
                store = SqliteStore(Path(tmp) / "bench.sqlite")
                try:
                    return controller_rate(n, workers, store)
                finally:
                    store.close()

        sqlite = best(sqlite_rate, repeats)
    except Exception as exc:  # reported, never hidden
        note = f"SqliteStore with the controller failed: {exc!r}"
    rows.append(
        result(
            f"throughput: {n:,} no-op tasks, Controller + SqliteStore",
            None if sqlite is None else round(sqlite),
            "tasks/s",
            peer=peers,
            ratio=safe_ratio(sqlite, pool),
            target=">= 4,000 tasks/s",
            passed=None if sqlite is None else sqlite >= 4_000,
            note=note,
        )
    )
    url = os.environ.get("CHONGMING_BENCH_POSTGRES")
    if url:
        pg: float | None = None
        note = None
        try:
            from chongming_nb.stores.postgres import PostgresStore

            store = PostgresStore(url)
            try:
                pg = best(lambda: controller_rate(n, workers, store), repeats)
            finally:
                store.close()
        except Exception as exc:
            note = f"PostgresStore with the controller failed: {exc!r}"
        rows.append(
            result(
                f"throughput: {n:,} no-op tasks, Controller + PostgresStore",
                None if pg is None else round(pg),
                "tasks/s",
                peer=peers,
                ratio=safe_ratio(pg, pool),
                target="report only",
                passed=None,
                note=note,
            )
        )
    return rows

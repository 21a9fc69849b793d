"""Task throughput: N no-op tasks submitted at once and waited for, through the Controller
(in memory, and with the SQLite store, and PostgreSQL when a URL is given in
``CHONGMING_BENCH_POSTGRES``) beside ``concurrent.futures.ThreadPoolExecutor`` and dask's
threaded scheduler with the same number of workers.

The Controller's clock stops when every task is terminal *and* every event has been
recorded (and, with a store, written): that is when ``ctl.snapshots_df()`` and the
sidebar agree. Every contender runs ``repeats`` times and reports its best run (as
``timeit`` does): the machine is shared, and the best run is the least disturbed one.
The contenders take turns, round after round (``common.interleaved``), so the ratio's
two sides are measured over the same stretch of the run.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import interleaved, result, safe_ratio
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


class _Guarded:
    """A contender whose failure is reported in its row instead of ending the others:
    after the first exception it answers None (no more samples)."""

    def __init__(self, what: str, rate: Callable[[], float]) -> None:
        self.what, self.rate = what, rate
        self.note: str | None = None

    def __call__(self) -> float | None:
        if self.note is not None:
            return None
        try:
            return self.rate()
        except Exception as exc:  # reported, never hidden
            self.note = f"{self.what} failed: {exc!r}"
            return None


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "throughput")
    n, workers, repeats = int(p["tasks"]), int(p["workers"]), int(p.get("repeats", 1))
    from chongming_nb.stores import SqliteStore

    def sqlite_rate() -> float:
        with tempfile.TemporaryDirectory() as tmp:  # a fresh database per run
            store = SqliteStore(Path(tmp) / "bench.sqlite")
            try:
                return controller_rate(n, workers, store)
            finally:
                store.close()

    sqlite_guard = _Guarded("SqliteStore with the controller", sqlite_rate)
    pg_guard: _Guarded | None = None
    contenders: dict[str, Callable[[], float | None]] = {
        "pool": lambda: pool_rate(n, workers),
        "memory": lambda: controller_rate(n, workers),
        "sqlite": sqlite_guard,
    }
    url = os.environ.get("CHONGMING_BENCH_POSTGRES")
    pg_store: Any = None
    if url:

        def pg_rate() -> float:
            nonlocal pg_store
            if pg_store is None:
                from chongming_nb.stores.postgres import PostgresStore

                pg_store = PostgresStore(url)
            return controller_rate(n, workers, pg_store)

        pg_guard = _Guarded("PostgresStore with the controller", pg_rate)
        contenders["postgres"] = pg_guard
    try:
        # the ratio's two sides in turn, round after round (common.interleaved)
        samples = interleaved(contenders, repeats)
    finally:
        if pg_store is not None:
            pg_store.close()
    # dask is a reported peer only (no ratio is taken against it): ~10 s a run here
    dask_samples = interleaved({"dask": lambda: dask_rate(n, workers)}, repeats)["dask"]
    top = {name: max(runs) if runs else None for name, runs in samples.items()}
    pool, ours, sqlite = top["pool"], top["memory"], top["sqlite"]
    dsk = max(dask_samples) if dask_samples else None
    peers = {
        "ThreadPoolExecutor": None if pool is None else round(pool),
        "dask threaded": None if dsk is None else round(dsk),
    }
    raw = {name: [round(v) for v in runs] for name, runs in samples.items()}
    rows = [
        result(
            f"throughput: {n:,} no-op tasks, in-memory Controller",
            None if ours is None else round(ours),
            "tasks/s",
            peer=peers,
            ratio=safe_ratio(ours, pool),
            target=">= 10,000 tasks/s",
            passed=None if ours is None else ours >= 10_000,
            workers=workers,
            runs=raw,
        )
    ]
    rows.append(
        result(
            f"throughput: {n:,} no-op tasks, Controller + SqliteStore",
            None if sqlite is None else round(sqlite),
            "tasks/s",
            peer=peers,
            ratio=safe_ratio(sqlite, pool),
            target=">= 4,000 tasks/s",
            passed=None if sqlite is None else sqlite >= 4_000,
            note=sqlite_guard.note,
        )
    )
    if pg_guard is not None:
        pg = top["postgres"]
        rows.append(
            result(
                f"throughput: {n:,} no-op tasks, Controller + PostgresStore",
                None if pg is None else round(pg),
                "tasks/s",
                peer=peers,
                ratio=safe_ratio(pg, pool),
                target="report only",
                passed=None,
                note=pg_guard.note,
            )
        )
    return rows

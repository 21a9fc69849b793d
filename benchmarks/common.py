"""Shared helpers for the benchmark modules: the result row and small timing tools."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

#: Keys every result row carries (the runner checks them).
KEYS = ("metric", "ours", "peer", "ratio", "target", "pass", "unit")


def result(
    metric: str,
    ours: float | None,
    unit: str,
    *,
    target: str,
    passed: bool | None,
    peer: Mapping[str, float | None] | float | None = None,
    ratio: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One row of the table. ``passed`` None means "no target to judge" (reported as
    n/a); ``extra`` keys (notes, raw samples) go to the JSON only."""
    row: dict[str, Any] = {
        "metric": metric,
        "ours": ours,
        "peer": dict(peer) if isinstance(peer, Mapping) else peer,
        "ratio": ratio,
        "target": target,
        "pass": passed,
        "unit": unit,
    }
    row.update(extra)
    return row


def best_of(repeats: int, fn: Callable[[], float]) -> float:
    """The smallest of ``repeats`` timings (the least disturbed by other processes)."""
    return min(fn() for _ in range(max(1, repeats)))


def interleaved(
    fns: Mapping[str, Callable[[], float | None]], repeats: int
) -> dict[str, list[float]]:
    """Every sample of each function, the functions run in turn, one round after
    another (``a b c a b c ...``), each call after a collection of the previous one's
    garbage. A ratio of two of them is then taken over the same stretch of the run: a
    burst of load on this shared machine slows the peer's samples as much as ours,
    instead of all of one side (two runs of the same code an hour apart differed 1.8x on
    a ratio measured side after side). A function that answers None is unavailable: it
    is asked once and gets no samples."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    missing: set[str] = set()
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            if name in missing:
                continue
            gc.collect()
            value = fn()
            if value is None:
                missing.add(name)
            else:
                samples[name].append(value)
    return samples


def timed(fn: Callable[[], Any]) -> float:
    """Wall seconds of one call, with the garbage collector quiet during it."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        if was:
            gc.enable()


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def safe_ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def generated_store(tasks: int) -> Path:
    """A SQLite store holding ``generate_history(store, tasks)`` (default arguments;
    written by SQL: ``sql=True``), made once and kept under the
    temp directory, keyed on the size, the schema version
    and the generator's source (a change to either makes a new file). Benchmarks only
    read it: open it read-only, or copy it."""
    import hashlib
    import inspect
    import os
    import tempfile

    from chongming_nb.stores import SqliteStore
    from chongming_nb.stores.protocol import SCHEMA_VERSION
    from chongming_nb.testing import history

    digest = hashlib.sha256(inspect.getsource(history).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "chongming-bench-history"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"history-{tasks}-v{SCHEMA_VERSION}-{digest}.db"
    if path.exists():
        return path
    part = folder / f".{path.name}.{os.getpid()}"
    store = SqliteStore(part)
    try:
        history.generate_history(store, tasks, sql=True)
    finally:
        store.close()
    import sqlite3

    conn = sqlite3.connect(part)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    os.replace(part, path)
    for side in ("-wal", "-shm"):
        Path(f"{part}{side}").unlink(missing_ok=True)
    return path

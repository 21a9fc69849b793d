"""Kernel memory and finished tasks.

1. Memory held per finished task kept (snapshot, history, attempt records,
   bookkeeping) by the in-memory Controller with no cap on the tasks kept
   (``HistoryLimits(memory_finished_tasks=None)``), measured with tracemalloc over N
   no-op tasks on the thread executor. The caller's handles are dropped before
   measuring: what is left is what the controller keeps. Peer: the
   ``concurrent.futures.Future`` a ThreadPoolExecutor user keeps per finished call (far
   less information, shown for scale).
2. Bounded memory: the process's RSS growth from ``from`` to ``to`` finished no-op tasks
   through a Controller with the default cap (10,000 finished tasks kept), in memory
   and with a SQLite store, each in a fresh interpreter. Tasks go in chunks of 1,000
   (the caller waits for each chunk's last task and keeps no handle). Peer: the same
   controller with no cap, its growth per task over ``peer_tasks`` tasks times the same
   span (measuring the span itself without a cap would take gigabytes). At full size
   these two rows take about an hour; ``CHONGMING_BENCH_SKIP_RSS=1`` in the environment
   leaves them out (the first row alone takes seconds).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import result
from benchmarks.sizes import size_of
from chongming_nb import Controller, HistoryLimits

#: No cap on the finished tasks kept in memory.
UNBOUNDED = HistoryLimits(memory_finished_tasks=None)
#: Tasks submitted between two waits in the RSS runs.
CHUNK = 1_000
#: Set to 1 to leave out the RSS rows (about an hour at full size).
SKIP_RSS_ENV = "CHONGMING_BENCH_SKIP_RSS"


def noop() -> None:
    return None


def _controller_bytes_per_task(n: int) -> float:
    ctl = Controller(history=UNBOUNDED)
    try:
        # warm up: executor threads, caches, event-bus thread, first-use allocations
        for h in [ctl.submit(noop) for _ in range(50)]:
            h.wait(timeout=60)
        ctl.flush()
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            handles = [ctl.submit(noop) for _ in range(n)]
            for h in handles:
                h.wait(timeout=600)
            ctl.flush(timeout=600)
            del handles, h
            gc.collect()
            used = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        return used / n
    finally:
        ctl.close()


def _futures_bytes_per_task(n: int) -> float:
    with ThreadPoolExecutor(max_workers=4) as ex:
        ex.submit(noop).result()
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            futures = [ex.submit(noop) for _ in range(n)]
            for f in futures:
                f.result()
            gc.collect()
            used = tracemalloc.get_traced_memory()[0] - base
            del futures
        finally:
            tracemalloc.stop()
    return used / n


def _rss() -> int:
    """This process's resident set size in bytes (Linux: /proc; else the peak)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _finish(ctl: Controller, n: int) -> None:
    """``n`` more no-op tasks through ``ctl``, ``CHUNK`` at a time, no handle kept."""
    while n > 0:
        k = min(CHUNK, n)
        last = None
        for _ in range(k):
            last = ctl.submit(noop)
        assert last is not None
        last.wait(timeout=600)
        n -= k
    ctl.flush(timeout=600)


def rss_growth(start: int, end: int, store: str | None, cap: int | None) -> dict[str, float]:
    """In this process: RSS after ``start`` finished tasks, then after ``end``."""
    ctl = Controller(store=store, history=HistoryLimits(memory_finished_tasks=cap))
    try:
        _finish(ctl, start)
        gc.collect()
        before = _rss()
        _finish(ctl, end - start)
        gc.collect()
        after = _rss()
        kept = len(ctl._book.tasks)
        total = sum(ctl.stats().values())
    finally:
        ctl.close()
    return {"before": before, "after": after, "kept": kept, "total": total}


def _child_rss(start: int, end: int, store: bool, cap: int | None) -> dict[str, float]:
    """``rss_growth`` in a fresh interpreter (nothing of earlier benchmarks in its heap)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db") if store else ""
        args = [str(start), str(end), db, "" if cap is None else str(cap)]
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_memory", *args],
            check=True,
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
    data: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def _bounded_rows(size: str) -> list[dict[str, Any]]:
    if os.environ.get(SKIP_RSS_ENV) == "1":
        return []
    p = size_of(size, "memory_bounded")
    start, end, cap, peer_n = int(p["from"]), int(p["to"]), int(p["cap"]), int(p["peer_tasks"])
    rows = []
    for store in (False, True):
        where = "SQLite store" if store else "in memory"
        ours = _child_rss(start, end, store, cap)
        peer = _child_rss(start, start + peer_n, store, None)
        growth = (ours["after"] - ours["before"]) / 1e6
        peer_growth = (peer["after"] - peer["before"]) / 1e6 / peer_n * (end - start)
        rows.append(
            result(
                f"RSS growth {start:,} -> {end:,} finished tasks ({where}, {cap:,} kept)",
                round(growth, 1),
                "MB",
                peer={
                    f"no cap (x{(end - start) / peer_n:g} of {peer_n:,} tasks)": round(
                        peer_growth, 1
                    )
                },
                ratio=growth / peer_growth if peer_growth > 0 else None,
                target="<= 40 MB",
                passed=growth <= 40,
                tasks_kept=ours["kept"],
                tasks_total=ours["total"],
            )
        )
    return rows


def run(size: str) -> list[dict[str, Any]]:
    n = int(size_of(size, "memory")["tasks"])
    ours = _controller_bytes_per_task(n)
    peer = _futures_bytes_per_task(n)
    return [
        result(
            f"memory per finished task kept ({n:,} tasks, no cap)",
            round(ours),
            "bytes",
            peer={"concurrent.futures.Future": round(peer)},
            ratio=ours / peer if peer else None,
            target="<= 2 KB (2048 bytes)",
            passed=ours <= 2048,
            tasks=n,
        ),
        *_bounded_rows(size),
    ]


if __name__ == "__main__":  # one RSS run (``_child_rss``): start end [db] [cap]
    a_start, a_end, a_db, a_cap = sys.argv[1:5]
    cap_arg = int(a_cap) if a_cap else None
    print(json.dumps(rss_growth(int(a_start), int(a_end), a_db or None, cap_arg)))

"""Memory held per finished task (snapshot, history, attempt records, bookkeeping) by
the in-memory Controller, measured with tracemalloc over N no-op tasks on the thread
executor. The caller's handles are dropped before measuring: what is left is what the
controller keeps. Peer: the ``concurrent.futures.Future`` a ThreadPoolExecutor user
keeps per finished call (far less information, shown for scale).
"""

from __future__ import annotations

import gc
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.common import result
from benchmarks.sizes import size_of
from chongming_nb import Controller


def noop() -> None:
    return None


def _controller_bytes_per_task(n: int) -> float:
    ctl = Controller()
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


def run(size: str) -> list[dict[str, Any]]:
    n = int(size_of(size, "memory")["tasks"])
    ours = _controller_bytes_per_task(n)
    peer = _futures_bytes_per_task(n)
    return [
        result(
            f"memory per finished task ({n:,} tasks)",
            round(ours),
            "bytes",
            peer={"concurrent.futures.Future": round(peer)},
            ratio=ours / peer if peer else None,
            target="<= 2 KB (2048 bytes)",
            passed=ours <= 2048,
            tasks=n,
        )
    ]

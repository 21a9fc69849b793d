"""Task functions for the dask channel tests (importable by the dask workers)."""

from __future__ import annotations

import time

from chongming_nb.runtime.context import TaskContext


def chatty(ctx: TaskContext, lines: int, size: int) -> bytes:
    """Reports progress and prints ``lines`` lines, then returns ``size`` bytes: the
    reports must all be delivered before the result."""
    for i in range(lines):
        print(f"line {i}")
        ctx.progress(done=i + 1, total=lines)
    return b"x" * size


def checkpoints_for(ctx: TaskContext, seconds: float) -> str:
    """Cooperative, without reports, for ``seconds`` (then returns)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.checkpoint()
        time.sleep(0.002)
    return "done"

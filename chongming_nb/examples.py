"""Small, importable example tasks for the notebooks and the docs.

Process and Dask executors need functions a child process can import — not functions
defined in a notebook cell — so the scale-out examples live here.
"""

from __future__ import annotations

import time
from typing import Any


def count_primes(ctx: Any, limit: int) -> int:
    """CPU-bound pure Python: how many primes below ``limit`` (checkpoint per 1,000)."""
    found = 0
    for n in ctx.track(range(2, limit), unit="numbers"):
        if n < 4:
            found += 1
            continue
        if n % 2 == 0:
            continue
        d = 3
        prime = True
        while d * d <= n:
            if n % d == 0:
                prime = False
                break
            d += 2
        found += prime
    return found


def stubborn(ctx: Any, seconds: float) -> str:
    """Ignores stop requests: never reaches a checkpoint while it spins."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1
    return f"spun {x} times"


def slow_steps(ctx: Any, steps: int, step_seconds: float = 0.05) -> int:
    """A cooperative loop with progress, for pause/resume/stop demonstrations."""
    for _ in ctx.track(range(steps), unit="steps"):
        time.sleep(step_seconds)
    return steps

"""Output capture cost: a task printing N MB with no newline at all beside the same
N MB printed in 1 KB lines (issue: capture must be linear in the bytes written whatever
the line endings), in the same run; writing the same bytes to ``/dev/null`` as a peer.

The task runs under an in-memory Controller with the inline executor, so the timing
includes the whole capture path: the stream proxy, line assembly, and each line's
record in the task's log.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from benchmarks.common import best_of, result, safe_ratio, timed
from benchmarks.sizes import size_of
from chongming_nb import Controller, TaskContext


def _write(stream: Any, chunk: str, n: int) -> None:
    w = stream.write
    for _ in range(n):
        w(chunk)


def _measure(ctx: TaskContext, megabytes: int, repeats: int) -> dict[str, float]:
    n = megabytes * 1024
    line = "x" * 1023 + "\n"
    no_newline = "x" * 1024
    out: dict[str, float] = {}
    out["lines"] = best_of(repeats, lambda: timed(lambda: _write(sys.stdout, line, n)))
    out["no_newline"] = best_of(
        repeats,
        lambda: timed(lambda: (_write(sys.stdout, no_newline, n), sys.stdout.write("\n"))),
    )
    with open(os.devnull, "w") as devnull:
        out["devnull"] = best_of(repeats, lambda: timed(lambda: _write(devnull, line, n)))
    return out


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "output")
    megabytes, repeats = int(p["megabytes"]), int(p["repeats"])
    ctl = Controller(executor="inline")
    try:
        t = ctl.submit(_measure, megabytes, repeats, name="bench-output").result(timeout=600)
    finally:
        ctl.close()
    ratio = safe_ratio(t["no_newline"], t["lines"])
    return [
        result(
            f"output capture: {megabytes} MB printed with no newline vs in 1 KB lines",
            round(t["no_newline"] * 1000, 2),
            "ms",
            peer={
                "1 KB lines": round(t["lines"] * 1000, 2),
                "/dev/null": round(t["devnull"] * 1000, 2),
            },
            ratio=ratio,
            target="<= 3x the 1 KB lines",
            passed=None if ratio is None else ratio <= 3.0,
            megabytes=megabytes,
        )
    ]

"""Per-item overhead of a controllable loop: ``ctx.track`` beside ``tqdm`` and a bare
loop, and ``ctx.checkpoint()`` beside a bare attribute-check function call.

Overhead per item = (time of the wrapped loop - time of the bare loop) / items, best of
several repeats. ``ctx`` is a real TaskContext of a task running under a Controller (the
inline executor, so the timing loop is not sharing its thread with a scheduler).
"""

from __future__ import annotations

import os
from typing import Any

from tqdm import tqdm

from benchmarks.common import interleaved, result, safe_ratio, timed
from benchmarks.sizes import size_of
from chongming_nb import Controller, TaskContext


class _Flags:
    __slots__ = ("flag",)

    def __init__(self) -> None:
        self.flag = False


_FLAGS = _Flags()


def bare_check() -> None:
    """The cheapest possible cooperative check: one function call, one attribute test."""
    if _FLAGS.flag:
        raise RuntimeError("stop")


def _measure(ctx: TaskContext, items: int, calls: int, repeats: int) -> dict[str, float]:
    r_items = range(items)
    r_calls = range(calls)

    def bare_loop() -> None:
        for _ in r_items:
            pass

    def tqdm_loop() -> None:
        with open(os.devnull, "w") as sink:
            for _ in tqdm(r_items, file=sink):
                pass

    def track_loop() -> None:
        for _ in ctx.track(r_items):
            pass

    def empty_calls() -> None:
        for _ in r_calls:
            pass

    def bare_calls() -> None:
        f = bare_check
        for _ in r_calls:
            f()

    def checkpoint_calls() -> None:
        f = ctx.checkpoint
        for _ in r_calls:
            f()

    # in turn, round after round (common.interleaved): each overhead is a difference of
    # two of these, so both sides are measured over the same stretch of the run
    loops = {
        "bare": bare_loop,
        "tqdm": tqdm_loop,
        "track": track_loop,
        "empty_calls": empty_calls,
        "bare_calls": bare_calls,
        "checkpoint_calls": checkpoint_calls,
    }
    samples = interleaved({name: lambda fn=fn: timed(fn) for name, fn in loops.items()}, repeats)
    return {name: min(runs) for name, runs in samples.items()}


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "overhead")
    items, calls, repeats = int(p["items"]), int(p["calls"]), int(p["repeats"])
    ctl = Controller(executor="inline")
    try:
        t = ctl.submit(_measure, items, calls, repeats, name="bench-overhead").result(timeout=600)
    finally:
        ctl.close()
    ns = 1e9
    bare_ns = t["bare"] / items * ns
    tqdm_over = (t["tqdm"] - t["bare"]) / items * ns
    track_over = (t["track"] - t["bare"]) / items * ns
    cp_ns = (t["checkpoint_calls"] - t["empty_calls"]) / calls * ns
    bare_call_ns = (t["bare_calls"] - t["empty_calls"]) / calls * ns
    r_track = safe_ratio(track_over, tqdm_over)
    r_cp = safe_ratio(cp_ns, bare_call_ns)
    return [
        result(
            "per-item overhead: ctx.track",
            round(track_over, 2),
            "ns/item",
            peer={"tqdm": round(tqdm_over, 2), "bare loop (total)": round(bare_ns, 2)},
            ratio=r_track,
            target="<= 0.7x tqdm's overhead",
            passed=None if r_track is None else r_track <= 0.7,
            items=items,
        ),
        result(
            "ctx.checkpoint() call",
            round(cp_ns, 2),
            "ns/call",
            peer={"bare attribute-check call": round(bare_call_ns, 2)},
            ratio=r_cp,
            target="<= 2x a bare check call",
            passed=None if r_cp is None else r_cp <= 2.0,
            calls=calls,
        ),
    ]

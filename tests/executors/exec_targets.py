"""Task functions for the controller-level executor tests. They live in a module of their
own so that child processes and dask workers can import them."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from chongming_nb.runtime.context import TaskContext


def burn_forever(ctx: TaskContext) -> None:
    """CPU-bound and uncooperative: never reaches a checkpoint (after reporting
    progress 1, which says it is in the loop)."""
    ctx.progress(done=1)
    x = 0
    while True:
        x += 1


def segfault(ctx: TaskContext) -> None:
    ctx.checkpoint()
    ctypes.string_at(0)


def abort(ctx: TaskContext) -> None:
    ctx.checkpoint()
    os.abort()


class DiesWhenLoaded:
    """An argument whose unpickling ends the process: the task never starts."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os._exit, (3,))


def takes_arg(ctx: TaskContext, arg: Any) -> str:
    return "unreachable"


def takes_kw(ctx: TaskContext, *, handle: Any = None) -> str:
    return "unreachable"


def quiet_checkpoints(ctx: TaskContext, seconds: float) -> str:
    """Busy but cooperative: checkpoints only, no progress reports."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.checkpoint()
    return "done"


def sleeps_without_checkpoint(ctx: TaskContext, seconds: float) -> None:
    time.sleep(seconds)


def steps(ctx: TaskContext, n: int, label: str) -> str:
    """n cooperative steps with progress; each step is a short piece of work."""
    for i in ctx.track(range(n), unit="steps"):
        end = time.monotonic() + 0.002
        while time.monotonic() < end:
            pass
        if i == 0:
            print(f"{label} started")
    return label


def loop_until_stopped(ctx: TaskContext) -> None:
    i = 0
    while True:
        ctx.checkpoint()
        i += 1
        if i % 1000 == 0:
            ctx.progress(done=i, unit="iterations")


def square(ctx: TaskContext, x: int) -> int:
    ctx.progress(done=1, total=1)
    return x * x


def plus_upstream(ctx: TaskContext, key: str, extra: int) -> Any:
    return ctx.upstream(key) + extra


def fail_first_attempt(ctx: TaskContext) -> int:
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return ctx.attempt


def unpicklable_result(ctx: TaskContext) -> Any:
    import threading

    return threading.Lock()


def stubborn(ctx: TaskContext, seconds: float) -> str:
    """Ignores stop requests for ``seconds`` (after reporting progress 1)."""
    ctx.progress(done=1)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "finished anyway"


def _slow_value(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


class SlowToLoad:
    """An argument that takes ``seconds`` to unpickle: a child that is slow to start."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __reduce__(self) -> tuple[Any, ...]:
        return (_slow_value, (self.seconds,))


def my_pid(ctx: TaskContext) -> int:
    return os.getpid()


_left_behind = __import__("threading").Event()


def leaves_a_thread(ctx: TaskContext) -> int:
    """Returns while a thread it started still runs (it never ends by itself)."""
    import threading

    threading.Thread(target=_left_behind.wait, daemon=True).start()
    return os.getpid()

"""A child process for the crash test: runs tasks on a SQLite store until killed."""

from __future__ import annotations

import sys
import time

import chongming_nb as cn


def quick(ctx, i):
    ctx.progress(done=1, total=1)
    return i


def slow(ctx, i):
    for _ in ctx.track(range(10_000)):
        time.sleep(0.001)
    return i


def main(path: str) -> None:
    import os
    import socket

    ctl = cn.Controller(
        store=path,
        owner=f"{socket.gethostname()}:{os.getpid()}:-",
        concurrency=cn.ConcurrencyPolicy(max_parallel=4),
    )
    i = 0
    print("ready", flush=True)
    while True:
        ctl.submit(quick, i)
        if i % 5 == 0:
            ctl.submit(slow, i)
        i += 1
        time.sleep(0.002)


if __name__ == "__main__":
    main(sys.argv[1])

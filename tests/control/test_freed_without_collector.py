"""A closed controller that nobody refers to any more is freed at once, by reference
counting: its rooms, tasks, snapshots and history hold no reference cycle, so nothing of
it waits for the cyclic garbage collector.

Why it matters: a notebook makes and drops controllers, and a kernel runs long. Garbage
that only the cyclic collector can free stays in memory until a full collection, and that
collection (tens of milliseconds for 10,000 finished tasks) then lands on whatever code
happens to run, a user's loop or the next controller's tasks.

Each case runs in a fresh interpreter: garbage that other tests leave behind would
otherwise show up in the collector's findings."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_SCENARIO = textwrap.dedent(
    """
    import gc, json, sys, threading, weakref
    from chongming_nb import ConcurrencyPolicy, Controller, InlineExecutor, InMemoryStore
    from chongming_nb import SqliteStore

    def noop(i):
        return i

    def scenario(store_kind, executor, path):
        store = {"none": lambda: None, "memory": InMemoryStore,
                 "sqlite": lambda: SqliteStore(path)}[store_kind]()
        more = {"executor": InlineExecutor()} if executor == "inline" else {}
        ctl = Controller(store=store, concurrency=ConcurrencyPolicy(max_parallel=4), **more)
        handles = [ctl.submit(noop, i) for i in range(50)]
        for h in handles:
            ctl.wait(h, timeout=30)
        assert ctl.flush(timeout=30)
        assert len(ctl.attempts_df()) == 50
        book = weakref.ref(ctl._book)
        ctl.close()
        return book

    gc.collect()
    gc.disable()
    before = set(threading.enumerate())
    book = scenario(sys.argv[1], sys.argv[2], sys.argv[3])
    for worker in set(threading.enumerate()) - before:  # idle workers end on their own
        worker.join(timeout=30)
    alive = [t.name for t in set(threading.enumerate()) - before]
    freed = book() is None
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    left = sorted({type(o).__qualname__ for o in gc.garbage
                   if type(o).__module__.startswith("chongming_nb")})
    print(json.dumps({"alive": alive, "freed": freed, "left": left}))
    """
)


@pytest.mark.parametrize("store_kind", ["none", "memory", "sqlite"])
@pytest.mark.parametrize("executor", ["thread", "inline"])
def test_a_closed_controller_is_freed_by_reference_counting(
    tmp_path: Path, store_kind: str, executor: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCENARIO, store_kind, executor, str(tmp_path / "t.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["alive"] == []  # the controller's threads have ended
    # the collector is off: only reference counting could have freed the book
    assert found["freed"], "the closed controller is still referred to"
    assert found["left"] == []  # nothing of ours waits for the collector

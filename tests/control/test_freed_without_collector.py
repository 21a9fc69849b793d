"""A closed controller that nobody refers to any more is freed at once, by reference
counting: its rooms, tasks, snapshots and history hold no reference cycle, so nothing of
it waits for the cyclic garbage collector.

Why it matters: a notebook makes and drops controllers, and a kernel runs long. Garbage
that only the cyclic collector can free stays in memory until a full collection, and that
collection (tens of milliseconds for 10,000 finished tasks) then lands on whatever code
happens to run, a user's loop or the next controller's tasks."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from chongming_nb import ConcurrencyPolicy, Controller, InlineExecutor, InMemoryStore, SqliteStore


def _noop(i: int) -> int:
    return i


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


def _ours_left_for_the_collector() -> list[str]:
    """Names of this package's objects that only the cyclic collector could free."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    left = sorted(
        {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("chongming_nb")}
    )
    gc.set_debug(0)
    gc.garbage.clear()
    return left


def _work(ctl: Controller) -> None:
    handles = [ctl.submit(_noop, i) for i in range(50)]
    for h in handles:
        ctl.wait(h, timeout=30)
    assert ctl.flush(timeout=30)
    assert len(ctl.attempts_df()) == 50


@pytest.mark.parametrize("store_kind", ["none", "memory", "sqlite"])
@pytest.mark.parametrize("executor", ["thread", "inline"])
def test_a_closed_controller_is_freed_by_reference_counting(
    tmp_path: Path, collector_off: None, store_kind: str, executor: str
) -> None:
    store = {
        "none": lambda: None,
        "memory": InMemoryStore,
        "sqlite": lambda: SqliteStore(tmp_path / "t.db"),
    }[store_kind]()
    more = {"executor": InlineExecutor()} if executor == "inline" else {}
    before = set(threading.enumerate())
    ctl = Controller(store=store, concurrency=ConcurrencyPolicy(max_parallel=4), **more)
    _work(ctl)
    book = weakref.ref(ctl._book)
    ctl.close()
    del ctl, store, more
    for worker in set(threading.enumerate()) - before:  # idle workers end on their own
        worker.join(timeout=30)
        assert not worker.is_alive(), worker
    left = book()
    referrers = [] if left is None else [type(r).__qualname__ for r in gc.get_referrers(left)]
    del left
    assert referrers == [], "the closed controller is still referred to"
    assert _ours_left_for_the_collector() == []

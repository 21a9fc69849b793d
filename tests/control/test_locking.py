"""The locking rules of ``chongming_nb/control/book.py``, held against a threaded run.

A controller with a store runs tasks that succeed, fail and retry, time out, and are
paused, resumed and stopped from several caller threads at once. Its lock is replaced
by one that records who takes it, and the rooms' entry points are wrapped to check,
on the thread that calls them:

* every status change (``TaskBook.apply``) happens under the lock;
* no executor launch runs under the lock;
* timers fire only on the dispatcher thread, under the lock;
* the recorder thread (store writes, subscribers) never takes the lock;
* subscribers are called on the recorder thread, without the lock;
* the store tick (``lifecycle.OwnerLeases.tick``: commands, owner heartbeat, leases,
  fencing) runs on the dispatcher thread, without the lock (it calls the store);
* batches are written to the store (``StoreLink.persist``) on the recorder thread,
  without the lock.

Each wrapped path must also have been taken, so a run that skipped one cannot pass.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chongming_nb import (
    ConcurrencyPolicy,
    Controller,
    Exponential,
    InMemoryStore,
    RetryPolicy,
    TaskContext,
    Timeout,
)
from chongming_nb.control import book as book_module
from chongming_nb.control.book import TaskBook
from chongming_nb.core.errors import TaskError
from chongming_nb.core.events import Event
from chongming_nb.core.states import TERMINAL
from chongming_nb.runtime.executors import ExecutionRequest, Executor, Reporter, make_executor

DEADLINE = 30.0


class RecordingLock:
    """An RLock that remembers which threads took it (the Condition protocol too)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.takers: Counter[str] = Counter()

    def _note(self) -> None:
        self.takers[threading.current_thread().name] += 1

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._note()
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    # what threading.Condition uses on its lock
    def _is_owned(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined,no-any-return]

    def _release_save(self) -> Any:
        return self._lock._release_save()  # type: ignore[attr-defined]

    def _acquire_restore(self, state: Any) -> None:
        self._lock._acquire_restore(state)  # type: ignore[attr-defined]
        self._note()


class Rules:
    """Violations and the count of each checked path."""

    def __init__(self) -> None:
        self.broken: list[str] = []
        self.seen: Counter[str] = Counter()
        self._guard = threading.Lock()

    def check(self, path: str, ok: bool, why: str) -> None:
        with self._guard:
            self.seen[path] += 1
            if not ok:
                self.broken.append(f"{path} on {threading.current_thread().name}: {why}")


class CheckedExecutor:
    """The thread executor, checked: ``launch`` must not run under the lock."""

    def __init__(self, inner: Executor, book: Callable[[], TaskBook], rules: Rules) -> None:
        self._inner = inner
        self._book = book
        self._rules = rules
        self.name = inner.name

    def launch(self, req: ExecutionRequest, reporter: Reporter) -> Any:
        lock = self._book().lock
        assert isinstance(lock, RecordingLock)
        self._rules.check("launch", not lock._is_owned(), "launched under the lock")
        return self._inner.launch(req, reporter)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def rules() -> Rules:
    return Rules()


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch, rules: Rules) -> Iterator[Controller]:
    # the book builds its lock (and the conditions on it) from this namespace; its
    # plain Lock (the queued-log count's, which the recorder may take) is not the book's
    fake_threading = types.SimpleNamespace(
        RLock=RecordingLock, Condition=threading.Condition, Lock=threading.Lock
    )
    monkeypatch.setattr(book_module, "threading", fake_threading)
    holder: list[Controller] = []
    ex = CheckedExecutor(make_executor("thread"), lambda: holder[0]._book, rules)
    ctl = Controller(
        store=InMemoryStore(),
        concurrency=ConcurrencyPolicy(max_parallel=3),
        executor=ex,  # type: ignore[arg-type]
        stop_grace=0.2,
        pause_grace=0.2,
    )
    holder.append(ctl)
    book = ctl._book
    lock = book.lock
    assert isinstance(lock, RecordingLock)

    original_apply = book.apply

    def apply(*a: Any, **kw: Any) -> None:
        rules.check("apply", lock._is_owned(), "a status changed without the lock")
        original_apply(*a, **kw)

    book.apply = apply  # type: ignore[method-assign]

    dispatcher = ctl._dispatcher
    original_fire = dispatcher._fire

    def fire(*a: Any) -> None:
        on_dispatcher = threading.current_thread() is dispatcher.thread
        rules.check("fire", on_dispatcher and lock._is_owned(), "a timer fired elsewhere")
        original_fire(*a)

    dispatcher._fire = fire  # type: ignore[method-assign]

    leases = ctl._leases
    assert leases is not None
    original_tick = leases.tick

    def tick(mono: float) -> None:
        on_dispatcher = threading.current_thread() is dispatcher.thread
        ok = on_dispatcher and not lock._is_owned()
        rules.check("store tick", ok, "the store ticked off the dispatcher or under the lock")
        original_tick(mono)

    leases.tick = tick  # type: ignore[method-assign]

    link = ctl._link
    assert link is not None
    original_persist = link._persist

    def persist(batch: Any) -> None:
        on_recorder = threading.current_thread().name == "chongming-recorder"
        ok = on_recorder and not lock._is_owned()
        rules.check("persist", ok, "a batch was written off the recorder or under the lock")
        original_persist(batch)

    link._persist = persist  # type: ignore[method-assign]
    yield ctl
    ctl.close(timeout=5)


def cooperative(ctx: TaskContext, n: int) -> int:
    for _ in ctx.track(range(n)):
        time.sleep(0.001)
    return n


def flaky(ctx: TaskContext) -> None:
    print(f"attempt {ctx.attempt}")  # log lines: the recorder writes them without the lock
    ctx.checkpoint()
    raise ConnectionError(f"attempt {ctx.attempt}")


def slow(ctx: TaskContext) -> None:
    for _ in ctx.track(range(200)):
        time.sleep(0.005)


def test_the_locking_rules_hold_under_concurrent_control(checked: Controller, rules: Rules) -> None:
    ctl = checked
    lock = ctl._book.lock
    assert isinstance(lock, RecordingLock)

    def subscriber(ev: Event) -> None:
        rules.check(
            "subscriber",
            threading.current_thread().name == "chongming-recorder" and not lock._is_owned(),
            "a subscriber ran off the recorder thread or under the lock",
        )

    ctl.watch(subscriber)
    handles = []
    for i in range(12):
        handles.append(ctl.submit(cooperative, 20 + i))
        handles.append(
            ctl.submit(
                flaky,
                retry=RetryPolicy(max_attempts=2, backoff=Exponential(base=0.01, jitter="none")),
            )
        )
    handles.append(ctl.submit(slow, timeout=Timeout(per_attempt=0.05)))
    long_ones = [ctl.submit(slow) for _ in range(4)]
    handles.extend(long_ones)

    def controller_thread(k: int) -> None:
        for j, h in enumerate(long_ones * 3):
            with contextlib.suppress(TaskError):
                (ctl.pause, ctl.resume, ctl.stop)[(j + k) % 3](h.id)
            ctl.get(h.id)
            ctl.list_tasks(limit=5)

    callers = [
        threading.Thread(target=controller_thread, args=(k,), name=f"caller-{k}") for k in range(3)
    ]
    for c in callers:
        c.start()
    for c in callers:
        c.join(DEADLINE)
    for h in long_ones:
        with contextlib.suppress(TaskError):
            ctl.stop(h.id, graceful=False)
    for h in handles:
        ctl.wait(h.id, timeout=DEADLINE)
    assert ctl.flush(DEADLINE)

    assert all(ctl.get(h.id).status in TERMINAL for h in handles)
    assert rules.broken == []
    for path in ("apply", "launch", "fire", "subscriber", "store tick", "persist"):
        assert rules.seen[path] > 0, f"the run never took the {path} path"
    assert lock.takers["chongming-recorder"] == 0, "the recorder thread took the lock"
    assert lock.takers["chongming-dispatcher"] > 0
    assert ctl.persist_failures == 0


def test_a_status_change_without_the_lock_is_caught(checked: Controller, rules: Rules) -> None:
    """The check above can fail: a status change outside the lock is reported."""
    h = checked.submit(cooperative, 1)
    checked.wait(h.id, timeout=DEADLINE)
    book = checked._book
    t = book.task(h.id)
    book.apply(t, book.sm.reset(t.snap))  # deliberately without the lock
    assert any(v.startswith("apply") for v in rules.broken)

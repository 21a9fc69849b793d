"""``Controller.flush`` waits for a hand-over of the outbox another thread is in the
middle of (the chaos test's "memory == store": a refused write handed over while the
owner flushed was converged only after its flush returned, so the memory it reported
still said SUCCEEDED where the store said LOST)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import chongming_nb as cn


class _WatchedLock:
    """The book's lock, telling when ``watched`` thread tries to take it."""

    def __init__(self, inner: Any, tried: threading.Event) -> None:
        self.inner = inner
        self.tried = tried
        self.watched: threading.Thread | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.current_thread() is self.watched:
            self.tried.set()
        return bool(self.inner.acquire(blocking, timeout))

    def __getattr__(self, name: str) -> Any:  # release, and what a Condition uses
        return getattr(self.inner, name)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


def test_flush_waits_for_a_hand_over_in_progress(tmp_path: Path) -> None:
    ctl = cn.Controller(store=str(tmp_path / "h.db"))
    try:
        book, bus = ctl._book, ctl._bus
        item = object()  # stands for a store write (the recorder skips what it does not know)
        go = threading.Event()  # the hander-over may go on: the flusher waits, or is done
        handing_over = threading.Event()
        queued = threading.Event()
        lock = _WatchedLock(book.lock, go)
        book.lock = lock  # type: ignore[assignment]
        real_put = bus.put_many

        def put_many(items: list[Any]) -> None:
            if threading.current_thread() is hander:
                handing_over.set()  # the items are out of the outbox, not yet queued
                go.wait()
            real_put(items)
            if item in items:
                queued.set()

        bus.put_many = put_many  # type: ignore[method-assign]

        def hand() -> None:
            with book.lock:
                book.outbox.append(item)
                book.flush_outbox()

        seen: list[bool] = []

        def flush() -> None:
            try:
                ctl.flush(10.0)
                seen.append(queued.is_set())  # was it queued ahead of the flush's marker?
            finally:
                go.set()

        hander = threading.Thread(target=hand)
        flusher = threading.Thread(target=flush)
        lock.watched = flusher
        hander.start()
        handing_over.wait()
        flusher.start()
        flusher.join()
        hander.join()
        assert seen == [True]
    finally:
        ctl.close()

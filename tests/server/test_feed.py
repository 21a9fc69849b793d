"""The feed's change tracking on an in-memory store (no server): cursors, progress-only
changes, tasks that finish between polls, pruned tasks, resets and long-poll wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from helpers_server import put_task

from chongming_nb.core.models import Progress
from chongming_nb.core.states import TaskStatus
from chongming_nb.server.feed import Feed
from chongming_nb.stores import InMemoryStore

S = TaskStatus
T = TypeVar("T")


async def direct(fn: Callable[[], T]) -> T:
    return fn()


def make_feed(store: Any, **kw: Any) -> Feed:
    return Feed(lambda: store, direct, interval=0.01, **kw)


async def test_cursor_and_changes() -> None:
    store = InMemoryStore()
    put_task(store, "a", S.RUNNING)
    put_task(store, "b", S.SUCCEEDED)
    feed = make_feed(store)
    cursor = await feed.primed()
    first = feed.changes(0)
    assert first.reset and {s.task_id for s in first.tasks} == {"a", "b"}
    # the whole store's counts ride along (the sidebar's counts bar stays live)
    assert first.counts == store.counts() and first.counts[S.RUNNING] == 1
    assert not await feed.poll_once()  # nothing changed
    store.touch("a", progress=Progress(done=5, total=10))  # no version bump
    assert await feed.poll_once()
    delta = feed.changes(cursor)
    assert not delta.reset and [s.task_id for s in delta.tasks] == ["a"]
    assert delta.counts[S.SUCCEEDED] == 1
    assert delta.tasks[0].progress is not None and delta.tasks[0].progress.done == 5
    assert feed.changes(feed.seq).tasks == []
    # a cursor from the future (the server restarted) gets the full list
    assert feed.changes(feed.seq + 5).reset
    await feed.close()


async def test_finished_between_polls_and_pruned_tasks() -> None:
    store = InMemoryStore()
    feed = make_feed(store, full_every=1000)
    cursor = await feed.primed()
    # created and finished between two polls: the counts change, so a full scan finds it
    put_task(store, "fast", S.SUCCEEDED)
    assert await feed.poll_once()
    assert [s.task_id for s in feed.changes(cursor).tasks] == ["fast"]
    cursor = feed.seq
    store.prune(keep_terminal=0)
    assert await feed.poll_once()
    assert feed.changes(cursor).removed == ["fast"]
    await feed.close()


async def test_wait_wakes_on_change_and_times_out_quietly() -> None:
    store = InMemoryStore()
    put_task(store, "a", S.RUNNING)
    feed = make_feed(store)
    cursor = await feed.primed()
    quiet = await feed.wait(cursor, 0.05)
    assert quiet.tasks == [] and quiet.cursor == cursor
    waiting = asyncio.ensure_future(feed.wait(cursor, 5))
    await asyncio.sleep(0)
    store.touch("a", progress=Progress(done=1))
    answer = await asyncio.wait_for(waiting, 5)
    assert [s.task_id for s in answer.tasks] == ["a"] and answer.cursor > cursor
    await feed.close()

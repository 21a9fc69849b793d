"""Bounded kernel memory: past ``HistoryLimits.memory_finished_tasks`` the oldest finished
tasks leave the controller's memory (their status kept in one byte each); live tasks
never. Handles, reads, counts and dependencies stay right; with a store, reads of an
evicted task go to the store. The tests count the tasks kept (never time or RSS)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ctl_helpers import Rig, failing_task, ok_task, wait_status, wait_until

from chongming_nb import Controller, HistoryLimits, TaskContext, TaskStatus
from chongming_nb.core.errors import ConfigurationError, TaskEvicted, TaskNotFound
from chongming_nb.core.models import Command, CommandState

S = TaskStatus
CAP = 5
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def kept(ctl: Controller) -> int:
    """Tasks the controller holds in memory."""
    return len(ctl._book.tasks)


def bounded(make_ctl: Callable[..., Controller], **kw: Any) -> Controller:
    return make_ctl(history=HistoryLimits(memory_finished_tasks=CAP), executor="inline", **kw)


def run_many(ctl: Controller, n: int) -> list[Any]:
    """``n`` no-op tasks, one after the other; the tasks in memory never pass the cap."""
    handles = []
    for i in range(n):
        h = ctl.submit(ok_task, i)
        h.wait(timeout=10)  # (settles its end if the dispatcher held the lock)
        handles.append(h)
        assert kept(ctl) <= CAP
    return handles


def test_finished_tasks_beyond_the_cap_leave_memory_oldest_first(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = bounded(make_ctl)
    handles = run_many(ctl, 40)
    assert kept(ctl) == CAP
    assert [s.task_id for s in ctl.list_tasks()] == [h.id for h in reversed(handles[-CAP:])]
    # counts stay right: the evicted are counted by status
    assert ctl.stats()["succeeded"] == ctl.stats(status=None)["succeeded"] == 40
    assert "tasks=40" in repr(ctl)


def test_a_handle_stays_valid_after_eviction_without_a_store(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = bounded(make_ctl)
    bad = ctl.submit(failing_task)
    handles = run_many(ctl, 20)
    first = handles[0]
    assert first.status is S.SUCCEEDED and first.done()
    assert bad.status is S.FAILED
    assert not first.running
    assert "out of memory" in repr(first)
    assert ctl.handle(first.id) == first
    with pytest.raises(TaskEvicted, match="memory_finished_tasks") as err:
        first.result()
    assert err.value.status is S.SUCCEEDED and err.value.kept == CAP
    with pytest.raises(TaskEvicted, match="without a store"):
        ctl.get(first.id)
    with pytest.raises(TaskEvicted, match="without a store"):
        first.attempts()
    # an id that never was is still unknown, not evicted
    with pytest.raises(TaskNotFound) as unknown:
        ctl.get("nope")
    assert not isinstance(unknown.value, TaskEvicted)
    s = ctl.stats()
    assert (s["succeeded"], s["failed"]) == (20, 1)


def test_with_a_store_evicted_tasks_are_read_from_it(
    make_ctl: Callable[..., Controller], tmp_path: Path
) -> None:
    ctl = bounded(make_ctl, store=str(tmp_path / "t.db"))
    bad = ctl.submit(failing_task, "kaput")
    handles = run_many(ctl, 20)
    assert kept(ctl) == CAP
    first = handles[0]
    snap = first.snapshot
    assert (snap.task_id, snap.status) == (first.id, S.SUCCEEDED)
    assert [a.outcome for a in first.attempts()] == [S.SUCCEEDED]
    assert [tr.to_status for tr in ctl.history(first)][-1] is S.SUCCEEDED
    assert first.wait().status is S.SUCCEEDED
    with pytest.raises(TaskEvicted, match="result is not kept"):
        first.result()
    with pytest.raises(Exception, match="kaput"):
        bad.result()  # the failure comes from the stored snapshot
    ids = [s.task_id for s in ctl.list_tasks()]
    assert ids == [h.id for h in reversed([bad, *handles])]
    assert [s.task_id for s in ctl.list_tasks(limit=7)] == ids[:7]
    assert {s.task_id for s in ctl.list_tasks(status="failed")} == {bad.id}
    assert [s.task_id for s in ctl.list_tasks(ids=[first.id, handles[-1].id])] == [
        handles[-1].id,
        first.id,
    ]
    assert ctl.stats()["succeeded"] == 20
    assert ctl.stats(status="failed")["failed"] == 1
    assert len(ctl.snapshots_df()) == 21
    assert len(ctl.attempts_df()) == 21
    assert set(ctl.transitions_df()["task_id"]) == set(ids)


def test_a_store_command_for_an_evicted_task_is_refused_naming_the_limit(
    make_ctl: Callable[..., Controller], tmp_path: Path
) -> None:
    ctl = bounded(make_ctl, store=str(tmp_path / "t.db"))
    first = run_many(ctl, 10)[0]
    store = ctl.store
    assert store is not None
    store.submit_command(
        Command(command_id="c1", task_id=first.id, verb="retry", actor="sidebar", created_at=NOW)
    )
    assert ctl._link is not None and ctl._link.poll_commands() == 1
    done = store.get_command("c1")
    assert done is not None and done.state is CommandState.REJECTED
    assert done.outcome is not None and "memory_finished_tasks" in done.outcome["reason"]
    assert done.outcome["status"] == "succeeded"


def test_another_controllers_tasks_in_the_store_are_not_listed(
    make_ctl: Callable[..., Controller], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    other = make_ctl(store=db, executor="inline")
    theirs = other.submit(ok_task)
    other.flush()
    ctl = bounded(make_ctl, store=db)
    run_many(ctl, 12)
    assert theirs.id not in {s.task_id for s in ctl.list_tasks()}
    assert len(ctl.list_tasks()) == 12


def test_live_tasks_are_never_evicted(make_ctl: Callable[..., Controller], rig: Rig) -> None:
    ctl = make_ctl(history=HistoryLimits(memory_finished_tasks=CAP), max_parallel=8)
    gate = rig.gate()
    live = [ctl.submit(gate.cooperative) for _ in range(3)]
    wait_status(ctl, live[0], S.RUNNING)
    for i in range(20):
        ctl.submit(ok_task, i)
    wait_until(ctl, lambda: ctl.stats()["succeeded"] == 20, what="20 tasks to succeed")
    ctl.flush()
    assert all(h.id in ctl._book.tasks for h in live)
    assert kept(ctl) == 3 + CAP
    gate.release()
    for h in live:
        assert h.wait(timeout=10).status is S.SUCCEEDED


def test_a_dependency_on_an_evicted_task_resolves(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = bounded(make_ctl)
    ok = ctl.submit(ok_task, "v")
    bad = ctl.submit(failing_task)
    run_many(ctl, 10)
    assert ok.id not in ctl._book.tasks and bad.id not in ctl._book.tasks

    seen: list[Any] = []

    def reads(ctx: TaskContext) -> None:
        try:
            ctx.upstream(ok)
        except KeyError as exc:
            seen.append(str(exc))

    after_ok = ctl.submit(reads, after=ok)
    assert after_ok.wait(timeout=10).status is S.SUCCEEDED
    assert "not kept" in seen[0] and "memory_finished_tasks" in seen[0]
    after_bad = ctl.submit(ok_task, after=[bad])
    assert after_bad.wait(timeout=10).status is S.CANCELLED
    assert bad.id in after_bad.snapshot.failure.message  # type: ignore[union-attr]


def test_an_unfinished_dependant_keeps_its_upstream_and_its_result(
    make_ctl: Callable[..., Controller], rig: Rig
) -> None:
    ctl = make_ctl(history=HistoryLimits(memory_finished_tasks=CAP))
    gate = rig.gate()
    up = ctl.submit(ok_task, "value")
    up.wait(timeout=10)
    blocker = ctl.submit(gate.cooperative)
    down = ctl.submit(lambda ctx: ctx.upstream(up), after=[up, blocker])
    for i in range(20):
        ctl.submit(ok_task, i).wait(timeout=10)
    assert up.id in ctl._book.tasks  # BLOCKED down needs its result
    gate.release()
    assert down.result(timeout=10) == "value"


def test_an_idempotency_key_of_an_evicted_task_still_names_it(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = bounded(make_ctl)
    first = ctl.submit(ok_task, idempotency_key="k")
    run_many(ctl, 10)
    assert ctl.submit(ok_task, idempotency_key="k") == first


def test_the_cap_is_validated_and_none_keeps_everything(
    make_ctl: Callable[..., Controller],
) -> None:
    with pytest.raises(ConfigurationError, match="memory_finished_tasks"):
        HistoryLimits(memory_finished_tasks=0)
    assert HistoryLimits().memory_finished_tasks == 10_000
    ctl = make_ctl(history=HistoryLimits(memory_finished_tasks=None), executor="inline")
    for i in range(30):
        ctl.submit(ok_task, i)
    assert kept(ctl) == 30

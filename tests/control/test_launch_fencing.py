"""A launch and the store's settling race: a task the store settled is never started,
and one settled while the executor is launching it is told to stop at its first
checkpoint; what ran is recorded as it happened (docs/store-guide.md, "Owners,
leases and fencing"). On the memory store, SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from ctl_helpers import Rig, ok_task, wait_status
from fencing import FAR, StorePair, WatchedExecutor, agree, settle_from_elsewhere

from chongming_nb import Controller, TaskContext, TaskStatus
from chongming_nb.control.loops import LoopRecord
from chongming_nb.control.persistence import PersistenceWarning
from chongming_nb.testing.stores import ForwardingStore

S = TaskStatus


class RunningAndQueued:
    """A controller of FAR with one slot whose store link the test drives: ``a``
    runs (until ``gate`` opens), ``b`` is queued behind it; ``began`` is set if ``b``'s
    work ever begins."""

    def __init__(self, rig: Rig, make_ctl: Callable[..., Controller], store: object) -> None:
        self.ex = WatchedExecutor()
        self.ctl = make_ctl(
            store=store, owner=FAR, lease_seconds=1, executor=self.ex, max_parallel=1
        )
        self.ctl._dispatcher.store_tick = None  # no heartbeat or renewal comes unasked
        self.gate = rig.gate()
        self.began = threading.Event()
        self.a = self.ctl.submit(self.gate.cooperative, name="first")
        wait_status(self.ctl, self.a, S.RUNNING)
        self.b = self.ctl.submit(self.second, name="second")

    def second(self, ctx: TaskContext) -> None:
        self.began.set()


def test_a_task_settled_while_it_is_being_launched_is_told_to_stop(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """The store settles a task (LOST) while the controller is inside the executor's
    launch, before the execution's handle exists; the owner adopts LOST at its next
    renewal. When the launch returns, the execution is told to stop: its first
    checkpoint raises, and the work after it never runs."""
    main, other = pair
    ex = WatchedExecutor()
    ctl = make_ctl(store=main, owner=FAR, lease_seconds=1, executor=ex)
    ctl._dispatcher.store_tick = None  # this test drives the store link itself
    go = ex.hold()
    worked = threading.Event()

    def work(ctx: TaskContext) -> None:
        ctx.checkpoint()
        worked.set()

    submitter = threading.Thread(target=ctl.submit, args=(work,), kwargs={"name": "work"})
    submitter.start()
    assert ex.in_launch.wait(10)
    [snap] = ctl.list_tasks()
    tid = snap.task_id
    ctl.flush()  # STARTING is in the store
    assert settle_from_elsewhere(other, rig.clock)()["lost"] == [tid]
    assert ctl._leases is not None
    ctl._leases.renew_leases()  # adopted while the launch is still inside the executor
    assert ctl.get(tid).status is S.LOST
    go.set()
    submitter.join(10)
    assert ex.end_of("work").wait(10)
    assert not worked.is_set(), "the work of a settled task ran"
    ctl.flush()
    agree(ctl, main, tid)
    [rec] = main.attempts(tid)
    assert rec.abandoned and rec.outcome is S.LOST


def test_a_task_settled_before_its_launch_does_not_start(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """The owner's standing lapsed (its clock is past its last heartbeat and lease
    renewal by more than a lease) and a reconciler settled its queued task CANCELLED
    ("never started"). When a slot frees, the launch waits until the store has taken
    its STARTING — the store refuses it — so the work never begins: the store's
    CANCELLED is true, and memory adopts it."""
    main, other = pair
    rq = RunningAndQueued(rig, make_ctl, main)
    ctl, ex, gate, began, a, b = rq.ctl, rq.ex, rq.gate, rq.began, rq.a, rq.b
    assert b.status is S.QUEUED
    ctl.flush()
    assert sorted(settle_from_elsewhere(other, rig.clock)()["lost"]) == sorted([a.id, b.id])
    assert main.get(b.id).status is S.CANCELLED
    rig.clock.advance(5)  # the owner's last heartbeat is more than a lease ago
    gate.release()
    assert ex.end_of("first").wait(10)  # its end was reported: the slot it held is free
    ctl.flush()
    assert ex.launched == ["first"], "a task the store settled was launched"
    assert not began.is_set()
    for h in (a, b):
        agree(ctl, main, h.id)
    assert ctl.get(b.id).status is S.CANCELLED
    assert ctl.attempts(b.id) == main.attempts(b.id)


def test_a_launch_in_doubt_starts_once_the_store_takes_it(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """The owner's standing lapsed but nobody settled its task: the launch waits for
    the store to take STARTING, then runs."""
    main, _ = pair
    ex = WatchedExecutor()
    ctl = make_ctl(store=main, owner=FAR, lease_seconds=1, executor=ex)
    ctl._dispatcher.store_tick = None
    rig.clock.advance(5)
    h = ctl.submit(ok_task, 3, name="late")
    ctl.flush()  # STARTING written, read back: launched
    assert h.result(timeout=10) == 3
    ctl.flush()
    assert ex.launched == ["late"]
    agree(ctl, main, h.id)


@pytest.mark.parametrize("pair", ["sqlite", "postgres"], indirect=True)
def test_a_held_launch_that_is_stopped_never_starts(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """The owner's standing lapsed and the store takes no writes (an outage holds
    them): the launch waits. Stopped meanwhile, the task is STOPPED at once, its work
    never began; when the store is back memory and store agree. (SQL stores: they hold
    the writes of an outage.)"""
    main, _ = pair
    flaky = ForwardingStore(main)
    ex = WatchedExecutor()
    ctl = make_ctl(store=flaky, owner=FAR, lease_seconds=1, executor=ex)
    ctl._dispatcher.store_tick = None
    rig.clock.advance(5)
    flaky.fail("record_batch")
    with pytest.warns(PersistenceWarning):
        h = ctl.submit(ok_task, name="held")
        ctl.flush()
    assert h.status is S.STARTING and ex.launched == []
    h.stop()
    wait_status(ctl, h, S.STOPPED)
    [rec] = ctl.attempts(h.id)
    assert rec.outcome is S.STOPPED and not rec.abandoned
    flaky.heal()
    ctl.flush()
    assert ex.launched == []
    agree(ctl, main, h.id)


@pytest.mark.parametrize("pair", ["sqlite", "postgres"], indirect=True)
def test_failing_lease_renewals_put_a_launch_in_doubt(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """The owner's heartbeats reach the store but its lease renewals do not (the
    recorder's writes are refused and held), so the leases the store holds run out
    and a reconciler settles the queued task. Its launch waits for the store, which
    refuses it: the work never begins."""
    main, other = pair
    flaky = ForwardingStore(main)
    rq = RunningAndQueued(rig, make_ctl, flaky)
    ctl, ex, gate, began, a, b = rq.ctl, rq.ex, rq.gate, rq.began, rq.a, rq.b
    leases = ctl._leases
    assert leases is not None
    leases.renew_leases()
    ctl.flush()
    assert main.get(b.id).lease_until is not None  # the store holds a lease on it
    flaky.fail("record_batch")
    with pytest.warns(PersistenceWarning):
        for _ in range(3):  # beats land, renewals are held
            rig.clock.advance(0.9)
            leases.beat_owner()
            leases.renew_leases()
            ctl.flush()
    assert ctl.health()["saved"] is False
    assert sorted(settle_from_elsewhere(other, rig.clock)()["lost"]) == sorted([a.id, b.id])
    gate.release()
    assert ex.end_of("first").wait(10)
    flaky.heal()
    ctl.flush()
    ctl.flush()
    assert ex.launched == ["first"], "a task the store settled was launched"
    assert not began.is_set()
    for h in (a, b):
        agree(ctl, main, h.id)


@pytest.mark.parametrize("pair", ["sqlite"], indirect=True)
def test_a_loop_in_a_cell_is_never_held(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """A tracked loop's work is the cell's own code, which runs whatever the store
    says: its task starts at once even while the owner's standing is in doubt and
    the store takes no writes (holding it would only fail the loop)."""
    main, _ = pair
    flaky = ForwardingStore(main)
    ctl = make_ctl(store=flaky, owner=FAR, lease_seconds=1)
    ctl._dispatcher.store_tick = None
    rig.clock.advance(5)
    flaky.fail("record_batch")
    with pytest.warns(PersistenceWarning):
        rec = LoopRecord(ctl, "loop", 3, "it")
        ctl.flush()
    assert rec.status is S.RUNNING
    rec.finish_succeeded(3)
    assert ctl.get(rec.task_id).status is S.SUCCEEDED

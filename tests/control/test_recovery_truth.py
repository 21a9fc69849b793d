"""Recovery never lies: when the store settled a task without its owner (a reconciler
found the owner's lease ended), the owner converges to the store's truth — even when
reading that truth fails at first — and no write of the task is dropped silently; a
task settled while it is being launched does not run its work, and what ran is
recorded as it happened. On the memory store, SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ctl_helpers import Rig, wait_status
from fencing import FAR, StorePair, agree, settle_from_elsewhere

from chongming_nb import Controller, TaskContext, TaskHandle, TaskStatus
from chongming_nb.control.pipeline import Pipeline, PipelineRunStatus
from chongming_nb.control.pipeline._status import RUN_TERMINAL
from chongming_nb.control.recovery import RUN_LOST, RUN_OPEN
from chongming_nb.stores import TaskStore
from chongming_nb.testing.stores import ForwardingStore

S = TaskStatus


def test_a_converge_whose_read_fails_is_tried_again_and_reported(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """The store refuses the owner's write (a reconciler settled the task) and reading
    the store's row back fails (the store went away again): the task stays to be
    converged — health() says so — and converges once the store answers; later
    writes of the task reach the store."""
    main, other = pair
    flaky = ForwardingStore(main)
    ctl = make_ctl(store=flaky, owner=FAR, lease_seconds=1)
    gate = rig.gate()
    h = ctl.submit(gate.cooperative, 7, name="work")
    wait_status(ctl, h, S.RUNNING)
    ctl.flush()
    assert settle_from_elsewhere(other, rig.clock)()["lost"] == [h.id]

    flaky.fail("get", "history")  # the store's truth cannot be read for now
    gate.release()
    assert h.wait(10)
    ctl.flush()  # the task's end is refused (fenced); reading its row back fails
    assert flaky.refused > 0
    health = ctl.health()
    assert list(health["unconverged"]) == [h.id], health
    assert "could not connect" in health["unconverged"][h.id]
    assert health["saved"] is False
    ctl.flush()  # tried again, still unreadable: still waiting, still said
    assert list(ctl.health()["unconverged"]) == [h.id]

    flaky.heal()
    ctl.flush()
    assert ctl.get(h.id).status is S.LOST
    agree(ctl, main, h.id)
    health = ctl.health()
    assert health["unconverged"] == {} and health["saved"] is True

    # what the task writes after converging reaches the store (nothing dropped)
    ctl.retry(h.id, force=True)
    assert h.wait(10)
    ctl.flush()
    assert ctl.get(h.id).status is S.SUCCEEDED
    agree(ctl, main, h.id)


@pytest.mark.parametrize("learns_by", ["renewal", "refused write"])
def test_an_execution_the_store_settled_is_stopped_and_its_attempt_recorded(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller], learns_by: str
) -> None:
    """A running task is settled LOST by a reconciler; the owner learns it at its next
    lease renewal, or when the store refuses its next write (a pause): the execution is
    told to stop (it stops at its next checkpoint), and the store holds the attempt's
    end as memory does (abandoned: the store's LOST stands), not an attempt that never
    ended."""
    main, other = pair
    ctl = make_ctl(store=main, owner=FAR, lease_seconds=1)
    ctl._dispatcher.store_tick = None  # this test drives the store link itself
    gate = rig.gate()
    h = ctl.submit(gate.cooperative, name="work")
    wait_status(ctl, h, S.RUNNING)
    ctl.flush()
    assert settle_from_elsewhere(other, rig.clock)()["lost"] == [h.id]
    if learns_by == "renewal":
        assert ctl._leases is not None
        ctl._leases.renew_leases()  # the task is not open in the store any more
    else:
        h.pause(timeout=30)  # the store refuses PAUSING: fenced
        ctl.flush()  # ... and converged
    assert ctl.get(h.id).status is S.LOST
    assert h.wait(10)  # the thread stopped at its checkpoint (the gate is still shut)
    ctl.flush()
    agree(ctl, main, h.id)
    [rec] = main.attempts(h.id)
    assert rec.ended_at is not None and rec.abandoned and rec.outcome is S.LOST


def _running_under_a_dead_owner(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> tuple[TaskStore, TaskHandle]:
    """A task running, recorded in ``pair``'s first store, under an owner that renews
    nothing from here on (as good as dead); the other store and the task's handle."""
    main, other = pair
    ctl = make_ctl(store=main, owner=FAR, lease_seconds=1)
    ctl._dispatcher.store_tick = None
    h = ctl.submit(rig.gate().cooperative, name="work")
    wait_status(ctl, h, S.RUNNING)
    ctl.flush()
    return other, h


def test_settling_an_orphan_closes_its_open_attempt(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """An owner that dies (kill -9) mid-attempt never records the attempt's end; the
    reconciler that settles the task LOST closes that attempt in the same write
    (its result unknown), so the store holds no attempt that runs forever."""
    other, h = _running_under_a_dead_owner(pair, rig, make_ctl)
    [open_rec] = other.attempts(h.id)
    assert open_rec.ended_at is None
    assert settle_from_elsewhere(other, rig.clock)()["lost"] == [h.id]
    s = other.get(h.id)
    assert s is not None and s.failure is not None
    [rec] = other.attempts(h.id)
    assert rec.ended_at is not None, "the settled task's attempt never ends in the store"
    assert rec.outcome is S.LOST and rec.failure_message == s.failure.message
    assert rec.started_at == open_rec.started_at and not rec.abandoned


def test_an_orphans_closed_attempt_ends_when_its_owner_was_last_seen(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """The reconciler that closes a dead owner's open attempt does not claim the attempt
    ran until the reconciler came by (an hour later here: `chongming attempts` showed a
    duration of an hour for work killed at once): it ends at the last time the store
    saw its owner alive, never before it started nor after the task was settled."""
    other, h = _running_under_a_dead_owner(pair, rig, make_ctl)
    died = rig.clock.now()
    [open_rec] = other.attempts(h.id)
    assert settle_from_elsewhere(other, rig.clock)()["lost"] == [h.id]
    s = other.get(h.id)
    assert s is not None and s.ended_at is not None and s.ended_at > died
    [rec] = other.attempts(h.id)
    assert rec.ended_at is not None
    assert open_rec.started_at <= rec.ended_at <= died, (rec.ended_at, died)


def test_what_a_refused_task_prints_before_it_converges_is_kept(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """Between the store's refusal of a task's write and its convergence, the task's
    stale versioned writes are dropped — but not what it printed meanwhile: its log
    lines are what happened, and reach the store."""
    main, other = pair
    ctl = make_ctl(store=main, owner=FAR, lease_seconds=1)
    ctl._dispatcher.store_tick = None  # this test drives the store link itself
    speak, spoke, done = threading.Event(), threading.Event(), threading.Event()

    def work(ctx: TaskContext) -> None:
        speak.wait(10)
        print("after the store settled me")
        spoke.set()
        done.wait(10)
        ctx.checkpoint()

    h = ctl.submit(work, name="work")
    wait_status(ctl, h, S.RUNNING)
    ctl.flush()
    assert settle_from_elsewhere(other, rig.clock)()["lost"] == [h.id]
    h.pause(timeout=30)  # refused: the task is fenced ...
    ctl._book.hand_over()
    assert ctl._bus.flush(10)  # ... and not converged yet (only flush() converges)
    speak.set()
    assert spoke.wait(10)
    ctl.flush()  # its line, then the convergence
    done.set()
    assert h.wait(10)
    ctl.flush()
    assert ctl.get(h.id).status is S.LOST
    lines = [r.line for r in main.logs(h.id)]
    assert "after the store settled me" in lines, lines


def test_a_run_of_an_owner_past_its_lease_is_settled_lost_then_its_owner_tells_the_end(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """A pipeline run of an owner on another host whose lease ended: the reconciler
    settles its task LOST and its run record ``lost`` (why, and its tasks' counts), not
    "running". The owner was only frozen: when it learns the store's truth its run
    ends FAILED (its step was lost) and its record says so — never "running" again."""
    main, other = pair
    ctl = make_ctl(store=main, owner=FAR, lease_seconds=1)
    ctl._dispatcher.store_tick = None  # this test drives the store link itself
    gate = rig.gate()
    pipe = Pipeline("far")
    pipe.add(gate.cooperative, name="step")
    run = pipe.submit(ctl)
    [tid] = run.task_ids()
    wait_status(ctl, tid, S.RUNNING)
    ctl.flush()
    report = settle_from_elsewhere(other, rig.clock)()
    assert report["lost"] == [tid] and report["runs"] == [run.id], report
    rec = other.get_run(run.id)
    assert rec is not None and rec.status == "lost"
    assert "far-away" in rec.spec["recovery"]["reason"]
    assert rec.spec["recovery"]["counts"] == {"lost": 1}
    assert settle_from_elsewhere(other, rig.clock)()["runs"] == []  # once

    assert ctl._leases is not None
    ctl._leases.renew_leases()  # the owner learns its task is settled
    assert run.wait(10) is PipelineRunStatus.FAILED
    ctl.flush()
    rec = other.get_run(run.id)
    assert rec is not None and rec.status == "failed"
    agree(ctl, main, tid)


def test_the_run_statuses_recovery_spells_are_the_pipelines() -> None:
    open_ = {s.value for s in PipelineRunStatus if s not in RUN_TERMINAL}
    assert open_ == RUN_OPEN
    assert PipelineRunStatus(RUN_LOST) in RUN_TERMINAL


def test_an_orphans_attempt_ends_at_its_latest_sign_of_life() -> None:
    """The latest of the task's heartbeat, its last progress report and its owner's
    heartbeat is when the dead owner was last seen: the attempt ends there (here the
    progress report, 5 minutes after the task's heartbeat and 55 before the reconcile)."""
    from datetime import timedelta

    from chongming_nb.control.recovery import reconcile_store
    from chongming_nb.core.models import AttemptRecord, Progress, TaskSnapshot
    from chongming_nb.stores import InMemoryStore
    from chongming_nb.testing import FakeClock

    t0 = FakeClock().now()
    store = InMemoryStore()
    store.create(
        TaskSnapshot(
            task_id="t1",
            name="work",
            status=S.RUNNING,
            attempt=1,
            created_at=t0,
            started_at=t0,
            last_heartbeat_at=t0,
            progress=Progress(done=3, total=10, updated_at=t0 + timedelta(minutes=5)),
            lease_owner=FAR,
            lease_until=t0 + timedelta(seconds=1),
        )
    )
    store.save_attempt(AttemptRecord(task_id="t1", attempt=1, started_at=t0))
    later = FakeClock(t0 + timedelta(hours=1))
    report = reconcile_store(store, later, me="reconciler", lease_seconds=1, grace=1)
    assert report["lost"] == ["t1"]
    [rec] = store.attempts("t1")
    assert rec.ended_at == t0 + timedelta(minutes=5) and rec.outcome is S.LOST


def test_a_task_paused_in_place_is_settled_lost_with_the_reason_as_a_running_one_is() -> None:
    """A kernel that died with a task paused in place: ``get_controller()`` settles it
    LOST (its attempt had begun). It was settled with no failure, so its row, the
    snapshot and its attempt said nothing of why, while a running task of the same
    kernel said "lease lost at ...: owner ... is gone"."""
    from chongming_nb.control.recovery import settle
    from chongming_nb.core.models import FailureKind
    from chongming_nb.core.state_machine import StateMachine
    from chongming_nb.testing import FakeClock

    ctl = Controller()
    go = threading.Event()

    def work(ctx: TaskContext) -> None:
        go.set()
        while True:
            ctx.checkpoint()
            go.wait(0.01)

    try:
        h = ctl.submit(work)
        assert go.wait(10)
        ctl.pause(h.id, wait=True)
        snap = ctl.get(h.id)
        assert snap.status is S.PAUSED and snap.started_at is not None
        why = "lease lost at 2026-12-03T11:03:03+00:00: owner x is gone"
        new, tr = settle(StateMachine(FakeClock()), snap, why)
        assert new.status is S.LOST and tr.reason == why
        assert new.failure is not None
        assert (new.failure.kind, new.failure.message) == (FailureKind.LOST, why)
    finally:
        ctl.stop(h.id, wait=True)
        ctl.close()


def test_a_status_change_keeps_the_heartbeat_the_store_was_given(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller]
) -> None:
    """A heartbeat reached the store by a touch of that column alone while the task's
    snapshot in memory kept its start time; the next full write of the snapshot (a
    pause, a resume) put the start time back. An owner that died after that was last
    seen, by the store, when the task started."""
    main, other = pair
    ctl = make_ctl(store=main)
    h = ctl.submit(rig.gate().cooperative, name="work")
    wait_status(ctl, h, S.RUNNING)
    started = ctl.get(h.id).started_at
    ctl.pause(h.id, wait=True)
    rig.clock.advance(5)
    with ctl._book.lock:  # (as the dispatcher samples)
        ctl._dispatcher._sample_heartbeats(rig.clock.monotonic())  # paused: alive
    ctl.flush()
    beat = other.get(h.id)
    assert beat is not None and beat.last_heartbeat_at == rig.clock.now() != started
    ctl.resume(h.id)
    wait_status(ctl, h, S.RUNNING)
    ctl.flush()
    for s in (other.get(h.id), ctl.get(h.id)):
        assert s is not None and s.status is S.RUNNING
        assert s.last_heartbeat_at == beat.last_heartbeat_at, "the heartbeat went back"


def test_recovery_reads_only_the_open_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of many finished pipeline runs: the reconcile of every new controller
    read and decoded all of them (0.6 s for 10,000 runs of 10 nodes) to find the open
    ones. Only open runs are read now; the finished ones are never decoded."""
    from datetime import timedelta

    from chongming_nb.control.recovery import reconcile_store
    from chongming_nb.stores import SqliteStore, _codec
    from chongming_nb.stores.protocol import OwnerRecord, RunRecord
    from chongming_nb.testing import FakeClock

    t0 = FakeClock().now()
    store = SqliteStore(tmp_path / "t.db")
    for i in range(300):
        at = t0 + timedelta(seconds=i)
        store.save_run(RunRecord(f"done-{i}", "etl", "succeeded", at, at, {"owner": FAR}))
    store.save_run(RunRecord("open", "etl", "running", t0, t0, {"owner": FAR}))
    # its owner, on another host, last heard of an hour before the reconcile: gone
    store.upsert_owner(OwnerRecord(FAR, "far-away", 1, None, t0, t0))
    decoded: list[str] = []
    real = _codec.row_to_run

    def counting(row: Any) -> RunRecord:
        rec = real(row)
        decoded.append(rec.run_id)
        return rec

    monkeypatch.setattr(_codec, "row_to_run", counting)
    later = FakeClock(t0 + timedelta(hours=1))
    report = reconcile_store(store, later, me="reconciler", lease_seconds=1, grace=1)
    assert report["runs"] == ["open"]
    assert not [r for r in decoded if r.startswith("done-")]
    rec = store.get_run("open")
    assert rec is not None and rec.status == RUN_LOST
    store.close()

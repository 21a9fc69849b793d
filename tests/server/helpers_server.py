"""Helpers for the server-extension tests: tasks driven into a state through the real
state machine and written to a store, and a minimal command claimer (what a kernel's
controller does with the store's command queue)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from chongming_nb.core.models import (
    AttemptRecord,
    CommandState,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores.protocol import LogRecord, OwnerRecord, TaskStore
from chongming_nb.testing.clock import FakeClock

S = TaskStatus


def owner_id(kernel: str, pid: int = 4242, host: str = "testhost") -> str:
    return f"{host}:{pid}:{kernel}"


def register_owner(store: TaskStore, kernel: str, pid: int = 4242) -> str:
    now = datetime.now(UTC)
    oid = owner_id(kernel, pid)
    store.upsert_owner(
        OwnerRecord(
            owner_id=oid,
            host="testhost",
            pid=pid,
            kernel_id=kernel,
            started_at=now,
            heartbeat_at=now,
        )
    )
    return oid


def put_task(
    store: TaskStore,
    task_id: str,
    status: TaskStatus,
    *,
    name: str | None = None,
    owner: str | None = None,
    clock: FakeClock | None = None,
    progress: Progress | None = None,
    max_attempts: int = 1,
) -> TaskSnapshot:
    """Create a task and walk it to ``status`` with the real state machine."""
    clock = clock or FakeClock(datetime.now(UTC) - timedelta(minutes=5))
    sm = StateMachine(clock)
    s = TaskSnapshot(
        task_id=task_id,
        name=name or task_id,
        created_at=clock.now(),
        lease_owner=owner,
        max_attempts=max_attempts,
    )
    store.create(s)
    steps: list[Callable[[TaskSnapshot], tuple[TaskSnapshot, Transition]]] = []
    if status is S.PENDING:
        pass
    elif status is S.QUEUED:
        steps = [sm.mark_queued]
    elif status in (S.RUNNING, S.PAUSED, S.FAILED, S.SUCCEEDED, S.STOPPING):
        steps = [sm.mark_queued, sm.mark_starting, sm.mark_running]
        if status is S.PAUSED:
            steps += [sm.request_pause, sm.confirm_paused]
        elif status is S.FAILED:
            failure = Failure(
                FailureKind.EXCEPTION,
                "boom <b>not markup</b>",
                traceback='Traceback (most recent call last):\n  File "x.py"\nValueError: boom',
                exception_type="ValueError",
            )
            steps.append(lambda x: sm.mark_failed(x, failure))
        elif status is S.SUCCEEDED:
            steps.append(sm.mark_succeeded)
        elif status is S.STOPPING:
            steps.append(sm.request_stop)
    else:
        raise ValueError(f"put_task does not reach {status}")
    for step in steps:
        clock.advance(1)
        new, tr = step(s)
        attempts: list[AttemptRecord] = []
        if new.status is S.STARTING:
            attempts.append(
                AttemptRecord(task_id=task_id, attempt=new.attempt, started_at=clock.now())
            )
        store.save_many([(new, s.status_version)], [tr], attempts=attempts)
        s = new
    if progress is not None:
        store.touch(task_id, progress=progress)
    store.append_logs(
        task_id, [LogRecord(at=clock.now(), stream="stdout", line="hello <i>log</i>")]
    )
    got = store.get(task_id)
    assert got is not None
    return got


class Claimer:
    """A minimal controller stand-in: claims commands of its tasks and applies them with
    the state machine, completing each command with ``{"ok": ..., "reason": ...}``."""

    def __init__(self, store: TaskStore, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.sm = StateMachine(FakeClock(datetime.now(UTC)))
        self.applied: list[str] = []

    def step(self) -> int:
        now = datetime.now(UTC)
        done = 0
        for cmd in self.store.claim_commands(owner=self.owner, now=now, lease_seconds=30):
            snap = self.store.get(cmd.task_id)
            ok, why = (
                (False, "unknown task")
                if snap is None
                else self.sm.can(snap, cmd.verb, force=bool(cmd.args.get("force")))
            )
            if ok and snap is not None:
                fn = {
                    "stop": self.sm.request_stop,
                    "pause": self.sm.request_pause,
                    "resume": self.sm.resume,
                    "skip": self.sm.skip,
                }.get(cmd.verb)
                if cmd.verb == "retry":
                    new, tr = self.sm.retry(snap, force=True, actor=cmd.actor)
                else:
                    assert fn is not None
                    new, tr = fn(snap, actor=cmd.actor)
                # a cooperative task reaches its checkpoint at once
                if new.status is S.STOPPING:
                    new2, tr2 = self.sm.confirm_stopped(new)
                    self.store.save_many(
                        [(new, snap.status_version), (new2, new.status_version)], [tr, tr2]
                    )
                    new = new2
                elif new.status is S.PAUSING:
                    new2, tr2 = self.sm.confirm_paused(new)
                    self.store.save_many(
                        [(new, snap.status_version), (new2, new.status_version)], [tr, tr2]
                    )
                    new = new2
                else:
                    self.store.save_many([(new, snap.status_version)], [tr])
                self.applied.append(f"{cmd.task_id}:{cmd.verb}")
            self.store.complete_command(
                cmd.command_id,
                now=now,
                outcome={"ok": ok, "reason": why},
                state=CommandState.DONE if ok else CommandState.REJECTED,
            )
            done += 1
        return done


class ClaimerThread(threading.Thread):
    """Runs a Claimer every ``interval`` seconds until stopped (an Event, not a sleep loop)."""

    def __init__(self, claimer: Claimer, interval: float = 0.05) -> None:
        super().__init__(daemon=True, name="test-claimer")
        self.claimer = claimer
        self.interval = interval
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            self.claimer.step()

    def stop(self) -> None:
        self.halt.set()
        self.join(5)

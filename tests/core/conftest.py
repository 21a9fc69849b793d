"""Fixtures for the pure-core tests: a fake clock, a state machine, snapshot factories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chongming_nb import StateMachine, TaskSnapshot, TaskStatus
from chongming_nb.core.states import OCCUPIED, TERMINAL
from chongming_nb.testing import FakeClock

MakeSnap = Callable[..., TaskSnapshot]  # type of the ``make`` fixture


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sm(clock: FakeClock) -> StateMachine:
    return StateMachine(clock)


@pytest.fixture
def make(clock: FakeClock) -> MakeSnap:
    """A consistent snapshot in ``status``: occupied and terminal states have started,
    terminal ones have ended, requested_action matches stopping/pausing."""

    def _make(status: TaskStatus = TaskStatus.PENDING, **kw: Any) -> TaskSnapshot:
        from chongming_nb.core.states import RequestedAction

        now = clock.now()
        fields: dict[str, Any] = {
            "task_id": "t1",
            "name": "job",
            "status": status,
            "status_version": 7,
            "attempt": 1 if status in OCCUPIED or status in TERMINAL else 0,
            "max_attempts": 3,
            "created_at": now,
            "started_at": now if status in OCCUPIED else None,
            "ended_at": now if status in TERMINAL else None,
            "requested_action": {
                TaskStatus.STOPPING: RequestedAction.STOP,
                TaskStatus.PAUSING: RequestedAction.PAUSE,
            }.get(status),
        }
        fields.update(kw)
        return TaskSnapshot(**fields)

    return _make

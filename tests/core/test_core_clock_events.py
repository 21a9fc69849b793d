"""FakeClock (shipped in chongming_nb.testing) and the event value types."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta

import pytest

from chongming_nb import Event, TaskStatus, TaskStatusChanged
from chongming_nb.core.clock import Clock
from chongming_nb.core.events import EVENT_TYPES
from chongming_nb.testing import FakeClock


def test_fake_clock_moves_only_when_told() -> None:
    c = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    t0, m0 = c.now(), c.monotonic()
    assert c.now() == t0 and c.monotonic() == m0
    c.advance(90.5)
    assert c.now() - t0 == timedelta(seconds=90.5)
    assert c.monotonic() - m0 == 90.5
    assert c.now().tzinfo is not None


def test_fake_clock_satisfies_the_clock_protocol() -> None:
    c: Clock = FakeClock()
    assert isinstance(c.now(), datetime) and isinstance(c.monotonic(), float)


def test_fake_clock_rejects_going_backwards_and_naive_starts() -> None:
    c = FakeClock()
    with pytest.raises(ValueError, match="backwards"):
        c.advance(-1)
    with pytest.raises(ValueError, match="aware"):
        FakeClock(datetime(2026, 1, 1))


def test_sleepers_wake_when_fake_time_passes_their_deadline() -> None:
    c = FakeClock()
    woke = threading.Event()

    def sleeper() -> None:
        c.sleep(10)
        woke.set()

    t = threading.Thread(target=sleeper, daemon=True)
    t.start()
    assert c.wait_for_sleepers(1, timeout=5)
    c.advance(9.9)
    assert not woke.wait(0.05)  # deadline not reached: still asleep
    c.advance(0.1)
    assert woke.wait(5)
    t.join(5)
    assert c.sleepers == 0


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_events_are_frozen_values_with_an_id(cls: type[Event]) -> None:
    assert issubclass(cls, Event)
    fields = {f.name for f in dataclasses.fields(cls)}
    assert {"event_id", "at"} <= fields
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_event_type_name_and_immutability() -> None:
    ev = TaskStatusChanged(
        event_id="e1",
        at=datetime(2026, 1, 1, tzinfo=UTC),
        task_id="t",
        from_status=TaskStatus.RUNNING,
        to_status=TaskStatus.STOPPING,
        trigger="user:stop",
        actor="ana",
        reason=None,
        version=4,
    )
    assert ev.type == "TaskStatusChanged"
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.actor = "mallory"  # type: ignore[misc]


def test_the_seed_event_set_is_present() -> None:
    names = {c.__name__ for c in EVENT_TYPES}
    assert {
        "TaskCreated",
        "TaskStatusChanged",
        "AttemptStarted",
        "AttemptFailed",
        "ProgressUpdated",
        "TaskHeartbeat",
        "TaskOutput",
        "TaskLogLine",
        "PipelineRunStatusChanged",
        "AdminOverride",
    } <= names

"""Fixtures for the widget layer tests: a fake clock, a fake controller with the real
state machine, and recording comms (no kernel, no browser)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chongming_nb.testing import FakeClock
from chongming_nb.testing.widgets import FakeController, RecordingComm, recording_comms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fctl(clock: FakeClock) -> FakeController:
    return FakeController(clock)


@pytest.fixture
def comms() -> Iterator[list[RecordingComm]]:
    with recording_comms() as made:
        yield made

"""Fixtures for the Controller tests: a fake clock the controller's timers follow, and a
controller factory that releases every gate and closes every controller afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from ctl_helpers import Rig

from chongming_nb import Controller
from chongming_nb.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rig(clock: FakeClock) -> Iterator[Rig]:
    r = Rig(clock)
    yield r
    r.close()


@pytest.fixture
def make_ctl(rig: Rig) -> Callable[..., Controller]:
    return rig.controller

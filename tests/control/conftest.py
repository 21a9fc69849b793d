"""Fixtures for the Controller tests: a fake clock the controller's timers follow, and a
controller factory that releases every gate and closes every controller afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ctl_helpers import Gate, GatedExecutor

from chongming_nb import Controller
from chongming_nb.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class Rig:
    """Makes controllers and gates and cleans them all up."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.controllers: list[Controller] = []
        self.gates: list[Gate] = []
        self.executors: list[GatedExecutor] = []

    def controller(self, **kw: Any) -> Controller:
        kw.setdefault("clock", self.clock)
        ctl = Controller(**kw)
        self.controllers.append(ctl)
        return ctl

    def gate(self) -> Gate:
        g = Gate()
        self.gates.append(g)
        return g

    def gated_executor(self) -> GatedExecutor:
        ex = GatedExecutor()
        self.executors.append(ex)
        return ex

    def close(self) -> None:
        for g in self.gates:
            g.release()
        for ex in self.executors:
            ex.go.set()
        for ctl in self.controllers:
            ctl.close()


@pytest.fixture
def rig(clock: FakeClock) -> Iterator[Rig]:
    r = Rig(clock)
    yield r
    r.close()


@pytest.fixture
def make_ctl(rig: Rig) -> Callable[..., Controller]:
    return rig.controller

"""Fixtures for the hardening tests (the fault and bad-input probe's cases, one module per
concern): controllers that are closed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chongming_nb import Controller


@pytest.fixture
def make_ctl() -> Iterator[Callable[..., Controller]]:
    made: list[Controller] = []

    def make(**kwargs: Any) -> Controller:
        ctl = Controller(**kwargs)
        made.append(ctl)
        return ctl

    yield make
    for ctl in made:
        ctl.close()

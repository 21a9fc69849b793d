"""Fixtures for the pipeline tests: a real threaded Controller (max_parallel=4) whose
artifacts go to the test's temporary directory, closed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pipe_helpers import Gate

from chongming_nb import ConcurrencyPolicy, Controller


@pytest.fixture
def make_ctl(tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    made: list[Controller] = []

    def make(**kw: Any) -> Controller:
        kw.setdefault("executor", "thread")
        kw.setdefault("concurrency", ConcurrencyPolicy(max_parallel=4))
        kw.setdefault("artifacts_root", tmp_path / "artifacts")
        ctl = Controller(**kw)
        made.append(ctl)
        return ctl

    yield make
    for ctl in made:
        ctl.close()


@pytest.fixture
def ctl(make_ctl: Callable[..., Controller]) -> Controller:
    return make_ctl()


@pytest.fixture
def gates() -> Iterator[Callable[[], Gate]]:
    made: list[Gate] = []

    def make() -> Gate:
        g = Gate()
        made.append(g)
        return g

    yield make
    for g in made:
        g.release()

"""The one executor contract (chongming_nb.testing.executor_contract) run against every
executor: inline, thread, process and dask."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chongming_nb.runtime.executors import InlineExecutor, ThreadExecutor
from chongming_nb.runtime.executors.process import ProcessExecutor
from chongming_nb.testing.executor_contract import ExecutorProfile, checks_for

# name -> (background, supports_pause, stop_verdict)
CLAIMS: dict[str, tuple[bool, bool, str | None]] = {
    "inline": (False, False, None),
    "thread": (True, True, "abandoned"),
    "process": (True, True, "killed"),
    # the forced stop of a dask worker restarts it (seconds): tested once, through the
    # controller, in test_dask.py
    "dask": (True, True, None),
}

CASES = [
    pytest.param(name, check, id=f"{name}-{check.__name__.removeprefix('check_')}")
    for name, claims in CLAIMS.items()
    for check in checks_for(*claims)
]


@pytest.fixture
def make_profile(request: pytest.FixtureRequest) -> Iterator[Callable[[str], ExecutorProfile]]:
    made: list[Any] = []

    def make(name: str) -> ExecutorProfile:
        background, pause, verdict = CLAIMS[name]
        if name == "dask":
            ex = request.getfixturevalue("dask_executor")
            factory: Callable[[], Any] = lambda: ex  # noqa: E731
        else:
            cls = {"inline": InlineExecutor, "thread": ThreadExecutor, "process": ProcessExecutor}

            def factory() -> Any:
                e = cls[name]()
                made.append(e)
                return e

        return ExecutorProfile(name, factory, background, pause, verdict, timeout=60.0)

    yield make
    for e in made:
        e.shutdown()


@pytest.mark.parametrize(("name", "check"), CASES)
def test_executor_contract(
    name: str,
    check: Callable[[ExecutorProfile], None],
    make_profile: Callable[[str], ExecutorProfile],
) -> None:
    check(make_profile(name))


def test_every_executor_is_covered() -> None:
    from chongming_nb.runtime.executors import EXECUTORS

    assert set(CLAIMS) == set(EXECUTORS)

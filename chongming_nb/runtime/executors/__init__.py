"""Executors, chosen in one place: ``make_executor(name)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.runtime.executors.base import (
    ExecutionHandle,
    ExecutionRequest,
    Executor,
    Outcome,
    Reporter,
    run_attempt,
)
from chongming_nb.runtime.executors.inline import InlineExecutor
from chongming_nb.runtime.executors.thread import ThreadExecutor


def _process() -> Executor:
    from chongming_nb.runtime.executors.process import ProcessExecutor

    return ProcessExecutor()


def _dask() -> Executor:
    from chongming_nb.runtime.executors.dask import DaskExecutor

    return DaskExecutor()


EXECUTORS: dict[str, Callable[[], Any]] = {
    "inline": InlineExecutor,
    "thread": ThreadExecutor,
    "process": _process,
    "dask": _dask,
}


def make_executor(name: str) -> Executor:
    try:
        factory = EXECUTORS[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown executor {name!r}; choose one of {', '.join(sorted(EXECUTORS))} "
            "or pass an Executor instance"
        ) from None
    executor: Executor = factory()
    return executor


__all__ = [
    "EXECUTORS",
    "ExecutionHandle",
    "ExecutionRequest",
    "Executor",
    "InlineExecutor",
    "Outcome",
    "Reporter",
    "ThreadExecutor",
    "make_executor",
    "run_attempt",
]

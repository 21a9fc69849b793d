"""A worker never dies: whatever a task raises or returns, the attempt ends FAILED (or
SUCCEEDED) with what could be recorded, its slot is freed and the next task runs.

``max_parallel=1`` with the thread executor: if the worker died, or the slot stayed
taken, the second task would never start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chongming_nb import ConcurrencyPolicy, Controller, TaskContext, TaskStatus
from chongming_nb.testing.executor_contract import (
    BadReturn,
    raise_odd_base,
    raise_unprintable,
    raise_untraceable,
    return_bad_object,
)

S = TaskStatus


def raise_keyboard_interrupt(ctx: TaskContext) -> None:
    raise KeyboardInterrupt


def raise_system_exit(ctx: TaskContext) -> None:
    raise SystemExit(3)


@pytest.mark.parametrize(
    ("target", "type_name", "unprintable"),
    [
        (raise_unprintable, "UnprintableError", True),
        (raise_untraceable, "UntraceableError", False),
        (raise_odd_base, "OddBaseException", False),
        (raise_keyboard_interrupt, "KeyboardInterrupt", False),
        (raise_system_exit, "SystemExit", False),
    ],
)
def test_a_bad_exception_fails_the_attempt_and_the_next_task_runs(
    make_ctl: Callable[..., Controller],
    target: Callable[..., Any],
    type_name: str,
    unprintable: bool,
) -> None:
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    bad = ctl.submit(target)
    good = ctl.submit(lambda ctx: "next one ran")
    assert good.result(timeout=10) == "next one ran"
    snap = bad.wait(10)
    assert snap.status is S.FAILED
    assert snap.failure is not None
    assert snap.failure.message.startswith(type_name)
    if unprintable:
        assert "unprintable exception" in snap.failure.message
    assert snap.failure.exception_type is not None
    assert snap.failure.exception_type.endswith(type_name)
    (attempt,) = ctl.attempts(bad.id)
    assert attempt.outcome is S.FAILED and attempt.traceback


def test_a_result_whose_repr_len_and_shape_fail_is_kept(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    bad = ctl.submit(return_bad_object)
    good = ctl.submit(lambda ctx: 2)
    assert good.result(timeout=10) == 2
    assert bad.wait(10).status is S.SUCCEEDED
    assert isinstance(bad.result(timeout=1), BadReturn)
    outcome = bad.snapshot.outcome
    assert outcome is not None and outcome["type"].endswith("BadReturn")

"""Idempotency keys: the same call again returns the first handle; the key used again
with a different function or different arguments is a clear error that shows what the
key was first used for, and creates nothing."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from chongming_nb import ConfigurationError, Controller, TaskContext


def extract(ctx: TaskContext, source: str, limit: int = 10) -> str:
    return f"{source}:{limit}"


def other(ctx: TaskContext, source: str, limit: int = 10) -> str:
    return source


def test_the_same_call_again_returns_the_first_handle(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = make_ctl()
    h1 = ctl.submit(extract, "flights", limit=3, idempotency_key="flights-2013")
    h2 = ctl.submit(extract, "flights", limit=3, idempotency_key="flights-2013")
    assert h2.id == h1.id
    assert h1.result(timeout=10) == "flights:3"
    assert len(ctl.list_tasks()) == 1


def test_a_function_redefined_by_rerunning_its_cell_is_the_same_function(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = make_ctl()
    made = []
    for _ in range(2):  # a cell run twice defines a new function object each time

        def step(ctx: TaskContext, n: int) -> int:
            return n

        made.append(ctl.submit(step, 1, idempotency_key="cell"))
    assert made[0].id == made[1].id


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "what"),
    [
        (extract, ("weather",), {"limit": 3}, "arguments"),
        (extract, ("flights",), {"limit": 4}, "arguments"),
        (extract, ("flights",), {}, "arguments"),
        (other, ("flights",), {"limit": 3}, "function"),
    ],
)
def test_the_key_with_another_function_or_arguments_is_refused(
    make_ctl: Callable[..., Controller],
    fn: Callable[..., str],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    what: str,
) -> None:
    ctl = make_ctl()
    first = ctl.submit(extract, "flights", limit=3, idempotency_key="flights-2013")
    with pytest.raises(ConfigurationError) as info:
        ctl.submit(fn, *args, idempotency_key="flights-2013", **kwargs)
    text = str(info.value)
    assert "idempotency_key 'flights-2013'" in text and first.id in text
    assert f"different {what}" in text
    assert "extract(ctx, 'flights', limit=3)" in text  # the first handle's call, shown
    assert [s.task_id for s in ctl.list_tasks()] == [first.id]


def test_arguments_that_cannot_be_compared_do_not_break_submit(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = make_ctl()
    a = np.arange(3)
    h1 = ctl.submit(lambda ctx, x: int(x.sum()), a, idempotency_key="arr")
    # an equal copy: ``==`` is elementwise, its truth undecidable; the key decides
    h2 = ctl.submit(lambda ctx, x: int(x.sum()), a.copy(), idempotency_key="arr")
    assert h2.id == h1.id

"""``ctx.progress`` is not a checkpoint (the documented choice): a stop requested while
a task only reports progress is not delivered by ``progress``; the next checkpoint
delivers it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from chongming_nb import Controller, TaskContext, TaskStatus

S = TaskStatus


def test_a_stop_is_delivered_at_the_next_checkpoint_not_at_progress(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = make_ctl()
    running, stop_asked = threading.Event(), threading.Event()
    reports_after_stop: list[int] = []

    def loop(ctx: TaskContext) -> None:
        running.set()
        assert stop_asked.wait(10)
        assert ctx.stop_requested  # the stop is pending ...
        for i in range(100):
            ctx.progress(done=i, total=100)  # ... and progress does not deliver it
            reports_after_stop.append(i)
        ctx.checkpoint()  # this does
        reports_after_stop.append(-1)  # never reached

    h = ctl.submit(loop)
    assert running.wait(10)
    h.stop(timeout=10)
    stop_asked.set()
    assert h.wait(10).status is S.STOPPED
    assert reports_after_stop == list(range(100))
    assert h.snapshot.progress is not None and h.snapshot.progress.done == 99

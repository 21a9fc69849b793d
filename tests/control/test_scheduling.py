"""Dependencies (``after=``), idempotency keys and the ConcurrencyPolicy."""

from __future__ import annotations

import threading

import pytest
from ctl_helpers import Rig, failing_task, ok_task, wait_status, wait_until

from chongming_nb import (
    BucketPolicy,
    ConcurrencyPolicy,
    ConfigurationError,
    FailureKind,
    TaskContext,
    TaskStatus,
)

S = TaskStatus


# ------------------------------------------------------------- dependencies


def test_after_blocks_until_dependencies_succeed(rig: Rig) -> None:
    ctl = rig.controller()
    g1, g2 = rig.gate(), rig.gate()
    a = ctl.submit(g1.cooperative, 10, name="extract")
    b = ctl.submit(g2.cooperative, 20, name="weather")

    def combine(ctx: TaskContext) -> int:
        return ctx.upstream(a) + ctx.upstream("weather") + ctx.upstream(b.id)

    c = ctl.submit(combine, after=[a, b.id])
    assert c.status is S.BLOCKED
    g1.release()
    wait_status(ctl, a, S.SUCCEEDED)
    assert c.status is S.BLOCKED  # one upstream still running
    g2.release()
    assert c.result(timeout=5) == 10 + 20 + 20
    assert ctl.get(c).deps == (a.id, b.id)
    assert [tr.to_status for tr in ctl.history(c)][:2] == [S.BLOCKED, S.QUEUED]


def test_after_a_finished_task_queues_at_once(rig: Rig) -> None:
    ctl = rig.controller()
    a = ctl.submit(ok_task, "x")
    a.wait(timeout=5)
    b = ctl.submit(lambda ctx: ctx.upstream(a) * 2, after=a)
    assert b.result(timeout=5) == "xx"


def test_upstream_unknown_key_is_a_clear_error(rig: Rig) -> None:
    ctl = rig.controller()
    a = ctl.submit(ok_task, 1, name="first")

    def bad(ctx: TaskContext) -> None:
        ctx.upstream("nope")

    b = ctl.submit(bad, after=[a])
    wait_status(ctl, b, S.FAILED)
    msg = ctl.get(b).failure.message  # type: ignore[union-attr]
    assert "nope" in msg and "first" in msg


@pytest.mark.parametrize("how", ["fails", "stopped", "skipped"])
def test_failed_dependency_cancels_dependants_transitively(rig: Rig, how: str) -> None:
    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=1))
    g = rig.gate()
    blocker = ctl.submit(g.cooperative)
    wait_status(ctl, blocker, S.RUNNING)
    a = ctl.submit(failing_task, name="upstream")
    b = ctl.submit(ok_task, after=[a], name="middle")
    c = ctl.submit(ok_task, after=[b], name="leaf")
    assert (b.status, c.status) == (S.BLOCKED, S.BLOCKED)
    if how == "stopped":
        a.stop()
    elif how == "skipped":
        a.skip("not today")
    g.release()
    wait_status(ctl, c, S.CANCELLED)
    for h in (b, c):
        s = ctl.get(h)
        assert s.status is S.CANCELLED
        assert s.failure is not None and s.failure.kind is FailureKind.DEPENDENCY_FAILED
    assert "upstream" in (ctl.get(b).failure.message or "")  # type: ignore[union-attr]
    assert ctl.attempts(b) == [] and ctl.attempts(c) == []


def test_after_unknown_task_is_rejected(rig: Rig) -> None:
    ctl = rig.controller()
    with pytest.raises(ConfigurationError, match="unknown task"):
        ctl.submit(ok_task, after=["deadbeef"])
    assert ctl.list_tasks() == []


def test_idempotency_key_returns_the_same_handle(rig: Rig) -> None:
    ctl = rig.controller()
    h1 = ctl.submit(ok_task, 1, idempotency_key="flights-2013")
    h2 = ctl.submit(ok_task, 1, idempotency_key="flights-2013")  # (other arguments: an
    assert h1 == h2 and h1.id == h2.id  # error, tests/hardening/test_idempotency_keys.py)
    assert h2.result(timeout=5) == 1
    assert len(ctl.list_tasks()) == 1
    h3 = ctl.submit(ok_task, 3, idempotency_key="flights-2014")
    assert h3 != h1 and h3.result(timeout=5) == 3


def test_submit_checks_arguments_at_submit_time(rig: Rig) -> None:
    ctl = rig.controller()

    def two(ctx: TaskContext, a: int, b: int) -> int:
        return a + b

    with pytest.raises(ConfigurationError, match="cannot be called"):
        ctl.submit(two, 1)
    with pytest.raises(ConfigurationError, match="cannot be called"):
        ctl.submit(two, 1, 2, c=3)
    assert ctl.list_tasks() == []
    assert ctl.submit(two, 1, b=2).result(timeout=5) == 3


def test_function_without_context_is_called_plainly(rig: Rig) -> None:
    ctl = rig.controller()
    assert ctl.submit(max, 3, 9).result(timeout=5) == 9
    assert ctl.submit(lambda x, y=1: x + y, 1, y=5).result(timeout=5) == 6


# -------------------------------------------------------------- concurrency


class Tracker:
    """Counts tasks inside their body; each waits on one shared gate."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.order: list[str] = []
        self.gate = threading.Event()

    def body(self, ctx: TaskContext, key: str = "all") -> str:
        with self.lock:
            self.order.append(ctx.name)
            for k in (key, "all") if key != "all" else ("all",):
                self.active[k] = self.active.get(k, 0) + 1
                self.peak[k] = max(self.peak.get(k, 0), self.active[k])
        try:
            while not self.gate.is_set():
                ctx.checkpoint()
                self.gate.wait(0.001)
        finally:
            with self.lock:
                for k in (key, "all") if key != "all" else ("all",):
                    self.active[k] -= 1
        return ctx.name


def running(ctl, hs) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.name for h in hs if h.status is S.RUNNING]


def test_max_parallel_is_respected(rig: Rig) -> None:
    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=3))
    tr = Tracker()
    hs = [ctl.submit(tr.body, name=f"t{i}") for i in range(10)]
    wait_until(ctl, lambda: len(running(ctl, hs)) == 3, what="three running")
    assert ctl.stats()["queued"] == 7
    tr.gate.set()
    for h in hs:
        h.wait(timeout=10)
    assert tr.peak["all"] == 3
    assert all(h.status is S.SUCCEEDED for h in hs)


def test_tag_limit_without_head_of_line_blocking(rig: Rig) -> None:
    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=4, limits={"io": 1}))
    tr = Tracker()
    io = [ctl.submit(tr.body, "io", name=f"io{i}", tags={"io"}) for i in range(3)]
    cpu = [ctl.submit(tr.body, name=f"cpu{i}") for i in range(2)]
    # the two queued io tasks do not keep the cpu tasks (submitted later) waiting
    wait_until(ctl, lambda: len(running(ctl, io + cpu)) == 3, what="1 io + 2 cpu running")
    assert sorted(running(ctl, cpu)) == ["cpu0", "cpu1"]
    assert running(ctl, io) == ["io0"]
    tr.gate.set()
    for h in io + cpu:
        h.wait(timeout=10)
    assert tr.peak["io"] == 1


def test_priority_order(rig: Rig) -> None:
    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=1))
    g = rig.gate()
    blocker = ctl.submit(g.cooperative)
    wait_status(ctl, blocker, S.RUNNING)
    order: list[str] = []

    def rec(ctx: TaskContext) -> None:
        order.append(ctx.name)

    hs = [
        ctl.submit(rec, name="low-1", priority=-1),
        ctl.submit(rec, name="mid-1"),
        ctl.submit(rec, name="high", priority=5),
        ctl.submit(rec, name="mid-2"),
        ctl.submit(rec, name="low-2", priority=-1),
    ]
    g.release()
    for h in hs:
        h.wait(timeout=5)
    assert order == ["high", "mid-1", "mid-2", "low-1", "low-2"]


def test_per_bucket_limit_without_head_of_line_blocking(rig: Rig) -> None:
    buckets = BucketPolicy(4)
    assert buckets.bucket_for("a") == buckets.bucket_for("c") != buckets.bucket_for("b")
    ctl = rig.controller(
        concurrency=ConcurrencyPolicy(max_parallel=4, per_bucket=1), buckets=buckets
    )
    tr = Tracker()
    a1 = ctl.submit(tr.body, name="a1", bucket_key="a")
    a2 = ctl.submit(tr.body, name="a2", bucket_key="c")  # same bucket as a1
    b1 = ctl.submit(tr.body, name="b1", bucket_key="b")
    free = ctl.submit(tr.body, name="free")  # no bucket key: no bucket limit
    wait_until(ctl, lambda: len(running(ctl, [a1, a2, b1, free])) == 3, what="3 running")
    assert sorted(running(ctl, [a1, a2, b1, free])) == ["a1", "b1", "free"]
    assert a2.status is S.QUEUED
    assert ctl.get(a1).bucket == ctl.get(a2).bucket
    tr.gate.set()
    assert a2.result(timeout=5) == "a2"


def test_waiting_tasks_hold_no_slot(rig: Rig, clock) -> None:  # type: ignore[no-untyped-def]
    """BLOCKED, QUEUED, PAUSED-before-start and RETRY_WAIT tasks do not count."""
    from chongming_nb import Exponential, RetryPolicy

    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=1))
    pol = RetryPolicy(max_attempts=2, backoff=Exponential(base=100, jitter="none"))
    r = ctl.submit(failing_task, retry=pol)
    wait_status(ctl, r, S.RETRY_WAIT)
    g = rig.gate()
    up = ctl.submit(g.cooperative, 5)
    wait_status(ctl, up, S.RUNNING)  # the retry-waiting task left the slot free
    blocked = ctl.submit(ok_task, after=[up])
    assert blocked.status is S.BLOCKED
    g.release()
    assert blocked.result(timeout=5) is None


def test_many_queued_inline_tasks_do_not_nest(rig: Rig) -> None:
    """Regression: each inline task's end pumped the next one from inside its own
    report, nesting one level per queued task until RecursionError."""
    ctl = rig.controller(concurrency=ConcurrencyPolicy(max_parallel=1))
    g = rig.gate()
    blocker = ctl.submit(g.cooperative, executor="thread")
    wait_status(ctl, blocker, S.RUNNING)
    hs = [ctl.submit(ok_task, i, executor="inline") for i in range(600)]
    assert all(h.status is S.QUEUED for h in hs)
    g.release()
    assert [h.result(timeout=30) for h in hs] == list(range(600))


def test_max_parallel_is_a_shortcut_for_the_concurrency_policy() -> None:
    import threading

    import chongming_nb as cn

    ctl = cn.Controller(max_parallel=2)
    try:
        assert ctl.concurrency.max_parallel == 2
        gate = threading.Event()
        started = threading.Semaphore(0)

        def hold(ctx):
            started.release()
            gate.wait(30)

        handles = [ctl.submit(hold) for _ in range(3)]
        assert started.acquire(timeout=30) and started.acquire(timeout=30)
        # two run, the third waits for a slot (and its body never started)
        wait_until(ctl, lambda: ctl.stats()["running"] == 2 and ctl.stats()["queued"] == 1)
        assert not started.acquire(blocking=False)
        gate.set()
        for h in handles:
            h.wait(30)
    finally:
        ctl.close()
    with pytest.raises(cn.ConfigurationError, match="max_parallel or concurrency, not both"):
        cn.Controller(max_parallel=2, concurrency=cn.ConcurrencyPolicy())
    with pytest.raises(cn.ConfigurationError, match="max_parallel must be"):
        cn.Controller(max_parallel=0)

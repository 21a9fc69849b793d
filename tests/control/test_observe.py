"""Observing tasks: output capture, DataFrame dtypes, the event bus and lifecycle hooks,
queries."""

from __future__ import annotations

import logging
import sys
import threading

import pandas as pd
import pytest
from ctl_helpers import Rig, failing_task, ok_task, wait_status, wait_until

from chongming_nb import (
    ConfigurationError,
    Exponential,
    FailureKind,
    ProgressUpdated,
    RetryPolicy,
    TaskContext,
    TaskOutput,
    TaskStatus,
    TaskStatusChanged,
)
from chongming_nb.frames import FAILURE_DTYPE, STATUS_DTYPE

S = TaskStatus

# ----------------------------------------------------------------- output


def test_print_and_logging_land_in_the_task_log(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    ctl = rig.controller()

    def chatty(ctx: TaskContext) -> int:
        print("hello from the task")
        print("two", "parts", end="")
        print(" and the rest")
        sys.stderr.write("warn line\n")
        logging.getLogger("user.module").warning("a user log record")
        ctx.log.info("via ctx.log", rows=3)
        print("unterminated tail", end="")
        return 1

    print("main thread before")
    h = ctl.submit(chatty)
    assert h.result(timeout=5) == 1
    print("main thread after")
    lines = [(r.stream, r.line) for r in h.logs()]
    assert ("stdout", "hello from the task") in lines
    assert ("stdout", "two parts and the rest") in lines
    assert ("stderr", "warn line") in lines
    assert ("stdout", "unterminated tail") in lines  # flushed when the attempt ends
    log_lines = [r for r in h.logs() if r.stream == "log"]
    assert any("a user log record" in r.line and r.level == "WARNING" for r in log_lines)
    assert any("via ctx.log" in r.line and "rows=3" in r.line for r in log_lines)
    out = capsys.readouterr()
    assert "main thread before" in out.out and "main thread after" in out.out
    assert "hello from the task" not in out.out + out.err
    assert "warn line" not in out.err
    assert h.logs(limit=1) == h.logs()[-1:]


def test_output_of_concurrent_tasks_is_kept_apart(rig: Rig) -> None:
    ctl = rig.controller()
    go = threading.Barrier(3)

    def talker(ctx: TaskContext, tag: str) -> None:
        go.wait(5)
        for i in range(50):
            print(f"{tag}-{i}")

    hs = [ctl.submit(talker, tag) for tag in ("a", "b", "c")]
    for h in hs:
        h.wait(timeout=5)
    for h, tag in zip(hs, ("a", "b", "c"), strict=True):
        assert [r.line for r in h.logs()] == [f"{tag}-{i}" for i in range(50)]


def test_log_lines_are_events_too(rig: Rig) -> None:
    from chongming_nb import TaskLogLine

    ctl = rig.controller()
    seen: list[str] = []
    ctl.watch(lambda e: seen.append(e.line), (TaskLogLine,))  # type: ignore[attr-defined]
    ctl.submit(lambda ctx: print("evented")).wait(timeout=5)
    ctl.flush()
    assert seen == ["evented"]


# ------------------------------------------------------------ dataframes


def test_dataframe_dtypes(rig: Rig) -> None:
    ctl = rig.controller()
    ok = ctl.submit(ok_task, 1, name="ok")
    pol = RetryPolicy(max_attempts=2, backoff=Exponential(base=0))
    bad = ctl.submit(failing_task, retry=pol, name="bad")
    ok.wait(timeout=5)
    bad.wait(timeout=5)

    snaps = ctl.snapshots_df()
    assert len(snaps) == 2
    assert snaps["status"].dtype == STATUS_DTYPE
    assert set(snaps["status"].cat.categories) == {s.value for s in S}
    for col in ("created_at", "queued_at", "started_at", "ended_at"):
        assert isinstance(snaps[col].dtype, pd.DatetimeTZDtype), col
        assert str(snaps[col].dt.tz) == "UTC"
    assert pd.api.types.is_timedelta64_dtype(snaps["duration"])
    assert snaps["failure_kind"].dtype == FAILURE_DTYPE
    row = snaps.set_index("name").loc["bad"]
    assert row["status"] == "failed" and row["failure_kind"] == "exception"

    atts = ctl.attempts_df()
    assert len(atts) == 3
    assert list(atts.sort_values(["name", "attempt"])["attempt"]) == [1, 2, 1]
    assert atts["outcome"].dtype == STATUS_DTYPE
    assert atts["failure_kind"].dtype == FAILURE_DTYPE
    assert isinstance(atts["started_at"].dtype, pd.DatetimeTZDtype)
    assert str(atts["ended_at"].dt.tz) == "UTC"
    assert pd.api.types.is_timedelta64_dtype(atts["duration"])
    assert (atts["duration"] >= pd.Timedelta(0)).all()
    assert atts["abandoned"].dtype == bool
    assert str(atts["exit_code"].dtype) == "Int64"
    assert atts["traceback"].str.contains("ValueError").sum() == 2

    evs = ctl.events_df()
    assert evs["from_status"].dtype == STATUS_DTYPE
    assert evs["to_status"].dtype == STATUS_DTYPE
    assert isinstance(evs["at"].dtype, pd.DatetimeTZDtype)
    assert len(evs) == len(ctl.history(ok)) + len(ctl.history(bad))

    # filters like list_tasks
    assert list(ctl.snapshots_df(status="failed")["name"]) == ["bad"]
    assert len(ctl.attempts_df(name_prefix="ok")) == 1


def test_empty_frames_keep_their_dtypes(rig: Rig) -> None:
    ctl = rig.controller()
    for df, col in ((ctl.snapshots_df(), "status"), (ctl.attempts_df(), "outcome")):
        assert len(df) == 0
        assert df[col].dtype == STATUS_DTYPE
    assert pd.api.types.is_timedelta64_dtype(ctl.attempts_df()["duration"])


def test_events_df_from_history_rows_equals_the_frame_of_the_transitions(rig: Rig) -> None:
    """events_df is built from the controller's compact history rows; it must hold
    exactly what transitions_frame makes of the Transition objects history() returns."""
    from chongming_nb.frames import transitions_frame

    ctl = rig.controller()
    empty = ctl.events_df()
    assert len(empty) == 0 and empty["to_status"].dtype == STATUS_DTYPE
    ok = ctl.submit(ok_task, 1, name="ok <b>")
    bad = ctl.submit(failing_task, name="bad")
    ok.wait(timeout=5)
    bad.wait(timeout=5)
    ctl.retry(bad, force=True)
    bad.wait(timeout=5)
    evs = ctl.events_df()
    trs = [tr for h in (bad, ok) for tr in ctl.history(h)]  # newest task first
    expect = transitions_frame(trs, {ok.id: "ok <b>", bad.id: "bad"})
    pd.testing.assert_frame_equal(
        evs.sort_values(["task_id", "version"]).reset_index(drop=True),
        expect.sort_values(["task_id", "version"]).reset_index(drop=True),
    )
    assert {"user:retry"} <= set(evs["trigger"])


# ------------------------------------------------------------- event bus


def test_failing_subscriber_and_hook_never_break_a_task(rig: Rig) -> None:
    ctl = rig.controller()
    good: list[object] = []

    def bad_subscriber(ev: object) -> None:
        raise RuntimeError("subscriber bug")

    class BadHook:
        def on_start(self, ev: object) -> None:
            raise RuntimeError("hook bug")

        def on_success(self, ev: object) -> None:
            raise RuntimeError("hook bug")

    class GoodHook:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def on_start(self, ev: object) -> None:
            self.calls.append("start")

        def on_success(self, ev: object) -> None:
            self.calls.append("success")

        def on_failure(self, ev: object) -> None:
            self.calls.append("failure")

    gh = GoodHook()
    ctl.watch(bad_subscriber)
    ctl.add_hook(BadHook())
    ctl.add_hook(gh)
    ctl.watch(good.append)
    assert ctl.submit(ok_task, 5).result(timeout=5) == 5
    wait_status(ctl, ctl.submit(failing_task), S.FAILED)
    ctl.flush()
    assert ctl.subscriber_failures >= 4  # created, queued, starting, running, ...
    assert ctl.hook_failures == 3  # start + success of the first, start of the second
    assert gh.calls == ["start", "success", "start", "failure"]
    assert good  # the good subscriber after the bad one still got everything
    assert len(good) == ctl.subscriber_failures


def test_add_hook_needs_a_method(rig: Rig) -> None:
    ctl = rig.controller()
    with pytest.raises(ConfigurationError, match="on_start"):
        ctl.add_hook(object())


def test_events_arrive_in_order_per_task(rig: Rig) -> None:
    ctl = rig.controller()
    seen: dict[str, list[int]] = {}
    lock = threading.Lock()

    def on(ev: TaskStatusChanged) -> None:
        with lock:
            seen.setdefault(ev.task_id, []).append(ev.version)

    ctl.watch(on, (TaskStatusChanged,))  # type: ignore[arg-type]
    pol = RetryPolicy(max_attempts=3, backoff=Exponential(base=0))
    hs = [ctl.submit(failing_task if i % 2 else ok_task, retry=pol) for i in range(30)]
    for h in hs:
        h.wait(timeout=10)
    ctl.flush()
    for h in hs:
        versions = seen[h.id]
        assert versions == list(range(1, ctl.get(h).status_version + 1))


def test_watch_filter_and_unsubscribe(rig: Rig) -> None:
    ctl = rig.controller()
    outs: list[object] = []
    unsub = ctl.watch(lambda e: outs.append(e.payload), (TaskOutput,))  # type: ignore[attr-defined]
    ctl.submit(lambda ctx: ctx.emit("row", {"n": 1})).wait(timeout=5)
    ctl.flush()
    unsub()
    ctl.submit(lambda ctx: ctx.emit("row", {"n": 2})).wait(timeout=5)
    ctl.flush()
    assert outs == [{"n": 1}]
    with pytest.raises(TypeError):
        ctl.watch(lambda e: None, [int])  # type: ignore[list-item]


def test_progress_is_latest_and_events_are_throttled(rig: Rig) -> None:
    ctl = rig.controller()
    g = rig.gate()
    progress_events: list[object] = []
    ctl.watch(progress_events.append, (ProgressUpdated,))

    def counting(ctx: TaskContext) -> None:
        for i in range(1, 1001):
            ctx.progress(done=i, total=1000, unit="rows")
        g.entered.set()
        g.event.wait()

    h = ctl.submit(counting)
    assert g.entered.wait(5)
    p = h.progress
    assert p is not None and (p.done, p.total, p.unit) == (1000, 1000, "rows")
    assert p.fraction == 1.0
    g.release()
    h.wait(timeout=5)
    ctl.flush()
    # 1000 reports in well under a second: a handful of events, not a thousand
    assert 1 <= len(progress_events) < 50
    assert ctl.get(h).progress.done == 1000  # type: ignore[union-attr]


def test_track_reports_progress_and_stops(rig: Rig) -> None:
    ctl = rig.controller()
    seen: list[int] = []

    def loop(ctx: TaskContext) -> None:
        for i in ctx.track(range(10_000_000), unit="it"):
            seen.append(i)

    h = ctl.submit(loop)
    wait_until(ctl, lambda: h.progress is not None and h.progress.done > 1000, what="progress")
    h.stop()
    wait_status(ctl, h, S.STOPPED)
    p = ctl.get(h).progress
    assert p is not None and p.total == 10_000_000 and p.unit == "it"
    assert seen == list(range(len(seen)))  # nothing skipped or repeated
    assert 1000 < len(seen) < 10_000_000


# ---------------------------------------------------------------- queries


def test_list_tasks_filters_and_stats(rig: Rig) -> None:
    ctl = rig.controller()
    a = ctl.submit(ok_task, name="load.flights", tags={"io"})
    b = ctl.submit(failing_task, name="load.weather")
    c = ctl.submit(ok_task, name="clean", tags={"cpu"})
    for h in (a, b, c):
        h.wait(timeout=5)
    assert [s.name for s in ctl.list_tasks()] == ["clean", "load.weather", "load.flights"]
    assert [s.name for s in ctl.list_tasks(name_prefix="load.")] == [
        "load.weather",
        "load.flights",
    ]
    assert [s.name for s in ctl.list_tasks(tag="io")] == ["load.flights"]
    assert [s.name for s in ctl.list_tasks(status={"failed"})] == ["load.weather"]
    assert len(ctl.list_tasks(limit=1)) == 1
    stats = ctl.stats()
    assert set(stats) == {s.value for s in S}
    assert (stats["succeeded"], stats["failed"], stats["running"]) == (2, 1, 0)
    with pytest.raises(ConfigurationError, match="statuses are"):
        ctl.list_tasks(status="done")
    with pytest.raises(ConfigurationError):
        ctl.list_tasks(limit=-1)
    fk = ctl.get(b).failure
    assert fk is not None and fk.kind is FailureKind.EXCEPTION


def test_handle_future_like(rig: Rig) -> None:
    import asyncio

    ctl = rig.controller()
    h = ctl.submit(ok_task, "v")
    called: list[str] = []
    h.add_done_callback(lambda hh: called.append(hh.id))
    assert asyncio.run(_await(h)) == "v"
    assert h.done() and h.exception() is None
    wait_until(ctl, lambda: called == [h.id], what="done callback")
    late: list[str] = []
    h.add_done_callback(lambda hh: late.append(hh.id))
    assert late == [h.id]  # already done: called at once
    assert "ok_task" in repr(h) and "succeeded" in repr(h)


async def _await(h: object) -> object:
    return await h  # type: ignore[misc]

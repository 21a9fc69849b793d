"""A task a person ended reads as what it is: a stop is not a failure, and the row says
who ended it and when (the widget row, the html/plain snapshots, attempts_df)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import chongming_nb as cn
from chongming_nb.core.models import ACTOR_SOURCES, actor_source, end_summary
from chongming_nb.notebook import display
from chongming_nb.notebook.rows import end_text
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing.widgets import recording_comms


@pytest.fixture
def ctl() -> Iterator[Any]:
    c = cn.Controller(executor="thread")
    with recording_comms():
        yield c
    c.close()


def wait_status(ctl: Any, task_id: str, status: str, timeout: float = 20) -> None:
    """Block until a watcher sees ``status`` (watchers subscribed earlier, like a
    table's, have been told by then)."""
    reached = threading.Event()

    def on(event: Any) -> None:
        if getattr(event, "task_id", None) == task_id and ctl.get(task_id).status == status:
            reached.set()

    unsubscribe = ctl.watch(on)
    try:
        if ctl.get(task_id).status != status:
            assert reached.wait(timeout), f"{task_id} never reached {status}"
    finally:
        unsubscribe()


def _running(ctl: Any) -> tuple[Any, threading.Event]:
    started = threading.Event()
    step = threading.Event()

    def work(ctx: Any) -> None:
        started.set()
        for _ in ctx.track(range(100_000), total=100_000, unit="rows"):
            step.wait(0.005)

    h = ctl.submit(work, name="cooperative")
    assert started.wait(20)
    return h, step


def test_a_widget_stop_on_a_storeless_controller_reads_neutral(ctl: Any) -> None:
    h, _ = _running(ctl)
    t = TaskTable(ctl, kind="task", task_ids=[h.id])
    t._on_custom_msg(t, {"type": "action", "action": "stop", "task_id": h.id, "request_id": 1})
    wait_status(ctl, h.id, "stopped")
    t.flush(force=True)
    (row,) = t.current_rows()
    assert row["status"] == "stopped"
    assert row["failure"] is None  # not "cancelled: stopped by widget"
    assert row["ended_by"] == "widget" and row["end_reason"] is None
    assert row["ended"] is not None
    # the live patch carried the same fields
    patches = [m for m in t.comm.custom_messages() if m["type"] == "patch"]
    sent = {k: v for p in patches for d in p["update"] for k, v in d.items()}
    assert sent["ended_by"] == "widget" and sent["status"] == "stopped"
    # attempts_df: the attempt ended "stopped" with no failure kind
    df = ctl.attempts_df()
    att = df[df["task_id"] == h.id].iloc[-1]
    assert att["outcome"] == "stopped"
    assert pd.isna(att["failure_kind"]) and pd.isna(att["failure_message"])
    # the snapshots: who and when, never "cancelled"
    data, _ = display.task_bundle(ctl, task_ids=[h.id], kind="task", title="job")
    assert "stopped from the widget at " in data["text/html"]
    assert "cancelled" not in data["text/html"]
    assert "stopped from the widget at " in data["text/plain"]
    t.close()


def test_the_reason_and_the_source_of_each_way_to_stop(ctl: Any) -> None:
    for actor, source in [
        ("widget", "widget"),
        ("sidebar:alice", "sidebar"),
        ("cli:root", "cli"),
        ("user", "api"),
    ]:
        h, _ = _running(ctl)
        ok, why = ctl.apply(h.id, "stop", actor=actor, args={"reason": "not needed"})
        assert ok, why
        h.wait(20)
        snap = ctl.get(h.id)
        assert snap.status is cn.TaskStatus.STOPPED and snap.failure is None
        assert end_summary(snap) == (source, "not needed")
    # Python's own h.stop()
    h, _ = _running(ctl)
    h.stop()
    h.wait(20)
    assert end_summary(ctl.get(h.id)) == ("api", None)


def test_a_cancel_called_from_python_reads_from_python_not_its_pipeline(ctl: Any) -> None:
    """``h.cancel(reason)`` (what the user guide says drops a delayed start) and
    ``ctl.cancel(id)`` are a person's call from Python: the row said "cancelled by its
    pipeline" for a task in no pipeline. A pipeline's own cancels still name it."""
    delayed = ctl.submit(lambda: None, delay=600)
    delayed.cancel("not needed")
    snap = ctl.get(delayed.id)
    assert snap.status is cn.TaskStatus.CANCELLED
    assert end_summary(snap) == ("api", "not needed")
    other = ctl.submit(lambda: None, delay=600)
    ctl.cancel(other.id)
    assert end_summary(ctl.get(other.id))[0] == "api"
    # a fail-fast run cancels its other waiting steps itself: those read "by its pipeline"
    pipe = cn.Pipeline("p", on_failure=cn.AggregationPolicy.FAIL_FAST)
    pipe.add(_boom, name="boom")
    pipe.add(lambda: None, name="later", delay=600)
    run = pipe.submit(ctl)
    run.wait(20)
    later = ctl.get(run.handle("later").id)
    assert later.status is cn.TaskStatus.CANCELLED
    assert end_summary(later)[0] == "pipeline"


def _boom() -> None:
    raise ValueError("boom")


def test_stopped_before_it_started_and_skipped_record_who(ctl: Any) -> None:
    gate = threading.Event()
    blocker = ctl.submit(lambda ctx: gate.wait(20), name="blocker")
    later = ctl.submit(lambda ctx: None, name="later", after=[blocker])
    other = ctl.submit(lambda ctx: None, name="other", after=[blocker])
    assert ctl.apply(later.id, "stop", actor="sidebar:bob")[0]
    assert ctl.apply(other.id, "skip", actor="cli:ops")[0]
    gate.set()
    blocker.wait(20)
    s_later, s_other = ctl.get(later.id), ctl.get(other.id)
    assert s_later.status is cn.TaskStatus.STOPPED and s_later.failure is None
    assert end_summary(s_later) == ("sidebar", None)
    assert s_other.status is cn.TaskStatus.SKIPPED and s_other.failure is None
    assert end_summary(s_other) == ("cli", None)
    t = TaskTable(ctl, kind="board")
    rows = {r["name"]: r for r in t.current_rows()}
    assert end_text(rows["later"]).startswith("stopped from the sidebar at ")  # type: ignore[union-attr]
    assert end_text(rows["other"]).startswith("skipped from the CLI at ")  # type: ignore[union-attr]
    assert rows["blocker"]["ended_by"] is None  # succeeded: nobody ended it
    t.close()


def test_a_stop_then_a_retry_clears_who_stopped_it(ctl: Any) -> None:
    h, _ = _running(ctl)
    h.stop()
    h.wait(20)
    assert end_summary(ctl.get(h.id))[0] == "api"
    h.retry(force=True)
    assert end_summary(ctl.get(h.id)) == (None, None)
    assert ctl.get(h.id).outcome is None
    h.stop()
    h.wait(20)


def test_actor_source_vocabulary() -> None:
    assert actor_source("sidebar:alice") == "sidebar"
    assert actor_source("cli:root") == "cli"
    assert actor_source("widget") == "widget"
    assert actor_source("user") == "api" and actor_source("magic") == "api"
    assert actor_source("orchestrator") == "pipeline"
    assert actor_source("interrupt") == "interrupt"  # the kernel's ■ stopping a loop
    assert actor_source("reconcile") == "system"
    assert actor_source(None) is None
    assert {
        actor_source(a)
        for a in ("widget", "sidebar:x", "cli:x", "user", "interrupt", "pipeline", "x")
    } == set(ACTOR_SOURCES)

"""The attempt timeline: built from the history frames, drawn as SVG and as a Figure."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from chongming_nb.core.models import AttemptRecord, FailureKind, Transition
from chongming_nb.core.states import TaskStatus as S
from chongming_nb.frames import attempts_frame, transitions_frame
from chongming_nb.pictures import build, human_seconds, plot, to_svg

T0 = datetime(2026, 12, 1, 14, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def history(task_id: str, steps: list[tuple[float, S, S, str]]) -> list[Transition]:
    return [
        Transition(task_id, a, b, trigger, trigger.split(":")[0], None, at(t), version)
        for version, (t, a, b, trigger) in enumerate(steps, 1)
    ]


@pytest.fixture
def frames():
    """Three tasks: 'flaky' fails, waits, succeeds; 'held' is paused mid-attempt; 'halted'
    is stopped by a person; 'slow' times out. Two slots."""
    attempts = [
        AttemptRecord("t1", 1, at(0), at(1), S.RETRY_WAIT, FailureKind.EXCEPTION, "boom"),
        AttemptRecord("t1", 2, at(3), at(4), S.SUCCEEDED),
        AttemptRecord("t2", 1, at(1), at(6), S.SUCCEEDED),
        AttemptRecord("t3", 1, at(4), at(5), S.STOPPED),
        AttemptRecord(
            "t4", 1, at(6), at(7), S.FAILED, FailureKind.TIMEOUT_ATTEMPT, "took too long"
        ),
    ]
    transitions = [
        *history(
            "t1",
            [
                (0, S.QUEUED, S.STARTING, "scheduler:dispatch"),
                (0, S.STARTING, S.RUNNING, "executor:started"),
                (1, S.RUNNING, S.RETRY_WAIT, "executor:failed"),
                (2.5, S.RETRY_WAIT, S.QUEUED, "scheduler:retry"),
                (3, S.QUEUED, S.STARTING, "scheduler:dispatch"),
                (3, S.STARTING, S.RUNNING, "executor:started"),
                (4, S.RUNNING, S.SUCCEEDED, "executor:succeeded"),
            ],
        ),
        *history(
            "t2",
            [
                (1, S.QUEUED, S.STARTING, "scheduler:dispatch"),
                (1, S.STARTING, S.RUNNING, "executor:started"),
                (2, S.RUNNING, S.PAUSING, "user:pause"),
                (2.2, S.PAUSING, S.PAUSED, "executor:paused"),
                (3.5, S.PAUSED, S.RUNNING, "user:resume"),
                (6, S.RUNNING, S.SUCCEEDED, "executor:succeeded"),
            ],
        ),
        *history(
            "t3",
            [
                (4, S.QUEUED, S.STARTING, "scheduler:dispatch"),
                (4, S.STARTING, S.RUNNING, "executor:started"),
                (4.8, S.RUNNING, S.STOPPING, "widget:stop"),
                (5, S.STOPPING, S.STOPPED, "executor:stopped"),
            ],
        ),
    ]
    names = {"t1": "flaky", "t2": "held", "t3": "<b>halted</b>", "t4": "slow"}
    return attempts_frame(attempts, names), transitions_frame(transitions, names)


def test_one_bar_per_attempt_on_its_tasks_lane_in_order_of_first_start(frames) -> None:
    tl = build(*frames)
    assert [name for _, name in tl.lanes] == ["flaky", "held", "<b>halted</b>", "slow"]
    assert len(tl.bars) == 5
    lanes = {tid: i for i, (tid, _) in enumerate(tl.lanes)}
    assert all(lanes[b.task_id] == b.lane for b in tl.bars)
    flaky = [b for b in tl.bars if b.task_id == "t1"]
    assert [(b.attempt, b.start, b.end, b.outcome) for b in flaky] == [
        (1, 0.0, 1.0, "retry_wait"),
        (2, 3.0, 4.0, "succeeded"),
    ]
    assert tl.t0 == T0 and tl.span == 7.0


def test_waits_pauses_stops_and_timeouts_are_marked_where_they_happened(frames) -> None:
    tl = build(*frames)
    marks = {(m.kind, m.lane, m.start, m.end) for m in tl.marks}
    assert ("retry_wait", 0, 1.0, 2.5) in marks
    assert ("paused", 1, 2.0, 3.5) in marks  # pausing and paused are one held interval
    assert ("stopping", 2, 4.8, 5.0) in marks
    assert ("stop", 2, 5.0, 5.0) in marks
    assert ("timeout", 3, 7.0, 7.0) in marks
    stop = next(m for m in tl.marks if m.kind == "stop")
    assert stop.label == "stopped by widget"  # who asked, not the executor that obeyed


def test_the_slots_strip_counts_attempts_running_and_never_double_counts_a_handover(
    frames,
) -> None:
    tl = build(*frames)
    assert tl.max_slots == 2

    def running_at(t: float) -> int:
        level = 0
        for when, n in tl.slots:
            if when <= t:
                level = n
        return level

    assert running_at(0.5) == 1
    assert running_at(1.5) == 1  # t1 ended at 1 as t2 started at 1: a handover, not 2
    assert running_at(3.5) == 2
    assert running_at(6.5) == 1
    assert running_at(7.0) == 0


def test_an_attempt_still_running_ends_at_now_and_says_so(frames) -> None:
    attempts, transitions = frames
    live = AttemptRecord("t9", 1, at(2))
    both = pd.concat([attempts, attempts_frame([live], {"t9": "live"})], ignore_index=True)
    tl = build(both, transitions, now=at(10))
    bar = next(b for b in tl.bars if b.task_id == "t9")
    assert bar.running and bar.outcome is None and bar.end == 10.0
    assert tl.span == 10.0


def test_svg_is_well_formed_escapes_names_and_carries_each_attempts_row(frames) -> None:
    svg = to_svg(build(*frames, title="run <nightly>"))
    root = ET.fromstring(svg)  # well-formed XML: every user string was escaped
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in root.iter(f"{ns}rect") if "cn-bar" in r.get("class", "")]
    assert len(bars) == 5
    titles = [r.find(f"{ns}title").text for r in bars]
    assert any("failure_message: boom" in t and "attempt: 1" in t for t in titles)
    assert "<b>halted</b>" not in svg and "&lt;b&gt;halted&lt;/b&gt;" in svg
    assert "run &lt;nightly&gt;" in svg
    tones = {r.get("data-task"): r.get("class") for r in bars}
    assert "cn-tone-muted" in tones["t3"]  # a person's stop is not drawn as a failure
    assert "cn-tone-bad" in tones["t4"]


def test_an_empty_timeline_says_so() -> None:
    tl = build(None, None)
    assert tl.lanes == () and tl.bars == ()
    assert "no attempts yet" in to_svg(tl)


def test_plot_gives_a_figure_with_one_lane_per_task(frames) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    fig = plot(build(*frames))
    lanes_ax = fig.axes[0]
    labels = [t.get_text() for t in lanes_ax.get_yticklabels()]
    assert labels == ["flaky", "held", "<b>halted</b>", "slow"]
    assert len(lanes_ax.patches) == 5  # one bar per attempt


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (5.04, "5.0s"), (75, "1m15s"), (7260, "2h01m"), (float("nan"), "")],
)
def test_human_seconds(seconds: float, text: str) -> None:
    assert human_seconds(seconds) == text


def test_bar_tooltips_name_the_duration_in_human_units(frames) -> None:
    svg = to_svg(build(*frames))
    assert re.search(r"duration: 1\.0s", svg)


def test_a_runs_timeline_and_a_stores_timeline_agree(tmp_path) -> None:
    import chongming_nb as cn

    path = tmp_path / "tasks.db"
    ctl = cn.Controller(store=cn.SqliteStore(str(path)))
    try:
        calls = {"n": 0}

        retry = cn.RetryPolicy(max_attempts=2, backoff=cn.Exponential(base=0.01, jitter="none"))

        @cn.task(retry=retry)
        def first(ctx):
            calls["n"] += 1
            if calls["n"] == 1:
                raise ValueError("once")
            return 1

        def second(ctx):
            return ctx.upstream("first") + 1

        pipe = cn.Pipeline("tl")
        a = pipe.add(first)
        pipe.add(second, deps=[a])
        run = pipe.submit(ctl)
        run.wait(30)
        live = run.timeline()
        assert [name for _, name in live.lanes] == ["first", "second"]
        assert len(live.bars) == 3
        assert any(m.kind == "retry_wait" for m in live.marks)
        ctl.flush()
        stored = cn.open_store(str(path)).timeline(pipeline_run_id=run.id)
        assert [(b.task_id, b.attempt, b.outcome) for b in stored.bars] == [
            (b.task_id, b.attempt, b.outcome) for b in live.bars
        ]
        after_all = datetime.now(UTC) + timedelta(seconds=1)
        assert cn.open_store(str(path)).timeline(since=after_all).bars == ()
        bundle = live._repr_mimebundle_()
        assert bundle["text/html"].count('class="cn-bar') == 3
        assert "2 tasks, 3 attempts" in bundle["text/plain"]
        out = tmp_path / "run.svg"
        assert live.to_svg(out) == out.read_text(encoding="utf-8")
    finally:
        ctl.close()


def test_since_and_until_must_be_aware_and_in_order(tmp_path) -> None:
    import chongming_nb as cn
    from chongming_nb.core.errors import ConfigurationError

    ctl = cn.Controller()
    try:
        with pytest.raises(ConfigurationError, match="since must be a timezone-aware"):
            from chongming_nb.pictures import from_source

            from_source(ctl, since=datetime(2026, 1, 1))
        with pytest.raises(ConfigurationError, match="is before since"):
            from_source(ctl, since=at(5), until=at(1))
    finally:
        ctl.close()


def test_the_controllers_timeline_draws_a_running_attempt_to_now() -> None:
    import threading

    import chongming_nb as cn
    from chongming_nb.testing.executor_contract import poll_until

    ctl = cn.Controller()
    gate = threading.Event()
    try:
        h = ctl.submit(lambda ctx: gate.wait(30), name="holding")
        assert poll_until(lambda: ctl.attempts(h.id) != [], 30)  # the attempt has begun
        tl = ctl.timeline(name_prefix="holding")
        (bar,) = tl.bars
        assert bar.running and bar.outcome is None
        assert tl.lanes == ((h.id, "holding"),)
        gate.set()
        h.wait(30)
        (bar,) = ctl.timeline(name_prefix="holding").bars
        assert not bar.running and bar.outcome == "succeeded"
    finally:
        gate.set()
        ctl.close()


def test_a_finished_history_ends_at_its_last_record_whatever_now_is(frames) -> None:
    tl = build(*frames, now=at(100))
    assert tl.span == 7.0  # not stretched to now: nothing is going on any more


def test_the_canvas_data_has_one_entry_per_bar_in_columns_with_its_attempt_row(frames) -> None:
    import json

    from chongming_nb.pictures.timeline import TIMELINE_MIME, to_json

    tl = build(*frames)
    data = to_json(tl)
    json.dumps(data)  # plain JSON
    assert data["lanes"] == [name for _, name in tl.lanes]
    assert data["lane_ids"] == [tid for tid, _ in tl.lanes]
    for column in data["bars"].values():
        assert len(column) == len(tl.bars)
    assert len(data["details"]) == len(tl.bars)
    i = next(i for i, b in enumerate(tl.bars) if b.task_id == "t1" and b.attempt == 1)
    row = dict(zip(data["keys"], data["details"][i], strict=True))
    assert row["name"] == "flaky" and row["outcome"] == "retry_wait"
    assert row["failure_message"] == "boom" and row["duration"] == "1.0s"
    assert data["bars"]["tone"][i] == tl.bars[i].tone
    assert sorted(data["marks"]["kind"]) == sorted(m.kind for m in tl.marks)
    assert data["max_slots"] == tl.max_slots == 2
    bundle = tl._repr_mimebundle_()
    assert bundle[TIMELINE_MIME] == data and "text/html" in bundle  # the SVG stays beside it


def test_a_large_static_svg_leaves_out_the_per_bar_tooltips(frames, monkeypatch) -> None:
    from chongming_nb.pictures import timeline

    tl = build(*frames)
    assert to_svg(tl).count('<rect class="cn-bar') == 5
    assert re.search(r'<rect class="cn-bar[^>]*><title>', to_svg(tl))
    monkeypatch.setattr(timeline, "SVG_TITLES_UP_TO", 4)
    svg = to_svg(tl)
    assert svg.count('<rect class="cn-bar') == 5
    assert not re.search(r'<rect class="cn-bar[^>]*><title>', svg)
    ET.fromstring(svg)  # still well formed

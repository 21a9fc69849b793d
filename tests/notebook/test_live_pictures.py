"""A run's graph in a notebook output: shown at once, redrawn at a bounded rate while the
run goes on, and final when it ends (what the saved notebook keeps)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

import chongming_nb as cn
from chongming_nb.notebook.pictures import LivePicture, show_run_graph


def test_a_live_timeline_in_a_cell_is_shown_by_the_notebook_layer(ctl, monkeypatch) -> None:
    """``ctl.timeline()`` as a cell's value while its work runs: the live display the
    package root installs gets it and its refresh; once nothing runs, it is shown once."""
    from chongming_nb.control import display

    seen: list[tuple[Any, Any]] = []
    monkeypatch.setattr(display, "_live_timeline", lambda first, again: seen.append((first, again)))
    gate = threading.Event()
    h = ctl.submit(lambda ctx: gate.wait(30), name="waits")
    first = ctl.timeline()
    while not first.bars:  # the attempt has started once it has a bar
        first = ctl.timeline()
    first._ipython_display_()
    assert seen == [(first, first.meta["refresh"])]
    gate.set()
    h.result(timeout=30)
    shown: list[Any] = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data))
    done = ctl.timeline()
    assert not done.live
    done._ipython_display_()
    assert len(seen) == 1 and len(shown) == 1  # the final picture, once


class Outputs:
    """A stand-in for IPython's display / update_display, recording what was published."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, dict[str, Any], float]] = []
        self.lock = threading.Lock()

    def __call__(self, data: dict[str, Any], display_id: str, first: bool) -> None:
        with self.lock:
            self.calls.append((display_id, first, data, time.monotonic()))


@pytest.fixture
def ctl():
    c = cn.Controller()
    yield c
    c.close()


def test_the_graph_is_shown_then_redrawn_until_the_run_is_over_and_ends_final(ctl) -> None:
    gate = threading.Event()

    def extract(ctx):
        for _ in ctx.track(range(50)):
            gate.wait(30)
        return 1

    def load(ctx):
        return ctx.upstream("extract") + 1

    pipe = cn.Pipeline("live")
    a = pipe.add(extract)
    pipe.add(load, deps=[a])
    run = pipe.submit(ctl)
    out = Outputs()
    live = show_run_graph(run, publish=out)
    (first_id, first, data, _), *_ = out.calls
    assert first and "cn-graph" in data["text/html"] and first_id == live.display_id
    gate.set()
    run.wait(30)
    assert live.wait(30), "the final picture was never published"
    last_id, last_first, last, _ = out.calls[-1]
    assert last_id == live.display_id and not last_first
    assert last["text/plain"].endswith("(2 succeeded)")
    assert 'data-status="succeeded"' in last["text/html"]


def test_redraws_are_coalesced_to_the_rate(ctl) -> None:
    def busy(ctx):
        for _ in ctx.track(range(3000)):
            time.sleep(0.0005)  # many progress events in little time

    pipe = cn.Pipeline("busy")
    pipe.add(busy)
    run = pipe.submit(ctl)
    out = Outputs()
    live = LivePicture(ctl, run.graph, run.done, rate=4.0, publish=out)
    run.wait(60)
    assert live.wait(30)
    updates = [t for _, first, _, t in out.calls if not first]
    assert updates, "never redrawn"
    gaps = [b - a for a, b in itertools.pairwise(updates)]
    assert all(g >= 0.24 for g in gaps), gaps  # at most 4 a second (minus clock jitter)


def test_a_run_already_over_is_drawn_once_and_nothing_is_left_listening(ctl) -> None:
    def one(ctx):
        return 1

    pipe = cn.Pipeline("done")
    pipe.add(one)
    run = pipe.submit(ctl)
    run.wait(30)
    out = Outputs()
    live = show_run_graph(run, publish=out)
    assert live.wait(0) and len(out.calls) == 1 and out.calls[0][1]


def test_a_bad_rate_is_refused(ctl) -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        LivePicture(ctl, lambda: None, lambda: True, rate=0, publish=Outputs())


def test_a_timeline_displayed_while_work_runs_is_redrawn_until_it_is_over(ctl) -> None:
    from chongming_nb.notebook.pictures import show_live_timeline
    from chongming_nb.pictures.timeline import TIMELINE_MIME

    gate = threading.Event()
    h = ctl.submit(lambda ctx: gate.wait(30), name="waits")
    first = ctl.timeline()
    while not first.bars:  # the attempt has started once it has a bar
        assert h.status.value in ("pending", "queued", "starting", "running")
        first = ctl.timeline()
    assert first.live and callable(first.meta["refresh"])
    out = Outputs()
    live = show_live_timeline(first, first.meta["refresh"], publish=out)
    (_, was_first, data, _), *_ = out.calls
    assert was_first and data[TIMELINE_MIME]["bars"]["running"] == [1]
    gate.set()
    h.result(timeout=30)
    assert live.wait(30), "the final timeline was never published"
    _, last_first, last, _ = out.calls[-1]
    assert not last_first
    assert last[TIMELINE_MIME]["bars"]["running"] == [0]
    assert last[TIMELINE_MIME]["bars"]["tone"] == ["ok"]

"""``cn.track`` / ``cn.tqdm`` / ``cn.trange`` without a kernel: the tqdm-compatible surface
against real tqdm for the same calls, and the loop's task on a real controller (pause,
resume and stop at item boundaries from another thread, nesting, the kind interrupt)."""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import tqdm as real_tqdm

import chongming_nb as cn
from chongming_nb import TaskStatus as S
from chongming_nb.core.models import end_summary


def _quiet(**kw: Any) -> dict[str, Any]:
    return {"file": io.StringIO(), **kw}


def _both(make: Callable[[Any], Any]) -> tuple[Any, Any]:
    return make(real_tqdm.tqdm), make(cn.tqdm)


# ------------------------------------------------------------ the tqdm surface


@pytest.mark.parametrize(
    "iterable",
    [
        pytest.param(lambda: list(range(37)), id="list"),
        pytest.param(lambda: (i * i for i in range(37)), id="generator"),
        pytest.param(lambda: {"a": 1, "b": 2, "c": 3}, id="dict"),
        pytest.param(lambda: "chongming", id="str"),
        pytest.param(lambda: range(0), id="empty"),
    ],
)
@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({}, id="plain"),
        pytest.param({"total": 100}, id="total"),
        pytest.param({"initial": 5}, id="initial"),
        pytest.param({"disable": True}, id="disable"),
        pytest.param({"disable": True, "initial": 3}, id="disable-initial"),
        pytest.param({"desc": "d", "unit": "rows", "unit_scale": True}, id="labels"),
    ],
)
def test_iteration_matches_tqdm(iterable: Callable[[], Any], kw: dict[str, Any]) -> None:
    ref, ours = real_tqdm.tqdm(iterable(), **_quiet(**kw)), cn.tqdm(iterable(), **_quiet(**kw))
    assert (ref.total, ref.n) == (ours.total, ours.n)
    assert list(ours) == list(ref) == list(iterable())
    assert (ref.total, ref.n) == (ours.total, ours.n)


@pytest.mark.parametrize("disable", [False, True])
def test_manual_updates_match_tqdm(disable: bool) -> None:
    def run(cls: Any) -> list[tuple[Any, Any]]:
        seen = []
        with cls(total=50, initial=2, disable=disable, **_quiet()) as bar:
            seen.append((bar.n, bar.total))
            bar.update()
            bar.update(7)
            bar.update(0.5)
            seen.append((bar.n, bar.total))
            bar.reset(total=10)
            seen.append((bar.n, bar.total))
            bar.update(3)
            seen.append((bar.n, bar.total))
        seen.append((bar.n, bar.total))
        return seen

    assert run(cn.tqdm) == run(real_tqdm.tqdm)


def test_trange_len_bool_and_labels_match_tqdm() -> None:
    ref, ours = _both(lambda cls: cls(range(3, 30, 4), desc="x", **_quiet()))
    assert (len(ref), bool(ref), ref.total) == (len(ours), bool(ours), ours.total)
    r2, o2 = real_tqdm.trange(2, 9, **_quiet()), cn.trange(2, 9, **_quiet())
    assert list(r2) == list(o2) and (r2.n, r2.total) == (o2.n, o2.total)
    for bar in (ref, ours):
        bar.set_description("step")
        bar.set_postfix({"loss": 0.25}, acc="hi", epoch=3)
    assert ref.desc == ours.desc == "step: "
    assert ref.postfix == ours.postfix == "loss=0.25, acc=hi, epoch=3"
    for bar in (ref, ours):
        bar.set_description_str("raw")
        bar.set_postfix_str("p=1")
    assert (ref.desc, ref.postfix) == (ours.desc, ours.postfix) == ("raw", "p=1")
    with pytest.raises(TypeError):
        bool(cn.tqdm(**_quiet()))
    with pytest.raises(TypeError, match="nested"):
        cn.tqdm(range(3), nested=True)


def test_text_bar_on_the_given_stream_and_nothing_when_disabled() -> None:
    out = io.StringIO()
    assert list(cn.track(range(4), desc="convert", unit="files", file=out)) == [0, 1, 2, 3]
    text = out.getvalue()
    assert "convert: 100%|" in text and "4/4" in text and "files/s" in text
    assert text.endswith("\n")  # leave=True keeps the last line
    out = io.StringIO()
    assert sum(cn.tqdm(range(4), file=out, disable=True)) == 6
    assert out.getvalue() == ""
    # disable=None: on by a terminal only, like tqdm (a StringIO is not one)
    out = io.StringIO()
    assert sum(cn.tqdm(range(4), file=out, disable=None)) == 6
    assert out.getvalue() == ""


def test_bad_options_are_named_and_change_nothing() -> None:
    with pytest.raises(cn.ConfigurationError, match="on_stop"):
        cn.track(range(3), on_stop="ignore")
    with pytest.raises(cn.ConfigurationError, match="mininterval"):
        cn.track(range(3), mininterval=-1)


# ------------------------------------------------------------- on the record


@pytest.fixture
def ctl() -> Iterator[cn.Controller]:
    c = cn.Controller(concurrency=cn.ConcurrencyPolicy(max_parallel=1))
    yield c
    c.close()


def _until(ctl: cn.Controller, task_id: str, status: S, timeout: float = 10.0) -> None:
    """Block until the task reaches ``status`` (an event, not a sleep)."""
    reached = threading.Event()

    def on(ev: Any) -> None:
        if getattr(ev, "task_id", None) == task_id and ctl.get(task_id).status is status:
            reached.set()

    unsubscribe = ctl.watch(on)
    try:
        if ctl.get(task_id).status is not status:
            assert reached.wait(timeout), f"{task_id} never became {status}"
    finally:
        unsubscribe()


def test_a_loop_is_a_task_that_takes_no_slot(ctl: cn.Controller) -> None:
    gate = threading.Event()
    busy = ctl.submit(lambda ctx: gate.wait(10))
    queued = ctl.submit(lambda ctx: None)
    bar = cn.track(range(3), desc="convert", unit="files", controller=ctl)
    assert bar.task_id is not None
    snap = ctl.get(bar.task_id)
    # every slot is busy, yet the loop runs (in this thread); the queue is untouched
    assert (snap.status, snap.executor, snap.name) == (S.RUNNING, "loop", "convert")
    assert ctl.get(queued.id).status is S.QUEUED
    assert list(bar) == [0, 1, 2]
    snap = ctl.get(bar.task_id)
    assert snap.status is S.SUCCEEDED
    assert snap.progress is not None and (snap.progress.done, snap.progress.total) == (3, 3)
    assert snap.progress.unit == "files"
    gate.set()
    ctl.wait(queued.id, timeout=10)
    assert ctl.get(busy.id).status is S.SUCCEEDED
    attempts = ctl.attempts_df()
    row = attempts[attempts.task_id == bar.task_id].iloc[0]
    assert (row.executor, str(row.outcome)) == ("loop", "succeeded")


def test_pause_freezes_resume_continues_stop_raises_one_line(ctl: cn.Controller) -> None:
    seen: list[int] = []
    frozen: list[float] = []
    bar = cn.track(range(10_000), desc="convert", controller=ctl)
    assert bar.task_id is not None
    tid = bar.task_id
    item_50, item_80, go_on = threading.Event(), threading.Event(), threading.Event()

    def control() -> None:  # another thread, as the comm's or the dispatcher's
        item_50.wait(10)
        ctl.pause(tid)
        go_on.set()  # the loop may go on to the boundary now
        _until(ctl, tid, S.PAUSED)
        frozen.append(bar.n)
        ctl.pause(tid)  # idempotent
        frozen.append(bar.n)
        ctl.resume(tid)
        item_80.wait(10)
        ctl.stop(tid)
        go_on.set()

    helper = threading.Thread(target=control)
    helper.start()
    with pytest.raises(cn.Stopped) as info:
        for i in bar:
            seen.append(i)
            if i in (50, 80):
                go_on.clear()
                (item_50 if i == 50 else item_80).set()
                go_on.wait(10)
    helper.join(10)
    # paused before item 51, the count frozen there; resumed from item 51; stopped
    # before item 81: no item lost, none twice, none after the stop
    assert frozen == [51, 51]
    assert seen == list(range(81))
    stopped = info.value
    assert stopped.done == 81 == bar.n
    lines = stopped._render_traceback_()
    assert lines == ["convert: stopped by you at 81 / 10,000 (1%) after " + lines[0][-4:]]
    snap = ctl.get(tid)
    assert snap.status is S.STOPPED and snap.progress is not None
    assert snap.progress.done == 81
    statuses = [t.to_status for t in ctl.history(tid)]
    assert statuses[-5:] == [S.PAUSING, S.PAUSED, S.RUNNING, S.STOPPING, S.STOPPED]


def test_on_stop_break_ends_the_loop_quietly(ctl: cn.Controller) -> None:
    bar = cn.track(range(1000), controller=ctl, on_stop="break")
    assert bar.task_id is not None
    seen = []
    for i in bar:
        seen.append(i)
        if i == 10:
            ctl.stop(bar.task_id)
    assert seen == list(range(11))  # the stop lands before item 11
    assert bar.stopped and ctl.get(bar.task_id).status is S.STOPPED


def test_stop_lands_at_update_in_manual_mode(ctl: cn.Controller) -> None:
    with pytest.raises(cn.Stopped), cn.tqdm(total=10, controller=ctl) as bar:
        assert bar.task_id is not None
        bar.update(3)
        ctl.stop(bar.task_id)
        bar.update(1)  # a boundary: the stop is delivered here
        pytest.fail("update() after a stop must raise")
    assert ctl.get(bar.task_id).status is S.STOPPED
    assert ctl.get(bar.task_id).progress.done == 4  # type: ignore[union-attr]


def test_retry_and_reset_are_refused_and_change_nothing(ctl: cn.Controller) -> None:
    bar = cn.track(range(5), controller=ctl, on_stop="break")
    assert bar.task_id is not None
    for i in bar:
        if i == 1:
            ctl.stop(bar.task_id)
    before = ctl.get(bar.task_id)
    for verb in ("retry", "reset"):
        ok, why = ctl.can(bar.task_id, verb, force=True)
        assert not ok and why is not None and "runs again only when its cell runs" in why
    assert ctl.apply(bar.task_id, "retry")[0] is False
    with pytest.raises(cn.InvalidTransition, match="cell runs again"):
        ctl.retry(bar.task_id, force=True)
    assert ctl.get(bar.task_id).status_version == before.status_version


def test_an_error_in_the_body_fails_the_task_with_its_traceback(ctl: cn.Controller) -> None:
    with pytest.raises(ZeroDivisionError), cn.track(range(5), controller=ctl) as bar:
        for i in bar:
            if i == 2:
                1 / 0  # noqa: B018
    assert bar.task_id is not None
    snap = ctl.get(bar.task_id)
    assert snap.status is S.FAILED and snap.failure is not None
    assert "ZeroDivisionError" in (snap.failure.traceback or "")


def test_leaving_the_loop_early_succeeds_with_tqdms_count(ctl: cn.Controller) -> None:
    bars = [real_tqdm.tqdm(range(100), **_quiet()), cn.track(range(100), controller=ctl)]
    for bar in bars:
        for i in bar:
            if i == 4:
                break
    ref, ours = bars
    assert ours.task_id is not None
    snap = ctl.get(ours.task_id)
    assert snap.status is S.SUCCEEDED and ref.n == ours.n == 4
    assert snap.progress is not None and snap.progress.done == 4


def test_an_inner_loops_stop_stops_the_with_bar_it_passes_through(ctl: cn.Controller) -> None:
    """A stop is not an error, also for the loops its Stopped leaves on the way out: the
    ``with`` bar around a stopped inner loop used to stay RUNNING (and on the thread's
    stack), and in a kernel the cell's end failed it with the Stopped as its error."""
    with pytest.raises(cn.Stopped), cn.tqdm(total=3, desc="outer", controller=ctl) as outer:
        inner = cn.track(range(100), desc="inner", controller=ctl)
        for j in inner:
            if j == 5:
                ctl.stop(inner.task_id)  # type: ignore[arg-type]
    assert outer.task_id is not None and inner.task_id is not None
    snap = ctl.get(outer.task_id)
    assert (snap.status, snap.failure) == (S.STOPPED, None)
    why = end_summary(snap)[1]
    assert why is not None and "inner loop 'inner'" in why
    assert ctl.get(inner.task_id).status is S.STOPPED
    from chongming_nb.notebook import track as T

    assert T._stack() == []  # nothing left behind for the next loop of the thread


def test_an_inner_loops_stop_stops_the_for_loop_it_passes_through(ctl: cn.Controller) -> None:
    outer = cn.track(range(3), desc="outer", controller=ctl)
    with pytest.raises(cn.Stopped):
        for _ in outer:
            inner = cn.track(range(100), desc="inner", controller=ctl)
            for j in inner:
                if j == 5:
                    ctl.stop(inner.task_id)  # type: ignore[arg-type]
    assert outer.task_id is not None
    snap = ctl.get(outer.task_id)
    assert (snap.status, snap.failure) == (S.STOPPED, None)
    assert snap.progress is not None and snap.progress.done == 0  # its item was not done


def test_an_outer_loop_that_catches_its_inner_loops_stop_goes_on(ctl: cn.Controller) -> None:
    outer = cn.track(range(3), desc="outer", controller=ctl)
    for i in outer:
        try:
            inner = cn.track(range(100), desc="inner", controller=ctl)
            for j in inner:
                if i == 0 and j == 5:
                    ctl.stop(inner.task_id)  # type: ignore[arg-type]
        except cn.Stopped:
            pass
    assert outer.task_id is not None
    snap = ctl.get(outer.task_id)
    assert snap.status is S.SUCCEEDED and outer.n == 3


def test_a_task_cancelled_through_a_with_bar_stops_it(ctl: cn.Controller) -> None:
    # e.g. ctx.checkpoint() of a task stopped while its body ran a bar
    with pytest.raises(cn.TaskCancelled), cn.tqdm(total=3, controller=ctl) as bar:
        bar.update()
        raise cn.TaskCancelled("the task was stopped")
    assert bar.task_id is not None
    snap = ctl.get(bar.task_id)
    assert (snap.status, snap.failure) == (S.STOPPED, None)
    assert snap.progress is not None and snap.progress.done == 1


def _numbers(n: int) -> Iterator[int]:
    yield from range(n)


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        pytest.param(lambda: list(range(40)), lambda: _numbers(3), id="list-around-generator"),
        pytest.param(lambda: _numbers(40), lambda: list(range(3)), id="generator-around-list"),
        pytest.param(lambda: range(40), lambda: range(3), id="range-around-range"),
        pytest.param(lambda: _numbers(40), lambda: _numbers(3), id="generators"),
    ],
)
def test_nested_loops_of_any_iterables_count_every_item(
    ctl: cn.Controller, outer: Callable[[], Any], inner: Callable[[], Any]
) -> None:
    """Loops nested in a cell share the thread's guard: an inner loop over a generator
    inside one over a list used to raise TypeError ('NoneType' object is not an
    iterator) in the outer loop's next batch."""
    seen = []
    bar = cn.track(outer(), desc="outer", controller=ctl)
    for i in bar:
        for j in cn.track(inner(), desc=f"inner-{i}", controller=ctl, leave=False):
            seen.append((i, j))
    assert seen == [(i, j) for i in range(40) for j in range(3)]
    assert bar.n == 40
    assert bar.task_id is not None and ctl.get(bar.task_id).status is S.SUCCEEDED


def test_nested_loops_stopping_the_outer_stops_the_inner(ctl: cn.Controller) -> None:
    outer = cn.track(range(5), desc="outer", controller=ctl)
    assert outer.task_id is not None
    inners: list[cn.tqdm[int]] = []
    with pytest.raises(cn.Stopped) as info:
        for i in outer:
            inner = cn.track(range(1000), desc=f"inner-{i}", controller=ctl, leave=False)
            inners.append(inner)
            for j in inner:
                if i == 1 and j == 20:
                    ctl.stop(outer.task_id)
    assert info.value.name == "outer" and info.value.done == 1
    assert ctl.get(outer.task_id).status is S.STOPPED
    assert [ctl.get(b.task_id).status for b in inners] == [S.SUCCEEDED, S.STOPPED]  # type: ignore[arg-type]
    assert inners[1].n == 21
    inner_snap = ctl.get(inners[1].task_id)  # type: ignore[arg-type]
    assert inner_snap.failure is None  # a stop is not a failure: the outcome says why
    why = end_summary(inner_snap)[1]
    assert why is not None and "outer loop 'outer'" in why


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main thread"
)
def test_first_interrupt_stops_at_a_boundary_second_raises(ctl: cn.Controller) -> None:
    before = signal.getsignal(signal.SIGINT)
    seen = []
    with pytest.raises(cn.Stopped) as info:
        for i in cn.track(range(1000), desc="kind", controller=ctl):
            seen.append(i)
            if i == 7:
                os.kill(os.getpid(), signal.SIGINT)  # delivered here, in this thread
                seen.append(-1)  # ... and the item goes on to its end
    assert seen == [*range(8), -1]
    assert "stopped by interrupt at 8 / 1,000" in str(info.value)
    # the row names the interrupt, not "the system", and says it once
    (snap,) = [s for s in ctl.list_tasks() if s.name == "kind"]
    assert snap.status == "stopped" and end_summary(snap) == ("interrupt", None)
    assert signal.getsignal(signal.SIGINT) is before
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        for i in cn.track(range(1000), controller=ctl):
            seen.append(i)
            if i == 3:
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)  # a second one: at once, as today
                seen.append(-1)
    assert seen == [0, 1, 2, 3]
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main thread"
)
def test_a_second_interrupt_ends_the_loop_stopped_by_interrupt_not_failed(
    ctl: cn.Controller,
) -> None:
    """Two interrupts raise KeyboardInterrupt in the middle of an item, as they always
    did; the loop's task is a person's stop ("stopped by interrupt"), not a failure
    with "KeyboardInterrupt" (it read failed, or stopped when the helper thread had
    asked first: a race)."""
    with pytest.raises(KeyboardInterrupt), cn.track(range(1000), controller=ctl) as bar:
        for i in bar:
            if i == 3:
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
    assert bar.task_id is not None and bar.stopped
    snap = ctl.get(bar.task_id)
    assert snap.status is S.STOPPED and snap.failure is None
    assert end_summary(snap) == ("interrupt", None)
    assert snap.progress is not None and snap.progress.done == 3
    (attempt,) = [a for a in ctl.attempts(bar.task_id)]
    assert str(attempt.outcome) == "stopped"


def test_a_loop_off_the_main_thread_touches_no_signal(ctl: cn.Controller) -> None:
    handlers: list[Any] = []
    done = threading.Event()

    def body() -> None:
        for _ in cn.track(range(3), controller=ctl):
            handlers.append(signal.getsignal(signal.SIGINT))
        done.set()

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert done.is_set() and handlers == [before] * 3


def test_pandas_hook_gives_the_same_results_and_counts_as_tqdms(ctl: cn.Controller) -> None:
    import pandas as pd

    df = pd.DataFrame({"a": range(40), "b": range(40, 80), "g": [i % 3 for i in range(40)]})
    real_tqdm.tqdm.pandas(file=io.StringIO())
    ref = {
        "series_apply": df.a.progress_apply(lambda x: x * 2),
        "series_map": df.a.progress_map(lambda x: x + 1),
        "frame_rows": df.progress_apply(lambda r: r.a + r.b, axis=1),
        "frame_cols": df.progress_apply(lambda c: c.sum()),
        "groupby": df.groupby("g").progress_apply(lambda g: len(g)),
    }
    cn.tqdm.pandas(controller=ctl, desc="frame")
    ours = {
        "series_apply": df.a.progress_apply(lambda x: x * 2),
        "series_map": df.a.progress_map(lambda x: x + 1),
        "frame_rows": df.progress_apply(lambda r: r.a + r.b, axis=1),
        "frame_cols": df.progress_apply(lambda c: c.sum()),
        "groupby": df.groupby("g").progress_apply(lambda g: len(g)),
    }
    for key, value in ref.items():
        assert value.equals(ours[key]), key
    loops = ctl.list_tasks(name_prefix="frame")
    assert len(loops) == 5 and {t.status for t in loops} == {S.SUCCEEDED}
    done = sorted((t.progress.done, t.progress.total) for t in loops)  # type: ignore[union-attr]
    assert done == sorted([(40, 40), (40, 40), (40, 40), (3, 3), (3, 3)])


def test_a_stop_inside_progress_apply_leaves_no_partial_result(ctl: cn.Controller) -> None:
    import pandas as pd

    cn.tqdm.pandas(controller=ctl, desc="rows")
    s = pd.Series(range(100))
    calls: list[int] = []

    def f(x: int) -> int:
        calls.append(x)
        if x == 9:
            (task,) = ctl.list_tasks(name_prefix="rows", status={"running"})
            ctl.stop(task.task_id)
        return x

    with pytest.raises(cn.Stopped, match="rows: stopped by you at 10 / 100"):
        s.progress_apply(f)
    assert calls == list(range(10))  # the stop landed before the 11th call


def test_an_interrupt_between_loops_does_what_the_previous_handler_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chongming_nb.notebook import track as tr

    monkeypatch.setattr(tr, "_last_interrupt", None)
    monkeypatch.setattr(tr, "_sigint_prev", signal.SIG_IGN)
    tr._on_sigint(signal.SIGINT, None)  # ignored, as before the loop
    monkeypatch.setattr(tr, "_sigint_prev", signal.SIG_DFL)
    with pytest.raises(KeyboardInterrupt):
        tr._on_sigint(signal.SIGINT, None)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: list(range(5000)), id="list"),
        pytest.param(lambda: range(5000), id="range"),
        pytest.param(lambda: dict.fromkeys(range(5000)), id="dict"),
        pytest.param(lambda: (i for i in range(5000)), id="generator"),
    ],
)
def test_a_stop_from_another_thread_lands_before_the_next_item(
    ctl: cn.Controller, make: Callable[[], Any]
) -> None:
    bar = cn.track(make(), controller=ctl)
    assert bar.task_id is not None
    tid = bar.task_id
    seen = []
    at_300, stopped = threading.Event(), threading.Event()

    def control() -> None:
        at_300.wait(10)
        ctl.stop(tid)  # the loop waits for this at item 300, in the middle of a batch
        stopped.set()

    helper = threading.Thread(target=control)
    helper.start()
    with pytest.raises(cn.Stopped) as info:
        for i in bar:
            seen.append(i)
            if i == 300:
                at_300.set()
                stopped.wait(10)
    helper.join(10)
    assert seen == list(range(301)) and info.value.done == 301 == bar.n


def test_a_loop_paused_then_stopped_says_the_time_it_worked_as_its_row_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stop line's "after ..." is the loop's work, its pause left out: the row's
    elapsed time (ran 2 s, paused 9 s, stopped: 2s, not 11s). One fake clock drives the
    controller and the loop's own clock."""
    from chongming_nb.notebook import track as track_module
    from chongming_nb.notebook.rows import pause_clock
    from chongming_nb.testing import FakeClock

    clock = FakeClock()
    monkeypatch.setattr(track_module, "monotonic", clock.monotonic)
    ctl = cn.Controller(clock=clock)
    try:
        bar = cn.track(range(100), desc="convert", controller=ctl)
        tid = bar.task_id
        assert tid is not None
        at_5, go_on = threading.Event(), threading.Event()

        def control() -> None:
            at_5.wait(10)
            ctl.pause(tid)
            go_on.set()
            _until(ctl, tid, S.PAUSED)
            clock.advance(9)
            ctl.stop(tid)

        helper = threading.Thread(target=control)
        helper.start()
        with pytest.raises(cn.Stopped) as info:
            for i in bar:
                if i == 5:
                    clock.advance(2)  # the work so far
                    at_5.set()
                    go_on.wait(10)
        helper.join(10)
        assert info.value._render_traceback_() == [
            "convert: stopped by you at 6 / 100 (6%) after 2.0s"
        ]
        snap = ctl.get(tid)
        assert snap.status is S.STOPPED
        assert snap.ended_at is not None and snap.started_at is not None
        paused = pause_clock(snap, ctl.history(tid)).paused
        assert (snap.ended_at - snap.started_at).total_seconds() - paused == 2.0
    finally:
        ctl.close()


class _WatchedLock:
    """A lock that says when a thread has to wait for it (``contended``)."""

    def __init__(self, on_contended: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._on_contended = on_contended

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        self._on_contended()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_the_loops_saved_output_ends_on_its_final_state_with_a_flush_in_flight(
    ctl: cn.Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read in the code, then reproduced: the table's flush thread builds an output from
    # the rows it fetched (here "paused") and publishes it; if the loop ended meanwhile
    # and wrote its final output first, the older one landed last, and a notebook saved
    # then (nbclient, papermill: the kernel stops after the last cell) said "paused".
    import chongming_nb.control.kernel as kernel
    import chongming_nb.notebook.track as track
    from chongming_nb.notebook.display import make_table
    from chongming_nb.notebook.schema import SNAPSHOT_MIME

    published: list[str] = []  # the output's status, in the order the rewrites landed
    changed = threading.Condition()
    contended: list[bool] = []
    in_flight, release = threading.Event(), threading.Event()
    tables: list[Any] = []

    def record(data: dict[str, Any]) -> None:
        with changed:
            published.append(str(data[SNAPSHOT_MIME]["rows"][0]["status"]))
            changed.notify_all()

    def publish(data: dict[str, Any], display_id: str) -> None:
        if threading.current_thread().name == "stale-flush" and not in_flight.is_set():
            in_flight.set()
            assert release.wait(10), "the stale rewrite was never released"
        record(data)

    class Handle:  # the cell's output (IPython's DisplayHandle)
        display_id = "out-1"

        def update(self, data: dict[str, Any], raw: bool = False) -> None:
            record(data)

    def display_row(ctl_: Any, task_id: str) -> tuple[Any, Any]:
        table = make_table(ctl_, task_ids=[task_id], kind="task", autoflush=False)

        def note_contended() -> None:
            with changed:
                contended.append(True)
                changed.notify_all()

        table._flush_lock = _WatchedLock(note_contended)
        table.keep_display_updated(Handle.display_id, publish=publish)
        tables.append(table)
        return table, Handle()

    monkeypatch.setattr(track, "_front_end_shell", lambda: object())
    monkeypatch.setattr(track, "after_each_cell", lambda shell, callback: False)
    monkeypatch.setattr(track, "_display_row", display_row)
    monkeypatch.setattr(kernel, "get_controller", lambda: ctl)

    bar = cn.track(range(1000), desc="load")
    tid = bar.task_id
    assert tid is not None and tables
    table = tables[0]

    def control() -> None:  # the comm's thread and the table's flush thread
        _until(ctl, tid, S.PAUSED)
        stale = threading.Thread(target=table.flush, kwargs={"force": True}, name="stale-flush")
        stale.start()
        assert in_flight.wait(10), "the flush did not rewrite the output for the pause"
        ctl.stop(tid)  # the loop ends while the flush is publishing "paused"
        with changed:  # until the loop's end has written, or waits to write, its output
            assert changed.wait_for(lambda: "stopped" in published or contended, 10)
        release.set()
        stale.join(10)

    helper = threading.Thread(target=control)
    helper.start()
    with pytest.raises(cn.Stopped):
        for i in bar:
            if i == 5:
                ctl.pause(tid)  # in place: the loop waits at its next item
    helper.join(10)
    assert not helper.is_alive()
    assert ctl.get(tid).status is S.STOPPED
    assert "paused" in published
    assert published[-1] == "stopped", published
    table.close()

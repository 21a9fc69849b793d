"""Saved notebooks keep the final state: a displayed table updates its own output
(``update_display_data`` on its display id) when a row changes status, with the widget
view, an escaped html table, plain text and the snapshot json the JupyterLab extension
draws when the widget's model is gone. ``ctl.board()`` exports as a table too."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _board import patches
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

import chongming_nb as cn
from chongming_nb.notebook import display, outputs, widget
from chongming_nb.notebook import schema as S
from chongming_nb.notebook.outputs import SNAPSHOT_MIME, WIDGET_MIME
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing import FakeClock
from chongming_nb.testing.widgets import FakeController, recording_comms


@pytest.fixture(autouse=True)
def front_end(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A kernel of a notebook session (JupyterLab), unless a test says otherwise; no view
    drawn before or after a test."""
    monkeypatch.setenv("JPY_SESSION_NAME", "/work/analysis.ipynb")
    outputs.forget_views()
    yield
    outputs.forget_views()


class Published:
    def __init__(self) -> None:
        self.updates: list[tuple[dict[str, Any], str]] = []

    def __call__(self, data: dict[str, Any], display_id: str) -> None:
        self.updates.append((data, display_id))


def statuses(data: dict[str, Any]) -> list[str]:
    return [r["status"] for r in data[SNAPSHOT_MIME]["rows"]]


def shown_task(
    fctl: FakeController, clock: FakeClock, name: str, total: float
) -> tuple[str, TaskTable, Published]:
    """A running task's row, displayed as the output "d" (its updates recorded)."""
    tid = fctl.add(name, status="running", total=total).task_id
    t = TaskTable(fctl, kind="task", task_ids=[tid], clock=clock, autoflush=False)
    pub = Published()
    t.keep_display_updated("d", publish=pub)
    return tid, t, pub


def test_a_finished_row_rewrites_the_saved_output_with_the_patch_that_shows_it(
    fctl: FakeController, clock: FakeClock, comms: Any
) -> None:
    tid, t, pub = shown_task(fctl, clock, "extract", 200)
    # progress alone never rewrites the saved output
    for _ in range(5):
        fctl.bump(tid, 40)
        clock.advance(3)
        t.flush()
    assert pub.updates == []
    fctl.fail(tid, "boom")
    clock.advance(0.1)  # (the patch rate: 10 a second)
    t.flush()  # no wait for the full-state refresh (2 s)
    (data, display_id), *_ = pub.updates
    assert display_id == "d" and statuses(data) == ["failed"]
    assert set(data) == {"text/plain", "text/html", SNAPSHOT_MIME, WIDGET_MIME}
    assert data[WIDGET_MIME]["model_id"] == t.model_id  # the live view stays
    assert ">failed<" in data["text/html"] and "200/200" in data["text/html"]
    assert data[SNAPSHOT_MIME]["rows"][0]["done"] == 200
    # nothing new: no more updates
    clock.advance(10)
    t.flush()
    assert len(pub.updates) == 1
    t.close()


class Ordered(Published):
    """Records the saved outputs and, at each, how many patches the view had been sent."""

    def __init__(self, table: list[TaskTable]) -> None:
        super().__init__()
        self.table = table
        self.patches_before: list[int] = []

    def __call__(self, data: dict[str, Any], display_id: str) -> None:
        super().__call__(data, display_id)
        self.patches_before.append(len(patches(self.table[0])))


def test_a_loop_stopped_then_saved_at_once_is_saved_stopped(
    fctl: FakeController, clock: FakeClock, comms: Any
) -> None:
    """Last session's user pass: a loop stopped from its row, the notebook saved a second
    later, and the saved board said "running 0%" (its output waited for the full-state
    refresh, every 2 s at best). The saved output now says stopped before the view does:
    it is rewritten before the patch that shows the stop, on the same channel."""
    loop = fctl.add("convert", status="running", total=1000).task_id
    other = fctl.add("other", status="running", total=10).task_id
    board = TaskTable(fctl, kind="board", clock=clock, autoflush=False)
    holder = [board]
    pub = Ordered(holder)
    board.keep_display_updated("board-out", publish=pub)
    board.flush(force=True)
    clock.advance(0.5)
    fctl.bump(other, 1)  # a running neighbour: progress only, nothing to rewrite
    board.flush()
    assert pub.updates == []
    board.handle_request(S.ActionRequest(action="stop", task_id=loop, request_id=1))
    board.flush()  # the row says stopping: not settled yet
    assert pub.updates == []
    fctl.settle(loop)  # the loop noticed the stop at its next item
    clock.advance(0.3)
    n_patches = len(patches(board))
    board.flush()
    # the save that follows one second after the stop holds what a person saw
    clock.advance(1.0)
    (data, display_id), *_ = pub.updates
    assert display_id == "board-out"
    saved = {r["name"]: r["status"] for r in data[SNAPSHOT_MIME]["rows"]}
    assert saved == {"convert": "stopped", "other": "running"}
    assert "[stopped]" in data["text/plain"] and ">stopped<" in data["text/html"]
    # written before the patch that shows the stop went out
    assert pub.patches_before == [n_patches]
    assert any(u.get("status") == "stopped" for u in patches(board)[-1]["update"])
    board.close()


def test_pause_and_resume_rewrite_the_saved_output_at_once(
    fctl: FakeController, clock: FakeClock, comms: Any
) -> None:
    tid, t, pub = shown_task(fctl, clock, "loop", 10)
    fctl.apply(tid, "pause")
    t.flush()
    assert pub.updates == []  # pausing: on its way
    fctl.settle(tid)
    clock.advance(0.2)
    t.flush()
    assert [statuses(d) for d, _ in pub.updates] == [["paused"]]
    fctl.apply(tid, "resume")
    clock.advance(0.2)
    t.flush()
    assert [statuses(d) for d, _ in pub.updates] == [["paused"], ["running"]]
    t.close()


def test_many_rows_finishing_are_coalesced_and_the_last_state_follows(
    fctl: FakeController, clock: FakeClock, comms: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [fctl.add(f"t{i}", status="running", total=1).task_id for i in range(42)]
    t = TaskTable(fctl, kind="board", clock=clock, autoflush=False)
    pub = Published()
    t.keep_display_updated("d", publish=pub)
    cpu = [0.0]

    def thread_time() -> float:  # each rewrite "costs" 10 ms of CPU
        cpu[0] += 0.01
        return cpu[0]

    t._cpu_time = thread_time
    for tid in ids[:40]:  # one task ends every 0.1 s, a flush each time
        fctl.fail(tid, "x")
        clock.advance(0.1)
        t.flush()
    # 10 ms per rewrite, at most 2% of a core: one rewrite per 0.5 s, not one per flush
    assert 6 <= len(pub.updates) <= 9
    clock.advance(1.0)
    t.flush()
    assert statuses(pub.updates[-1][0]).count("failed") == 40
    fctl.fail(ids[40], "x")
    clock.advance(0.1)
    t.flush()  # the first change after a quiet second: at once
    n = len(pub.updates)
    assert statuses(pub.updates[-1][0]).count("failed") == 41
    fctl.fail(ids[41], "x")
    clock.advance(0.1)
    scheduled: list[float] = []
    monkeypatch.setattr(widget._SCHEDULER, "schedule", lambda _t, due: scheduled.append(due))
    t._scheduled_flush()  # 0.1 s after the last rewrite: it waits ...
    assert len(pub.updates) == n
    assert len(scheduled) == 1  # ... and the flush thread comes back for it
    clock.advance(0.4)
    t.flush()
    assert set(statuses(pub.updates[-1][0])) == {"failed"}
    assert len(pub.updates) == n + 1
    t.close()


@pytest.fixture
def shell() -> Iterator[CapturingDisplayPublisher]:
    ip = InteractiveShell.instance()
    saved = ip.display_pub
    pub = CapturingDisplayPublisher()
    ip.display_pub = pub
    try:
        yield pub
    finally:
        ip.display_pub = saved


@pytest.mark.parametrize("shown", ["handle", "controller"])
def test_a_handle_or_ctl_displays_with_an_id_and_its_final_state_replaces_the_first(
    shell: CapturingDisplayPublisher, shown: str
) -> None:
    ctl = cn.Controller(executor="thread")
    gate = threading.Event()

    def work(ctx: Any) -> str:
        for _ in ctx.track(range(200), total=200, unit="item"):
            gate.wait(10)
        return "done"

    try:
        with recording_comms():
            h = ctl.submit(work, name="extract")
            # what IPython's display hook does with `h` (or `ctl`: a board) as a cell's
            # value: `_ipython_display_`, which shows it with a display id
            data, _ = InteractiveShell.instance().display_formatter.format(
                h if shown == "handle" else ctl
            )
            assert data == {}
            first = shell.outputs[0]
            display_id = first["transient"]["display_id"]
            assert first["update"] is False and display_id
            assert SNAPSHOT_MIME in first["data"] and WIDGET_MIME in first["data"]
            assert "succeeded" not in first["data"]["text/html"]
            gate.set()
            assert h.result(timeout=30) == "done"
            (table,) = [w for w in _tables() if h.id in w.task_ids]
            table.flush(force=True)
            last = shell.outputs[-1]
            assert last["update"] is True and last["transient"]["display_id"] == display_id
            assert statuses(last["data"]) == ["succeeded"]
            html = last["data"]["text/html"]
            assert ">succeeded<" in html and "200/200 item" in html
            assert (
                "extract" in last["data"]["text/plain"]
                and "[succeeded]" in last["data"]["text/plain"]
            )
            table.close()
    finally:
        ctl.close()


def _tables() -> list[TaskTable]:
    import gc

    return [o for o in gc.get_objects() if isinstance(o, TaskTable) and not o.closed]


def test_board_and_run_export_as_tables_not_reprs(fctl: FakeController, comms: Any) -> None:
    fctl.add("a", status="running", total=10)
    fctl.add("b", status="succeeded")
    b = display.board(fctl, title="nightly")
    data, metadata = b._repr_mimebundle_()
    assert metadata == {}
    assert data["text/html"].startswith('<div class="cn-snapshot">')
    assert "<table>" in data["text/html"] and ">succeeded<" in data["text/html"]
    assert "TaskTable(" not in data["text/plain"] and "nightly" in data["text/plain"]
    assert data[WIDGET_MIME]["model_id"] == b.model_id
    assert sorted(r["name"] for r in data[SNAPSHOT_MIME]["rows"]) == ["a", "b"]
    b.close()


def test_a_pipeline_run_displays_as_a_table(shell: CapturingDisplayPublisher) -> None:
    ctl = cn.Controller(executor="thread")
    try:
        with recording_comms():
            pipe = cn.Pipeline("nightly")
            pipe.add(lambda ctx: 1, name="extract")
            run = pipe.submit(ctl)
            run.wait(30)
            run._ipython_display_()
            data = shell.outputs[-1]["data"]
            assert "<table>" in data["text/html"] and "extract" in data["text/html"]
            assert "PipelineRun" not in data["text/plain"]
            assert statuses(data) == ["succeeded"]
            for t in _tables():
                t.close()
    finally:
        ctl.close()


def test_the_plain_text_of_a_failed_or_lost_row_says_why_as_its_html_does() -> None:
    """The text/plain of a table (what a terminal, ``nbconvert --to markdown`` or a
    notebook viewer without html shows) said ``boom  [failed]  0:00`` and nothing of
    the failure that its html shows."""
    from datetime import UTC, datetime

    from chongming_nb.notebook.rows import render_html, render_plain

    at = datetime(2026, 12, 3, 11, 0, tzinfo=UTC)
    base = {"attempt": 1, "max_attempts": 1, "done": 0.0, "total": None, "unit": None}
    rows = [
        {
            **base,
            "id": "t1",
            "name": "boom",
            "status": "failed",
            "message": None,
            "failure": {"kind": "exception", "message": "ValueError: bad row"},
        },
        {
            **base,
            "id": "t2",
            "name": "stubborn",
            "status": "lost",
            "message": "last line",
            "failure": {"kind": "lost", "message": "thread abandoned, result unknown"},
        },
    ]
    plain = render_plain(rows, title=None, at=at)
    html_text = render_html(rows, title=None, at=at)
    for why in ("exception: ValueError: bad row", "lost: thread abandoned, result unknown"):
        assert why in plain, plain
        assert why in html_text


def test_a_row_that_finished_between_its_bundle_and_its_display_id_is_rewritten_at_once(
    fctl: FakeController, clock: FakeClock, comms: Any
) -> None:
    """``h`` of a task that ends at once: the output is displayed with the bundle made
    first, and its display id reaches the table a moment later. A finish patched in
    between left the saved output "starting" until the next full-state refresh (2 s;
    100 s for a big board): an nbconvert run that ended sooner saved "starting"."""
    tid = fctl.add("quick", status="running", total=None).task_id
    t = TaskTable(fctl, kind="task", task_ids=[tid], clock=clock, autoflush=False)
    shown = t.bundle()  # what display() publishes
    assert statuses(shown) == ["running"]
    fctl.fail(tid, "boom")
    clock.advance(0.1)
    t.flush()  # the patch goes out before the output has its display id
    pub = Published()
    t.keep_display_updated("d", publish=pub)
    assert [statuses(data) for data, _ in pub.updates] == [["failed"]]
    clock.advance(0.5)
    t.flush()
    assert len(pub.updates) == 1  # nothing new: no more updates
    # a display id given while nothing changed since the bundle rewrites nothing
    t.bundle()
    t.keep_display_updated("e", publish=pub)
    assert len(pub.updates) == 1
    t.close()


def test_progress_between_the_bundle_and_the_display_id_rewrites_nothing(
    fctl: FakeController, clock: FakeClock, comms: Any
) -> None:
    tid = fctl.add("loop", status="running", total=100).task_id
    t = TaskTable(fctl, kind="task", task_ids=[tid], clock=clock, autoflush=False)
    t.bundle()
    fctl.bump(tid, 40)
    clock.advance(0.1)
    assert t.flush()  # a progress patch
    pub = Published()
    t.keep_display_updated("d", publish=pub)
    assert pub.updates == []
    t.close()


# ------------------------------------------------------ no one to see the live view


def test_with_no_front_end_the_rewritten_output_holds_no_widget_view(
    fctl: FakeController, clock: FakeClock, comms: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nbclient (``nbconvert --execute``, papermill) saves the state of every widget model
    it saw, and nbconvert then renders an output's widget view instead of its html: the
    export showed an empty space where the table was. With no front end, the rewritten
    output is the static table."""
    monkeypatch.delenv("JPY_SESSION_NAME")
    tid, t, pub = shown_task(fctl, clock, "extract", 200)
    fctl.fail(tid, "boom")
    t.flush(force=True)
    (data, _), *_ = pub.updates
    assert set(data) == {"text/plain", "text/html", SNAPSHOT_MIME}
    assert ">failed<" in data["text/html"]
    t.close()


def test_a_drawn_view_keeps_the_widget_view_in_the_rewritten_output(
    fctl: FakeController, clock: FakeClock, comms: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A front end that names no notebook session but draws widgets says so when a view
    renders (``{"type": "view"}``): from then on, the outputs keep the live view."""
    monkeypatch.delenv("JPY_SESSION_NAME")
    tid, t, pub = shown_task(fctl, clock, "extract", 200)
    t._on_custom_msg(t, {"type": "view", "request_id": 1})
    assert outputs.draws_widgets()
    assert not [m for m in comms[0].custom_messages() if m.get("type") == "ack"]  # no answer
    fctl.fail(tid, "boom")
    t.flush(force=True)
    (data, _), *_ = pub.updates
    assert data[WIDGET_MIME]["model_id"] == t.model_id
    t.close()


def test_with_no_front_end_the_cells_end_rewrites_its_tables_static(
    shell: CapturingDisplayPublisher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose rows had finished before it was shown (``ctl.board()`` as the last
    line) has no status change to rewrite it: the end of its cell does, when no view of
    it was drawn by then."""
    monkeypatch.delenv("JPY_SESSION_NAME")
    ip = InteractiveShell.instance()
    ctl = cn.Controller(executor="inline")
    try:
        with recording_comms():
            ctl.submit(lambda: 1, name="load").wait(30)
            ip.display_formatter.format(ctl.board())
            first = shell.outputs[-1]
            assert WIDGET_MIME in first["data"]  # (a client that draws it says so later)
            ip.events.trigger("post_run_cell", None)
            last = shell.outputs[-1]
            assert last["update"] is True
            assert last["transient"]["display_id"] == first["transient"]["display_id"]
            assert set(last["data"]) == {"text/plain", "text/html", SNAPSHOT_MIME}
            assert ">succeeded<" in last["data"]["text/html"]
            # a front end drew a view in time: the next cell's end leaves the output alone
            (table,) = [w for w in _tables() if w.kind == "board"]
            n = len(shell.outputs)
            table.keep_display_updated(first["transient"]["display_id"])
            table._on_custom_msg(table, {"type": "view", "request_id": 1})
            ip.events.trigger("post_run_cell", None)
            assert len(shell.outputs) == n
            table.close()
    finally:
        ctl.close()

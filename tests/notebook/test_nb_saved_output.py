"""Saved notebooks keep the final state: a displayed table updates its own output
(``update_display_data`` on its display id) when a row changes status, with the widget
view, an escaped html table, plain text and the snapshot json the JupyterLab extension
draws when the widget's model is gone. ``ctl.board()`` exports as a table too."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

import chongming_nb as cn
from chongming_nb.notebook import display
from chongming_nb.notebook.widget import SNAPSHOT_MIME, WIDGET_MIME, TaskTable
from chongming_nb.testing import FakeClock
from chongming_nb.testing.widgets import FakeController, recording_comms


class Published:
    def __init__(self) -> None:
        self.updates: list[tuple[dict[str, Any], str]] = []

    def __call__(self, data: dict[str, Any], display_id: str) -> None:
        self.updates.append((data, display_id))


def statuses(data: dict[str, Any]) -> list[str]:
    return [r["status"] for r in data[SNAPSHOT_MIME]["rows"]]


def test_a_status_change_updates_the_output_at_the_full_state_rate(
    fctl: FakeController, clock: FakeClock, comms: Any
) -> None:
    tid = fctl.add("extract", status="running", total=200).task_id
    t = TaskTable(fctl, kind="task", task_ids=[tid], clock=clock, autoflush=False)
    pub = Published()
    t.keep_display_updated("d-1", publish=pub)
    # progress alone never rewrites the saved output
    for _ in range(5):
        fctl.bump(tid, 40)
        clock.advance(3)
        t.flush()
    assert pub.updates == []
    fctl.fail(tid, "boom")
    t.flush()  # the patch goes out at once; the saved output waits for the full interval
    assert pub.updates == []
    clock.advance(2.5)
    t.flush()
    (data, display_id), *_ = pub.updates
    assert display_id == "d-1" and statuses(data) == ["failed"]
    assert set(data) == {"text/plain", "text/html", SNAPSHOT_MIME, WIDGET_MIME}
    assert data[WIDGET_MIME]["model_id"] == t.model_id  # the live view stays
    assert ">failed<" in data["text/html"] and "200/200" in data["text/html"]
    assert data[SNAPSHOT_MIME]["rows"][0]["done"] == 200
    # nothing new: no more updates
    clock.advance(10)
    t.flush()
    assert len(pub.updates) == 1
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

"""The lead's case, as a person saw it: JupyterLab at 900 px with the Tasks sidebar open,
a task that runs 2 s, is paused (Pause on the notebook's board row) for 9 s, then
stopped (Stop in the sidebar). The board row and the sidebar row read the same elapsed
time, the task's work: "2s" (before, the board read 2s and the sidebar 11s: the stopped
row's ``ended - started`` counted the pause). The saved notebook's output says the same.

The kernel's controller runs on a fake clock (``chongming_nb.testing.FakeClock``) that a
cell moves, so the seconds are exact; the waits are on the rows' states. Screenshots go
to the test's temp dir (never docs/img)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _rows import click_verb

pytestmark = pytest.mark.browser

SETUP = """\
import os, threading
from datetime import UTC, datetime
import chongming_nb as cn
from chongming_nb.testing import FakeClock
clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
ctl = cn.Controller(store=os.environ["CHONGMING_STORE"], clock=clock)
release = threading.Event()
def work(ctx):
    while not release.is_set():
        ctx.checkpoint()
        release.wait(0.001)
h = ctl.submit(work, name="paused then stopped")
ctl.board()
"""
WORK_2S = "clock.advance(2)"
PAUSED_9S = "clock.advance(9)"
CLOSE = "release.set(); ctl.close()"
BOARD_ROW = ".jp-Notebook .jp-Cell .cn-item .cm-Row"
PANEL = "#chongming-tasks-panel"


def wait_both(page: Any, rows: list[Any], status: str) -> None:
    for row in rows:
        page.wait_for_function(
            "([r, s]) => r.dataset.status === s",
            arg=[row.element_handle(), status],
            timeout=60_000,
        )


def times(row: Any) -> str:
    return str(row.locator(".cm-Row-times").inner_text())


def test_a_task_paused_then_stopped_reads_the_same_elapsed_time_on_the_board_and_sidebar(
    notebook: Any, jupyter_lab: Any, finished_tasks_cleared: None, tmp_path: Path
) -> None:
    nb = notebook("paused-elapsed.ipynb", [SETUP, WORK_2S, PAUSED_9S, CLOSE])
    page = nb.page
    page.set_viewport_size({"width": 900, "height": 800})
    page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
    panel = page.locator(PANEL)
    panel.wait_for(state="visible", timeout=30_000)
    nb.run(0)
    board = page.locator(BOARD_ROW).first
    board.wait_for(timeout=60_000)
    task_id = board.get_attribute("data-task-id")
    side = panel.locator(f'li.cm-Row[data-task-id="{task_id}"]')
    side.wait_for(timeout=60_000)
    rows = [board, side]
    wait_both(page, rows, "running")

    nb.run(1)  # 2 s of work
    page.screenshot(path=str(tmp_path / "running-900.png"))
    click_verb(board, "pause")
    wait_both(page, rows, "paused")
    # paused: both frozen at the pause, 2 s after the start
    for row in rows:
        page.wait_for_function(
            "(r) => r.querySelector('.cm-Row-times').textContent.startsWith('2s')",
            arg=row.element_handle(),
            timeout=30_000,
        )
    page.screenshot(path=str(tmp_path / "paused-900.png"))

    nb.run(2)  # paused 9 s
    click_verb(side, "stop")
    wait_both(page, rows, "stopped")
    page.screenshot(path=str(tmp_path / "stopped-900.png"))
    print("screenshots:", tmp_path)
    assert times(board) == times(side) == "2s", (times(board), times(side))
    for row in rows:
        tip = row.locator(".cm-Row-times").get_attribute("title")
        assert tip == "elapsed 2s", tip

    # the notebook's output is rewritten when the row finishes (what a save keeps)
    page.wait_for_function(
        """() => {
            const outs = window.jupyterapp.shell.currentWidget.content.model.cells.get(0).outputs;
            for (let i = 0; i < outs.length; i++) {
                const html = outs.get(i).data['text/html'];
                if (typeof html === 'string' && html.includes('<td>stopped</td>')) return true;
            }
            return false;
        }""",
        timeout=60_000,
    )
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )
    saved = json.loads((jupyter_lab.root / "paused-elapsed.ipynb").read_text())
    data = saved["cells"][0]["outputs"][-1]["data"]
    html = "".join(data["text/html"])  # (nbformat keeps text as a list of lines)
    assert "<td>stopped</td>" in html and "<td>0:02</td>" in html, html
    (snap_row,) = data["application/vnd.chongming.tasks+json"]["rows"]
    assert snap_row["status"] == "stopped" and snap_row["paused"] == 9000, snap_row
    nb.run(3)

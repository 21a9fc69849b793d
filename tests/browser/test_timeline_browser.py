"""The attempt timeline in real JupyterLab + Chromium: ``ctl.timeline()`` displayed while
work runs is drawn on a canvas and redrawn live until the work is over; hovering a bar
shows its attempt's row; after save → kernel shut down → reopen the canvas is drawn again
from the saved output, and the nbconvert HTML export carries the static SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _saved import export_html, save_shut_down_reopen

pytestmark = pytest.mark.browser

SETUP = """\
import threading
import chongming_nb as cn
ctl = cn.Controller()
release, started = threading.Event(), threading.Event()
def first(ctx):
    return 1
def held(ctx):
    started.set()
    release.wait(120)
    return 2
a = ctl.submit(first, name="first")
a.result(timeout=30)
b = ctl.submit(held, name="held")
started.wait(30)
ctl.timeline()
"""
RELEASE = "release.set(); b.result(timeout=60); print('DONE', b.status.value)"

# where bar ``i`` is drawn in the lanes' box: the canvas's label column is 160 px, its
# time axis the rest of the width but 12 px (labextension/src/timeline.ts)
BAR_X = """(i) => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[0];
    const width = cell.querySelector('.cn-timeline-lanes').clientWidth;
    for (const o of nb.model.cells.get(0).outputs.toJSON()) {
        const d = o.data && o.data['application/vnd.chongming.timeline+json'];
        if (d) {
            const mid = (d.bars.start[i] + d.bars.end[i]) / 2;
            return 160 + ((width - 172) * mid) / d.span;
        }
    }
    return -1;
}"""


def bar_x(nb: Any, i: int) -> float:
    return float(nb.page.evaluate(BAR_X, i))


# a run, a reopen and an HTML export: minutes on a loaded machine (a watchdog)
@pytest.mark.timeout(900)
def test_a_live_timeline_on_canvas_hovers_rows_and_is_saved(
    notebook: Any, jupyter_lab: Any, tmp_path: Path
) -> None:
    nb = notebook("timeline.ipynb", [SETUP, RELEASE])
    nb.run(0)
    view = nb.cell(0).locator(".cn-timeline-view")
    view.wait_for(timeout=30_000)
    assert view.locator("canvas.cn-timeline-canvas").count() == 1
    assert view.get_attribute("data-attempts") == "2"
    assert "2 tasks, 2 attempts" in view.locator(".cn-timeline-head").text_content()

    # hover the first lane's bar: its attempt row
    box = view.locator(".cn-timeline-lanes").bounding_box()
    assert box is not None
    nb.page.mouse.move(box["x"] + bar_x(nb, 0), box["y"] + 8)
    tip = view.locator(".cn-timeline-tip")
    tip.wait_for(state="visible", timeout=10_000)
    assert "name: first" in tip.inner_text() and "outcome: succeeded" in tip.inner_text()

    # live: the held attempt is drawn running, then ended once it is released
    nb.run(1)
    assert "DONE succeeded" in nb.wait_output(1, "DONE")
    nb.page.wait_for_function(
        """() => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            for (const o of nb.model.cells.get(0).outputs.toJSON()) {
                const d = o.data && o.data['application/vnd.chongming.timeline+json'];
                if (d && d.bars.running.length === 2 && d.bars.running.every(r => r === 0)) {
                    return true;
                }
            }
            return false;
        }""",
        timeout=30_000,
    )
    nb.page.mouse.move(box["x"] + bar_x(nb, 1), box["y"] + 24)
    tip.wait_for(state="visible", timeout=10_000)
    assert "name: held" in tip.inner_text() and "outcome: succeeded" in tip.inner_text()
    nb.page.screenshot(path=str(tmp_path / "timeline-live.png"))

    again = save_shut_down_reopen(nb, jupyter_lab)
    saved = again.cell(0).locator(".cn-timeline-view")
    saved.wait_for(timeout=30_000)
    assert saved.get_attribute("data-attempts") == "2"
    again.page.screenshot(path=str(tmp_path / "timeline-reopened.png"))

    exported = export_html(jupyter_lab.root / "timeline.ipynb", tmp_path / "timeline.html")
    assert exported.count('class="cn-bar cn-tone-ok"') == 2
    print("screenshots:", tmp_path)

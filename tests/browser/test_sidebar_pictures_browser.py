"""The Tasks sidebar's pictures in real JupyterLab + Chromium, against a real kernel whose
controller writes the shared SQLite store: a pipeline with a retried step; selecting the
step in the sidebar shows its two attempts as a small timeline that follows the step live
(its second attempt running, then done) and fits the sidebar; hovering a bar shows the
attempt's row; the step's "run graph" link opens the run's graph in the main area with
its nodes and their statuses, and a node click selects that node's task in the sidebar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

PANEL = "#chongming-tasks-panel"
GRAPH = ".cm-RunGraph"

SETUP = """\
import threading
import chongming_nb as cn
ctl = cn.get_controller()
release = threading.Event()
tries = []
def flaky(ctx):
    tries.append(1)
    if len(tries) == 1:
        raise RuntimeError("the first attempt fails <b>x</b>")
    release.wait(120)
    return 2
pipe = cn.Pipeline("pictures <b>run</b>")
a = pipe.add(lambda ctx: 1, name="extract")
b = pipe.add(flaky, deps=[a], name="flaky",
             retry=cn.RetryPolicy(max_attempts=3, backoff=cn.Exponential(base=0.2, jitter="none")))
pipe.add(lambda ctx: 0, deps=[a], when=lambda up: False, name="branch")
pipe.add(lambda ctx: 3, deps=[b], name="report")
run = pipe.submit(ctl)
print("RUN", run.id, run.handle("extract").id, run.handle("flaky").id)
"""
RELEASE = "release.set(); run.wait(60); print('DONE', run.status.value, len(tries))"

NODES = f"""() => Object.fromEntries([...document.querySelectorAll('{GRAPH} .cn-graph-node')]
    .map(g => [g.dataset.node, g.dataset.status]))"""


def wait_nodes(page: Any, want: dict[str, str]) -> None:
    try:
        page.wait_for_function(
            f"(want) => {{ const got = ({NODES})();"
            " return Object.keys(got).length === Object.keys(want).length"
            " && Object.entries(want).every(([k, v]) => got[k] === v); }",
            arg=want,
            timeout=30_000,
        )
    except Exception as exc:
        raise AssertionError(f"the run graph never showed {want}: {page.evaluate(NODES)}") from exc


def activate(page: Any, *, path: str | None = None, widget_id: str | None = None) -> None:
    """Bring a main-area tab to the front: a document's by its path, or a widget's by id."""
    page.evaluate(
        """([path, id]) => {
            const app = window.jupyterapp;
            for (const w of app.shell.widgets('main')) {
                if ((path && w.context && w.context.path === path) || w.id === id) {
                    app.shell.activateById(w.id);
                    return;
                }
            }
            throw new Error(`no tab ${path ?? id}`);
        }""",
        [path, widget_id],
    )


@pytest.mark.timeout(600)  # a watchdog on a loaded machine, not a timed assertion
@pytest.mark.usefixtures("finished_tasks_cleared")
def test_a_steps_attempts_and_its_run_graph_in_the_sidebar(
    notebook: Any, jupyter_lab: Any, page: Any, tmp_path: Path
) -> None:
    nb = notebook("pictures.ipynb", [SETUP, RELEASE])
    nb.run(0)
    run_id, extract, flaky = nb.wait_output(0, "RUN").split("RUN", 1)[1].split()[:3]

    page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
    panel = page.locator(PANEL)
    panel.wait_for(state="visible")
    row = panel.locator(f'li.cm-Row[data-task-id="{flaky}"]')
    row.wait_for()
    # the step's second attempt runs (the first failed, a retry wait between)
    page.wait_for_function(
        f"""() => {{
            const r = document.querySelector('{PANEL} li[data-task-id="{flaky}"]');
            return r && r.dataset.status === 'running';
        }}""",
        timeout=30_000,
    )
    row.locator(".cm-Row-name").click()
    mini = panel.locator(f'.cm-Details[data-task-id="{flaky}"] .cm-Details-pictures')
    mini.wait_for()
    view = mini.locator(".cm-MiniTimeline")
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} .cm-MiniTimeline')?.dataset.attempts === '2'""",
        timeout=30_000,
    )
    head = mini.locator(".cn-timeline-head")
    assert head.inner_text().startswith("Attempts over time: 2 in ")
    assert head.inner_text().endswith(", one running")
    # below the verbs, inside the sidebar's width
    assert page.evaluate(
        f"""() => document.querySelector('{PANEL} .cm-Details-pictures')
                 .previousElementSibling.classList.contains('cm-Details-actions')"""
    )
    widths = page.evaluate(
        f"""() => {{
            const p = document.querySelector('{PANEL}');
            const c = p.querySelector('.cm-MiniTimeline canvas.cn-timeline-canvas');
            return [p.clientWidth, c.getBoundingClientRect().width];
        }}"""
    )
    assert 0 < widths[1] <= widths[0], widths
    page.screenshot(path=str(tmp_path / "sidebar-mini-timeline.png"))

    # the step's run graph in the main area
    mini.locator(".cm-Details-runGraph").click()
    graph = page.locator(GRAPH)
    graph.wait_for()
    assert graph.get_attribute("data-run") == run_id
    graph_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    wait_nodes(
        page, {"extract": "succeeded", "flaky": "running", "branch": "skipped", "report": "blocked"}
    )
    assert page.locator(f"{GRAPH} .cn-graph-edge").count() == 3
    assert page.locator(f"{GRAPH} .cn-graph-node.cn-graph-selected").get_attribute("data-node") == (
        "flaky"
    )
    assert "pictures <b>run</b>" in graph.locator(".cm-RunGraph-head").inner_text()
    assert graph.locator("b").count() == 0

    # live: the step ends (its notebook's tab in front to run the cell); the sidebar's
    # timeline and the graph follow without a click
    activate(page, path="pictures.ipynb")
    nb.run(1)
    assert "DONE succeeded 2" in nb.wait_output(1, "DONE")
    wait_nodes(
        page,
        {"extract": "succeeded", "flaky": "succeeded", "branch": "skipped", "report": "succeeded"},
    )
    page.wait_for_function(
        f"""() => {{
            const h = document.querySelector('{PANEL} .cm-MiniTimeline .cn-timeline-head');
            return h && h.textContent.startsWith('Attempts over time: 2 in ')
                && !h.textContent.includes('running');
        }}""",
        timeout=30_000,
    )
    # hovering the first bar (the run is over: the picture stays) shows the failed
    # attempt's row, as text
    data = jupyter_lab.api(f"/chongming/api/tasks/{flaky}/timeline")
    box = view.locator(".cn-timeline-lanes").bounding_box()
    assert box is not None
    mid = (data["bars"]["start"][0] + data["bars"]["end"][0]) / 2
    x = box["x"] + (box["width"] - 12) * mid / data["span"]
    page.mouse.move(x, box["y"] + 11)
    tip = view.locator(".cn-timeline-tip")
    tip.wait_for(state="visible")
    assert "outcome: failed" in tip.inner_text()
    assert "the first attempt fails <b>x</b>" in tip.inner_text()
    assert tip.locator("b").count() == 0
    page.screenshot(path=str(tmp_path / "run-graph.png"))

    # a node click selects its task in the sidebar
    activate(page, widget_id=graph_id)
    page.screenshot(path=str(tmp_path / "run-graph-tab.png"))
    page.locator(f'{GRAPH} .cn-graph-node[data-node="extract"]').click()
    panel.locator(f'.cm-Details[data-task-id="{extract}"]').wait_for(timeout=15_000)
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} .cm-MiniTimeline')?.dataset.attempts === '1'""",
        timeout=30_000,
    )
    print("screenshots:", tmp_path)

"""The Tasks sidebar's details and a run's graph tab as a person sees them, in real
JupyterLab + Chromium at 900x700 with the sidebar open beside a notebook, against a real
kernel whose controller writes the shared SQLite store:

* selecting a step whose owner id is long keeps the details on screen: long ids on one
  line (ellipsis; the full text in a tooltip and a copy button), and the step's small
  timeline of attempts inside the viewport without scrolling;
* the "run graph" tab's drawing fills the tab's height and grows with the window;
* after a page reload the graph tab is back with its run's nodes (read again from the
  store), and a tab of a run the store does not know says so in the tab.

Screenshots go to the test's tmp_path (printed), never into docs/img."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(600),  # a watchdog on a loaded machine, not a timed assertion
    pytest.mark.usefixtures("finished_tasks_cleared"),
]

PANEL = "#chongming-tasks-panel"
GRAPH = ".cm-RunGraph"
STEPS = ("extract", "transform", "report")

SETUP = """\
import chongming_nb as cn
ctl = cn.get_controller()
pipe = cn.Pipeline("detail <b>run</b>")
a = pipe.add(lambda ctx: 1, name="extract")
b = pipe.add(lambda ctx: 2, deps=[a], name="transform")
pipe.add(lambda ctx: 3, deps=[b], name="report")
run = pipe.submit(ctl)
run.wait(60)
print("RUN", run.id, run.handle("transform").id, run.status.value)
"""


def start(notebook: Any, page: Any, name: str) -> tuple[str, str]:
    """At 900x700: a notebook whose kernel ran a three-step pipeline, the Tasks sidebar
    open beside it; the run's id and its middle step's task id."""
    page.set_viewport_size({"width": 900, "height": 700})
    nb = notebook(name, [SETUP])
    nb.run(0)
    words = nb.wait_output(0, "RUN").split("RUN", 1)[1].split()
    assert words[2] == "succeeded", words
    page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
    page.locator(PANEL).wait_for(state="visible")
    return words[0], words[1]


def select(page: Any, task_id: str) -> Any:
    """Click the task's row in the sidebar; its details box once its timeline is drawn."""
    panel = page.locator(PANEL)
    panel.locator(f'li.cm-Row[data-task-id="{task_id}"] .cm-Row-name').click()
    details = panel.locator(f'.cm-Details[data-task-id="{task_id}"]')
    details.wait_for()
    page.wait_for_function(
        f"() => document.querySelector('{PANEL} .cm-MiniTimeline')?.dataset.attempts === '1'",
        timeout=30_000,
    )
    return details


def open_graph(page: Any, task_id: str, run_id: str) -> Any:
    """The step's "run graph" link, clicked: the tab, once its three nodes are drawn."""
    details = select(page, task_id)
    details.locator(".cm-Details-runGraph").click()
    return wait_graph(page, run_id)


def wait_graph(page: Any, run_id: str) -> Any:
    graph = page.locator(f'{GRAPH}[data-run="{run_id}"]')
    try:
        page.wait_for_function(
            f"""() => [...document.querySelectorAll('{GRAPH}[data-run="{run_id}"] .cn-graph-node')]
                .filter(g => g.dataset.status === 'succeeded').length === {len(STEPS)}""",
            timeout=60_000,
        )
    except Exception as exc:
        nodes = page.locator(f"{GRAPH} .cn-graph-node").count()
        raise AssertionError(f"the graph of run {run_id} never showed its nodes ({nodes})") from exc
    return graph


BOXES = f"""() => {{
    const box = e => {{ const r = e.getBoundingClientRect(); return {{top: r.top, bottom: r.bottom,
        left: r.left, right: r.right, height: r.height, width: r.width}}; }};
    const d = document.querySelector('{PANEL} .cm-TasksPanel-details');
    const mini = document.querySelector('{PANEL} .cm-MiniTimeline');
    return {{details: box(d), scrollTop: d.scrollTop, mini: box(mini),
             page: {{width: innerWidth, height: innerHeight}}}};
}}"""


def test_details_of_a_long_owner_id_keep_the_timeline_in_view(
    notebook: Any, page: Any, tmp_path: Path
) -> None:
    _, step = start(notebook, page, "detail-owner.ipynb")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    details = select(page, step)
    page.screenshot(path=str(tmp_path / "details-900x700.png"))
    # the small timeline of attempts is on screen without scrolling anything
    boxes = page.evaluate(BOXES)
    mini, box, view = boxes["mini"], boxes["details"], boxes["page"]
    assert boxes["scrollTop"] == 0, boxes
    assert mini["height"] > 0 and mini["bottom"] <= min(box["bottom"], view["height"]), boxes
    assert mini["left"] >= 0 and mini["right"] <= view["width"], boxes

    # the facts as drawn: the owner id (host:pid:kernel:start-nonce) on one line, cut
    # with an ellipsis, no taller than a one-word fact; the whole id in the DOM
    # (selectable) and in its tooltip
    facts = details.evaluate(
        """d => Object.fromEntries([...d.querySelectorAll('.cm-Details-facts dd')].map(dd => {
            const v = dd.querySelector('.cm-Details-value') ?? dd, s = getComputedStyle(v);
            return [dd.dataset.fact ?? dd.previousElementSibling.textContent, {
                text: v.textContent, title: v.title, height: dd.getBoundingClientRect().height,
                cut: v.scrollWidth > v.clientWidth, overflow: s.textOverflow,
                wrap: s.whiteSpace, select: s.userSelect}];
        }))"""
    )
    owner = facts["owner"]
    assert owner["text"].count(":") >= 3 and len(owner["text"]) > 60, owner
    assert owner["title"] == owner["text"], owner
    assert (owner["cut"], owner["overflow"], owner["wrap"], owner["select"]) == (
        True,
        "ellipsis",
        "nowrap",
        "text",
    ), owner
    for fact in ("id", "kernel", "owner"):
        assert facts[fact]["height"] <= facts["status"]["height"] + 4, (fact, facts)

    # copy, by keyboard: Tab from the kernel's copy button reaches the owner's, Enter copies
    copy = details.locator('dd[data-fact="owner"] button.cm-Details-copy')
    assert copy.get_attribute("aria-label") == "Copy the owner"
    details.locator('dd[data-fact="kernel"] button.cm-Details-copy').focus()
    page.keyboard.press("Tab")
    assert copy.evaluate("b => document.activeElement === b")
    page.keyboard.press("Enter")
    page.wait_for_function(  # the button says so once the clipboard took the text
        """() => document.querySelector(
            '.cm-Details dd[data-fact="owner"] button.cm-Details-copy')?.textContent === 'copied'"""
    )
    assert page.evaluate("() => navigator.clipboard.readText()") == owner["text"]
    page.screenshot(path=str(tmp_path / "details-copied.png"))
    print("screenshots:", tmp_path)


GRAPH_BOXES = f"""(run) => {{
    const tab = document.querySelector(`{GRAPH}[data-run="${{run}}"]`);
    const svg = tab.querySelector('.cn-graph-svg');
    return {{tab: tab.getBoundingClientRect().height, svg: svg.getBoundingClientRect().height,
             bottom: tab.getBoundingClientRect().bottom - svg.getBoundingClientRect().bottom}};
}}"""


def test_the_run_graph_tab_fills_its_height_and_follows_resizes(
    notebook: Any, page: Any, tmp_path: Path
) -> None:
    run_id, step = start(notebook, page, "detail-graph.ipynb")
    open_graph(page, step, run_id)
    page.screenshot(path=str(tmp_path / "graph-900x700.png"))
    before = page.evaluate(GRAPH_BOXES, run_id)
    # the drawing takes the tab's height below its heading line and tools, not a capped
    # strip: below it only the selected node's line and the tab's padding
    assert before["svg"] >= 0.75 * before["tab"], before
    assert before["bottom"] <= 48, before

    page.set_viewport_size({"width": 900, "height": 1000})
    page.wait_for_function(
        f"""([run, was]) => ({GRAPH_BOXES})(run).svg > was + 250""", arg=[run_id, before["svg"]]
    )
    after = page.evaluate(GRAPH_BOXES, run_id)
    assert after["svg"] >= 0.75 * after["tab"], after
    # the three nodes are still in view at the new size (fitted again, not left in a corner)
    inside = page.evaluate(
        f"""(run) => {{
            const svg = document.querySelector(`{GRAPH}[data-run="${{run}}"] .cn-graph-svg`)
                .getBoundingClientRect();
            return [...document.querySelectorAll(
                `{GRAPH}[data-run="${{run}}"] .cn-graph-node .cn-graph-box`)].every(b => {{
                    const r = b.getBoundingClientRect();
                    return r.top >= svg.top && r.bottom <= svg.bottom
                        && r.left >= svg.left && r.right <= svg.right; }});
        }}""",
        run_id,
    )
    assert inside
    page.screenshot(path=str(tmp_path / "graph-900x1000.png"))
    print("screenshots:", tmp_path)


# the workspace (tab layout) JupyterLab saves on the server: each save, once the server
# answered, recorded in window.__cmSaved (a page-side record the test waits on)
WATCH_SAVES = """() => {
    const ws = window.jupyterapp.serviceManager.workspaces;
    const save = ws.save.bind(ws);
    window.__cmSaved = [];
    ws.save = async (id, workspace) => {
        const done = await save(id, workspace);
        window.__cmSaved.push(JSON.stringify(workspace.data));
        return done;
    };
}"""


def reload(page: Any, key: str) -> None:
    """Reload once the workspace saved on the server holds `key` (its tab restorer's
    entry); then wait for the new page's lab to be restored."""
    try:
        page.wait_for_function(
            "(key) => (window.__cmSaved ?? []).some(d => d.includes(key))", arg=key, timeout=60_000
        )
    except Exception as exc:
        raise AssertionError(f"the workspace saved on the server never held {key}") from exc
    page.reload()
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.restored")
    page.evaluate(WATCH_SAVES)


def test_the_run_graph_tab_comes_back_after_a_reload(
    notebook: Any, page: Any, tmp_path: Path
) -> None:
    run_id, step = start(notebook, page, "detail-restore.ipynb")
    page.evaluate(WATCH_SAVES)
    open_graph(page, step, run_id)
    reload(page, f"chongming-run-graph:{run_id}")
    graph = wait_graph(page, run_id)
    assert "detail <b>run</b>" in graph.locator(".cm-RunGraph-head").inner_text()
    assert graph.locator("b").count() == 0
    page.screenshot(path=str(tmp_path / "graph-restored.png"))

    # a tab of a run the store does not have (gone since the tab was opened): after the
    # reload it says so in the tab, no error dialog
    gone = "run-that-is-gone"
    page.evaluate(
        "(id) => window.jupyterapp.commands.execute('chongming:open-run-graph', {runId: id})", gone
    )
    page.locator(f'{GRAPH}[data-run="{gone}"] .cm-RunGraph-head.cm-mod-gone').wait_for()
    reload(page, f"chongming-run-graph:{gone}")
    head = page.locator(f'{GRAPH}[data-run="{gone}"] .cm-RunGraph-head')
    head.wait_for()
    page.wait_for_function(
        f"""() => document.querySelector('{GRAPH}[data-run="{gone}"] .cm-RunGraph-head')
            ?.classList.contains('cm-mod-gone')"""
    )
    assert head.inner_text() == (
        f"Pipeline run {gone} is no longer in the task store: its graph cannot be shown."
    )
    assert page.locator(".jp-Dialog").count() == 0
    wait_graph(page, run_id)  # the other tab came back too
    page.screenshot(path=str(tmp_path / "graph-gone.png"))
    print("screenshots:", tmp_path)

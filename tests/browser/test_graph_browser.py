"""A pipeline run's graph in real JupyterLab + Chromium: a 6-node run with a retried step,
a ``when=False`` branch and a step paused from the graph shows its 6 nodes with the right
statuses, live; a node click selects the node's row in the table below and offers the
verbs that row allows, which act through the table's own verb path. After save → kernel
shut down → reopen, and in the nbconvert HTML export, the final graph is there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _saved import export_html, save_shut_down_reopen

pytestmark = pytest.mark.browser

SETUP = """\
import threading, time
import chongming_nb as cn
ctl = cn.Controller()
release = threading.Event()
tries = []
def extract(ctx):
    return 1
def flaky(ctx):
    tries.append(1)
    if len(tries) == 1:
        raise RuntimeError("the first attempt fails")
    return 2
def slow(ctx):
    for _ in ctx.track(range(100_000), unit="steps"):
        if release.is_set():
            return 3
        time.sleep(0.01)
def combine(ctx):
    return ctx.upstream("flaky") + ctx.upstream("slow")
pipe = cn.Pipeline("six")
a = pipe.add(extract, name="extract")
b = pipe.add(flaky, deps=[a], name="flaky",
             retry=cn.RetryPolicy(max_attempts=3, backoff=cn.Exponential(base=0.2, jitter="none")))
c = pipe.add(slow, deps=[a], name="slow")
pipe.add(lambda ctx: 0, deps=[a], when=lambda up: False, name="branch")
e = pipe.add(combine, deps=[b, c], name="combine")
pipe.add(lambda ctx: ctx.upstream("combine") * 10, deps=[e], name="report")
run = pipe.submit(ctl)
run
"""
RELEASE = "release.set(); run.wait(60); print('RUN', run.status.value, len(tries))"

NODES = """() => {
    const out = {};
    const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[0];
    for (const g of cell.querySelectorAll('.cn-root .cn-graph-node')) {
        out[g.dataset.node] = g.dataset.status;
    }
    return out;
}"""


def nodes(nb: Any) -> dict[str, str]:
    return dict(nb.page.evaluate(NODES))


def wait_nodes(nb: Any, want: dict[str, str], timeout: float = 30_000) -> None:
    try:
        nb.page.wait_for_function(
            f"""(want) => {{
                const got = ({NODES})();
                return Object.entries(want).every(([k, v]) => got[k] === v);
            }}""",
            arg=want,
            timeout=timeout,
        )
    except Exception as exc:
        raise AssertionError(f"graph never showed {want}; it shows {nodes(nb)}") from exc


# a whole run, a reopen and an HTML export: minutes on a loaded machine (a watchdog, not
# a timed assertion)
@pytest.mark.timeout(900)
def test_a_runs_graph_is_live_selects_rows_pauses_and_is_saved(
    notebook: Any, jupyter_lab: Any, tmp_path: Path
) -> None:
    nb = notebook("graph.ipynb", [SETUP, RELEASE])
    nb.run(0)
    cell = nb.cell(0)
    cell.locator(".cn-root .cn-graph-node").first.wait_for(timeout=30_000)
    assert len(nodes(nb)) == 6
    # live, without running anything: the retried step succeeds on its second attempt, the
    # branch whose condition is false is skipped, the slow step runs
    wait_nodes(
        nb, {"extract": "succeeded", "flaky": "succeeded", "branch": "skipped", "slow": "running"}
    )
    # its attempt count comes with its row: the graph's own spec can report the node's
    # status a patch before the table's row of its task arrives (CI saw "succeeded"
    # alone), so the detail is waited for, not read at the status's first sight
    flaky = cell.locator(".cn-root .cn-graph-node[data-node=flaky] .cn-graph-detail")
    try:
        flaky.filter(has_text="attempt 2").wait_for(timeout=30_000)
    except Exception as exc:
        raise AssertionError(f"the retried node says {flaky.text_content()!r}") from exc
    assert nodes(nb)["combine"] in ("blocked", "pending")

    # a node click selects its row in the table below and offers its allowed verbs
    cell.locator(".cn-root .cn-graph-node[data-node=slow]").click()
    selected = cell.locator(".cn-root .cn-item.cn-selected")
    selected.wait_for(timeout=10_000)
    assert selected.count() == 1
    assert selected.locator(".cm-Row-name").text_content().strip() == "slow"
    panel = cell.locator(".cn-root .cn-graph-panel[data-node=slow]")
    panel.wait_for(timeout=10_000)
    panel.locator("button[data-verb=pause]").click()
    wait_nodes(nb, {"slow": "paused"})
    assert selected.get_attribute("data-status") == "paused"  # the row says so too
    panel.locator("button[data-verb=resume]").wait_for(timeout=10_000)
    nb.page.screenshot(path=str(tmp_path / "graph-paused.png"))
    panel.locator("button[data-verb=resume]").click()
    wait_nodes(nb, {"slow": "running"})

    nb.run(1)
    assert "RUN succeeded 2" in nb.wait_output(1, "RUN")
    final = {
        "extract": "succeeded",
        "flaky": "succeeded",
        "slow": "succeeded",
        "branch": "skipped",
        "combine": "succeeded",
        "report": "succeeded",
    }
    wait_nodes(nb, final)

    # the kernel rewrote the output with the final graph; save, shut down, reopen
    nb.page.wait_for_function(
        """() => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            for (const o of nb.model.cells.get(0).outputs.toJSON()) {
                const d = o.data && o.data['application/vnd.chongming.tasks+json'];
                if (d && d.graph && d.graph.nodes.every(n => n.status !== null
                    && !['running', 'blocked', 'pending', 'queued'].includes(n.status))) {
                    return true;
                }
            }
            return false;
        }""",
        timeout=30_000,
    )
    again = save_shut_down_reopen(nb, jupyter_lab)
    saved = json.loads((jupyter_lab.root / "graph.ipynb").read_text())
    (snap,) = [
        o["data"]["application/vnd.chongming.tasks+json"]
        for o in saved["cells"][0]["outputs"]
        if "application/vnd.chongming.tasks+json" in o.get("data", {})
    ]
    assert {n["name"]: n["status"] for n in snap["graph"]["nodes"]} == final
    static = again.cell(0).locator(".cn-saved-static .cn-graph-node")
    static.first.wait_for(timeout=30_000)
    got = dict(
        again.page.evaluate(
            """() => Object.fromEntries([...document.querySelectorAll(
                '.jp-Notebook .jp-Cell')[0].querySelectorAll('.cn-saved-static .cn-graph-node')]
                .map(g => [g.dataset.node, g.dataset.status]))"""
        )
    )
    assert got == final
    assert "model not found" not in again.output_text(0)
    again.page.screenshot(path=str(tmp_path / "graph-reopened.png"))

    exported = export_html(jupyter_lab.root / "graph.ipynb", tmp_path / "graph.html")
    for name, status in final.items():
        assert f'data-node="{name}" data-status="{status}"' in exported
    print("screenshots:", tmp_path)


BIG = """\
import threading
import chongming_nb as cn
ctl = cn.Controller()
gate = threading.Event()
pipe = cn.Pipeline("warehouse")
config = pipe.add(lambda ctx: gate.wait(300), name="config")
loads = []
for i in range(60):  # per source table a chain of four steps
    prev = config
    for step in ("extract", "clean", "validate", "load"):
        prev = pipe.add(lambda ctx: 1, deps=[prev], name=f"{step}_{i:02d}")
    loads.append(prev)
marts = [pipe.add(lambda ctx: 1, deps=loads[i % 60 : i % 60 + 3], name=f"mart_{i:02d}")
         for i in range(0, 120, 3)]
reports = [pipe.add(lambda ctx: 1, deps=marts[i : i + 3], name=f"report_{i:02d}")
           for i in range(0, 40, 3)]
dashboards = [pipe.add(lambda ctx: 1, deps=reports[i : i + 4], name=f"dashboard_{i}")
              for i in range(0, 14, 4)]
pipe.add(lambda ctx: 1, deps=dashboards, name="notify")
run = pipe.submit(ctl)
print("NODES", len(run.graph_spec()["nodes"]))
run
"""

LAYOUTS = "() => window.__cnGraphLayouts || { page: 0, worker: 0 }"


# a 300-task run in a loaded kernel: a watchdog, not a timed assertion
@pytest.mark.timeout(600)
def test_a_300_node_run_is_laid_out_once_in_the_worker_and_stays_live(notebook: Any) -> None:
    release = "gate.set(); run.wait(300); print('RUN', run.status.value)"
    nb = notebook("big-graph.ipynb", [BIG, release])
    nb.run(0)
    total = int(nb.wait_output(0, "NODES").split("NODES")[1].split()[0])
    cell = nb.cell(0)
    # every node drawn, laid out off the page's main thread
    nb.page.wait_for_function(
        """(n) => document.querySelectorAll('.jp-Cell')[0]
            .querySelectorAll('.cn-root .cn-graph-node').length === n""",
        arg=total,
        timeout=120_000,
    )
    assert cell.locator(".cn-root .cn-graph-view").get_attribute("data-layout") == "done"
    assert not cell.locator(".cn-root .cn-graph-wait").is_visible()
    # (the widget's bundle and the extension's, which drew the saved snapshot first, each
    # laid it out once in their worker)
    first = nb.page.evaluate(LAYOUTS)
    assert first["page"] == 0 and first["worker"] >= 1, first
    assert nodes(nb)["config"] == "running"

    # the whole run's status changes restyle the nodes; none lays the graph out again
    nb.run(1)
    assert "RUN succeeded" in nb.wait_output(1, "RUN", timeout=300_000)
    nb.page.wait_for_function(
        f"""() => Object.values(({NODES})()).every(s => s === 'succeeded')""", timeout=60_000
    )
    assert len(nodes(nb)) == total
    assert nb.page.evaluate(LAYOUTS) == first

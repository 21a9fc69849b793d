"""Saved notebooks keep the final state, in real JupyterLab + Chromium: a task that
finished after it was displayed, and one stopped from its row, are saved with their final
rows; after the kernel is shut down and the notebook reopened, the outputs show those
rows (never "Error displaying widget: model not found"), and the nbconvert HTML export
says "succeeded". Screenshots go to the test's temp dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _saved import export_html, save_shut_down_reopen

pytestmark = pytest.mark.browser

SETUP = """\
import time
import chongming_nb as cn
ctl = cn.Controller()
def work(ctx, n, pause):
    for _ in ctx.track(range(n), total=n, unit="item"):
        time.sleep(pause)
done = ctl.submit(work, 200, 0.01, name="finisher")
done
"""
STOPPABLE = """\
longer = ctl.submit(work, 100_000, 0.01, name="stoppable")
longer
"""
WAIT = "done.wait(60); print('FINAL', done.status.value)"

SNAPSHOT_STATUSES = """(i) => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const outputs = nb.model.cells.get(i).outputs.toJSON();
    const out = [];
    for (const o of outputs) {
        const d = o.data && o.data['application/vnd.chongming.tasks+json'];
        if (d) for (const r of d.rows) out.push(r.status);
    }
    return out;
}"""


def saved_statuses(nb: Any, i: int) -> list[str]:
    return list(nb.page.evaluate(SNAPSHOT_STATUSES, i))


def wait_saved_status(nb: Any, i: int, status: str, timeout: float = 30_000) -> None:
    nb.page.wait_for_function(
        f"""([i, status]) => ({SNAPSHOT_STATUSES})(i).includes(status)""",
        arg=[i, status],
        timeout=timeout,
    )


def test_save_shut_down_reopen_shows_final_states_and_html_says_succeeded(
    notebook: Any, jupyter_lab: Any, tmp_path: Path
) -> None:
    nb = notebook("saved.ipynb", [SETUP, STOPPABLE, WAIT])
    nb.run(0)
    nb.cell(0).locator(".cn-item").first.wait_for(timeout=30_000)
    assert saved_statuses(nb, 0) in (["running"], ["starting"], ["queued"])
    nb.run(1)
    stop = nb.cell(1).locator(".cn-item .cm-Row-actions button[data-verb=stop]")
    stop.wait_for(timeout=30_000)
    nb.page.wait_for_function(
        """() => {
            const b = document.querySelectorAll('.jp-Notebook .jp-Cell')[1]
                .querySelector('.cn-item .cm-Row-actions button[data-verb=stop]');
            return !!b && !b.hidden;
        }""",
        timeout=30_000,
    )
    stop.click()
    # last session's user pass: saved a second after the stop, the output said "running
    # 0%". The kernel rewrites the saved output before the patch that shows the stop: once
    # the live row says stopped, the output model (what a save writes) says it already
    nb.page.wait_for_function(
        """() => {
            const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[1];
            const s = c.querySelector('.cn-item .cm-Row-status');
            return !!s && s.textContent.trim() === 'stopped';
        }""",
        timeout=30_000,
    )
    assert saved_statuses(nb, 1) == ["stopped"]
    nb.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    nb.page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )
    on_disk = json.loads((jupyter_lab.root / "saved.ipynb").read_text())
    assert [
        r["status"]
        for o in on_disk["cells"][1]["outputs"]
        for r in o.get("data", {}).get("application/vnd.chongming.tasks+json", {}).get("rows", [])
    ] == ["stopped"]
    nb.run(2)
    assert "FINAL succeeded" in nb.wait_output(2, "FINAL")
    # the kernel rewrote both outputs with their final rows
    wait_saved_status(nb, 0, "succeeded")
    wait_saved_status(nb, 1, "stopped")
    # an updated output keeps one live view (the renderer is reused, not stacked)
    nb.page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].slice(0, 2)
            .every(c => c.querySelectorAll('.cn-item').length === 1
                && c.querySelector('.cn-item .cm-Row-status').textContent.trim() !== 'running')""",
        timeout=30_000,
    )
    nb.page.screenshot(path=str(tmp_path / "saved-live.png"))
    # save, shut the kernel down, reopen in the same page: a new kernel, no widget models
    # from the old one
    again = save_shut_down_reopen(nb, jupyter_lab)
    path = jupyter_lab.root / "saved.ipynb"
    saved = json.loads(path.read_text())
    outs = [o for o in saved["cells"][0]["outputs"] if "data" in o]
    assert any("succeeded" in "".join(o["data"].get("text/html", "")) for o in outs)
    first = again.cell(0).locator(".cn-saved-static .cn-saved-row")
    first.wait_for(timeout=30_000)
    again.page.wait_for_timeout(0)
    # give the widget manager its chance to restore; the snapshot must stay
    again.page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            return k && k.status === 'idle';
        }""",
        timeout=60_000,
    )
    text0 = again.output_text(0)
    text1 = again.output_text(1)
    assert "model not found" not in text0 + text1
    # drawn by the same row module as the live view (labextension/src/row.ts)
    assert first.locator(".cm-Row-status").inner_text() == "succeeded"
    assert first.locator(".cm-Row-count").inner_text() == "200/200 item"
    assert first.locator(".cm-Row-pct").inner_text() == "100%"
    row1 = again.cell(1).locator(".cn-saved-static .cn-saved-row").first
    assert "stopped" in row1.inner_text()
    assert "stopped from the widget at " in row1.inner_text()
    assert row1.get_attribute("data-tone") == "muted"  # not red: a stop is not a failure
    again.page.screenshot(path=str(tmp_path / "saved-reopened.png"))

    # the HTML export
    exported = export_html(path, tmp_path / "saved.html")
    assert ">succeeded<" in exported
    assert "stopped from the widget at " in exported
    assert "200/200 item" in exported
    print("screenshots:", tmp_path)


DELAYED = """\
import chongming_nb as cn
ctl = cn.Controller()
later = ctl.submit(print, "hello", name="later", delay=3600)
later
"""


def test_reopened_delayed_row_names_its_start_without_counting_down(
    notebook: Any, jupyter_lab: Any, tmp_path: Path
) -> None:
    # the lead's user pass: reopened after the kernel was shut down, the saved board's
    # delayed row still counted down from the viewer's clock ("starts at 08:06 (in
    # 9m51s)") under "saved state, not live", and would read "(in 0s)" once that passed
    nb = notebook("delayed.ipynb", [DELAYED])
    nb.run(0)
    note = nb.cell(0).locator(".cn-item .cm-Row-noteText").first
    note.wait_for(timeout=30_000)
    nb.page.wait_for_function(
        """() => {
            const n = document.querySelector('.jp-Notebook .jp-Cell .cn-item .cm-Row-noteText');
            return !!n && n.textContent.startsWith('starts at ');
        }""",
        timeout=30_000,
    )
    assert "(in " in note.inner_text()  # live: counted down
    again = save_shut_down_reopen(nb, jupyter_lab)
    row = again.cell(0).locator(".cn-saved-static .cn-saved-row").first
    row.wait_for(timeout=30_000)
    saved_note = row.locator(".cm-Row-noteText").inner_text()
    again.page.screenshot(path=str(tmp_path / "delayed-reopened.png"))
    assert saved_note.startswith("was to start at "), saved_note
    assert "(in " not in saved_note
    assert "saved state" in again.output_text(0)

"""A kernel restarted or killed, seen from the Tasks sidebar in real JupyterLab +
Chromium: within 5 s its running task reads "kernel gone" with every button disabled and
the status bar stops counting it, with no code run in any kernel and nothing written to
the store; once the new kernel's controller reconciles the store, the task reads "lost".
Screenshots go to the test's temp dir."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

PANEL = "#chongming-tasks-panel"
SUBMIT = """\
import os, time
import chongming_nb as cn
ctl = cn.get_controller()
def work(ctx):
    for _ in ctx.track(range(100_000), total=100_000, unit="steps"):
        time.sleep(0.01)
h = ctl.submit(work, name="survivor")
print("SUBMITTED", h.id, "PID", os.getpid())
"""
RECONCILE = "import chongming_nb as cn\nctl = cn.get_controller()\nprint('RECONCILED')"
STATUS_TEXT = "(document.querySelector('.cm-StatusItem')?.textContent || '')"


def row_is(task_id: str, predicate: str) -> str:
    return f"""() => {{
        const r = document.querySelector('{PANEL} li[data-task-id="{task_id}"]');
        if (!r) return false;
        const buttons = [...r.querySelectorAll('button[data-verb]')];
        return {predicate};
    }}"""


@pytest.mark.parametrize("how", ["kill", "restart"])
def test_a_gone_kernels_task_reads_kernel_gone_within_5s(
    notebook: Any, page: Any, tmp_path: Path, how: str
) -> None:
    nb = notebook(f"gone-{how}.ipynb", [SUBMIT, RECONCILE])
    nb.run(0)
    words = nb.wait_output(0, "SUBMITTED").split()
    task_id, pid = words[words.index("SUBMITTED") + 1], int(words[words.index("PID") + 1])
    page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
    page.wait_for_function(
        row_is(
            task_id,
            "r.dataset.status === 'running' && "
            "buttons.some(b => b.dataset.verb === 'stop' && !b.hidden)",
        ),
        timeout=30_000,
    )
    page.wait_for_function(f"() => {STATUS_TEXT}.startsWith('1 running')", timeout=30_000)
    # what the kernel connection goes through from here (the kill's restart is noticed
    # later: its status reads "idle" until then, the stale one of the dead kernel)
    page.evaluate(
        """() => {
            const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            window.__statuses = [];
            k.statusChanged.connect((_, s) => window.__statuses.push(s));
        }"""
    )
    if how == "kill":  # the kernel dies; JupyterLab's server restarts it
        os.kill(pid, signal.SIGKILL)
    else:  # Kernel > Restart, without the confirmation dialog
        page.evaluate(
            """() => { window.__restart = window.jupyterapp.shell.currentWidget
                .sessionContext.session.kernel.restart(); }"""
        )
    # the spec: within 5 s, still running in the store, marked, no verb offered,
    # and not counted as running by the status bar. A graceful restart lets the old
    # kernel say how its task ended on its way out (stopped or lost, "the kernel shut
    # down while it ran"): that is the truth too, and it may come first.
    gone = (
        "r.textContent.includes('kernel gone') && r.dataset.status === 'running' && "
        "buttons.length > 0 && buttons.every(b => b.hidden)"
    )
    said_on_its_way_out = (
        "['stopped', 'lost'].includes(r.dataset.status) && r.textContent.includes('shut down')"
    )
    ended = f"({gone})" if how == "kill" else f"(({gone}) || ({said_on_its_way_out}))"
    page.wait_for_function(
        row_is(task_id, f"{ended} && {STATUS_TEXT}.startsWith('0 running')"),
        timeout=5_000,
    )
    page.locator(PANEL).screenshot(path=str(tmp_path / f"kernel-gone-{how}.png"))
    if how == "restart":
        return  # (the old process may still record how its thread ended on its way out)
    page.wait_for_function(
        """() => {
            const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            const restarted = (window.__statuses || []).some(
                (s) => s === 'autorestarting' || s === 'restarting' || s === 'starting');
            return k && restarted && k.status === 'idle';
        }""",
        timeout=60_000,
    )
    nb.run(1)
    nb.wait_output(1, "RECONCILED")
    page.wait_for_function(
        row_is(task_id, "r.dataset.status === 'lost' && !r.textContent.includes('kernel gone')"),
        timeout=30_000,
    )
    page.locator(PANEL).screenshot(path=str(tmp_path / "kernel-gone-lost.png"))


def test_a_notebooks_rows_read_kernel_gone_at_once_after_a_restart_from_the_kernel_menu(
    notebook: Any, page: Any, tmp_path: Path
) -> None:
    """The widget watches its kernel connection's status: a restart closes no comm, and
    without that the rows would keep offering Stop until three pings went unheard."""
    nb = notebook("gone-widget.ipynb", [SUBMIT + "h\n"])
    nb.run(0)
    out = nb.cell(0)
    out.locator(".cn-item").first.wait_for(timeout=30_000)
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-Notebook .cn-item button[data-verb="stop"]')]
                 .some((b) => !b.hidden)""",
        timeout=30_000,
    )
    # Kernel > Restart Kernel…, and the dialog's Restart
    page.evaluate("() => { window.jupyterapp.commands.execute('kernelmenu:restart'); }")
    page.locator(".jp-Dialog .jp-mod-accept").click()
    page.wait_for_function(
        """() => {
            const root = document.querySelector('.jp-Notebook .cn-root');
            if (!root) return false;
            const banner = root.querySelector('.cn-banner');
            const verbs = [...root.querySelectorAll('.cn-item button[data-verb]')];
            return root.classList.contains('cn-disconnected') && !banner.hidden &&
                banner.textContent.startsWith('kernel gone (restarted)') &&
                verbs.length > 0 && verbs.every((b) => b.hidden);
        }""",
        timeout=5_000,
    )
    out.screenshot(path=str(tmp_path / "widget-kernel-gone.png"))

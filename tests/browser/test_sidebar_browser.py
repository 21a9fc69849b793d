"""The Tasks sidebar in real JupyterLab + Chromium, against real kernels whose
controllers share one SQLite store: tasks of two notebooks are listed, grouped by
notebook; Stop in the sidebar stops a task while its kernel runs a busy foreground cell
(the command travels through the store's queue; the kernel's dispatcher thread claims it);
the status bar counts follow; an unauthenticated API request is refused."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
PANEL = "#chongming-tasks-panel"


def submit_cell(name: str) -> str:
    return (
        "import time\n"
        "import chongming_nb as cn\n"
        "ctl = cn.get_controller()\n"
        "def work(ctx):\n"
        "    for _ in ctx.track(range(100_000), total=100_000, unit='steps'):\n"
        "        time.sleep(0.01)\n"
        f"h = ctl.submit(work, name={name!r})\n"
        "print('SUBMITTED', h.id)\n"
    )


BUSY = (
    "import time\n"
    "t0 = time.time()\n"
    "n = 0\n"
    "while time.time() - t0 < 25:\n"
    "    n += 1\n"
    "print('LOOP DONE', n)\n"
)


def task_id_from(nb: Any) -> str:
    text = nb.wait_output(0, "SUBMITTED")
    return str(text.split("SUBMITTED", 1)[1].split()[0])


def status_in_store(store_path: Path, task_id: str) -> TaskStatus | None:
    store = SqliteStore(store_path)
    try:
        snap = store.get(task_id)
        return None if snap is None else snap.status
    finally:
        store.close()


def notebook_class(lab: Any, page: Any, name: str) -> Any:
    """The conftest's Notebook driver for a page of our own (the factory binds ``page``)."""
    here = Path(__file__).with_name("conftest.py")
    module = next(
        (
            m
            for m in list(sys.modules.values())
            if getattr(m, "__file__", None) and Path(m.__file__) == here
        ),
        None,
    )
    if module is None:  # pytest registered it under another name: load the file itself
        import importlib.util

        spec = importlib.util.spec_from_file_location("chongming_browser_conftest", here)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["chongming_browser_conftest"] = module  # dataclasses look it up
        spec.loader.exec_module(module)
    return module.Notebook(lab, page, name)


def forget_workspace(lab: Any) -> None:
    """Drop the saved layout, so the next page load opens only the notebook it names."""
    request = urllib.request.Request(
        f"{lab.url}/lab/api/workspaces/default",
        method="DELETE",
        headers={"Authorization": f"token {lab.token}"},
    )
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise


def test_sidebar_lists_two_notebooks_and_stops_a_task_while_its_kernel_is_busy(
    jupyter_lab: Any, notebook: Any, page: Any, browser: Any
) -> None:
    # notebook beta in a page of its own, closed once its task runs (its kernel stays)
    forget_workspace(jupyter_lab)
    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        other_page = other.new_page()
        other_page.set_default_timeout(60_000)
        jupyter_lab.write_notebook("beta.ipynb", [submit_cell("beta-task")])
        nb_b = notebook_class(jupyter_lab, other_page, "beta.ipynb").open()
        nb_b.run(0)
        beta = task_id_from(nb_b)
    finally:
        other.close()
    forget_workspace(jupyter_lab)
    nb_a = notebook("alpha.ipynb", [submit_cell("alpha-task <b>x</b>"), BUSY])
    nb_a.run(0)
    alpha = task_id_from(nb_a)

    page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
    panel = page.locator(PANEL)
    panel.wait_for(state="visible")
    alpha_row = panel.locator(f'li.cm-TaskRow[data-task-id="{alpha}"]')
    beta_row = panel.locator(f'li.cm-TaskRow[data-task-id="{beta}"]')
    alpha_row.wait_for()
    beta_row.wait_for()
    # grouped by notebook: the owning kernel's session path
    try:
        page.wait_for_function(
            f"""() => !!document.querySelector(
                '{PANEL} section[data-notebook="alpha.ipynb"] li[data-task-id="{alpha}"]')""",
            timeout=15_000,
        )
    except Exception as exc:
        sections = page.evaluate(
            f"() => [...document.querySelectorAll('{PANEL} section')].map(s => s.dataset.notebook)"
        )
        listing = jupyter_lab.api("/chongming/api/tasks")
        rows = [(r["name"], r["owner"], r["kernel_id"], r["notebook"]) for r in listing["tasks"]]
        raise AssertionError(
            f"sections {sections}; rows {rows}; sessions {listing['sessions']}"
        ) from exc
    assert (
        panel.locator('section[data-notebook="alpha.ipynb"]')
        .locator(f'li[data-task-id="{alpha}"]')
        .count()
        == 1
    )
    assert (
        panel.locator('section[data-notebook="beta.ipynb"]')
        .locator(f'li[data-task-id="{beta}"]')
        .count()
        == 1
    )
    # names are text, not markup
    assert alpha_row.locator(".cm-TaskRow-name").inner_text() == "alpha-task <b>x</b>"
    assert alpha_row.locator("b").count() == 0
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} li[data-task-id="{alpha}"]')
                  ?.dataset.status === 'running'"""
    )
    # buttons follow the server's can flags
    assert alpha_row.locator('button[data-verb="stop"]').is_enabled()
    assert not alpha_row.locator('button[data-verb="resume"]').is_enabled()

    status = page.locator(".cm-StatusItem")
    page.wait_for_function(
        "() => document.querySelector('.cm-StatusItem')?.textContent"
        ".startsWith('1 running · 0 paused')"
    )

    # the foreground cell keeps the kernel's main thread busy
    nb_a.run(1, wait=False)
    page.wait_for_function(
        """() => window.jupyterapp.shell.currentWidget.content.widgets[1]
                 .model.executionState === 'running'"""
    )
    page.screenshot(path=str(REPO / "docs" / "img" / "sidebar.png"))
    alpha_row.locator('button[data-verb="stop"]').click()
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} li[data-task-id="{alpha}"]')
                  ?.dataset.status === 'stopped'""",
        timeout=20_000,
    )
    assert nb_a.is_busy(1), "the busy cell should still be running: the stop did not wait"
    assert status_in_store(jupyter_lab.store, alpha) is TaskStatus.STOPPED
    assert status_in_store(jupyter_lab.store, beta) is TaskStatus.RUNNING
    page.wait_for_function(
        "() => document.querySelector('.cm-StatusItem')?.textContent"
        ".startsWith('0 running · 0 paused')"
    )
    assert "0 failed" in status.inner_text()
    # after the stop, Retry is offered and Stop is not
    assert alpha_row.locator('button[data-verb="retry"]').is_enabled()
    assert not alpha_row.locator('button[data-verb="stop"]').is_enabled()

    # the details view shows the history of the stop
    alpha_row.locator(".cm-TaskRow-name").click()
    details = panel.locator(f'.cm-Details[data-task-id="{alpha}"]')
    details.wait_for()
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} .cm-Details')
                  ?.textContent.includes('stopping → stopped')"""
    )
    page.screenshot(path=str(REPO / "docs" / "img" / "sidebar.png"))

    # stop beta too, through the same API, so no kernel keeps working after the test
    beta_row.locator('button[data-verb="stop"]').click()
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} li[data-task-id="{beta}"]')
                  ?.dataset.status === 'stopped'""",
        timeout=20_000,
    )


def test_unauthenticated_api_request_is_refused(jupyter_lab: Any) -> None:
    for path in ("/chongming/api/tasks", "/chongming/api/feed?since=0&timeout=0"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{jupyter_lab.url}{path}", timeout=10)
        assert info.value.code == 403
    request = urllib.request.Request(
        f"{jupyter_lab.url}/chongming/api/tasks/x/commands",
        data=b'{"verb": "stop"}',
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 403
    # with the token the same listing works
    assert "tasks" in jupyter_lab.api("/chongming/api/tasks")

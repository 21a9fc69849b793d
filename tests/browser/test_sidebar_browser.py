"""The Tasks sidebar in real JupyterLab + Chromium, against real kernels whose
controllers share one SQLite store: tasks of two notebooks are listed, grouped by
notebook; Stop in the sidebar stops a task while its kernel runs a busy foreground cell
(the command travels through the store's queue; the kernel's dispatcher thread claims it);
the status bar counts follow; an unauthenticated API request is refused. With 1,500
tasks the list is windowed: only the rows in view are in the DOM, laid out without gaps
wherever it is scrolled, and a task changed in the store is patched in its row."""

from __future__ import annotations

import dataclasses
import itertools
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _rows import click_verb, offers, open_tasks_panel

from chongming_nb.core.models import Failure, FailureKind, Progress, TaskSnapshot
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore
from chongming_nb.testing.lab import Notebook

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
    tmp_path: Path, jupyter_lab: Any, notebook: Any, page: Any, browser: Any
) -> None:
    # notebook beta in a page of its own, closed once its task runs (its kernel stays)
    forget_workspace(jupyter_lab)
    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        other_page = other.new_page()
        other_page.set_default_timeout(60_000)
        jupyter_lab.write_notebook("beta.ipynb", [submit_cell("beta-task")])
        nb_b = Notebook(jupyter_lab, other_page, "beta.ipynb").open()
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
    alpha_row = panel.locator(f'li.cm-Row[data-task-id="{alpha}"]')
    beta_row = panel.locator(f'li.cm-Row[data-task-id="{beta}"]')
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
    assert alpha_row.locator(".cm-Row-name").inner_text() == "alpha-task <b>x</b>"
    assert alpha_row.locator("b").count() == 0
    # the notebook menu: the server picks that notebook's tasks (its kernel's session)
    menu = panel.locator("select.cm-Filter-notebook")
    with page.expect_response(
        lambda r: "/chongming/api/tasks?" in r.url and "notebook=beta.ipynb" in r.url
    ) as answered:
        menu.select_option("nb:beta.ipynb")
    assert [t["id"] for t in answered.value.json()["tasks"]] == [beta]
    alpha_row.wait_for(state="detached")
    assert beta_row.count() == 1
    page.screenshot(path=str(tmp_path / "sidebar-one-notebook.png"))
    assert "alpha.ipynb" in menu.inner_text()  # the other notebook is still offered
    menu.select_option("nb:alpha.ipynb")
    beta_row.wait_for(state="detached")
    alpha_row.wait_for()
    menu.select_option(label="All notebooks")
    beta_row.wait_for()
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} li[data-task-id="{alpha}"]')
                  ?.dataset.status === 'running'"""
    )
    # buttons follow the server's can flags
    assert offers(alpha_row, "stop")
    assert not offers(alpha_row, "resume")

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
    page.screenshot(path=str(tmp_path / "sidebar.png"))
    click_verb(alpha_row, "stop")
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
    assert offers(alpha_row, "retry")
    assert not offers(alpha_row, "stop")

    # the details view shows the history of the stop
    alpha_row.locator(".cm-Row-name").click()
    details = panel.locator(f'.cm-Details[data-task-id="{alpha}"]')
    details.wait_for()
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} .cm-Details')
                  ?.textContent.includes('stopping → stopped')"""
    )
    page.screenshot(path=str(tmp_path / "sidebar.png"))

    # stop beta too, through the same API, so no kernel keeps working after the test
    click_verb(beta_row, "stop")
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


# ------------------------------------------------------------------ a long list

LONG = 1500
LONG_PREFIX = "vlist-"

# geometry of the drawn rows inside the list's viewport (page coordinates)
GEOMETRY = """(sel) => {
  const list = document.querySelector(sel + ' .cm-TaskList');
  const box = list.getBoundingClientRect();
  const rows = [...list.querySelectorAll('li.cm-Row')].map((li) => {
    const r = li.getBoundingClientRect();
    return { id: li.dataset.name, top: r.top, bottom: r.bottom };
  });
  return {
    top: box.top, bottom: box.top + list.clientHeight,
    scrollTop: list.scrollTop, scrollHeight: list.scrollHeight,
    clientHeight: list.clientHeight, rows,
  };
}"""


def _fill_long_list(store_path: Path) -> list[str]:
    """``LONG`` finished tasks without an owner, created one second apart (the last is
    the newest): every tenth failed with a long message (taller rows), the rest succeeded
    with a progress message. Returns the ids, oldest first."""
    base = datetime.now(UTC) - timedelta(hours=2)
    ids: list[str] = []
    items: list[tuple[TaskSnapshot, int | None]] = []
    for i in range(LONG):
        failed = i % 10 == 3
        created = base + timedelta(seconds=i)
        task_id = f"vl{i:05d}{uuid.uuid4().hex[:8]}"
        ids.append(task_id)
        items.append(
            (
                TaskSnapshot(
                    task_id=task_id,
                    name=f"{LONG_PREFIX}{i:05d}",
                    status=TaskStatus.FAILED if failed else TaskStatus.SUCCEEDED,
                    status_version=4,
                    attempt=1,
                    max_attempts=3,
                    created_at=created,
                    queued_at=created,
                    started_at=created,
                    ended_at=created + timedelta(seconds=2),
                    progress=Progress(10.0, 10.0, "rows", f"chunk {i}", created),
                    failure=Failure(FailureKind.EXCEPTION, "ValueError: " + "bad row " * 30)
                    if failed
                    else None,
                ),
                None,
            )
        )
    store = SqliteStore(store_path)
    try:
        store.save_many(items)
    finally:
        store.close()
    return ids


def test_sidebar_windows_a_long_list_and_patches_rows_in_place(jupyter_lab: Any, page: Any) -> None:
    """1,500 tasks: only the rows in view (plus a few) are in the DOM, laid out without
    gaps or overlaps wherever the list is scrolled; the scrollbar spans the whole list;
    a task changed in the store updates its row in place."""
    ids = _fill_long_list(jupyter_lab.store)
    forget_workspace(jupyter_lab)
    panel = open_tasks_panel(jupyter_lab, page, PANEL)
    panel.locator(".cm-Filter-text").fill(LONG_PREFIX)
    panel.locator(".cm-Filter-text").press("Enter")
    # the text filter is the store's: 200 at a time (the matches counted once all are
    # in); load them all for the geometry checks
    status = panel.locator(".cm-TasksPanel-status")
    more = panel.locator(".cm-TasksPanel-moreButton")
    for loaded in range(200, LONG, 200):
        page.wait_for_function(
            f"""() => document.querySelector('{PANEL} .cm-TasksPanel-status')
                      ?.textContent.startsWith('{loaded:,} of {loaded:,}+ matching')"""
        )
        more.click()
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} .cm-TasksPanel-status')
                  ?.textContent.startsWith('{LONG:,} of {LONG:,} matching')"""
    )
    assert not more.is_visible() and status.inner_text().startswith(f"{LONG:,} of")
    # name each drawn row by its index, for the geometry checks
    page.evaluate(
        f"""() => {{
            const mark = () => document.querySelectorAll('{PANEL} li.cm-Row').forEach(
                (li) => {{ li.dataset.name = li.querySelector('.cm-Row-name').textContent; }});
            new MutationObserver(mark).observe(document.querySelector('{PANEL} .cm-TaskList'),
                {{ subtree: true, childList: true, characterData: true }});
            mark();
        }}"""
    )

    def settled(position: str) -> dict[str, Any]:
        """Scroll the list (JS expression of the list element ``l``), then wait until the
        drawn rows cover the viewport (from its top, or the group title above the first
        row, to its bottom, less a row's spacing); returns the geometry."""
        page.evaluate(
            f"(sel) => {{ const l = document.querySelector(sel + ' .cm-TaskList');"
            f" l.scrollTop = {position}; }}",
            PANEL,
        )
        try:
            page.wait_for_function(
                f"""(sel) => {{
                    const g = ({GEOMETRY})(sel);
                    if (!g.rows.length) return false;
                    // at the top, the group title comes first
                    const first = g.scrollTop === 0 ? g.top + 40 : g.top + 1;
                    return g.rows[0].top <= first
                        && g.rows[g.rows.length - 1].bottom >= g.bottom - 4;
                }}""",
                arg=PANEL,
                timeout=15_000,
            )
        except Exception as exc:  # Playwright's TimeoutError: say what was drawn
            g = page.evaluate(GEOMETRY, PANEL)
            raise AssertionError(f"rows do not cover the viewport at {position}: {g}") from exc
        geometry: dict[str, Any] = page.evaluate(GEOMETRY, PANEL)
        return geometry

    def check(g: dict[str, Any]) -> list[int]:
        rows = g["rows"]
        # bounded: a viewport's worth plus the overscan, never the whole list
        assert 3 <= len(rows) <= 60, len(rows)
        numbers = [int(r["id"][len(LONG_PREFIX) :]) for r in rows]
        # newest first, consecutive: nothing skipped, nothing twice
        assert numbers == list(range(numbers[0], numbers[0] - len(numbers), -1)), numbers
        for above, below in itertools.pairwise(rows):
            # no overlap, and no gap beyond the rows' spacing
            assert below["top"] >= above["bottom"] - 0.5, (above, below)
            assert below["top"] <= above["bottom"] + 4, (above, below)
        return numbers

    top = settled("0")
    numbers = check(top)
    assert numbers[0] == LONG - 1
    # the sizer makes the scrollbar span every row (each row is more than 30 px tall)
    assert top["scrollHeight"] > LONG * 30

    middle = check(settled("l.scrollHeight / 2"))
    assert middle[-1] > 0 and middle[0] < LONG - 1
    assert abs(middle[len(middle) // 2] - LONG // 2) < LONG // 5, middle

    bottom = settled("l.scrollHeight")
    assert check(bottom)[-1] == 0
    last = bottom["rows"][-1]
    assert last["bottom"] <= bottom["bottom"] + 1, ("the oldest row is in view at the end", bottom)

    # back up: the estimate-corrected offsets put the group title and the newest row at
    # the very top again
    again = settled("0")
    assert check(again)[0] == LONG - 1
    assert again["scrollTop"] == 0
    title = panel.locator('section[data-notebook=""] h3').bounding_box()
    assert title is not None and abs(title["y"] - again["top"]) < 1
    assert abs(again["rows"][0]["top"] - (title["y"] + title["height"])) < 1

    # a task changed in the store: its row is patched, not replaced
    newest = ids[-1]
    row = panel.locator(f'li.cm-Row[data-task-id="{newest}"]')
    assert row.get_attribute("data-status") == "succeeded"
    assert not offers(row, "retry")
    page.evaluate(
        f"""() => {{ document.querySelector('{PANEL} li[data-task-id="{newest}"]')
                      .__original = true; }}"""
    )
    store = SqliteStore(jupyter_lab.store)
    try:
        snap = store.get(newest)
        assert snap is not None
        changed = dataclasses.replace(
            snap,
            status=TaskStatus.FAILED,
            status_version=snap.status_version + 1,
            failure=Failure(FailureKind.EXCEPTION, "<b>changed</b> in the store"),
        )
        store.save(changed, expect_version=snap.status_version)
    finally:
        store.close()
    page.wait_for_function(
        f"""() => document.querySelector('{PANEL} li[data-task-id="{newest}"]')
                  ?.dataset.status === 'failed'""",
        timeout=20_000,
    )
    assert page.evaluate(
        f"""() => document.querySelector('{PANEL} li[data-task-id="{newest}"]')
                  .__original === true"""
    ), "the row element was replaced instead of patched"
    assert row.locator(".cm-Row-noteText").inner_text() == "exception: <b>changed</b> in the store"
    assert row.locator("b").count() == 0
    assert offers(row, "retry")
    check(settled("0"))


PAUSE_LATER = (
    "time.sleep(3.5)\n"
    "ctl.pause(h.id)\n"
    "t0 = time.time()\n"
    "while ctl.get(h.id).status.value != 'paused' and time.time() - t0 < 60:\n"
    "    time.sleep(0.05)\n"
    "print('NOW', ctl.get(h.id).status.value)\n"
)


@pytest.mark.usefixtures("finished_tasks_cleared")
def test_a_paused_tasks_elapsed_time_reads_the_same_in_the_sidebar_and_on_its_row(
    jupyter_lab: Any, notebook: Any, page: Any
) -> None:
    """Each view froze a paused row's clock when it first drew it paused: the board heard
    of the pause at once, the sidebar through the store ~1 s later, and the two read one
    second apart. Both now count to the row's ``frozen`` instant (the transition's time)."""
    forget_workspace(jupyter_lab)
    nb = notebook("paused.ipynb", [submit_cell("pausing") + "h\n", PAUSE_LATER, "ctl.stop(h.id)"])
    nb.run(0)
    tid = task_id_from(nb)
    nb.run(1)
    assert "NOW paused" in nb.wait_output(1, "NOW")
    page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
    panel = page.locator(PANEL)
    panel.wait_for(state="visible")
    side = panel.locator(f'li.cm-Row[data-task-id="{tid}"]')
    side.wait_for()
    board = nb.cell(0).locator(".cn-item").first
    page.wait_for_function(
        f"""() => {{
            const s = document.querySelector('{PANEL} li.cm-Row[data-task-id="{tid}"]');
            const b = document.querySelectorAll('.jp-Notebook .jp-Cell')[0]
                .querySelector('.cn-item');
            const st = (n) => n && n.querySelector('.cm-Row-status').textContent.trim();
            return st(s) === 'paused' && st(b) === 'paused';
        }}""",
        timeout=30_000,
    )
    # the elapsed part of `elapsed<remaining`
    side_elapsed = side.locator(".cm-Row-times").inner_text().split("<")[0]
    board_elapsed = board.locator(".cm-Row-times").inner_text().split("<")[0]
    assert int(side_elapsed.split("s", 1)[0]) >= 3, side_elapsed  # paused 3.5 s in
    assert side_elapsed == board_elapsed
    nb.run(2)

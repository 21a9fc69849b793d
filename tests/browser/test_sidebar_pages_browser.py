"""The Tasks sidebar over a long generated history, in real JupyterLab + Chromium: the
first page of 200 is listed, scrolling to the end of the list brings the next page (a
task of page 2 appears), the counts above the list are the store's ``counts()``, and
the *failed* count lists the failed tasks down to the oldest one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _rows import open_tasks_panel

from chongming_nb.stores import SqliteStore
from chongming_nb.testing.history import generate_history

pytestmark = pytest.mark.browser

PANEL = "#chongming-tasks-panel"
N = 3000  # generated tasks g00000000 (oldest) .. g00000bb7 (newest); every tenth failed


def tid(i: int) -> str:
    return f"g{i:08x}"


def fill(store_path: Path) -> dict[str, int]:
    store = SqliteStore(store_path)
    try:
        generate_history(store, N, sql=True)
        return {k.value: v for k, v in store.counts().items() if v}
    finally:
        store.close()


def status_is(page: Any, text: str) -> None:
    try:
        page.wait_for_function(
            """([sel, want]) => document.querySelector(sel + ' .cm-TasksPanel-status')
                                ?.textContent === want""",
            arg=[PANEL, text],
            timeout=30_000,
        )
    except Exception as exc:  # Playwright's TimeoutError: say what the panel said
        got = page.evaluate(
            "(sel) => [sel + ' .cm-TasksPanel-status', sel + ' .cm-TasksPanel-more']"
            ".map(s => document.querySelector(s)?.textContent)",
            PANEL,
        )
        raise AssertionError(f"status line: want {text!r}, got {got}") from exc


def scroll_to_end(page: Any) -> None:
    page.evaluate(
        "(sel) => { const l = document.querySelector(sel + ' .cm-TaskList');"
        " l.scrollTop = l.scrollHeight; }",
        PANEL,
    )


@pytest.mark.usefixtures("finished_tasks_cleared")
def test_sidebar_pages_past_the_first_page_and_counts_the_store(
    jupyter_lab: Any, page: Any
) -> None:
    counts = fill(jupyter_lab.store)
    assert sum(counts.values()) >= N
    panel = open_tasks_panel(jupyter_lab, page, PANEL)
    total = sum(counts.values())
    status_is(page, f"200 of {total:,} tasks")
    # the counts of the whole store, not of the rows loaded
    buttons = panel.locator(".cm-Count")
    expected = [f"{s} {n:,}" for s, n in counts.items()]
    drawn = "(sel) => Array.from(document.querySelectorAll(sel + ' .cm-Count'), b => b.textContent)"
    try:
        page.wait_for_function(
            f"([sel, want]) => JSON.stringify(({drawn})(sel)) === want",
            arg=[
                PANEL,
                json.dumps(expected, separators=(",", ":")),
            ],  # both in the order of the statuses
            timeout=30_000,
        )
    except Exception as exc:
        raise AssertionError(f"counts: want {expected}, got {page.evaluate(drawn, PANEL)}") from exc
    page_two = panel.locator(f'li.cm-Row[data-task-id="{tid(N - 201)}"]')
    assert page_two.count() == 0
    # scrolled to the end: the next page is asked for and drawn below
    scroll_to_end(page)
    status_is(page, f"400 of {total:,} tasks")
    scroll_to_end(page)
    page.locator(f'{PANEL} li.cm-Row[data-task-id="{tid(N - 400)}"]').wait_for()
    assert panel.locator("li.cm-Row").count() < 80  # windowed: the DOM holds the view

    # the way to an old failed task: the failed count, then to the end of its pages
    buttons.filter(has_text="failed").click()
    failed = counts["failed"]
    of = f"of {failed:,} matching tasks ({total:,} in the store)"
    status_is(page, f"200 {of}")
    for loaded in range(400, failed + 200, 200):
        scroll_to_end(page)
        status_is(page, f"{min(loaded, failed):,} {of}")
    scroll_to_end(page)
    oldest = panel.locator(f'li.cm-Row[data-task-id="{tid(9)}"]')
    oldest.wait_for()
    assert oldest.get_attribute("data-status") == "failed"
    assert panel.locator('.cm-Count[aria-pressed="true"]').inner_text() == f"failed {failed:,}"

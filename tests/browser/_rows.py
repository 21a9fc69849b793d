"""Helpers for the shared task row (labextension/src/row.ts) in browser tests: a row
offers its allowed verbs inline when it is wide enough, else in its "⋯" menu; and the
Tasks panel opened on a fresh page."""

from __future__ import annotations

from typing import Any


def offers(row: Any, verb: str) -> bool:
    """Is ``verb`` offered by a row (inline, or in its "⋯" menu when the row is narrow)?"""
    return bool(
        row.evaluate(
            """(li, verb) => [...li.querySelectorAll(`button[data-verb="${verb}"]`)]
                   .some((b) => !b.hidden)""",
            verb,
        )
    )


def click_verb(row: Any, verb: str) -> None:
    """Click ``verb`` the way a person would: the inline button when the row shows it,
    else through the row's "⋯" menu."""
    inline = row.locator(f'.cm-Row-actions button[data-verb="{verb}"]')
    if inline.is_visible():
        inline.click()
        return
    row.locator(".cm-Row-more").click()
    row.page.locator(f'body > .cm-Row-menu:not([hidden]) button[data-verb="{verb}"]').click()


def open_tasks_panel(lab: Any, page: Any, panel: str = "#chongming-tasks-panel") -> Any:
    """Load JupyterLab in ``page`` (no notebook), open the Tasks panel; its locator."""
    page.goto(lab.url_for(""))
    page.wait_for_function(
        "() => window.jupyterapp?.commands.hasCommand('chongming:open-tasks')", timeout=120_000
    )
    page.evaluate(
        """async () => { await window.jupyterapp.restored;
                         await window.jupyterapp.commands.execute('chongming:open-tasks'); }"""
    )
    located = page.locator(panel)
    located.wait_for(state="visible")
    return located

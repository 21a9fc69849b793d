"""Helpers for the shared task row (labextension/src/row.ts) in browser tests: a row
offers its allowed verbs inline when it is wide enough, else in its "⋯" menu."""

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

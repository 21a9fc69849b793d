"""A task row in real JupyterLab + Chromium, as a person sees it: at 360, 900 and 1,400 px
with the Tasks sidebar open every action allowed for a running row is inside the window
(inline, or in the row's "⋯" menu), the percentage is visible and the count, times and
rate are never cut; a paused row's text
stays the same (its clock stopped); a task a person stopped is drawn neutral, not as an
error, and says when. Screenshots go to the test's temp dir (never docs/img)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

SETUP = """\
import time
import chongming_nb as cn
ctl = cn.Controller(executor="thread")
def work(ctx):
    for _ in ctx.track(range(100_000), total=100_000, unit="rows"):
        time.sleep(0.02)
h = ctl.submit(work, name="extract flights")
h
"""
SETUP_STORE = SETUP.replace('cn.Controller(executor="thread")', "cn.get_controller()")
ROW = ".jp-Notebook .jp-Cell .cn-item .cm-Row"


def wait_status(page: Any, status: str, timeout: float = 30_000) -> None:
    page.wait_for_function(
        f"""(s) => document.querySelector('{ROW}')?.dataset.status === s""",
        arg=status,
        timeout=timeout,
    )


def box_inside(page: Any, locator: Any) -> tuple[bool, dict[str, float]]:
    """Is the element's whole box inside the window (and not covered by its clip)?"""
    box = locator.bounding_box()
    size = page.viewport_size
    assert box is not None, "element has no box (not rendered)"
    inside = (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= size["width"] + 0.5
        and box["y"] + box["height"] <= size["height"] + 0.5
        and box["width"] > 0
    )
    return inside, box


def allowed_verbs(row: Any) -> list[str]:
    return list(
        row.evaluate(
            """(r) => [...r.querySelectorAll('.cm-Row-menu button[data-verb]')]
                 .filter((b) => !b.hidden).map((b) => b.dataset.verb)"""
        )
    )


def check_row_fits(page: Any, row: Any, width: int, where: str, shots: Path) -> None:
    """The percentage and every allowed action of a running ``row`` are in the window."""
    row.scroll_into_view_if_needed()
    page.wait_for_function(
        "(r) => /^\\d+%$/.test(r.querySelector('.cm-Row-pct')?.textContent)",
        arg=row.element_handle(),
        timeout=30_000,
    )
    page.screenshot(path=str(shots / f"{where}-{width}.png"))
    pct = row.locator(".cm-Row-pct")
    assert pct.is_visible()
    ok, box = box_inside(page, pct)
    assert ok, f"{where}: the percentage is outside the {width} px window: {box}"
    # the widest percentage fits its cell whole (a clipped "10…" would read as 10%)
    widest_fits = row.evaluate(
        """(r) => {
            const p = r.querySelector('.cm-Row-pct');
            const shown = p.textContent;
            p.textContent = '100%';
            const fits = p.scrollWidth <= p.clientWidth;
            p.textContent = shown;
            return fits;
        }"""
    )
    assert widest_fits, f"{where}: '100%' is clipped in the percentage cell at {width} px"
    for cell in (".cm-Row-name", ".cm-Row-status", ".cm-Row-bar", ".cm-Row-count"):
        ok, box = box_inside(page, row.locator(cell))
        assert ok, f"{where}: {cell} is outside the {width} px window: {box}"
    # n/total, elapsed<remaining and the rate are whole: never cut, at any width (a
    # narrow row wraps its stats line instead)
    page.wait_for_function(
        "(r) => (r.querySelector('.cm-Row-rate')?.textContent || '').endsWith('/s')",
        arg=row.element_handle(),
        timeout=30_000,
    )
    cut = row.evaluate(
        """(r) => {
            const right = r.getBoundingClientRect().right + 0.5;
            return ['.cm-Row-count', '.cm-Row-times', '.cm-Row-rate']
                .map((s) => r.querySelector(s))
                .filter((c) => c.scrollWidth > c.clientWidth
                    || c.getBoundingClientRect().right > right)
                .map((c) => `${c.className}: ${c.textContent}`);
        }"""
    )
    assert cut == [], f"{where}: cut at {width} px: {cut}"
    verbs = allowed_verbs(row)
    assert verbs == ["pause", "stop"], verbs
    inline = row.locator(".cm-Row-actions")
    if inline.is_visible():
        for verb in verbs:
            button = inline.locator(f'button[data-verb="{verb}"]')
            assert button.is_visible(), verb
            ok, box = box_inside(page, button)
            assert ok, f"{where}: {verb} is outside the {width} px window: {box}"
            assert button.get_attribute("title"), f"{verb} has no tooltip"
    else:
        # narrow: the actions are one click away, and the menu opens inside the window
        more = row.locator(".cm-Row-more")
        ok, box = box_inside(page, more)
        assert ok, f"{where}: the actions button is outside the {width} px window: {box}"
        assert more.get_attribute("title") == "Actions: Pause, Stop"
        more.click()
        for verb in verbs:
            # the open menu is drawn over the page (in <body>): nothing can clip it
            entry = page.locator(f'body > .cm-Row-menu:not([hidden]) button[data-verb="{verb}"]')
            assert entry.is_visible(), verb
            ok, box = box_inside(page, entry)
            assert ok, f"{where}: {verb} (in the menu) is outside the {width} px window: {box}"
        page.screenshot(path=str(shots / f"{where}-{width}-menu.png"))
        page.keyboard.press("Escape")
        page.wait_for_function("() => !document.querySelector('body > .cm-Row-menu')")


@pytest.mark.parametrize("width", [1400, 900, 360])
def test_every_allowed_action_and_the_percentage_fit_the_window(
    notebook: Any, width: int, tmp_path: Path
) -> None:
    nb = notebook(f"fit{width}.ipynb", [SETUP_STORE, "h.stop(); h.wait(30)"])
    page = nb.page
    page.set_viewport_size({"width": width, "height": 900})
    page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
    panel = page.locator("#chongming-tasks-panel")
    panel.wait_for(state="visible", timeout=20_000)
    nb.run(0)
    wait_status(page, "running")
    task_id = page.locator(".jp-Notebook .cn-item").first.get_attribute("data-task-id")

    # the sidebar's row of the task (the sidebar is open at every width)
    side = panel.locator(f'li.cm-Row[data-task-id="{task_id}"]')
    side.wait_for(timeout=30_000)
    page.wait_for_function(
        "(r) => r.dataset.status === 'running'", arg=side.element_handle(), timeout=30_000
    )
    check_row_fits(page, side, width, "sidebar", tmp_path)

    # the notebook's row; at 360 px the open sidebar takes the whole window (JupyterLab
    # leaves the notebook a sliver), so the notebook is looked at with the sidebar shut
    if width < 500:
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
        panel.wait_for(state="hidden")
    row = page.locator(ROW).first
    check_row_fits(page, row, width, "notebook", tmp_path)
    # the bar takes the free width, not a token 40 px
    bar = row.locator(".cm-Row-bar").bounding_box()
    assert bar is not None and bar["width"] >= 0.25 * min(width - 60, 700), bar
    nb.run(1)


def test_paused_row_holds_still_and_a_user_stop_is_not_an_error(
    notebook: Any, tmp_path: Path
) -> None:
    nb = notebook("truth.ipynb", [SETUP, "ctl.close()"])
    page = nb.page
    nb.run(0)
    wait_status(page, "running")
    row = page.locator(ROW).first
    row.locator('.cm-Row-actions button[data-verb="pause"]').click()
    wait_status(page, "paused")
    # the answer to the click is shown, then fades away on its own
    page.wait_for_function(
        f"() => document.querySelector('{ROW} .cm-Row-ack')?.textContent.startsWith('Pause: ok')"
    )
    page.wait_for_function(
        f"() => document.querySelector('{ROW} .cm-Row-ack')?.textContent === ''",
        timeout=15_000,
    )
    # the assertion itself: sample the paused row's text for 3 s; it never changes
    first = row.inner_text()
    samples = []
    for _ in range(12):
        page.wait_for_timeout(250)
        samples.append(row.inner_text())
    assert all(s == first for s in samples), {s for s in samples if s != first}
    times = row.locator(".cm-Row-times").inner_text()
    assert re.fullmatch(r"\d+s<\S+", times), times
    page.screenshot(path=str(tmp_path / "paused.png"))

    row.locator('.cm-Row-actions button[data-verb="stop"]').click()
    wait_status(page, "stopped")
    assert row.get_attribute("data-tone") == "muted"
    status = row.locator(".cm-Row-status")
    assert "cm-tone-bad" not in (status.get_attribute("class") or "")
    colours = page.evaluate(
        f"""() => {{
            const s = document.querySelector('{ROW} .cm-Row-status');
            const n = document.querySelector('{ROW} .cm-Row-noteText');
            const probe = document.createElement('span');
            probe.style.color = 'var(--jp-error-color1)';
            document.body.append(probe);
            const error = getComputedStyle(probe).color;
            probe.remove();
            return {{status: getComputedStyle(s).color, note: getComputedStyle(n).color,
                     error, failureClass: n.classList.contains('cm-mod-failure')}};
        }}"""
    )
    assert colours["status"] != colours["error"], colours
    assert colours["note"] != colours["error"], colours
    assert not colours["failureClass"]
    note = row.locator(".cm-Row-noteText").inner_text()
    assert re.fullmatch(r"stopped from the widget at \d\d:\d\d", note), note
    page.screenshot(path=str(tmp_path / "stopped.png"))
    nb.run(1)

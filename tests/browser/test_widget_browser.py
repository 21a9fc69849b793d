"""The TaskTable widget in real JupyterLab + Chromium: progress moves, Pause / Resume /
Stop round-trip to the kernel (also while another cell runs a CPU-bound loop), a board of
2,000 tasks renders virtualised and scrolls, user strings render as text, and (on a page
of its own, no kernel) patches redraw rows and re-filter / re-sort the view."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
XSS = "<img src=x onerror=window.__xss=1>"

SETUP = """\
import time
import chongming_nb as cn
ctl = cn.get_controller()
def work(ctx):
    for _ in ctx.track(range(1_000_000), total=1_000_000, unit="rows"):
        time.sleep(0.01)
h = ctl.submit(work, name="cooperative")
seen = []
def _record(e):
    if getattr(e, "task_id", None) == h.id and hasattr(e, "to_status"):
        seen.append(e.to_status.value)
ctl.watch(_record)
h
"""
STATUS = "print('STATUS=' + ctl.get(h.id).status.value, 'SEEN=' + ','.join(seen))"
BUSY = """\
t0 = time.time()
n = 0
while time.time() - t0 < 20:
    n += 1
print('LOOP DONE', n)
"""


def row(nb: Any) -> Any:
    return nb.cell(0).locator(".cn-item").first


def badge_is(nb: Any, status: str, timeout: float = 20_000) -> None:
    try:
        _badge_is(nb, status, timeout)
    except Exception as exc:
        text = nb.page.evaluate(
            "() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')]"
            ".map(c => c.innerText).join('\\n----\\n')"
        )
        raise AssertionError(f"badge never showed {status!r}; notebook shows:\n{text}") from exc


def _badge_is(nb: Any, status: str, timeout: float) -> None:
    nb.page.wait_for_function(
        """(status) => {
            const b = document.querySelector('.jp-Notebook .jp-Cell .cn-item .cm-Row-status');
            return !!b && b.textContent.split(' ')[0] === status;
        }""",
        arg=status,
        timeout=timeout,
    )


def done_count(nb: Any) -> float:
    text = row(nb).locator(".cm-Row-count").inner_text()
    m = re.match(r"([\d.]+)", text)
    return float(m.group(1)) if m else 0.0


def test_progress_pause_resume_stop_round_trip(notebook: Any) -> None:
    nb = notebook("roundtrip.ipynb", [SETUP, STATUS, "1", STATUS])
    nb.run(0)
    r = row(nb)
    r.wait_for(timeout=30_000)
    badge_is(nb, "running")
    assert r.locator(".cm-Row-actions button[data-verb=pause]").is_visible()
    assert r.locator(".cm-Row-actions button[data-verb=resume]").is_hidden()
    assert r.locator(".cm-Row-actions button[data-verb=retry]").is_hidden()
    first = done_count(nb)
    nb.page.wait_for_function(
        """(first) => {
            const t = document.querySelector('.jp-Notebook .cn-item .cm-Row-count');
            return !!t && parseFloat(t.textContent) > first;
        }""",
        arg=first,
        timeout=20_000,
    )
    assert done_count(nb) > first  # progress moves
    # aria-labels name the task
    assert r.locator(".cm-Row-actions button[data-verb=pause]").get_attribute("aria-label") == (
        "Pause cooperative"
    )

    r.locator(".cm-Row-actions button[data-verb=pause]").click()
    badge_is(nb, "paused")
    assert r.locator(".cm-Row-actions button[data-verb=resume]").is_visible()
    assert r.locator(".cm-Row-actions button[data-verb=pause]").is_hidden()
    assert r.locator(".cm-Row-ack").inner_text().startswith("Pause: ok")

    r.locator(".cm-Row-actions button[data-verb=resume]").click()
    badge_is(nb, "running")
    assert r.locator(".cm-Row-ack").inner_text().startswith("Resume: ok")

    r.locator(".cm-Row-actions button[data-verb=stop]").click()
    badge_is(nb, "stopped", timeout=15_000)
    assert r.locator(".cm-Row-ack").inner_text().startswith("Stop: ok")
    for verb in ("pause", "resume", "stop", "skip"):
        assert r.locator(f".cm-Row-actions button[data-verb={verb}]").is_hidden()
    assert r.locator(".cm-Row-actions button[data-verb=retry]").is_visible()
    nb.run(2)
    nb.run(3)
    out = nb.wait_output(3, "STATUS=")
    assert "STATUS=stopped" in out
    # the kernel itself went through PAUSED, back to RUNNING, then STOPPED
    seen = out.split("SEEN=")[1].split()[0].split(",")
    assert seen[seen.index("paused") :][:2] == ["paused", "running"], seen
    assert seen[-2:] == ["stopping", "stopped"], seen


@pytest.mark.parametrize(
    "make_ctl",
    ["cn.Controller()", "cn.get_controller()"],
    ids=["no-store", "store"],
)
def test_stop_click_while_a_cpu_bound_cell_runs(notebook: Any, make_ctl: str) -> None:
    """The click reaches the kernel over the widget's comm subshell (without a store
    there is no other way), and with a store too."""
    setup = SETUP.replace("ctl = cn.get_controller()", f"ctl = {make_ctl}")
    assert f"ctl = {make_ctl}" in setup
    nb = notebook(f"busy-{make_ctl[3:7]}.ipynb", [setup, BUSY])
    nb.run(0)
    r = row(nb)
    r.wait_for(timeout=30_000)
    badge_is(nb, "running")
    nb.run(1, wait=False)
    nb.wait_busy(1, timeout=20_000)
    r.locator(".cm-Row-actions button[data-verb=stop]").click()
    badge_is(nb, "stopped", timeout=15_000)
    assert nb.is_busy(1), "the stop should land while the CPU-bound cell is still running"


BOARD = f"""\
import threading
import chongming_nb as cn
gate = threading.Event()
board_ctl = cn.Controller(executor="thread",
                          concurrency=cn.ConcurrencyPolicy(max_parallel=3))
def hold(ctx, i):
    ctx.progress(done=i % 100, total=100, unit="%")
    if i < 2:  # two tasks stay running; the rest finish through the third slot
        gate.wait(300)
for i in range(2000):
    board_ctl.submit(hold, i, name=f"task-{{i:04d}}")
bad = board_ctl.submit(hold, 7, name={XSS!r})
board_ctl.board(title="2,000 tasks")
"""
XSS_LOG = f"""\
def noisy(ctx):
    print({XSS!r})
    ctx.progress(done=1, total=2, message={XSS!r})
    raise ValueError({XSS!r})
x = board_ctl.submit(noisy, name="noisy")
x.wait(30); x.status.value
"""


def test_board_of_2000_renders_scrolls_and_escapes(notebook: Any, tmp_path: Path) -> None:
    nb = notebook("board.ipynb", [BOARD, XSS_LOG, "gate.set(); board_ctl.close()"])
    nb.run(0, timeout=180_000)
    page = nb.page
    table = nb.cell(0).locator(".cn-table")
    table.wait_for(timeout=60_000)
    page.wait_for_function(
        """() => {
            const s = document.querySelector('.jp-Notebook .cn-summary');
            return !!s && s.textContent.startsWith('2001 tasks');
        }""",
        timeout=60_000,
    )
    rendered = nb.cell(0).locator(".cn-item").count()
    assert 0 < rendered < 100, f"rows must be virtualised, {rendered} in the DOM"

    # scroll to the bottom: the last rows get rendered, the first ones leave the DOM
    viewport = nb.cell(0).locator(".cn-viewport")
    viewport.evaluate("v => { v.scrollTop = v.scrollHeight; }")
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-Notebook .cn-item')]
                 .some(e => e.dataset.index === '2000')""",
        timeout=10_000,
    )
    assert nb.cell(0).locator(".cn-item").count() < 100
    viewport.evaluate("v => { v.scrollTop = 0; }")

    # search narrows the view; the XSS-named task renders as text
    nb.cell(0).locator(".cn-search").fill("onerror")
    page.wait_for_function(
        """() => document.querySelectorAll('.jp-Notebook .cn-item').length === 1""",
        timeout=10_000,
    )
    name = nb.cell(0).locator(".cn-item .cm-Row-name")
    assert name.inner_text() == XSS
    assert nb.cell(0).locator(".cn-table img").count() == 0
    nb.cell(0).locator(".cn-search").fill("")

    # status filter
    nb.cell(0).locator(".cn-filter").select_option("running")
    page.wait_for_function(
        """() => {
            const items = [...document.querySelectorAll('.jp-Notebook .cn-item')];
            return items.length === 2 && items.every(e => e.dataset.status === 'running');
        }""",
        timeout=10_000,
    )
    nb.cell(0).locator(".cn-filter").select_option("")

    # a failing task with an XSS message, log line and traceback: all text
    nb.run(1, timeout=60_000)
    nb.wait_output(1, "failed")
    nb.cell(0).locator(".cn-search").fill("noisy")
    page.wait_for_function(
        """() => {
            const items = document.querySelectorAll('.jp-Notebook .cn-item');
            return items.length === 1 && items[0].dataset.status === 'failed';
        }""",
        timeout=20_000,
    )
    item = nb.cell(0).locator(".cn-item").first
    assert XSS in item.locator(".cm-Row-noteText").inner_text()
    item.locator(".cm-Row-name").click()
    drawer = item.locator(".cn-drawer")
    drawer.locator(".cn-log").wait_for(timeout=20_000)
    assert XSS in drawer.locator(".cn-log").inner_text()
    assert "ValueError" in drawer.locator(".cn-tb pre").inner_text()
    assert nb.cell(0).locator(".cn-table img").count() == 0
    assert page.evaluate("() => window.__xss") is None
    item.locator(".cm-Row-name").click()
    nb.cell(0).locator(".cn-search").fill("")

    # a screenshot of the rendered board (the README's pictures come from the example
    # notebooks: scripts/render_pictures.py; tests never write there)
    page.wait_for_function(
        """() => document.querySelectorAll('.jp-Notebook .cn-item').length > 5""",
        timeout=10_000,
    )
    out = tmp_path / "board.png"  # never over docs/img
    table.screenshot(path=str(out))
    assert out.stat().st_size > 5_000
    # render time per update stays small (recorded by widget.js)
    times = page.evaluate("() => globalThis.__cnRenderTimes || []")
    assert times, "widget.js records its render times"
    times = sorted(times)
    p95 = times[int(0.95 * (len(times) - 1))]
    # sanity bound only: the <= 50 ms p95 target is measured by the UI benchmark (this
    # run measured ~83 ms on the shared 2-core machine while 2,000 tasks finished)
    assert p95 < 250, f"p95 render {p95:.1f} ms"
    nb.run(2)


DISCONNECT = """\
import chongming_nb as cn
dctl = cn.Controller(executor="thread")
d = dctl.submit(lambda ctx: ctx.checkpoint() or 1, name="short")
d.wait(30)
d
"""


def test_disconnected_banner_when_the_kernel_goes(notebook: Any) -> None:
    nb = notebook("disconnect.ipynb", [DISCONNECT])
    nb.run(0)
    nb.cell(0).locator(".cn-item").first.wait_for(timeout=30_000)
    nb.shutdown()
    banner = nb.cell(0).locator(".cn-banner")
    banner.wait_for(state="visible", timeout=30_000)
    # "kernel gone (shut down)" once the kernel connection reports it ("disconnected"
    # while only the comm's close is known)
    assert re.match(
        r"(disconnected|kernel gone \([a-z ]+\)) — state as of \d\d:\d\d:\d\d",
        banner.inner_text(),
    ), banner.inner_text()
    # no action is offered without a kernel, and the menu says why
    for b in nb.cell(0).locator(".cn-item .cm-Row-actions button[data-verb]").all():
        assert b.is_hidden()
    more = nb.cell(0).locator(".cn-item .cm-Row-more").first
    assert more.is_disabled() or more.is_hidden()
    assert "no kernel to send it to" in (more.get_attribute("title") or "")


# ------------------------------------------------------------ patches, without a kernel

STATIC = REPO / "chongming_nb" / "notebook" / "static"
STANDALONE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="widget.css"></head>
<body><div id="out" style="width:1300px"></div>
<script type="module">import widget from "./widget.js"; window.__widget = widget;</script>
</body></html>"""
MOUNT = """(state) => {
  const handlers = {};
  const model = {
    get: (k) => state[k],
    on: (e, cb) => { (handlers[e] = handlers[e] || []).push(cb); },
    off: () => {},
    send: (m) => { (window.__sent = window.__sent || []).push(m); },
  };
  window.__patch = (msg) => { for (const cb of handlers["msg:custom"] || []) cb(msg, []); };
  window.__widget.render({ model, el: document.getElementById("out") });
}"""


def _shown(page: Any) -> list[tuple[str, str]]:
    """(name, progress text) of the rows on screen, top to bottom, after the next paint."""
    shown = page.evaluate(
        """() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() =>
          done([...document.querySelectorAll('#out .cn-item')]
            .sort((a, b) => Number(a.dataset.index) - Number(b.dataset.index))
            .map((e) => [e.querySelector('.cm-Row-name').textContent,
                         e.querySelector('.cm-Row-count').textContent])))))"""
    )
    return [(name, prog) for name, prog in shown]


def test_patches_redraw_rows_in_place_and_refilter_the_view(page: Any) -> None:
    """The front end patches rows in place: a progress-only patch still redraws the row,
    a status patch takes a row out of a status filter, a progress patch reorders a
    progress sort, and a patched message renders as text."""
    from chongming_nb.core.state_machine import CONTROL_VERBS
    from chongming_nb.notebook import schema as S

    files = {
        "index.html": (STANDALONE, "text/html"),
        "widget.js": ((STATIC / "widget.js").read_text(), "text/javascript"),
        "widget.css": ((STATIC / "widget.css").read_text(), "text/css"),
    }

    def serve(route: Any) -> None:
        name = route.request.url.rsplit("/", 1)[-1].split("?")[0]
        body, ctype = files.get(name, ("not found", "text/plain"))
        route.fulfill(status=200 if name in files else 404, body=body, content_type=ctype)

    def row(i: int, done: float) -> dict[str, Any]:
        r: dict[str, Any] = dict.fromkeys(S.ROW_FIELDS)
        can = {v: v in ("pause", "stop") for v in CONTROL_VERBS}
        r.update(id=f"t{i}", name=f"task-{i}", status="running", version=2, attempt=1)
        r.update(max_attempts=1, done=done, total=100.0, unit="rows", created=1.0)
        r.update(started=2.0, has_tb=False, tags=[], can=can)
        return r

    page.route("http://widget.invalid/**", serve)
    page.goto("http://widget.invalid/index.html")
    page.wait_for_function("() => window.__widget !== undefined")
    state = {
        "schema": {**S.schema_for_js(), "hash": S.schema_hash()},
        "kind": "board",
        "title": "patches",
        "rows": [row(0, 10.0), row(1, 20.0), row(2, 30.0)],
        "rows_seq": 0,
        "rows_at": 0.0,
    }
    page.evaluate(MOUNT, state)
    assert _shown(page) == [("task-0", "10/100 rows"), ("task-1", "20/100 rows"),
                            ("task-2", "30/100 rows")]  # fmt: skip

    def patch(seq: int, update: list[dict[str, Any]]) -> None:
        msg = {"type": "patch", "seq": seq, "base": seq - 1, "upsert": [], "update": update,
               "remove": [], "summary": {}, "at": 0.0}  # fmt: skip
        page.evaluate("(m) => window.__patch(m)", msg)

    patch(1, [{"id": "t1", "done": 25.0, "message": XSS}])
    assert _shown(page)[1] == ("task-1", "25/100 rows")
    assert page.locator("#out .cn-item .cm-Row-noteText").nth(1).text_content() == XSS
    assert page.locator("#out img").count() == 0

    page.locator("#out .cn-filter").select_option("running")
    assert len(_shown(page)) == 3  # painted with the filter before the patch comes
    patch(2, [{"id": "t0", "status": "paused", "version": 3}])
    assert [n for n, _ in _shown(page)] == ["task-1", "task-2"]

    page.locator("#out .cn-filter").select_option("")
    page.locator("#out .cn-sort").select_option("progress")
    assert [n for n, _ in _shown(page)] == ["task-0", "task-1", "task-2"]
    patch(3, [{"id": "t0", "done": 90.0}])
    assert _shown(page) == [("task-1", "25/100 rows"), ("task-2", "30/100 rows"),
                            ("task-0", "90/100 rows")]  # fmt: skip
    # the drawn view says so once; no gap, no sync asked
    assert page.evaluate("() => window.__sent || []") == [{"type": "view", "request_id": 1}]


CAPPED = """\
import chongming_nb as cn
capped = cn.Controller(executor="inline", history=cn.HistoryLimits(memory_finished_tasks=5))
for i in range(12):
    capped.submit(lambda: None, name=f"q{i}").wait(30)
capped.board()
"""
MORE = "for i in range(3):\n    capped.submit(lambda: None, name=f'r{i}').wait(30)\ncapped.flush()"


def test_a_board_past_the_memory_cap_counts_every_task_and_says_what_it_does_not_show(
    notebook: Any, tmp_path: Path
) -> None:
    """Issue 21 item 2: finished tasks past HistoryLimits.memory_finished_tasks leave the
    kernel's memory; the board shows the newest 5, counts all, and says the rest are not
    shown and where they are (here: nowhere, there is no store)."""
    nb = notebook("capped.ipynb", [CAPPED, MORE])
    nb.run(0)
    page = nb.page
    head = """([total, older]) => {
        const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[0];
        const s = c.querySelector('.cn-summary'), o = c.querySelector('.cn-older');
        return !!s && !!o && s.textContent.startsWith(total) && o.textContent === older;
    }"""
    where = "counted only: without a store their rows are not kept"
    page.wait_for_function(
        head, arg=["12 tasks: 12 succeeded", f"7 older finished tasks not shown — {where}"],
        timeout=60_000,
    )  # fmt: skip
    assert nb.cell(0).locator(".cn-item").count() == 5
    nb.run(1)
    page.wait_for_function(
        head, arg=["15 tasks: 15 succeeded", f"10 older finished tasks not shown — {where}"],
        timeout=60_000,
    )  # fmt: skip
    assert nb.cell(0).locator(".cn-item").count() == 5
    page.set_viewport_size({"width": 900, "height": 700})
    page.screenshot(path=str(tmp_path / "capped-board.png"))
    print("screenshot:", tmp_path / "capped-board.png")

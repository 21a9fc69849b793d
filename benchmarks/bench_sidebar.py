"""The JupyterLab Tasks sidebar (issue 7): click-to-store latency and refresh render time.

Full size, in a real ``jupyter lab`` (this checkout's server extension and prebuilt
labextension) driven through Playwright's Chromium:

* **click -> state changed in the store**: a controller process (``cn.Controller`` on
  the shared SQLite store, like a kernel's) owns a cooperative task that checkpoints every
  10 ms. The benchmark clicks Pause, then Resume, in the task's row of the Tasks panel,
  alternately, and polls the store from its own connection (every 2 ms) until the task is
  PAUSED / RUNNING. Latency = store change seen (``time.time()``) minus the click
  (``performance.timeOrigin + performance.now()`` in the page, same machine clock). The
  path: REST POST -> store command queue -> the controller's dispatcher claims it
  (it wakes at least every 50 ms) -> applied -> checkpoint -> persisted. Target p50 <= 250 ms.
* **refresh with 5,000 tasks in the store**: the store holds 5,000 finished tasks plus
  the live one. The page wraps ``fetch`` (time the listing body is read) and
  ``requestAnimationFrame`` (start/end of each callback, and whether it changed the
  panel's DOM). Clicking Refresh: render time = end of the first animation frame that
  changes the panel after the listing response was read, minus that moment (JSON parse,
  model update, waiting for the frame, and the render itself). Also reported: the
  same for a full redraw from scratch (status filter to an empty status, then back to
  all). Target <= 100 ms. The panel lists the newest ``limit`` tasks the front end asks
  for (``TaskModel`` default 2,000), which the rows say.

Both sizes, no browser: the sidebar's **pages** of the REST list as the handler answers
them (``server.listing.read_page``, the rows with their ``can`` flags, the JSON): the
first page of 200, the next one (``after=``), the first of ``status=failed`` and of
``text=load``, on a generated store of 1,000,000 tasks (tiny: 5,000;
``common.generated_store``) beside the same on a store of 2,000 (every page measured
is full there too). Target <= 1.5x
(issue 21 item 3), except the text (no index serves it: reported).

Tiny size (the smoke test; no browser, no server): the command path alone, in-process:
a command written to the store queue the way the REST handler writes it, to the state
change in the store, with the controller in this process.

No peer: dask-labextension and jupyter-scheduler have no per-task pause control to
compare with.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks._ui import UnavailableError, chromium, jupyter_lab, percentile
from benchmarks.common import generated_store, median, result, timed
from benchmarks.sizes import size_of
from chongming_nb.core.models import Command, Failure, FailureKind, Progress, TaskSnapshot
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore

S = TaskStatus
PANEL = "#chongming-tasks-panel"
CLICK_P50_MS = 250.0
RENDER_MS = 100.0
DEFAULTS: dict[str, dict[str, Any]] = {
    "tiny": {
        "clicks": 6,
        "store_tasks": 200,
        "refreshes": 0,
        "page_tasks": 5_000,
        "page_repeats": 2,
    },
    "full": {
        "clicks": 20,
        "store_tasks": 5_000,
        "refreshes": 9,
        "page_tasks": 1_000_000,
        "page_repeats": 15,
    },
}

CONTROLLER = r"""
import os, sys, time
import chongming_nb as cn
from chongming_nb.stores import SqliteStore

ctl = cn.Controller(store=SqliteStore(sys.argv[1]), owner=f"bench:{os.getpid()}:-")

def cooperative(ctx):
    n = 0
    while True:
        ctx.checkpoint()
        n += 1
        ctx.progress(done=n, unit="ticks")
        time.sleep(0.01)

h = ctl.submit(cooperative, name="sidebar-bench-cooperative")
ctl.flush()
print("TASK", h.id, flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
h.stop(graceful=True, timeout=5)
ctl.flush()
ctl.close()
"""

# ---------------------------------------------------------------- the store


def fill_store(store: SqliteStore, n: int) -> None:
    """``n`` finished tasks (mostly succeeded, some failed/stopped/cancelled), created
    over the last hours, with progress, in one group commit."""
    now = datetime.now(UTC)
    kinds = [S.SUCCEEDED] * 7 + [S.FAILED, S.STOPPED, S.CANCELLED]
    items: list[tuple[TaskSnapshot, int | None]] = []
    for i in range(n):
        status = kinds[i % len(kinds)]
        created = now - timedelta(seconds=3 * (n - i) + 60)
        total = float(100 + i % 900)
        done = total if status is S.SUCCEEDED else total / 2
        items.append(
            (
                TaskSnapshot(
                    task_id=f"bench{i:06d}{uuid.uuid4().hex[:6]}",
                    name=f"extract-{i % 37}-part-{i}",
                    status=status,
                    status_version=4,
                    attempt=1,
                    max_attempts=3,
                    created_at=created,
                    queued_at=created,
                    started_at=created + timedelta(seconds=1),
                    ended_at=created + timedelta(seconds=2 + i % 50),
                    progress=Progress(done, total, "rows", f"chunk {i % 17}", created),
                    failure=Failure(FailureKind.EXCEPTION, f"ValueError: bad row {i}")
                    if status is S.FAILED
                    else None,
                    tags=frozenset({"bench", f"group-{i % 5}"}),
                ),
                None,
            )
        )
    store.save_many(items)


def wait_status(store: SqliteStore, task_id: str, want: S, timeout: float = 30.0) -> float:
    """Poll the store (another process writes it) until ``task_id`` is ``want``; returns
    ``time.time()`` when seen."""
    deadline = time.monotonic() + timeout
    while True:
        snap = store.get(task_id)
        if snap is not None and snap.status is want:
            return time.time()
        if time.monotonic() > deadline:
            got = None if snap is None else snap.status.value
            raise TimeoutError(f"task {task_id} is {got}, not {want.value}, after {timeout} s")
        time.sleep(0.002)


# ---------------------------------------------------------------- tiny: command path


def command_path_ms(clicks: int, workdir: Path) -> list[float]:
    """In-process: a command queued the way ``POST tasks/{id}/commands`` queues it, to the
    state change in the store (ms), alternating pause and resume."""
    import chongming_nb as cn

    path = workdir / "tiny.db"
    ctl = cn.Controller(store=SqliteStore(path), owner=f"bench:{os.getpid()}:-")
    halt = threading.Event()

    def cooperative(ctx: Any) -> None:
        while not halt.is_set():
            ctx.checkpoint()
            halt.wait(0.01)

    server_side = SqliteStore(path)  # the server extension's own connection
    samples: list[float] = []
    h = ctl.submit(cooperative, name="sidebar-bench-tiny")
    try:
        ctl.flush()
        wait_status(server_side, h.id, S.RUNNING)
        for i in range(clicks):
            verb, want = ("pause", S.PAUSED) if i % 2 == 0 else ("resume", S.RUNNING)
            t0 = time.time()
            server_side.submit_command(
                Command(
                    command_id=uuid.uuid4().hex,
                    task_id=h.id,
                    verb=verb,
                    actor="sidebar:bench",
                    created_at=datetime.now(UTC),
                )
            )
            samples.append((wait_status(server_side, h.id, want) - t0) * 1000.0)
    finally:
        halt.set()
        with contextlib.suppress(Exception):
            h.resume()
        ctl.flush()
        ctl.close()
        server_side.close()
    return samples


# ---------------------------------------------------------------- full: the browser

INIT_SCRIPT = """(() => {
  const w = window;
  w.__cm = { bodies: [], frames: [] };
  const origFetch = w.fetch.bind(w);
  w.fetch = async (...args) => {
    const resp = await origFetch(...args);
    const a = args[0];
    const url = String(a && a.url ? a.url : a);
    if (url.includes('/chongming/api/tasks?') || /\\/chongming\\/api\\/tasks$/.test(url)) {
      const text = resp.text.bind(resp);
      resp.text = async () => {
        const t = await text();
        w.__cm.bodies.push({ url, at: performance.now(), bytes: t.length });
        return t;
      };
    }
    return resp;
  };
  const origRaf = w.requestAnimationFrame.bind(w);
  w.requestAnimationFrame = (cb) => origRaf((ts) => {
    const t0 = performance.now();
    try {
      cb(ts);
    } finally {
      const t1 = performance.now();
      const obs = w.__cmObserver;
      const changed = obs ? obs.takeRecords().length > 0 : false;
      w.__cm.frames.push({ ts, start: t0, end: t1, changed });
      if (w.__cm.frames.length > 5000) w.__cm.frames.splice(0, 2500);
    }
  });
})();"""

OBSERVE = """(sel) => {
  const panel = document.querySelector(sel);
  const w = window;
  w.__cmObserver = new MutationObserver((recs) => {
    // changes outside an animation frame (none expected): a frame of their own
    const at = performance.now();
    w.__cm.frames.push({ ts: -1, start: at, end: at, changed: recs.length > 0 });
  });
  w.__cmObserver.observe(panel, {
    subtree: true, childList: true, attributes: true, characterData: true,
  });
}"""

# the first frame after ``since`` that changed the panel: its end minus ``since``
SETTLED = """(since) => {
  const frames = window.__cm.frames.filter((f) => f.start >= since);
  const hit = frames.find((f) => f.changed);
  if (!hit) return null;
  const same = frames.filter((f) => f.ts === hit.ts && hit.ts !== -1);
  const end = Math.max(hit.end, ...same.map((f) => f.end));
  const busy = same.length
    ? same.reduce((a, f) => a + (f.end - f.start), 0)
    : hit.end - hit.start;
  return { total: end - since, busy };
}"""


def _refresh_once(page: Any) -> dict[str, float]:
    t_click = float(
        page.evaluate(
            f"""() => {{
                window.__cm.bodies = [];
                const t = performance.now();
                document.querySelector('{PANEL} .cm-TasksPanel-refresh').click();
                return t;
            }}"""
        )
    )
    page.wait_for_function(
        """(t) => window.__cm.bodies.some((b) => b.at >= t)
              && window.__cm.frames.some((f) => f.changed
                   && f.start >= window.__cm.bodies.find((b) => b.at >= t).at)""",
        arg=t_click,
        timeout=60_000,
    )
    body = page.evaluate(
        "(t) => window.__cm.bodies.find((b) => b.at >= t)",
        t_click,
    )
    settled = page.evaluate(SETTLED, body["at"])
    return {
        "render_ms": float(settled["total"]),
        "busy_ms": float(settled["busy"]),
        "fetch_ms": float(body["at"]) - t_click,
        "bytes": float(body["bytes"]),
    }


def _redraw_once(page: Any) -> dict[str, float]:
    """Filter to an empty status (the list empties), then back to all: draw every row."""
    select = f"{PANEL} .cm-Filter-status"
    page.evaluate(
        """(sel) => { const s = document.querySelector(sel);
                      s.value = 'status:blocked'; s.dispatchEvent(new Event('change')); }""",
        select,
    )
    page.wait_for_function(f"() => document.querySelectorAll('{PANEL} li.cm-Row').length === 0")
    t0 = float(
        page.evaluate(
            """(sel) => { const s = document.querySelector(sel); const t = performance.now();
                          s.value = ''; s.dispatchEvent(new Event('change')); return t; }""",
            select,
        )
    )
    page.wait_for_function(f"() => document.querySelectorAll('{PANEL} li.cm-Row').length > 0")
    settled = page.evaluate(SETTLED, t0)
    return {"render_ms": float(settled["total"]), "busy_ms": float(settled["busy"])}


@contextlib.contextmanager
def _controller_process(store_path: Path, workdir: Path) -> Iterator[tuple[str, Any]]:
    env = dict(os.environ, CHONGMING_STORE=str(store_path), PYTHONUNBUFFERED="1")
    err = (workdir / "controller.err").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(store_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("TASK "):
            proc.kill()
            raise RuntimeError(
                f"controller process failed: {line!r} {(workdir / 'controller.err').read_text()}"
            )
        yield line.split()[1], proc
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        err.close()


def browser_run(clicks: int, n_store: int, refreshes: int, workdir: Path) -> dict[str, Any]:
    store_path = workdir / "tasks.db"
    reader = SqliteStore(store_path)
    out: dict[str, Any] = {}
    try:
        fill_store(reader, n_store)
        with (
            _controller_process(store_path, workdir) as (task_id, _proc),
            jupyter_lab(workdir / "lab", store_path) as lab,
            chromium() as browser,
        ):
            wait_status(reader, task_id, S.RUNNING)
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            page.set_default_timeout(90_000)
            page.add_init_script(INIT_SCRIPT)
            page.goto(lab.url_for())
            page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
            page.wait_for_function(
                "() => window.jupyterapp.commands.hasCommand('chongming:open-tasks')",
                timeout=120_000,
            )
            _open_panel(page)
            row = f'{PANEL} li.cm-Row[data-task-id="{task_id}"]'
            page.locator(row).wait_for()
            page.evaluate(OBSERVE, PANEL)
            out["rows_listed"] = page.locator(f"{PANEL} li.cm-Row").count()

            # --- click -> store
            latencies: list[float] = []
            first_change: list[float] = []
            for i in range(clicks):
                verb, want = ("pause", S.PAUSED) if i % 2 == 0 else ("resume", S.RUNNING)
                # the row's own button (inline, or in its ⋯ menu when narrow: the same
                # handler), offered once the verb is allowed
                button = f'{row} .cm-Row-actions button[data-verb="{verb}"]'
                page.wait_for_function(
                    "(sel) => { const b = document.querySelector(sel); return b && !b.hidden; }",
                    arg=button,
                    timeout=30_000,
                )
                before = reader.get(task_id)
                assert before is not None
                t_click = float(
                    page.evaluate(
                        """(sel) => { const t = performance.timeOrigin + performance.now();
                                      document.querySelector(sel).click(); return t; }""",
                        button,
                    )
                )
                changed = _first_change(reader, task_id, before.status_version)
                seen = wait_status(reader, task_id, want)
                latencies.append(seen * 1000.0 - t_click)
                first_change.append(changed * 1000.0 - t_click)
            out["click_ms"] = latencies
            out["first_change_ms"] = first_change

            # --- refresh with the full store
            out["refresh"] = [_refresh_once(page) for _ in range(refreshes)]
            out["redraw"] = [_redraw_once(page) for _ in range(max(1, refreshes // 3))]
            # the same redraw in a 360 px window (the panel as wide as the window allows)
            page.set_viewport_size({"width": NARROW_WINDOW_PX, "height": 900})
            out["redraw_narrow"] = [_redraw_once(page) for _ in range(max(1, refreshes // 3))]
            page.set_viewport_size({"width": 1400, "height": 900})
            # the rows the panel lists (the windowed list keeps only those in view in
            # the DOM, so they are counted in the listing, not as elements)
            out["rows_listed"] = _listed_rows(lab)
            out["rows_in_dom"] = page.locator(f"{PANEL} li.cm-Row").count()
            out["listing_ms_page_open"] = _listing_ms(lab, 3)
            context.close()
            out["listing_ms"] = _listing_ms(lab, 3)
    finally:
        reader.close()
    return out


def _listed_rows(lab: Any) -> int:
    """How many tasks the panel's listing (``GET tasks?limit=2000``) returns."""
    body = lab.api("/chongming/api/tasks?limit=2000")
    tasks = body.get("tasks", body) if isinstance(body, dict) else body
    return len(tasks)


def _listing_ms(lab: Any, rounds: int) -> list[float]:
    """The REST listing the panel asks for (``GET tasks?limit=2000``), timed from Python
    (no browser): request to parsed JSON, ms."""
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        lab.api("/chongming/api/tasks?limit=2000")
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def _open_panel(page: Any) -> None:
    """Open the Tasks panel once the shell has restored its layout (a layout restored
    after the command would hide the panel again)."""
    for _ in range(5):
        page.evaluate(
            """async () => {
                await window.jupyterapp.restored;
                await window.jupyterapp.commands.execute('chongming:open-tasks');
            }"""
        )
        try:
            page.locator(PANEL).wait_for(state="visible", timeout=10_000)
            return
        except Exception:  # Playwright's TimeoutError: ask again
            continue
    raise RuntimeError("the Tasks panel did not become visible")


def _first_change(store: SqliteStore, task_id: str, version: int, timeout: float = 30.0) -> float:
    """``time.time()`` when the task's status_version first moves past ``version``."""
    deadline = time.monotonic() + timeout
    while True:
        snap = store.get(task_id)
        if snap is not None and snap.status_version > version:
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task_id} did not change within {timeout} s")
        time.sleep(0.002)


# ---------------------------------------------------------------- run


def _params(size: str) -> dict[str, Any]:
    p = dict(DEFAULTS.get(size, DEFAULTS["tiny"]))
    p.update(size_of(size, "sidebar"))  # benchmarks/sizes.py may override
    return p


#: The store the sidebar's pages are compared with: each page measured is full there
#: too (200 of its tasks failed) and a next page follows (an empty store lists nothing).
PAGE_PEER_TASKS = 2_000


def _page_ms(path: Path, listing: Any, *, second: bool) -> float:
    """One listing as the REST handler answers it (``server.listing.read_page``, the rows
    with their ``can`` flags, the JSON), without the HTTP round trip; ``second``: the
    page after the first one's cursor."""
    from dataclasses import replace as with_

    from chongming_nb.core.state_machine import StateMachine
    from chongming_nb.runtime.clock import SYSTEM_CLOCK
    from chongming_nb.server.listing import read_page
    from chongming_nb.server.serialize import task_rows

    store = SqliteStore(path, readonly=True)
    sm = StateMachine(SYSTEM_CLOCK)
    try:
        if second:
            listing = with_(listing, after=read_page(store, listing).next)

        def answer() -> str:
            page = read_page(store, listing)
            rows = task_rows(page.tasks, sm=sm, now=datetime.now(UTC), owners={}, sessions={})
            body = {"tasks": rows, "next": page.next, "counts": page.counts, "totals": page.totals}
            return json.dumps(body, default=str, separators=(",", ":"))

        answer()  # warm: the file's pages in the OS cache
        return min(timed(answer) for _ in range(3)) * 1e3
    finally:
        store.close()


def page_rows(tasks: int, repeats: int) -> list[dict[str, Any]]:
    """The sidebar's pages of the REST list on a generated store of ``tasks`` tasks
    (``common.generated_store``) beside the same on a store of ``PAGE_PEER_TASKS``."""
    from chongming_nb.server.contract import LIST_PAGE
    from chongming_nb.server.listing import Listing

    big, small = generated_store(tasks), generated_store(PAGE_PEER_TASKS)
    failed = Listing(statuses=frozenset({S.FAILED}), limit=LIST_PAGE)
    rows = []
    for what, listing, second, target in (
        ("first page", Listing(limit=LIST_PAGE), False, 1.5),
        ("next page (after= the first page's cursor)", Listing(limit=LIST_PAGE), True, 1.5),
        ("first page of the failed tasks (status=failed)", failed, False, 1.5),
        ("first page of text=load (no index: rows are read until 200 match)",
         Listing(text="load", limit=LIST_PAGE), False, None),
    ):  # fmt: skip
        samples: dict[str, list[float]] = {"big": [], "small": []}
        for _ in range(max(1, repeats // 3)):
            samples["big"].append(_page_ms(big, listing, second=second))
            samples["small"].append(_page_ms(small, listing, second=second))
        o, peer = min(samples["big"]), min(samples["small"])
        peer_name = f"a store of {PAGE_PEER_TASKS:,} tasks"
        rows.append(
            result(
                f"sidebar {what}: {LIST_PAGE} rows + whole-store counts as the REST list "
                f"answers it, store of {tasks:,} tasks vs {peer_name}",
                round(o, 2),
                "ms",
                target=f"<= {target:g}x {peer_name}" if target else "reported",
                passed=o <= target * peer if target else None,
                peer={peer_name: round(peer, 2)},
                ratio=o / peer if peer else None,
                samples_ms=samples,
                load_1min=round(os.getloadavg()[0], 2),
            )
        )
    return rows


def run(size: str) -> list[dict[str, Any]]:
    p = _params(size)
    clicks = int(p["clicks"])
    pages = page_rows(int(p["page_tasks"]), int(p["page_repeats"]))
    with tempfile.TemporaryDirectory(prefix="cm-sidebar-bench-") as tmp:
        workdir = Path(tmp)
        if size != "full":
            tiny_ms = command_path_ms(clicks, workdir)
            p50 = median(tiny_ms)
            return [
                *pages,
                result(
                    "sidebar (tiny: no browser): command queued as the REST handler queues "
                    "it -> task state changed in the store, pause/resume of a cooperative "
                    "task, p50 (no peer)",
                    p50,
                    "ms",
                    target=f"p50 <= {CLICK_P50_MS:g} ms",
                    passed=p50 <= CLICK_P50_MS,
                    samples_ms=tiny_ms,
                ),
                _render_placeholder("refresh"),
                _render_placeholder("redraw"),
                _render_placeholder(f"redraw, {NARROW_WINDOW_PX} px window"),
            ]
        try:
            b = browser_run(clicks, int(p["store_tasks"]), int(p["refreshes"]), workdir)
        except UnavailableError as exc:
            return [
                *pages,
                result(
                    "sidebar click -> task state changed in the store, p50",
                    None,
                    "ms",
                    target=f"p50 <= {CLICK_P50_MS:g} ms",
                    passed=None,
                    note=str(exc),
                ),
            ]
    n_store = int(p["store_tasks"])
    clicks_ms: list[float] = b["click_ms"]
    p50 = percentile(clicks_ms, 50)
    rows = [
        *pages,
        result(
            "sidebar click (Pause/Resume in the Tasks panel, real jupyter lab + Chromium) -> "
            "task state changed in the store (controller process, cooperative task), p50 "
            "(no peer)",
            p50,
            "ms",
            target=f"p50 <= {CLICK_P50_MS:g} ms",
            passed=p50 <= CLICK_P50_MS,
            p95_ms=percentile(clicks_ms, 95),
            first_change_p50_ms=percentile(b["first_change_ms"], 50),
            samples_ms=clicks_ms,
        ),
    ]
    fetch = [s["fetch_ms"] for s in b["refresh"]]
    rows.append(
        result(
            f"sidebar Refresh with {n_store:,} tasks in the store: click -> listing "
            "response read in the page, p50 (server: SQLite query, can_* per row, JSON; "
            "no target in the issue; no peer)",
            percentile(fetch, 50),
            "ms",
            target="reported",
            passed=None,
            rest_from_python_ms_p50=percentile(b["listing_ms"], 50),
            rest_from_python_page_open_ms_p50=percentile(b["listing_ms_page_open"], 50),
            rest_from_python_ms=b["listing_ms"],
            response_bytes=b["refresh"][0]["bytes"],
        )
    )
    for key, label in (
        ("refresh", "Refresh clicked: listing response read -> panel DOM settled"),
        ("redraw", "full redraw of the list (filter to none, back to all) -> DOM settled"),
        (
            "redraw_narrow",
            f"the same full redraw in a {NARROW_WINDOW_PX} px window (narrow rows, "
            "actions in the ⋯ menu)",
        ),
    ):
        samples: list[dict[str, float]] = b[key]
        totals = [s["render_ms"] for s in samples]
        med = percentile(totals, 50)
        rows.append(
            result(
                f"sidebar render with {n_store:,} tasks in the store ({b['rows_listed']:,} "
                f"rows listed): {label}, p50 (no peer)",
                med,
                "ms",
                target=f"<= {RENDER_MS:g} ms",
                passed=med <= RENDER_MS,
                max_ms=max(totals),
                rows_in_dom=b["rows_in_dom"],
                busy_ms_p50=percentile([s["busy_ms"] for s in samples], 50),
                fetch_ms_p50=percentile([s["fetch_ms"] for s in samples], 50)
                if "fetch_ms" in samples[0]
                else None,
                samples=samples,
            )
        )
    return rows


#: the narrow window of the narrow-width render row
NARROW_WINDOW_PX = 360


def _render_placeholder(which: str) -> dict[str, Any]:
    return result(
        f"sidebar render ({which}) with 5,000 tasks in the store",
        None,
        "ms",
        target=f"<= {RENDER_MS:g} ms",
        passed=None,
        note="measured at full size only (needs jupyter lab and Chromium)",
    )


def _main(argv: list[str]) -> None:
    for r in run(argv[1] if len(argv) > 1 else "tiny"):
        print({k: v for k, v in r.items() if k != "samples"})


if __name__ == "__main__":
    _main(sys.argv)

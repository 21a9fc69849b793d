"""Widget traffic and kernel CPU for N tasks updating progress at once (issues 6 and 10).

Ours: one board ``TaskTable`` (the anywidget model behind ``ctl.board()``) over N running
tasks of the widget layer's in-memory ``FakeController``, with a recording comm (no
kernel, no browser) and its real flush scheduler on the real clock. Every task reports
progress ``rate`` times a second for ``seconds`` wall seconds, in 0.1 s ticks.
Measured: comm messages/s and bytes/s the widget publishes (patches and full-state
refreshes), bytes per changed row in a patch against a full row, and the kernel CPU
share of the board: thread CPU time spent in the widget's event intake (``_on_event``,
timed per call on the producer thread) and its flushes (timed on the flush thread),
divided by wall time. The fake controller's ``list_tasks(ids=...)`` scan during a flush
is charged to the widget (it is on the widget's update path).

Peer: the same update stream shown as one ``ipywidgets.IntProgress`` per task (the
do-it-yourself alternative; ipywidgets#1408 measured the same effect with Buttons): each
``bar.value = done`` is timed; its comm messages and bytes are counted the same way.
Also: CPU and comm models to *open* the N-row board against N IntProgress bars.

Browser (full size only): the real ``static/widget.js`` in real Chromium, fed the
initial rows and then every message the board sent during the run (replayed in order
through a minimal anywidget-like model); render time per update = the synchronous
message handler + the paint it schedules (the widget's own ``performance.now()`` record).
Target p95 <= 50 ms.

Bytes are ``len(json.dumps(data))`` of each published ``comm_msg`` (the fake comm does not
serialise; a real kernel adds JSON + ZeroMQ cost proportional to these bytes, for both).
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import comm as comm_module

from benchmarks._ui import UnavailableError, percentile, static_page
from benchmarks.common import result, safe_ratio
from benchmarks.sizes import size_of
from chongming_nb.notebook.widget import _STATIC, TaskTable
from chongming_nb.runtime.clock import SystemClock
from chongming_nb.testing.widgets import FakeController, RecordingComm

TICK = 0.1
MAX_MESSAGES_PER_S = 10.0
MAX_CPU_SHARE = 0.25  # of one core, for the whole board
MAX_PATCH_ROW_FRACTION = 0.5  # bytes per changed row in a patch / bytes of a full row
RENDER_P95_MS = 50.0


def _nbytes(data: Any) -> int:
    return len(json.dumps(data, separators=(",", ":"), default=str))


class _TimedTable(TaskTable):
    """A board that adds up the thread CPU time of its own update path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.intake_cpu = 0.0
        self.flush_cpu = 0.0
        self.flushes = 0
        self._timing_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def _on_event(self, event: Any) -> None:
        t0 = time.thread_time()
        super()._on_event(event)
        self.intake_cpu += time.thread_time() - t0  # one producer thread

    def _scheduled_flush(self) -> None:
        t0 = time.thread_time()
        super()._scheduled_flush()
        spent = time.thread_time() - t0
        with self._timing_lock:
            self.flush_cpu += spent
            self.flushes += 1


def _drive(n: int, seconds: float, rate: float, update: Callable[[int, int], None]) -> float:
    """Call ``update(task_index, value)`` so that every task updates ``rate`` times a second
    for ``seconds``, in ticks of 0.1 s (pacing a load generator, not synchronisation).
    Returns the wall time the run really took."""
    per_tick = max(1, round(n * rate * TICK))
    steps = max(1, round(seconds / TICK))
    cursor = 0
    t0 = time.perf_counter()
    for step in range(steps):
        for _ in range(per_tick):
            update(cursor % n, cursor // n + 1)
            cursor += 1
        pause = t0 + (step + 1) * TICK - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    return time.perf_counter() - t0


class _SerializingComm(RecordingComm):
    """A recording comm that also JSON-encodes what it publishes, as a kernel's session
    would before sending it (so that cost lands on the sender's CPU time), and keeps the
    encoded size."""

    def __init__(self, **kwargs: Any) -> None:
        self.sizes: list[int] = []
        super().__init__(**kwargs)

    def publish_msg(
        self,
        msg_type: str,
        data: Any = None,
        metadata: Any = None,
        buffers: Any = None,
        **keys: Any,
    ) -> None:
        size = _nbytes(data)
        with self._rec_lock:
            self.published.append((msg_type, data))
            self.sizes.append(size)


@contextlib.contextmanager
def _serializing_comms() -> Iterator[list[_SerializingComm]]:
    made: list[_SerializingComm] = []
    original = comm_module.create_comm

    def create(**kwargs: Any) -> _SerializingComm:
        c = _SerializingComm(**kwargs)
        made.append(c)
        return c

    comm_module.create_comm = create
    try:
        yield made
    finally:
        comm_module.create_comm = original


def _published_since(c: RecordingComm, start: int) -> list[tuple[Any, int]]:
    """(data, encoded bytes) of every comm_msg published from index ``start`` on."""
    assert isinstance(c, _SerializingComm)
    with c._rec_lock:
        return [
            (d, n)
            for (t, d), n in zip(c.published[start:], c.sizes[start:], strict=True)
            if t == "comm_msg"
        ]


def _ours(n: int, seconds: float, rate: float) -> dict[str, Any]:
    ctl = FakeController(clock=SystemClock())
    ids = [ctl.add(f"task-{i}", status="running", total=1e9).task_id for i in range(n)]
    gc.collect()
    with _serializing_comms() as comms:
        cpu0 = time.process_time()
        table = _TimedTable(ctl, kind="board", title="bench")
        open_cpu = time.process_time() - cpu0
        comm = table.comm
        assert isinstance(comm, RecordingComm)
        rows0 = table.current_rows()
        initial: dict[str, Any] = {
            "schema": table.schema,
            "kind": table.kind,
            "title": table.title,
            "rows": rows0,
            "rows_seq": table.seq,
            "rows_at": table.rows_at,
        }
        full_row_bytes = sum(_nbytes(r) for r in rows0) / max(1, n)
        table.intake_cpu = table.flush_cpu = 0.0
        start = len(comm.published)
        wall = _drive(n, seconds, rate, lambda i, _v: ctl.bump(ids[i], 1.0))
        intake, flush = table.intake_cpu, table.flush_cpu
        published = _published_since(comm, start)
        table.close()
    sent = [d for d, _ in published]
    total_bytes = sum(nb for _, nb in published)
    patches = [
        (d["content"], nb)
        for d, nb in published
        if d.get("method") == "custom" and d["content"].get("type") == "patch"
    ]
    patch_bytes = sum(nb for _, nb in patches)
    patch_rows = sum(len(p["update"]) + len(p["upsert"]) for p, _ in patches)
    replay = [
        {"kind": "custom", "msg": d["content"]}
        if d.get("method") == "custom"
        else {"kind": "state", "state": d.get("state", {})}
        for d in sent
        if d.get("method") in ("custom", "update")
    ]
    return {
        "wall": wall,
        "events": round(n * rate * TICK) * round(seconds / TICK),
        "messages": len(sent),
        "patches": len(patches),
        "state_updates": sum(d.get("method") == "update" for d in sent),
        "bytes": total_bytes,
        "patch_bytes": patch_bytes,
        "patch_rows": patch_rows,
        "full_row_bytes": full_row_bytes,
        "cpu": intake + flush,
        "intake_cpu": intake,
        "flush_cpu": flush,
        "open_cpu": open_cpu,
        "open_models": len(comms),
        "initial": initial,
        "replay": replay,
    }


def _peer(n: int, seconds: float, rate: float) -> dict[str, Any]:
    import ipywidgets  # type: ignore[import-untyped]

    gc.collect()
    with _serializing_comms() as comms:
        cpu0 = time.process_time()
        bars = [ipywidgets.IntProgress(value=0, min=0, max=10**9, description=f"task-{i}")
                for i in range(n)]  # fmt: skip
        open_cpu = time.process_time() - cpu0
        opened = len(comms)
        starts = [len(c.published) for c in comms]
        spent = [0.0]

        def update(i: int, value: int) -> None:
            t0 = time.thread_time()
            bars[i].value = value
            spent[0] += time.thread_time() - t0

        wall = _drive(n, seconds, rate, update)
        sent = [x for c, s in zip(comms, starts, strict=True) for x in _published_since(c, s)]
        for b in bars:
            b.close()
        for c in comms[opened:]:
            c.close()
    return {
        "wall": wall,
        "messages": len(sent),
        "bytes": sum(nb for _, nb in sent),
        "cpu": spent[0],
        "open_cpu": open_cpu,
        "open_models": opened,
    }


# ------------------------------------------------------------------ browser

_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="widget.css"></head>
<body style="margin:0"><div id="out" style="width:__WIDTH__px"></div>
<script type="module">
import widget from "./widget.js";
window.__widget = widget;
</script></body></html>"""

_MOUNT = """(init) => {
  const handlers = {};
  const state = Object.assign({}, init);
  const model = {
    get: (k) => state[k],
    on: (e, cb) => { (handlers[e] = handlers[e] || []).push(cb); },
    off: (e, cb) => { handlers[e] = (handlers[e] || []).filter((x) => x !== cb); },
    send: () => {},
  };
  window.__state = state;
  window.__handlers = handlers;
  window.__widget.render({ model, el: document.getElementById("out") });
  return document.getElementById("out").dataset.rendered || "0";
}"""

_APPLY = """async (upd) => {
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  await frame();  // start on a fresh frame, nothing pending
  globalThis.__cnRenderTimes = [];
  const t0 = performance.now();
  if (upd.kind === "custom") {
    for (const cb of window.__handlers["msg:custom"] || []) cb(upd.msg, []);
  } else {
    Object.assign(window.__state, upd.state);
    for (const k of Object.keys(upd.state))
      for (const cb of window.__handlers["change:" + k] || []) cb();
  }
  const handler = performance.now() - t0;
  await frame();  // the widget's paint was requested first, so it has run
  const paints = globalThis.__cnRenderTimes.slice();
  return { handler, paint: paints.reduce((a, b) => a + b, 0), paints: paints.length };
}"""


#: the board's width in the page: a wide notebook, and a narrow one (a 360 px window:
#: the rows wrap onto more lines and the actions fold into the "⋯" menu)
WIDE_PX = 1300
NARROW_PX = 330


def _browser_render(
    initial: dict[str, Any], replay: list[dict[str, Any]], width: int = WIDE_PX
) -> dict[str, Any]:
    files = {
        "index.html": (_PAGE.replace("__WIDTH__", str(width)), "text/html"),
        "widget.js": ((_STATIC / "widget.js").read_text(), "text/javascript"),
        "widget.css": ((_STATIC / "widget.css").read_text(), "text/css"),
    }

    with static_page(files, max(width + 30, 360)) as page:
        page.wait_for_function("() => window.__widget !== undefined")
        rendered = int(page.evaluate(_MOUNT, initial))
        samples: list[dict[str, float]] = [page.evaluate(_APPLY, u) for u in replay]
    per_update = [s["handler"] + s["paint"] for s in samples]
    return {"rendered_rows": rendered, "per_update_ms": per_update, "samples": samples}


# ------------------------------------------------------------------ run


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "widget")
    n = int(p.get("tasks", 100))
    seconds = float(p.get("seconds", 1.0))
    rate = float(p.get("updates_per_task_per_second", 1.0))
    ours = _ours(n, seconds, rate)
    peer = _peer(n, seconds, rate)
    what = f"{n:,} tasks each updating progress {rate:g}/s"
    rows: list[dict[str, Any]] = []

    msgs = ours["messages"] / ours["wall"]
    peer_msgs = peer["messages"] / peer["wall"]
    rows.append(
        result(
            f"widget: comm messages/s to the front end, one board, {what} "
            "(peer: one ipywidgets.IntProgress per task)",
            msgs,
            "msg/s",
            target=f"<= {MAX_MESSAGES_PER_S:g}/s per widget",
            passed=msgs <= MAX_MESSAGES_PER_S,
            peer={"IntProgress": peer_msgs},
            ratio=safe_ratio(msgs, peer_msgs),
            patches=ours["patches"],
            state_updates=ours["state_updates"],
            events=ours["events"],
            wall_s=ours["wall"],
            peer_wall_s=peer["wall"],
        )
    )
    bps = ours["bytes"] / ours["wall"]
    peer_bps = peer["bytes"] / peer["wall"]
    rows.append(
        result(
            f"widget: bytes/s to the front end, {what} (patches + full-state refreshes)",
            bps,
            "B/s",
            target="reported (payload judged per changed row below)",
            passed=None,
            peer={"IntProgress": peer_bps},
            ratio=safe_ratio(bps, peer_bps),
            patch_bytes=ours["patch_bytes"],
            full_state_bytes=ours["bytes"] - ours["patch_bytes"],
        )
    )
    per_row = ours["patch_bytes"] / ours["patch_rows"] if ours["patch_rows"] else None
    frac = safe_ratio(per_row, ours["full_row_bytes"])
    rows.append(
        result(
            "widget: patch bytes per changed row (peer column: bytes of a full row; "
            "no ipywidgets peer)",
            per_row,
            "B/row",
            target=f"<= {MAX_PATCH_ROW_FRACTION:g}x a full row (only changed fields)",
            passed=None if frac is None else frac <= MAX_PATCH_ROW_FRACTION,
            peer={"full row": ours["full_row_bytes"]},
            ratio=frac,
            patch_rows=ours["patch_rows"],
        )
    )
    share = ours["cpu"] / ours["wall"]
    peer_share = peer["cpu"] / peer["wall"]
    rows.append(
        result(
            f"widget: kernel CPU share of the board, {what} (thread CPU in the update path "
            "/ wall; peer: CPU in IntProgress.value updates)",
            share * 100,
            "% of a core",
            target=f"<= {MAX_CPU_SHARE:.0%} of one core",
            passed=share <= MAX_CPU_SHARE,
            peer={"IntProgress": peer_share * 100},
            ratio=safe_ratio(share, peer_share),
            intake_cpu_s=ours["intake_cpu"],
            flush_cpu_s=ours["flush_cpu"],
            peer_cpu_s=peer["cpu"],
        )
    )
    rows.append(
        result(
            f"widget: CPU to open a {n:,}-task board (ours: 1 TaskTable; peer: {n:,} "
            f"IntProgress = {peer['open_models']:,} comm models)",
            ours["open_cpu"],
            "s",
            target="< peer",
            passed=ours["open_cpu"] < peer["open_cpu"],
            peer={"IntProgress": peer["open_cpu"]},
            ratio=safe_ratio(ours["open_cpu"], peer["open_cpu"]),
            ours_models=ours["open_models"],
            peer_models=peer["open_models"],
        )
    )
    render_metric = (
        f"widget: browser render time per update, p95 (Chromium, real widget.js, "
        f"{n:,}-row board, the run's messages replayed; no peer)"
    )
    narrow_metric = (
        f"widget: browser render time per update, p95, narrow ({NARROW_PX} px board: "
        f"rows on four lines, actions in the ⋯ menu; {n:,} rows, the same messages; "
        "peer column: the wide board)"
    )
    if size != "full":
        for metric in (render_metric, narrow_metric):
            rows.append(
                result(
                    metric,
                    None,
                    "ms",
                    target=f"<= {RENDER_P95_MS:g} ms",
                    passed=None,
                    note="measured at full size only",
                )
            )
        return rows
    try:
        b = _browser_render(ours["initial"], ours["replay"])
        narrow = _browser_render(ours["initial"], ours["replay"], width=NARROW_PX)
    except UnavailableError as exc:
        rows.append(
            result(
                render_metric,
                None,
                "ms",
                target=f"<= {RENDER_P95_MS:g} ms",
                passed=None,
                note=str(exc),
            )
        )
        return rows
    times = b["per_update_ms"]
    p95 = percentile(times, 95)
    patch_sizes = [
        (len(u["msg"].get("update", [])) + len(u["msg"].get("upsert", [])), ms)
        for u, ms in zip(ours["replay"], times, strict=True)
        if u["kind"] == "custom" and u["msg"].get("type") == "patch"
    ]
    per_k = [ms * 1000.0 / k for k, ms in patch_sizes if k > 0]
    rows.append(
        result(
            render_metric,
            p95,
            "ms",
            target=f"<= {RENDER_P95_MS:g} ms",
            passed=p95 <= RENDER_P95_MS,
            updates=len(times),
            p50_ms=percentile(times, 50),
            max_ms=max(times),
            rendered_rows=b["rendered_rows"],
            rows_per_patch_p50=percentile([float(k) for k, _ in patch_sizes], 50)
            if patch_sizes
            else None,
            ms_per_1000_changed_rows_p50=percentile(per_k, 50) if per_k else None,
            full_state_ms=[
                s["handler"] + s["paint"]
                for s, u in zip(b["samples"], ours["replay"], strict=True)
                if u["kind"] == "state"
            ],
        )
    )
    nt = narrow["per_update_ms"]
    np95 = percentile(nt, 95)
    rows.append(
        result(
            narrow_metric,
            np95,
            "ms",
            target=f"<= {RENDER_P95_MS:g} ms",
            passed=np95 <= RENDER_P95_MS,
            peer={f"{WIDE_PX} px": p95},
            ratio=safe_ratio(np95, p95),
            updates=len(nt),
            p50_ms=percentile(nt, 50),
            max_ms=max(nt),
            rendered_rows=narrow["rendered_rows"],
        )
    )
    return rows


if __name__ == "__main__":
    import sys

    for r in run(sys.argv[1] if len(sys.argv) > 1 else "tiny"):
        print({k: v for k, v in r.items() if k != "full_state_ms"})

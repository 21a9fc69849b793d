"""Per-item overhead of a loop in a cell: ``cn.track`` beside ``tqdm.notebook.tqdm`` and
``tqdm.auto.tqdm``, and beside ``ctx.track`` inside a task, all in one real Jupyter
kernel (nbclient), in the same run.

The kernel is told it has a front end (``JPY_SESSION_NAME``, as jupyter_server sets it),
so ``cn.track`` does what it does in JupyterLab: it is a task of the kernel's controller
(on a temporary SQLite store) and displays its row. Overhead per item = (time of the
wrapped loop - time of a bare loop) / items, best of several repeats, in CPU time of
the cell's thread (``time.thread_time``: on a shared 2-core machine the wall clock of a
loop this short mostly measures who else ran).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import result, safe_ratio
from benchmarks.sizes import size_of

CELL = """\
import gc, json, time, warnings
import chongming_nb as cn
from tqdm.auto import tqdm as auto_tqdm
from tqdm.notebook import tqdm as nb_tqdm
warnings.simplefilter("ignore")
ITEMS, REPEATS, STOP_TRIALS = {items}, {repeats}, {trials}
r = range(ITEMS)

def timed(fn):
    gc.collect(); gc.disable()
    try:
        t0 = time.thread_time(); fn(); return time.thread_time() - t0
    finally:
        gc.enable()

def bare():
    for _ in r:
        pass

def cn_track():
    for _ in cn.track(r, desc="bench"):
        pass

def tqdm_notebook():
    for _ in nb_tqdm(r):
        pass

def tqdm_auto():
    for _ in auto_tqdm(r):
        pass

def in_task(ctx):
    def ctx_track():
        for _ in ctx.track(r):
            pass
    return min(timed(ctx_track) for _ in range(REPEATS))

ctl = cn.get_controller()
out = {{}}
for name, fn in (("bare", bare), ("cn_track", cn_track), ("tqdm_notebook", tqdm_notebook),
                 ("tqdm_auto", tqdm_auto)):
    out[name] = min(timed(fn) for _ in range(REPEATS))
# the task runs in this cell's thread (inline), like the loop it is compared with
out["ctx_track"] = ctl.submit(in_task, executor="inline", name="bench-ctx").result(timeout=600)

# stop latency: ctl.stop() from another thread (as the comm's subshell or the store's
# dispatcher call it) -> cn.Stopped raised in the cell, items of 1 ms
import statistics, threading
lat = []
for _ in range(STOP_TRIALS):
    bar = cn.track(range(1_000_000), desc="bench-stop")
    when = {{}}
    def stopper():
        time.sleep(0.05)
        when["t"] = time.perf_counter()
        ctl.stop(bar.task_id)
    threading.Thread(target=stopper).start()
    try:
        for _ in bar:
            time.sleep(0.001)
    except cn.Stopped:
        lat.append(time.perf_counter() - when["t"])
out["stop_latency_ms"] = statistics.median(lat) * 1000
print("RESULT " + json.dumps(out))
"""


def _run_in_kernel(items: int, repeats: int, trials: int) -> dict[str, Any]:
    import nbformat
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory() as tmp:
        saved = {k: os.environ.get(k) for k in ("JPY_SESSION_NAME", "CHONGMING_STORE")}
        os.environ["JPY_SESSION_NAME"] = str(Path(tmp) / "bench.ipynb")
        os.environ["CHONGMING_STORE"] = str(Path(tmp) / "tasks.db")
        try:
            nb = nbformat.v4.new_notebook()
            nb.cells = [
                nbformat.v4.new_code_cell(CELL.format(items=items, repeats=repeats, trials=trials))
            ]
            nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
            NotebookClient(
                nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": tmp}}
            ).execute()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("name") == "stdout")
    line = next(ln for ln in text.splitlines() if ln.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def run(size: str) -> list[dict[str, Any]]:
    p = size_of(size, "cell_loop")
    items, repeats, trials = int(p["items"]), int(p["repeats"]), int(p["stop_trials"])
    t = _run_in_kernel(items, repeats, trials)
    ns = 1e9

    def over(name: str) -> float:
        return (float(t[name]) - float(t["bare"])) / items * ns

    ours = over("cn_track")
    nb_over, auto_over, ctx_over = over("tqdm_notebook"), over("tqdm_auto"), over("ctx_track")
    r_nb = safe_ratio(ours, nb_over)
    r_ctx = safe_ratio(ours, ctx_over)
    peers = {
        "tqdm.notebook": round(nb_over, 2),
        "tqdm.auto": round(auto_over, 2),
        "ctx.track in a task": round(ctx_over, 2),
        "bare loop (total)": round(float(t["bare"]) / items * ns, 2),
    }
    return [
        result(
            "per-item overhead: cn.track in a cell (kernel with a front end) vs tqdm.notebook",
            round(ours, 2),
            "ns/item",
            peer=peers,
            ratio=r_nb,
            target="<= 0.5x tqdm.notebook's overhead",
            passed=None if r_nb is None else r_nb <= 0.5,
            items=items,
        ),
        result(
            "per-item overhead: cn.track in a cell vs ctx.track in a task (same kernel)",
            round(ours, 2),
            "ns/item",
            peer={"ctx.track in a task": round(ctx_over, 2)},
            ratio=r_ctx,
            target="<= 1.5x ctx.track's overhead",
            passed=None if r_ctx is None else r_ctx <= 1.5,
            items=items,
        ),
        result(
            "stop latency of cn.track in a cell (ctl.stop from another thread -> cn.Stopped "
            "raised; 1 ms items), median",
            round(float(t["stop_latency_ms"]), 2),
            "ms",
            target="<= 500 ms (issue 24: Stop ends the cell within 500 ms)",
            passed=float(t["stop_latency_ms"]) <= 500,
            trials=trials,
        ),
    ]

"""The process and dask executors from a real Jupyter kernel: a task imported from a
module runs in a child (pid on the snapshot, output in the task's log), and so do a
function defined in a cell (using a helper and a constant from another cell) and a
lambda; what cannot be pickled is refused with the argument named."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent

CELLS = [
    f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
    "import os, json, threading, exec_targets as T, chongming_nb as cn\n"
    "ctl = cn.Controller(executor='process')",
    "h = ctl.submit(T.steps, 50, 'from-kernel')\n"
    "value = h.result(timeout=120)\n"
    "snap = ctl.get(h)\n"
    "print(json.dumps({'value': value, 'pid': snap.pid, 'kernel_pid': os.getpid(),\n"
    "                  'logs': [r.line for r in h.logs()]}))",
    # a helper and a constant in one cell, the task that uses them in the next
    "OFFSET = 100\ndef helper(n):\n    return n + OFFSET",
    "def cell_task(ctx, n):\n"
    "    ctx.checkpoint()\n"
    "    print('cell task', n)\n"
    "    return helper(n), os.getpid()\n"
    "def run_everywhere(c):\n"
    "    h = c.submit(cell_task, 1)\n"
    "    value, pid = h.result(timeout=120)\n"
    "    lam = c.submit(lambda: os.getpid()).result(timeout=120)\n"
    "    try:\n"
    "        c.submit(T.takes_arg, threading.Lock())\n"
    "        refused = 'NO ERROR'\n"
    "    except cn.ConfigurationError as e:\n"
    "        refused = str(e)\n"
    "    return {'value': value, 'pid': pid, 'lambda_pid': lam, 'kernel_pid': os.getpid(),\n"
    "            'logs': [r.line for r in h.logs()], 'refused': refused}\n"
    "print(json.dumps(run_everywhere(ctl)))\n"
    "ctl.close()",
    "dctl = cn.Controller(executor=cn.DaskExecutor(n_workers=1))\n"
    "print(json.dumps(run_everywhere(dctl)))\n"
    "dctl.close()",
]


def _check(ran: dict[str, object]) -> None:
    assert ran["value"] == 101
    assert ran["pid"] != ran["kernel_pid"] and ran["lambda_pid"] != ran["kernel_pid"]
    refused = str(ran["refused"])
    assert "argument 0 of 'takes_arg' cannot be pickled" in refused, refused
    assert "executor='thread'" in refused


def test_notebook_functions_run_in_processes_and_on_dask(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    ran = json.loads(nb.cells[1].outputs[0]["text"])
    assert ran["value"] == "from-kernel"
    assert ran["pid"] is not None and ran["pid"] != ran["kernel_pid"]
    assert ran["logs"] == ["from-kernel started"]

    in_process = json.loads(nb.cells[3].outputs[-1]["text"].splitlines()[-1])
    _check(in_process)
    assert in_process["logs"] == ["cell task 1"]
    on_dask = json.loads(nb.cells[4].outputs[-1]["text"].splitlines()[-1])
    _check(on_dask)

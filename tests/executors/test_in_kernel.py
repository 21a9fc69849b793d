"""The process executor from a real Jupyter kernel: a task imported from a module runs in
a child (pid on the snapshot, output in the task's log), and a function defined in a
cell gets the clear error instead of a mysterious failure in the child."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent

CELLS = [
    f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
    "import os, json, exec_targets as T, chongming_nb as cn\n"
    "ctl = cn.Controller(executor='process')",
    "h = ctl.submit(T.steps, 50, 'from-kernel')\n"
    "value = h.result(timeout=120)\n"
    "snap = ctl.get(h)\n"
    "print(json.dumps({'value': value, 'pid': snap.pid, 'kernel_pid': os.getpid(),\n"
    "                  'logs': [r.line for r in h.logs()]}))",
    "def cell_task(ctx):\n"
    "    return 1\n"
    "try:\n"
    "    ctl.submit(cell_task)\n"
    "    print('NO ERROR')\n"
    "except cn.ConfigurationError as e:\n"
    "    print('ConfigurationError:', e)\n"
    "ctl.close()",
]


def test_process_executor_in_a_jupyter_kernel(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    ran = json.loads(nb.cells[1].outputs[0]["text"])
    assert ran["value"] == "from-kernel"
    assert ran["pid"] is not None and ran["pid"] != ran["kernel_pid"]
    assert ran["logs"] == ["from-kernel started"]
    refused = nb.cells[2].outputs[0]["text"]
    assert refused.startswith("ConfigurationError:"), refused
    assert "interactive session" in refused and "executor='thread'" in refused

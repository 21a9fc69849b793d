"""A notebook of code cells run in a real kernel by nbclient, as ``jupyter nbconvert
--execute`` and papermill run one."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient


def executed(cells: list[str], tmp_path: Path) -> nbformat.NotebookNode:
    """The notebook of ``cells`` after nbclient ran it (errors kept as outputs), in
    ``tmp_path``."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    NotebookClient(
        nb,
        timeout=180,
        # after a cell's reply nbclient waits iopub_timeout (4 s by default) for the rest
        # of its outputs, then goes on without them, saying only a log warning: under
        # load the kernel's IOPub thread sent the final update of a loop's output later
        # than that, and the cell kept its first state. Wait for the cell's idle status.
        iopub_timeout=180,
        raise_on_iopub_timeout=True,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    return nb

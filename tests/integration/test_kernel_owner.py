"""A Controller a user makes in a notebook names its kernel in its owner id.

The Tasks sidebar files tasks under their notebook by the kernel id in the owner id.
``cn.get_controller()`` always put it there; a ``cn.Controller(store=...)`` made in a
cell did not, so its tasks were listed under "No live kernel" and the status bar of
their own notebook counted none of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from _kernel import run_cell
from jupyter_client.manager import KernelManager

from chongming_nb.control.ownership import OwnerId


def _kernel_of(owner: str) -> str | None:
    parsed = OwnerId.parse(owner)
    assert parsed is not None, owner
    return parsed.kernel


def test_controller_made_in_a_kernel_names_the_kernel(tmp_path: Path) -> None:
    # named as jupyter_server names it (a bare KernelManager picks a temporary name)
    kid = str(uuid.uuid4())
    km = KernelManager(kernel_name="python3", connection_file=str(tmp_path / f"kernel-{kid}.json"))
    km.start_kernel(env={**os.environ}, cwd=str(tmp_path))
    try:
        cell = (
            "import chongming_nb as cn\n"
            f"ctl = cn.Controller(store={str(tmp_path / 'mine.db')!r})\n"
            "print(ctl.owner, flush=True)\n"
            "ctl.close()\n"
        )
        printed = run_cell(km, cell)
    finally:
        km.shutdown_kernel(now=True)
    assert _kernel_of(printed.split()[-1]) == kid


def test_controller_in_a_script_names_no_kernel_and_imports_no_ipykernel(
    tmp_path: Path,
) -> None:
    code = (
        "import sys, chongming_nb as cn\n"
        f"ctl = cn.Controller(store={str(tmp_path / 's.db')!r})\n"
        "print(ctl.owner, 'ipykernel' in sys.modules)\n"
        "ctl.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    owner, imported = done.stdout.split()
    assert _kernel_of(owner) is None
    assert imported == "False"

"""Helpers for browser tests of saved outputs: save a notebook, shut its kernel down and
reopen it in the same page (a new kernel, no widget models from the old one), and export
it to HTML with nbconvert."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any


def save_shut_down_reopen(nb: Any, lab: Any) -> Any:
    """Save ``nb``, shut its kernel down, and return the notebook reopened."""
    nb.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    nb.page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )
    nb.shutdown()
    nb.page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            return !w.sessionContext.session || !w.sessionContext.session.kernel;
        }""",
        timeout=30_000,
    )
    return type(nb)(lab, nb.page, nb.name).open()


def export_html(notebook: Path, out: Path) -> str:
    """The nbconvert HTML export of ``notebook`` (written to ``out``), as text."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nbconvert",
            "--to",
            "html",
            str(notebook),
            "--output",
            str(out.with_suffix("")),
        ],
        check=True,
        capture_output=True,
        timeout=600,  # a watchdog: nbconvert takes minutes on a loaded machine
    )
    return out.read_text()

"""Real JupyterLab in real Chromium, for UI tests and benchmarks.

``jupyter_lab(base)`` starts a ``jupyter lab`` server on 127.0.0.1 with a random token, its
config, runtime, settings and root under ``base`` and ``CHONGMING_STORE`` pointing at a
SQLite file there (kernels never touch the user's store); it yields a :class:`LabServer`.
``chromium()`` yields a Playwright browser driving ``/usr/bin/chromium`` headless.
:class:`Notebook` drives one open notebook through ``window.jupyterapp``.

``tests/browser/conftest.py`` wraps these as pytest fixtures; ``benchmarks/`` uses them
directly. Playwright is a dev dependency; the browser comes from the system
(``apt-get install -y chromium``), never from a Playwright download.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "KERNELSPEC",
    "LabServer",
    "Notebook",
    "UnavailableError",
    "chromium",
    "jupyter_lab",
]

CHROMIUM = "/usr/bin/chromium"
#: The flags that let Chromium run headless in a container without network side trips.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
#: Written into every notebook ``write_notebook`` makes (no "Select Kernel" dialog).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
STARTUP_TIMEOUT = 120.0


class UnavailableError(RuntimeError):
    """Chromium or Playwright is missing: the browser part cannot run."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LabServer:
    """A running ``jupyter lab``: its address, token, root folder, task store and log."""

    url: str
    token: str
    root: Path
    store: Path
    log: Path

    def url_for(self, path: str = "") -> str:
        """A fresh workspace per page load, so tabs of earlier pages are not restored."""
        workspace = f"w{secrets.token_hex(6)}"
        tail = f"/tree/{path}" if path else ""
        return f"{self.url}/lab/workspaces/{workspace}{tail}?reset&token={self.token}"

    def write_notebook(self, name: str, cells: Sequence[str]) -> Path:
        """Write a notebook of code cells (with kernelspec metadata) under the root."""
        nb = {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}},
            "cells": [
                {
                    "cell_type": "code",
                    "id": f"c{i}",
                    "metadata": {},
                    "execution_count": None,
                    "outputs": [],
                    "source": src,
                }
                for i, src in enumerate(cells)
            ],
        }
        path = self.root / name
        path.write_text(json.dumps(nb, indent=1))
        return path

    def api(self, path: str) -> Any:
        """GET a server REST path with the token; the decoded JSON."""
        req = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read().decode())


def _answer_news_question(settings: Path) -> None:
    # JupyterLab asks "get notified about Jupyter news?" in a toast that covers the page
    # (and screenshots): answer it in the lab's settings up front
    folder = settings / "@jupyterlab" / "apputils-extension"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )


@contextlib.contextmanager
def jupyter_lab(base: Path, store: Path | None = None) -> Iterator[LabServer]:
    """Start ``jupyter lab`` with everything under ``base`` (the task store at ``store``,
    ``base/tasks.db`` by default); stop it on exit (terminate, then kill)."""
    root = base / "root"
    for d in (root, base / "config", base / "runtime"):
        d.mkdir(parents=True, exist_ok=True)
    _answer_news_question(base / "settings")
    store = store if store is not None else base / "tasks.db"
    token = secrets.token_hex(16)
    port = _free_port()
    env = dict(os.environ)
    env.update(
        {
            "CHONGMING_STORE": str(store),
            "JUPYTER_CONFIG_DIR": str(base / "config"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    log_path = base / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=",
    ]
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=root)
        lab = LabServer(f"http://127.0.0.1:{port}", token, root, store, log_path)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        try:
            while True:  # readiness of an external process: poll its status endpoint
                if proc.poll() is not None:
                    raise RuntimeError(f"jupyter lab exited early:\n{log_path.read_text()[-4000:]}")
                try:
                    lab.api("/api/status")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"jupyter lab did not start in {STARTUP_TIMEOUT}s:\n"
                            f"{log_path.read_text()[-4000:]}"
                        ) from None
                    time.sleep(0.25)
            yield lab
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A Playwright Chromium browser (headless, ``/usr/bin/chromium``). Raises
    :class:`UnavailableError` when Chromium or Playwright is missing."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        raise UnavailableError(f"{CHROMIUM} is missing: run `apt-get install -y chromium`")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - playwright is a dev dependency
        raise UnavailableError(f"playwright is not installed: {exc}") from exc
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            yield browser
        finally:
            browser.close()


_PROMPT = """(i) => {
    const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
    const p = c && c.querySelector('.jp-InputPrompt');
    return p ? p.textContent.trim() : '';
}"""


class Notebook:
    """A notebook open in JupyterLab in ``page``, driven through ``window.jupyterapp``:
    ``run(i)`` runs cell ``i`` (``wait=False`` not to wait), ``wait_done(i)`` /
    ``wait_busy(i)`` / ``is_busy(i)`` read its ``[*]`` / ``[N]`` prompt,
    ``output_text(i)``, ``wait_output(i, needle)``, ``shutdown()``."""

    def __init__(self, lab: LabServer, page: Any, name: str) -> None:
        self.lab = lab
        self.page = page
        self.name = name

    def open(self) -> Notebook:
        """Load the notebook and wait for an idle kernel."""
        self.page.goto(self.lab.url_for(self.name))
        self.page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        self.page.wait_for_function(
            """() => {
                const w = window.jupyterapp.shell.currentWidget;
                const k = w && w.sessionContext && w.sessionContext.session
                    && w.sessionContext.session.kernel;
                return k && k.status === 'idle';
            }""",
            timeout=90_000,
        )
        return self

    def cell(self, i: int) -> Any:
        return self.page.locator(".jp-Notebook .jp-Cell").nth(i)

    def run(self, i: int, *, wait: bool = True, timeout: float = 60_000) -> None:
        """Run cell ``i``; with ``wait``, block until its prompt shows an execution count."""
        self.page.evaluate(
            """(i) => {
                const app = window.jupyterapp;
                const nb = app.shell.currentWidget.content;
                nb.activeCellIndex = i;
                nb.deselectAll();
                app.commands.execute('notebook:run-cell');
            }""",
            i,
        )
        if wait:
            self.wait_done(i, timeout=timeout)

    def prompt(self, i: int) -> str:
        return str(self.page.evaluate(_PROMPT, i))

    def wait_done(self, i: int, timeout: float = 60_000) -> None:
        """Wait until cell ``i`` shows ``[N]:`` (the input prompt says ``[*]:`` while it is
        queued or running)."""
        self.page.wait_for_function(
            f"(i) => /^\\[\\d+\\]:?$/.test(({_PROMPT})(i))", arg=i, timeout=timeout
        )

    def wait_busy(self, i: int, timeout: float = 60_000) -> None:
        self.page.wait_for_function(
            f"(i) => ({_PROMPT})(i).startsWith('[*]')", arg=i, timeout=timeout
        )

    def is_busy(self, i: int) -> bool:
        return self.prompt(i).startswith("[*]")

    def output_text(self, i: int) -> str:
        return str(self.cell(i).locator(".jp-OutputArea").inner_text())

    def wait_output(self, i: int, needle: str, timeout: float = 60_000) -> str:
        self.page.wait_for_function(
            """([i, needle]) => {
                const cells = document.querySelectorAll('.jp-Notebook .jp-Cell');
                const out = cells[i] && cells[i].querySelector('.jp-OutputArea');
                return !!out && out.innerText.includes(needle);
            }""",
            arg=[i, needle],
            timeout=timeout,
        )
        return self.output_text(i)

    def shutdown(self) -> None:
        self.page.evaluate(
            """() => {
                const w = window.jupyterapp.shell.currentWidget;
                return w && w.sessionContext && w.sessionContext.shutdown();
            }"""
        )

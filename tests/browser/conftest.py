"""Real JupyterLab in real Chromium (DESIGN §7). Shared by every browser test.

Session fixtures:

* ``jupyter_lab`` -> :class:`LabServer`: a ``jupyter lab`` server on 127.0.0.1 with a
  random token, its root in a temp dir, ``expose_app_in_browser`` on (so tests can call
  ``window.jupyterapp.commands``), and ``CHONGMING_STORE`` pointing at a temp SQLite file
  (kernels never touch the user's store). ``lab.write_notebook(name, cells)`` writes a
  notebook with kernelspec metadata (no "Select Kernel" dialog); ``lab.url_for(path)``.
* ``browser``: Playwright Chromium at /usr/bin/chromium with DESIGN §7's flags.

Function fixtures:

* ``page``: a fresh browser context + page (1400x900), closed after the test.
* ``notebook``: a factory ``notebook(name, cells) -> Notebook`` that writes, opens and
  waits for an idle kernel; ``Notebook.run(i)`` runs cell ``i`` (``wait=False`` to not
  wait; ``wait_done(i)``, ``wait_busy(i)``, ``is_busy(i)`` read the ``[*]``/``[N]`` prompt),
  ``Notebook.output_text(i)``, ``Notebook.wait_output(i, needle)``, ``Notebook.shutdown()``.

Chromium is installed by the test command (``apt-get install -y chromium``); if
``/usr/bin/chromium`` is missing the session fails with that instruction (no skip).
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
STARTUP_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LabServer:
    url: str
    token: str
    root: Path
    store: Path
    log: Path

    def url_for(self, path: str) -> str:
        """A fresh workspace per page load, so tabs of earlier tests are not restored."""
        workspace = f"t{secrets.token_hex(6)}"
        return f"{self.url}/lab/workspaces/{workspace}/tree/{path}?reset&token={self.token}"

    def write_notebook(self, name: str, cells: list[str]) -> Path:
        nb = {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {
                "kernelspec": KERNELSPEC,
                "language_info": {"name": "python"},
            },
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
        req = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read().decode())


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    (base / "config").mkdir()
    (base / "runtime").mkdir()
    # answer JupyterLab's "get notified about Jupyter news?" question up front, so the
    # toast does not cover the pages (and the screenshots in docs/img)
    notification = base / "settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )
    store = base / "tasks.db"
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
    log_file = log_path.open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=root)
    server = LabServer(f"http://127.0.0.1:{port}", token, root, store, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    try:
        while True:  # readiness of an external process: poll its status endpoint
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited early:\n{log_path.read_text()[-4000:]}")
            try:
                server.api("/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"jupyter lab did not start in {STARTUP_TIMEOUT}s:\n"
                        f"{log_path.read_text()[-4000:]}"
                    ) from None
                time.sleep(0.25)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log_file.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.fail(
            f"{CHROMIUM} is missing: run `apt-get install -y chromium` (the test command does)"
        )
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    p = context.new_page()
    p.set_default_timeout(60_000)
    try:
        yield p
    finally:
        context.close()


class Notebook:
    """A notebook open in JupyterLab, driven through ``window.jupyterapp``."""

    def __init__(self, lab: LabServer, page: Any, name: str) -> None:
        self.lab = lab
        self.page = page
        self.name = name

    def open(self) -> Notebook:
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
        return str(
            self.page.evaluate(
                """(i) => {
                    const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
                    const p = c && c.querySelector('.jp-InputPrompt');
                    return p ? p.textContent.trim() : '';
                }""",
                i,
            )
        )

    def wait_done(self, i: int, timeout: float = 60_000) -> None:
        """Wait until cell ``i`` shows ``[N]:`` (the input prompt says ``[*]:`` while it is
        queued or running)."""
        self.page.wait_for_function(
            """(i) => {
                const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
                const p = c && c.querySelector('.jp-InputPrompt');
                return !!p && /^\\[\\d+\\]:?$/.test(p.textContent.trim());
            }""",
            arg=i,
            timeout=timeout,
        )

    def wait_busy(self, i: int, timeout: float = 60_000) -> None:
        self.page.wait_for_function(
            """(i) => {
                const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
                const p = c && c.querySelector('.jp-InputPrompt');
                return !!p && p.textContent.trim().startsWith('[*]');
            }""",
            arg=i,
            timeout=timeout,
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


@pytest.fixture
def notebook(jupyter_lab: LabServer, page: Any) -> Iterator[Any]:
    opened: list[Notebook] = []

    def make(name: str, cells: list[str]) -> Notebook:
        jupyter_lab.write_notebook(name, cells)
        nb = Notebook(jupyter_lab, page, name).open()
        opened.append(nb)
        return nb

    yield make
    for nb in opened:
        with contextlib.suppress(Exception):
            nb.shutdown()

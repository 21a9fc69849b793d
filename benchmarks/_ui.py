"""Real JupyterLab and real Chromium for the UI benchmarks.

The same startup as ``tests/browser/conftest.py`` (that file is a pytest conftest, not an
importable module), reduced to what the benchmarks need: a ``jupyter lab`` server on
127.0.0.1 with a random token and ``CHONGMING_STORE`` pointing at a given SQLite file,
and Playwright's Chromium at ``/usr/bin/chromium`` with DESIGN §7's flags.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
STARTUP_TIMEOUT = 120.0


class UnavailableError(RuntimeError):
    """Chromium or Playwright is missing: the browser part cannot run."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    store: Path
    log: Path

    def url_for(self, path: str = "") -> str:
        """A fresh workspace per page load (no restored tabs)."""
        workspace = f"b{secrets.token_hex(6)}"
        tail = f"/tree/{path}" if path else ""
        return f"{self.url}/lab/workspaces/{workspace}{tail}?reset&token={self.token}"

    def api(self, path: str) -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read().decode())


@contextlib.contextmanager
def jupyter_lab(base: Path, store: Path) -> Iterator[Lab]:
    """Start ``jupyter lab`` with its config, runtime and root under ``base``; stop it on
    exit (terminate, then kill)."""
    root = base / "root"
    for d in (root, base / "config", base / "runtime"):
        d.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    port = free_port()
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
        lab = Lab(f"http://127.0.0.1:{port}", token, root, store, log_path)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        try:
            while True:  # readiness of an external process: poll its status endpoint
                if proc.poll() is not None:
                    raise RuntimeError(f"jupyter lab exited early:\n{log_path.read_text()[-3000:]}")
                try:
                    lab.api("/api/status")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"jupyter lab did not start in {STARTUP_TIMEOUT}s:\n"
                            f"{log_path.read_text()[-3000:]}"
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
    """A Playwright Chromium browser (headless, /usr/bin/chromium)."""
    if not Path(CHROMIUM).exists():
        raise UnavailableError(f"{CHROMIUM} is missing: apt-get install -y chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - playwright is a dev dependency
        raise UnavailableError(f"playwright is not installed: {exc}") from exc
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)

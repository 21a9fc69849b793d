"""The JupyterLab extension: its TypeScript unit tests, and the installed result
(`jupyter labextension list` / `jupyter server extension list`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    env["CI"] = "true"
    return env


def test_typescript_unit_tests_pass(repo_root: Path) -> None:
    ext = repo_root / "labextension"
    assert (ext / "node_modules").is_dir(), (
        "labextension/node_modules is missing: run scripts/setup.sh (or "
        "scripts/build_labextension.sh) first"
    )
    npm = shutil.which("npm", path=_env()["PATH"])
    assert npm, "npm is not installed"
    proc = subprocess.run(
        [npm, "test", "--silent"],
        cwd=ext,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "passed" in proc.stdout


def test_labextension_is_installed_enabled_and_ok() -> None:
    proc = subprocess.run(
        [str(BIN / "jupyter"), "labextension", "list"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = ANSI.sub("", proc.stdout + proc.stderr)
    lines = [x for x in out.splitlines() if "chongming-nb" in x]
    assert lines, "chongming-nb is not listed by `jupyter labextension list`"
    assert "enabled" in lines[0] and "OK" in lines[0], lines[0]


def test_server_extension_is_enabled_and_valid() -> None:
    proc = subprocess.run(
        [str(BIN / "jupyter"), "server", "extension", "list"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = ANSI.sub("", proc.stdout + proc.stderr)
    assert "chongming_nb.server enabled" in out, out
    assert re.search(r"chongming_nb\.server\s+\S*\s*OK", out), out

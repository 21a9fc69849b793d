"""`pip install .` of the checkout into a clean virtualenv is the whole install: the kernel
library, the JupyterLab extension and the server extension, with no other step."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _uv() -> list[str]:
    found = shutil.which("uv")
    if found:
        return [found]
    # scripts/setup.sh installs uv with pip into the interpreter it builds the venv from
    for python in ("python3", sys.executable):
        probe = subprocess.run([python, "-m", "uv", "--version"], capture_output=True)
        if probe.returncode == 0:
            return [python, "-m", "uv"]
    pytest.fail("uv is missing: scripts/setup.sh installs it")


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert out.returncode == 0, f"{args} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("clean-venv") / "venv"
    uv = _uv()
    env_python = sys.executable  # the same interpreter version the project is tested on
    _run([*uv, "venv", "--quiet", "--python", env_python, str(venv)])
    # a plain (not editable) install of the checkout, as a user would do it
    _run([*uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(ROOT)])
    return venv


def test_the_labextension_is_installed_and_enabled(installed: Path) -> None:
    out = _run([str(installed / "bin" / "jupyter"), "labextension", "list"])
    text = out.stdout + out.stderr
    line = next((line for line in text.splitlines() if "chongming-nb" in line), None)
    assert line is not None, text
    assert "enabled" in line and "OK" in line, line


def test_the_server_extension_is_enabled(installed: Path) -> None:
    out = _run([str(installed / "bin" / "jupyter"), "server", "extension", "list"])
    text = out.stdout + out.stderr
    line = next((line for line in text.splitlines() if "chongming_nb" in line), None)
    assert line is not None, text
    assert "enabled" in line, line


def test_a_task_runs_from_the_installed_package(installed: Path, tmp_path: Path) -> None:
    script = (
        "import json, chongming_nb as cn\n"
        "ctl = cn.Controller()\n"
        "h = ctl.submit(lambda ctx: 41 + 1, name='answer')\n"
        "print(json.dumps({'result': h.result(timeout=60), 'status': str(h.status),"
        " 'file': cn.__file__}))\n"
    )
    out = _run([str(installed / "bin" / "python"), "-c", script], cwd=tmp_path)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["result"] == 42
    assert report["status"].lower().endswith("succeeded")
    # the installed copy, not the checkout
    assert str(installed) in report["file"], report["file"]


def _stamp(text: str) -> tuple[list[str], str]:
    inputs = re.search(r"^ \* inputs: (.+)$", text, re.M)
    digest = re.search(r"^ \* sha256: ([0-9a-f]{32})$", text, re.M)
    assert inputs and digest, "the bundle has no inputs/sha256 header"
    return inputs.group(1).split(), digest.group(1)


def _hash(files: list[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.encode())
        h.update(b"\0")
        h.update((ROOT / "labextension" / f).read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:32]


def test_the_installed_package_carries_the_widget_bundle_built_from_the_sources(
    installed: Path, tmp_path: Path
) -> None:
    """The notebook widget's bundle is a git-ignored build output: the wheel's build
    (pyproject.toml's jupyter-builder hook) must put it in the package, built from the
    checkout's row module and contract."""
    out = _run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "import chongming_nb.notebook.widget as w, json; "
            "print(json.dumps([str(w._STATIC), w.__file__, w.TaskTable._esm == w.UNBUILT_ESM]))",
        ],
        cwd=tmp_path,  # the installed copy, not the checkout
    )
    static, module, unbuilt = json.loads(out.stdout.strip().splitlines()[-1])
    assert str(installed) in module and not unbuilt
    js = (Path(static) / "widget.js").read_text(encoding="utf-8")
    css = (Path(static) / "widget.css").read_text(encoding="utf-8")
    files, digest = _stamp(js)
    assert {"src/widget.ts", "src/row.ts", "src/format.ts", "src/contract.ts"} <= set(files)
    assert _hash(files) == digest, f"the installed widget.js is older than {files}"
    css_files, css_digest = _stamp(css)
    assert "style/row.css" in css_files and _hash(css_files) == css_digest
    from chongming_nb.notebook import schema

    assert f'SCHEMA_HASH = "{schema.schema_hash()}"' in js

"""The front end's own unit tests (``labextension/test/*.test.ts``, vitest in jsdom) run
as part of the test command: the row, the saved snapshot, the sidebar and the widget
are tested there without a browser, and a failure there fails this test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LABEXTENSION = Path(__file__).resolve().parents[1] / "labextension"


def test_vitest_suite_passes() -> None:
    vitest = LABEXTENSION / "node_modules" / ".bin" / "vitest"
    if not vitest.exists():
        pytest.fail(
            "labextension/node_modules is missing: scripts/setup.sh installs it "
            "(scripts/build_labextension.sh)"
        )
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: the front end's unit tests need Node.js")
    env = {**os.environ, "CI": "true", "NO_COLOR": "1"}
    done = subprocess.run(
        [str(vitest), "run", "--reporter=dot"],
        cwd=LABEXTENSION,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-20_000:] + done.stderr[-5_000:])
    assert done.returncode == 0, "vitest failed: its report is in the captured output above"
    assert " passed" in done.stdout, done.stdout[-2_000:]

"""docs/states.md is generated from the core and must be up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from chongming_nb import TRANSITIONS, TaskStatus
from chongming_nb.core.docs import GENERATED_PATH, REGENERATE_COMMAND, render_state_table

ROOT = Path(__file__).resolve().parents[2]


def test_committed_states_doc_is_up_to_date() -> None:
    path = ROOT / GENERATED_PATH
    assert path.exists(), f"{GENERATED_PATH} is missing; run: {REGENERATE_COMMAND}"
    assert path.read_text(encoding="utf-8") == render_state_table(), (
        f"{GENERATED_PATH} is stale (the state table changed); regenerate it with: "
        f"{REGENERATE_COMMAND}"
    )


def test_render_is_deterministic() -> None:
    assert render_state_table() == render_state_table()


def test_every_table_row_is_rendered() -> None:
    text = render_state_table()
    for st in TaskStatus:
        targets = [t for t in TaskStatus if t in TRANSITIONS[st]]
        row = ", ".join(f"`{t.value}`" for t in targets) if targets else "(terminal)"
        assert f"| `{st.value}` | {row} |" in text
        for t in targets:
            assert f"    {st.value} --> {t.value}\n" in text


def test_verb_table_is_computed_from_the_state_machine() -> None:
    text = render_state_table()
    assert "| `skip` | pending, blocked, queued |" in text
    assert "| `resume` | paused (in place), paused (before start) |" in text
    assert "| paused (in place) | — | → stopped | — | → running |" in text
    assert "| paused (before start) | — | → stopped | — | → queued |" in text
    assert "`skip` is listed from `failed`" in text


def test_gen_docs_check_mode(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr

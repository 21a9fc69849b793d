"""docs/states.md is generated from the core and must be up to date."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

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


def _load_gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gen_docs_writes_and_detects_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gen = _load_gen_docs()
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    target = tmp_path / GENERATED_PATH
    assert gen.main(["--check"]) == 1  # missing counts as stale
    assert gen.main([]) == 0
    assert target.read_text(encoding="utf-8") == render_state_table()
    assert gen.main(["--check"]) == 0
    target.write_text(render_state_table().replace("`lost`", "`gone`"), encoding="utf-8")
    capsys.readouterr()
    assert gen.main(["--check"]) == 1
    assert REGENERATE_COMMAND in capsys.readouterr().err


def test_gen_docs_check_passes_on_the_repository() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr

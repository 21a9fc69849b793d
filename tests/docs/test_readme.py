"""The README tells the truth: its Python blocks run as written, in order, in a fresh kernel,
and its first lines are the two commands."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", markdown, flags=re.S | re.M)


def test_readme_opens_with_exactly_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = re.search(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)
    assert first_block is not None
    assert first_block.group(1) == "bash"
    assert first_block.group(2).split() == ["./scripts/run.sh", "./scripts/test.sh"]
    # nothing but the title and one sentence before them
    before = text[: first_block.start()].strip().splitlines()
    assert before[0] == "# chongming_nb" and len([line for line in before if line]) == 2


def test_the_blocks_are_found() -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 3
    assert "cn.get_controller()" in blocks[0]


def test_readme_python_blocks_run_in_order_in_a_fresh_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_code_cell(block) for block in blocks]
    monkeypatch.setenv("CHONGMING_STORE", str(tmp_path / "tasks.db"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()  # raises CellExecutionError, naming the block, on the first failure
    # what each cell shows (a handle is displayed with a display id: display_data)
    results = [
        "".join(
            "".join(o.get("data", {}).get("text/plain", ""))
            for o in cell.outputs
            if o.output_type in ("execute_result", "display_data")
        )
        for cell in nb.cells
    ]
    assert "flights" in results[0] or "extract" in results[0], results[0]
    # the comments in the tour say what these cells show: hold them to it
    assert "40000" in results[1]
    assert any("STOPPED" in r for r in results[2:]), results

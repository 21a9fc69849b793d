"""Every example notebook runs top to bottom in a real kernel, and is committed clean."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# smaller data through the parameters cell
PARAMS: dict[str, dict[str, object]] = {
    "01-quickstart.ipynb": {"N_ITEMS": 200, "STEP_SECONDS": 0.005},
    "02-flights-pipeline.ipynb": {"SAMPLE_ROWS": 30_000, "CHUNK_ROWS": 5_000},
    "03-history-and-dataframes.ipynb": {"N_TASKS": 12},
    "04-scale-out.ipynb": {"N_TASKS": 6, "WORK": 20_000},
}


def test_there_are_notebooks() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert {"01-quickstart.ipynb", "03-history-and-dataframes.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a code cell has outputs"
            assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"
    assert nb.metadata["kernelspec"]["name"] == "python3"


def _parametrise(nb: nbformat.NotebookNode, params: dict[str, object]) -> None:
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
            return


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runs_top_to_bottom(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(path, as_version=4)
    _parametrise(nb, PARAMS.get(path.name, {}))
    monkeypatch.setenv("CHONGMING_STORE", str(tmp_path / "tasks.db"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
    untidy = [f"cell {i}: {problem}" for i, problem in _untidy_outputs(nb)]
    assert not untidy, untidy
    left_behind = [
        str(p.relative_to(workdir))
        for p in workdir.rglob("*")
        if p.is_file() and not _ignored_in_checkout(f"notebooks/{p.relative_to(workdir)}")
    ]
    assert not left_behind, f"{path.name} leaves files git does not ignore: {left_behind}"
    if path.name.startswith("03-"):
        images = [
            o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
        ]
        assert images, "notebook 03 shows its charts inline"


# What a reader should never see in an example's output: object reprs, raw datetimes and
# timedeltas, record reprs.
_UNTIDY = {
    "a datetime repr": re.compile(r"datetime\.datetime\("),
    "a raw timedelta": re.compile(r"\b\d+ days \d\d:\d\d:\d\d"),
    "a record repr": re.compile(r"\b(?:LogRecord|Progress|TaskSnapshot|Failure)\("),
}


def _output_texts(cell: nbformat.NotebookNode) -> list[str]:
    texts = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            texts.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            texts.append(o.data.get("text/plain", ""))
    return texts


def _untidy_outputs(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    found = []
    for i, cell in enumerate(nb.cells):
        for text in _output_texts(cell):
            for what, pattern in _UNTIDY.items():
                if m := pattern.search(text):
                    found.append((i, f"{what}: {m.group(0)!r}"))
            # one missing-value marker per table
            if re.search(r"\bNaN\b", text) and "<NA>" in text:
                found.append((i, "both NaN and <NA> in one output"))
    return found


def _ignored_in_checkout(relative: str) -> bool:
    out = subprocess.run(["git", "check-ignore", "-q", relative], cwd=ROOT, capture_output=True)
    return out.returncode == 0

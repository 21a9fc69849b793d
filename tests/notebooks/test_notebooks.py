"""Every example notebook runs top to bottom in a real kernel, and is committed clean."""

from __future__ import annotations

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
    monkeypatch.setenv("MPLBACKEND", "Agg")
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

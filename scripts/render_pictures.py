"""Render the pictures of README.md and docs/ from the example notebooks, in real
JupyterLab and real Chromium.

    .venv/bin/python scripts/render_pictures.py            # writes docs/img/*.png
    .venv/bin/python scripts/render_pictures.py --out DIR  # somewhere else (a check)

Each picture is the output of a cell of a notebook in ``notebooks/``, run top to bottom
with the same smaller parameters the test suite uses (so it takes a minute, not ten):

    board.png     01-quickstart: the board after the tour (its last cell)
    sidebar.png   01-quickstart: the Tasks sidebar beside the notebook
    graph.png     02-flights-pipeline: the resumed run's live graph, as the widget draws it
                  above the run's table (the cell that displays ``run2``)
    timeline.png  03-history-and-dataframes: the timeline of the whole history

Nothing here is a test fixture: the rows are the examples' own tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chongming_nb.testing.lab import Notebook, chromium, jupyter_lab  # noqa: E402

# the test suite's parameters (tests/notebooks/test_notebooks.py): real data, less of it
PARAMS: dict[str, dict[str, object]] = {
    "01-quickstart.ipynb": {"N_ITEMS": 200, "STEP_SECONDS": 0.01},
    "02-flights-pipeline.ipynb": {"SAMPLE_ROWS": 30_000, "CHUNK_ROWS": 5_000},
    "03-history-and-dataframes.ipynb": {"N_TASKS": 16},
}
WIDTH, HEIGHT = 1280, 900


def _prepare(src: Path, dst: Path, params: dict[str, object]) -> int:
    """Copy a notebook with its parameters cell set; the number of cells."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            extra = "\n".join(f"{k} = {v!r}" for k, v in params.items())
            source = "".join(cell["source"])
            cell["source"] = source + "\n" + extra
            break
    dst.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return len(nb["cells"])


def _code_cells(path: Path) -> list[int]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


def _last_cell_with(path: Path, needle: str) -> int:
    nb = json.loads(path.read_text(encoding="utf-8"))
    hits = [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and needle in "".join(c["source"])
    ]
    if not hits:
        raise SystemExit(f"{path.name}: no cell contains {needle!r}")
    return hits[-1]


def _run_all(nb: Notebook, cells: list[int]) -> None:
    for i in cells:
        nb.run(i, timeout=300_000)


def _shot_output(nb: Notebook, i: int, out: Path, part: str = ".jp-OutputArea") -> None:
    area = nb.cell(i).locator(part).first
    area.scroll_into_view_if_needed()
    nb.page.wait_for_timeout(500)  # let the last coalesced update paint
    area.screenshot(path=str(out))
    print(f"wrote {out}")


def _last_cell_displaying(path: Path, name: str) -> int:
    """The last code cell whose last line shows ``name`` as the cell's value."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    hits = [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code"
        and "".join(c["source"]).strip().splitlines()[-1].split("#")[0].strip() == name
    ]
    if not hits:
        raise SystemExit(f"{path.name}: no cell shows {name!r} as its value")
    return hits[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chongming-pictures-") as tmp:
        base = Path(tmp)
        with jupyter_lab(base) as lab, chromium() as browser:
            for name, params in PARAMS.items():
                _prepare(ROOT / "notebooks" / name, lab.root / name, params)
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})

            # 01: the board, then the sidebar beside the notebook
            name = "01-quickstart.ipynb"
            nb = Notebook(lab, page, name).open()
            _run_all(nb, _code_cells(lab.root / name))
            board = _last_cell_with(lab.root / name, "ctl.board()")
            nb.page.wait_for_timeout(1500)
            _shot_output(nb, board, args.out / "board.png")
            page.evaluate("() => window.jupyterapp.commands.execute('chongming:open-tasks')")
            page.wait_for_selector("#chongming-tasks-panel", timeout=60_000)
            page.wait_for_timeout(2500)  # the sidebar's first listing
            page.screenshot(path=str(args.out / "sidebar.png"))
            print(f"wrote {args.out / 'sidebar.png'}")
            toggle = "() => window.jupyterapp.commands.execute('application:toggle-left-area')"
            page.evaluate(toggle)
            nb.shutdown()

            # 02: the pipeline run's live graph, as the widget draws it above the run's
            # table (it fits itself to the output's width)
            name = "02-flights-pipeline.ipynb"
            nb = Notebook(lab, page, name).open()
            _run_all(nb, _code_cells(lab.root / name))
            graph = _last_cell_displaying(lab.root / name, "run2")
            view = ".cn-root .cn-graph-view[data-layout=done]"
            nb.cell(graph).locator(view).first.wait_for(timeout=60_000)
            nb.page.wait_for_function(  # the run's final statuses
                """(i) => [...document.querySelectorAll('.jp-Notebook .jp-Cell')[i]
                    .querySelectorAll('.cn-root .cn-graph-node')]
                    .every(g => !['planned', 'pending', 'blocked', 'queued', 'starting',
                        'running', 'retry_wait'].includes(g.dataset.status))""",
                arg=graph,
                timeout=60_000,
            )
            _shot_output(nb, graph, args.out / "graph.png", view)
            nb.shutdown()

            # 03: the timeline of the whole history
            name = "03-history-and-dataframes.ipynb"
            nb = Notebook(lab, page, name).open()
            _run_all(nb, _code_cells(lab.root / name))
            timeline = _last_cell_with(lab.root / name, "timeline(")
            _shot_output(nb, timeline, args.out / "timeline.png")
            nb.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

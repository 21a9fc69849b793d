"""A notebook run with no one watching (``jupyter nbconvert --execute``, papermill: nbclient
in a real kernel) and exported to html by nbconvert shows its task tables with their
final rows.

nbclient saves the state of every widget model it saw in the notebook's metadata, and
nbconvert renders an output's widget view whenever that state holds its model: the
export showed an empty space (the view needs a widget renderer from a CDN, and our
widget's code) where each table was. With no front end, a table's output is rewritten
with the static table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _executed import executed
from nbconvert import HTMLExporter

CELLS = [
    "import threading\nimport chongming_nb as cn\nctl = cn.Controller()\ngate = threading.Event()",
    # a task's row shown while it runs, finished in a later cell
    "h = ctl.submit(lambda: gate.wait(30), name='extract-orders')\nh",
    "gate.set()\nh.wait(30)\nctl.flush(30)",
    # a board of finished tasks as the last line: no status change follows
    "ctl.submit(lambda: 1 / 0, name='load-weather').wait(30)\nctl.board()",
]


def _executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.setenv("CHONGMING_STORE", str(tmp_path / "tasks.db"))
    return executed(CELLS, tmp_path)


def test_an_executed_notebook_exports_its_tables_with_their_final_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = _executed(tmp_path, monkeypatch)
    assert [o for c in nb.cells for o in c.outputs if o["output_type"] == "error"] == []
    # nbclient kept the widget state (its default): what made nbconvert pick the views
    assert nb.metadata.get("widgets")
    row, board = nb.cells[1].outputs, nb.cells[3].outputs
    for outs in (row, board):
        (shown,) = [o for o in outs if o["output_type"] == "display_data"]
        assert "application/vnd.jupyter.widget-view+json" not in shown["data"]
        assert "text/html" in shown["data"]
    html, _ = HTMLExporter().from_notebook_node(nb)
    # each table is in the page as html, with its final rows
    assert html.count('<div class="cn-snapshot">') == 2
    assert "extract-orders" in html and ">succeeded<" in html
    assert "load-weather" in html and ">failed<" in html
    assert "ZeroDivisionError" in html  # the failed row's traceback

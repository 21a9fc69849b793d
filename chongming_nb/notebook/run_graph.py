"""``RunTable``: a pipeline run's table with its graph drawn above it.

The graph's structure goes to the front end as the ``graph`` trait (``PipelineRun.
graph_spec()``: nodes, dependencies, join modes, ``when`` conditions, map fan-outs and the
task standing for each node); the front end lays it out (dagre) and takes the statuses
and progress from the table's own rows, so the graph is live with the table's patches and
coalesced the same way. The trait is sent again only when the structure or the tasks
standing for the nodes change (a node's task created, a map expanded, a compensation run),
never for a status change.

The saved output keeps the final graph: the static snapshot of the table (``text/html``,
for nbconvert and viewers without the extension) starts with the run's graph as an inline
SVG, and the snapshot json carries the graph with each node's status, which the JupyterLab
extension draws when the widget's model is gone.
"""

from __future__ import annotations

import logging
from typing import Any

import traitlets

from chongming_nb.notebook.outputs import SNAPSHOT_MIME
from chongming_nb.notebook.widget import ControllerLike, TaskTable

log = logging.getLogger("chongming_nb.notebook")


def _mapping(spec: dict[str, Any]) -> tuple[Any, ...]:
    """What of a graph spec the front end cannot learn from the rows."""
    return tuple(
        (n["name"], n["task"], len(n["children"]), n["compensation"]) for n in spec["nodes"]
    )


class RunTable(TaskTable):
    """The table of one pipeline run (``kind="run"``) with the run's live graph."""

    graph = traitlets.Dict().tag(sync=True)

    def __init__(self, ctl: ControllerLike, run: Any, **kwargs: Any) -> None:
        self._run = run
        spec = run.graph_spec()
        self._graph_key = _mapping(spec)
        super().__init__(ctl, kind="run", pipeline_run_id=run.id, **kwargs)
        self.graph = spec

    def _refresh_graph(self) -> None:
        try:
            spec = self._run.graph_spec()
        except Exception:
            log.debug("the run's graph could not be read", exc_info=True)
            return
        key = _mapping(spec)
        if key == self._graph_key:
            return
        self._graph_key = key
        with self._send_lock:
            if not self.closed:
                self.graph = spec

    def _send_patch(self, dirty: set[str]) -> bool:
        sent = super()._send_patch(dirty)
        if sent:
            self._refresh_graph()
        return sent

    def snapshot_data(self, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        data = super().snapshot_data(rows)
        try:
            spec = self._run.graph_spec()
            svg = self._run.graph().to_svg()
        except Exception:
            log.debug("the run's graph could not be drawn for the saved output", exc_info=True)
            return data
        data[SNAPSHOT_MIME]["graph"] = spec
        data["text/html"] = (
            '<div class="cn-graph-output" style="overflow:auto;max-height:640px">'
            f"{svg}</div>{data['text/html']}"
        )
        return data

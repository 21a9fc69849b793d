"""Display hooks: the mime bundles ``TaskHandle``, ``PipelineRun`` and ``Controller``
return from ``_repr_mimebundle_``.

Each bundle carries the live widget view *and* an escaped ``text/html`` table and a
``text/plain`` summary of the same rows, so nbconvert, GitHub and a notebook opened
without its kernel still show the last known state.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict, Unpack

from chongming_nb.notebook.outputs import SNAPSHOT_MIME, SNAPSHOT_ROWS, WIDGET_MIME
from chongming_nb.notebook.rows import render_html, render_plain
from chongming_nb.notebook.widget import ControllerLike, TaskTable

__all__ = [
    "SNAPSHOT_MIME",
    "WIDGET_MIME",
    "TableView",
    "board",
    "make_table",
    "show",
    "task_bundle",
]

log = logging.getLogger("chongming_nb.notebook")


def _now(ctl: ControllerLike) -> datetime:
    clock = getattr(ctl, "clock", None)
    now = getattr(clock, "now", None)
    if callable(now):
        try:
            value = now()
            if isinstance(value, datetime):
                return value
        except Exception:
            pass
    return datetime.now(UTC)


class TableView(TypedDict, total=False):
    """What a table shows (``TaskTable``'s keywords): some tasks by id, a pipeline run's,
    or a filtered board, under a title; ``kind`` is "task", "run" or "board"."""

    task_ids: Iterable[str] | None
    pipeline_run_id: str | None
    filter: Mapping[str, Any] | None
    title: str | None
    kind: str
    #: a pipeline run: its graph above its table
    run: Any


def make_table(ctl: ControllerLike, **view: Unpack[TableView]) -> TaskTable:
    """The live widget for a task, a run or a board (what ``ctl.board()`` returns); a
    pipeline ``run`` gets its graph above its table."""
    run = view.pop("run", None)
    if run is not None:
        from chongming_nb.notebook.run_graph import RunTable

        return RunTable(ctl, run, filter=view.get("filter"), title=view.get("title"))
    view.setdefault("kind", "task")  # (TaskTable's own default is "board")
    return TaskTable(ctl, **view)  # type: ignore[misc]  # (no "run": popped above)


def snapshot_bundle(
    ctl: ControllerLike,
    rows: list[dict[str, Any]],
    *,
    title: str | None,
) -> dict[str, Any]:
    """The static snapshot of ``rows`` when no widget could be built."""
    at = _now(ctl)
    tracebacks: dict[str, str] = {}
    for row in rows[:SNAPSHOT_ROWS]:
        if row.get("has_tb") and len(tracebacks) < 50:
            try:
                failure = ctl.get(str(row["id"])).failure
            except Exception:
                continue
            if failure is not None and failure.traceback:
                tracebacks[str(row["id"])] = failure.traceback
    return {
        "text/plain": render_plain(rows, title=title, at=at),
        "text/html": render_html(rows, title=title, at=at, tracebacks=tracebacks),
    }


def _table_and_bundle(
    ctl: ControllerLike, view: TableView
) -> tuple[TaskTable | None, dict[str, Any]]:
    try:
        table = make_table(ctl, **view)
    except ValueError:
        raise
    except Exception:
        log.exception("could not build the task widget; showing a static snapshot")
        query: dict[str, Any] = dict(view.get("filter") or {})
        task_ids = view.get("task_ids")
        if task_ids is not None:
            query["ids"] = list(task_ids)
        pipeline_run_id = view.get("pipeline_run_id")
        if pipeline_run_id is not None:
            query["pipeline_run_id"] = pipeline_run_id
        from chongming_nb.notebook.rows import build_row

        rows = [build_row(s, ctl.can_all(s.task_id)) for s in ctl.list_tasks(**query)]
        return None, snapshot_bundle(ctl, rows, title=view.get("title"))
    return table, table.bundle()


def task_bundle(
    ctl: ControllerLike, **view: Unpack[TableView]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, metadata)`` for ``_repr_mimebundle_``: widget view + html + plain +
    the snapshot json (see ``TaskTable.bundle``).

    If the widget cannot be built (e.g. no kernel comm machinery), the html and plain
    snapshots are still returned.
    """
    _, data = _table_and_bundle(ctl, view)
    return data, {}


def show(ctl: ControllerLike, **view: Unpack[TableView]) -> str:
    """``_ipython_display_`` of a handle or a run: display the table with a display id
    and keep that output updated as its tasks change status (so the saved notebook and
    its html export show the final state). Returns the display id."""
    from IPython.display import display

    table, data = _table_and_bundle(ctl, view)
    display_id = uuid.uuid4().hex
    display(data, raw=True, display_id=display_id)
    if table is not None:
        table.keep_display_updated(display_id)
    return display_id


def board(
    ctl: ControllerLike,
    *,
    filter: Mapping[str, Any] | None = None,
    title: str | None = None,
    task_ids: Iterable[str] | None = None,
    pipeline_run_id: str | None = None,
    status: Any = None,
    tag: str | None = None,
    name_prefix: str | None = None,
) -> TaskTable:
    """``ctl.board(...)``: a live board widget. Filters may be given as keywords
    (``status=``, ``tag=``, ``name_prefix=``) or as ``filter={...}``."""
    query: dict[str, Any] = dict(filter or {})
    for key, value in (("status", status), ("tag", tag), ("name_prefix", name_prefix)):
        if value is not None:
            query[key] = value
    return make_table(
        ctl,
        task_ids=task_ids,
        pipeline_run_id=pipeline_run_id,
        filter=query or None,
        title=title or "tasks",
        kind="board" if pipeline_run_id is None else "run",
    )

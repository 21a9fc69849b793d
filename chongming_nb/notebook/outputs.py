"""The notebook outputs a table keeps true: the bundle it is displayed with, and the
rewrites (``update_display_data`` on its display ids) that leave a saved notebook, and
its html export, holding the final state of its rows.

Every output holds the static part (``text/plain``, an escaped ``text/html`` table and
the rows as data, :data:`SNAPSHOT_MIME`) and, while a front end that draws widgets is
there, the live widget view. nbconvert renders the widget view of an output whenever the
notebook's saved widget state holds its model, and nbclient (``jupyter nbconvert
--execute``, papermill) saves the state of every model it saw: the html export of such a
run showed an empty space where the table was. So the view goes into an output only
when someone can see it:

- a front end is known (:func:`draws_widgets`): jupyter_server started this kernel for a
  notebook session (``JPY_SESSION_NAME``: JupyterLab, Notebook 7), or a view of some table
  was drawn in this kernel (the widget says ``{"type": "view"}`` when it renders: any
  client that draws widgets);
- otherwise the first output still carries the view (a client that draws widgets but
  names no session is learned only when it draws one), and when the cell ends, each
  table shown in it is rewritten with the static part only; later rewrites follow the
  same rule.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from chongming_nb.notebook import schema as S
from chongming_nb.notebook._cells import after_each_cell
from chongming_nb.notebook.older import Older, add_counts
from chongming_nb.notebook.rows import epoch_ms, render_html, render_plain, summarize

log = logging.getLogger("chongming_nb.notebook")

WIDGET_MIME = S.WIDGET_MIME
SNAPSHOT_MIME = S.SNAPSHOT_MIME
#: Rows a saved snapshot (html table, snapshot json) carries at most.
SNAPSHOT_ROWS = 200
#: The share of one core that rewriting a table's saved output may take: after one that
#: took ``c`` seconds of CPU, the next settled change waits ``c / SNAPSHOT_CPU_SHARE``
#: (a small table's saved output follows every flush; 10,000 tasks finishing at once are
#: coalesced to one rewrite every second or so, and the last one always follows).
SNAPSHOT_CPU_SHARE = 0.02

#: ``publish(data, display_id)``: sends ``update_display_data`` for one display.
Publisher = Callable[[dict[str, Any], str], None]


def publish_update(data: dict[str, Any], display_id: str) -> None:
    """Update one notebook output in place (IPython's display publisher; any thread).
    Nothing happens outside a kernel."""
    from IPython.core.interactiveshell import InteractiveShell

    if not InteractiveShell.initialized():
        return
    InteractiveShell.instance().display_pub.publish(
        data=data, metadata={}, transient={"display_id": display_id}, update=True
    )


# ------------------------------------------------------------------ the front end

_view_drawn = threading.Event()


def saw_view() -> None:
    """A view of a table was drawn: this kernel has a front end that draws widgets."""
    _view_drawn.set()


def draws_widgets() -> bool:
    """Whether someone sees the live widget views of this kernel (see the module
    docstring)."""
    return bool(os.environ.get("JPY_SESSION_NAME")) or _view_drawn.is_set()


def forget_views() -> None:
    """For tests: as if no view had been drawn in this process."""
    _view_drawn.clear()


class _CellEnd:
    """The tables shown in the running cell while no front end is known: at the cell's
    end (IPython's ``post_run_cell``) their outputs lose the widget view."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: weakref.WeakSet[TableOutputs] = weakref.WeakSet()

    def add(self, table: TableOutputs) -> None:
        shell = _shell()
        if shell is None or not after_each_cell(shell, self.ended):
            return
        with self._lock:
            self._tables.add(table)

    def ended(self, result: Any = None) -> None:
        with self._lock:
            tables, self._tables = list(self._tables), weakref.WeakSet()
        if draws_widgets():
            return
        for table in tables:
            if not table.closed:
                table.rewrite_static()


def _shell() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance() if InteractiveShell.initialized() else None


_CELL_END = _CellEnd()


class _Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class TableOutputs:
    """The outputs of a table (a mixin of ``TaskTable``; its state is the table's)."""

    _ctl: Any
    _clock: _Clock
    _lock: Any
    _flush_lock: Any
    _send_lock: Any
    _closed: bool
    _rows: dict[str, dict[str, Any]]
    _dirty: set[str]
    _seq: int
    _older: Older
    _bundled_seq: int
    _changed_seq: int
    _display_ids: list[str]
    _publish: Publisher
    _snapshot_stale: bool
    _snapshot_urgent: bool
    _next_snapshot: float
    _cpu_time: Callable[[], float]
    title_text: str
    hidden_where: str
    kind: str
    model_id: str
    comm: Any
    closed: bool
    current_rows: Callable[[], list[dict[str, Any]]]
    flush: Callable[..., bool]

    def snapshot_data(self, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The static part of this table's output: ``text/plain``, an escaped
        ``text/html`` table (nbconvert, GitHub) and :data:`SNAPSHOT_MIME` (rows as data,
        for the JupyterLab extension when the widget's model is gone)."""
        with self._lock:
            if rows is None:
                rows = self.current_rows()  # (the lock is re-entrant)
                self._bundled_seq = self._seq
            hidden = dict(self._older.hidden)
        at = self._clock.now()
        title = self.title_text or None
        older = {"hidden": hidden, "where": self.hidden_where}
        tracebacks: dict[str, str] = {}
        for row in rows[:SNAPSHOT_ROWS]:
            if row.get("has_tb") and len(tracebacks) < 50:
                with contextlib.suppress(Exception):
                    failure = self._ctl.get(str(row["id"])).failure
                    if failure is not None and failure.traceback:
                        tracebacks[str(row["id"])] = failure.traceback
        data: dict[str, Any] = {
            "text/plain": render_plain(rows, title=title, at=at, **older),
            "text/html": render_html(
                rows, title=title, at=at, tracebacks=tracebacks, limit=SNAPSHOT_ROWS, **older
            ),
            SNAPSHOT_MIME: {
                "version": S.SCHEMA_VERSION,
                "kind": self.kind,
                "title": self.title_text,
                "model_id": self.model_id,
                "rows": rows[:SNAPSHOT_ROWS],
                "total_rows": len(rows) + sum(hidden.values()),
                "summary": add_counts(summarize(rows), hidden),
                "at": epoch_ms(at),
            },
        }
        return data

    def bundle(self, *, live: bool = True) -> dict[str, Any]:
        """Everything an output of this table holds: the static snapshot of the current
        rows and, with ``live``, the live widget view."""
        data = self.snapshot_data()
        if live and self.comm is not None:
            data[WIDGET_MIME] = {"version_major": 2, "version_minor": 1, "model_id": self.model_id}
        return data

    def keep_display_updated(self, display_id: str, publish: Publisher | None = None) -> None:
        """Update the output ``display_id`` (``update_display_data``) when rows change
        status, so a saved notebook and its html export hold the final state: at once
        when a row finishes, pauses or resumes, with the full-state refresh otherwise."""
        if publish is not None:
            self._publish = publish
        with self._lock:
            if display_id not in self._display_ids:
                self._display_ids.append(display_id)
            # a status changed in a patch after the bundle this output was displayed
            # with (a task that ended at once): the output is behind, rewrite it now
            # (progress alone never rewrites an output)
            behind = self._bundled_seq < self._changed_seq
        if not draws_widgets():
            _CELL_END.add(self)
        if behind:
            with self._flush_lock:
                self._update_displays()

    def rewrite_now(self) -> None:
        """Rewrite the outputs now, after a flush in flight (its older rows must not land last)."""
        with self._lock:
            self._dirty.update(self._rows)
        self.flush(force=True)
        with self._flush_lock:
            self._update_displays()

    def rewrite_static(self) -> None:
        """Rewrite the outputs now, without the widget view when no front end is known
        (the end of a cell that nothing drew a view for)."""
        with self._flush_lock:
            self._update_displays()

    def _update_displays(self) -> None:
        """Rewrite every output showing this table with its current snapshot; the next
        rewrite for a settled change waits in proportion to what this one cost."""
        self._snapshot_stale = False
        self._snapshot_urgent = False
        if not self._display_ids:
            return
        cpu0 = self._cpu_time()
        data = self.bundle(live=draws_widgets())
        for display_id in list(self._display_ids):
            try:
                with self._send_lock:
                    if self._closed:
                        return
                    self._publish(data, display_id)
            except Exception:
                log.debug("updating the saved output failed", exc_info=True)
        cost = max(0.0, self._cpu_time() - cpu0)
        self._next_snapshot = self._clock.monotonic() + cost / SNAPSHOT_CPU_SHARE

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """``ctl.board()`` as a cell's value: the widget plus the static snapshot (an
        html table in nbconvert, not an object repr)."""
        return self.bundle(), {}

    def _ipython_display_(self) -> None:
        """Displayed with a display id, kept up to date as rows change status."""
        import uuid

        from IPython.display import display

        display_id = uuid.uuid4().hex
        display(self.bundle(), raw=True, display_id=display_id)
        self.keep_display_updated(display_id)

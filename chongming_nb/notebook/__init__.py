"""The notebook layer: the TaskTable widget, display hooks and the IPython magics.

Imported lazily by the control layer (``ctl.board()``, ``_repr_mimebundle_``), so that
``import chongming_nb`` does not pull in ipywidgets; the names below load the widget
module on first use, so the server extension can read the row shape
(``chongming_nb.notebook.rows``, ``.schema``) without importing anywidget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chongming_nb.core._lazy import lazy_getattr

if TYPE_CHECKING:
    from chongming_nb.notebook.display import make_table, task_bundle
    from chongming_nb.notebook.widget import TaskTable

__all__ = ["TaskTable", "make_table", "task_bundle"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "TaskTable": "chongming_nb.notebook.widget",
        "make_table": "chongming_nb.notebook.display",
        "task_bundle": "chongming_nb.notebook.display",
    },
)

"""The notebook layer: the TaskTable widget, display hooks and the IPython magics.

Imported lazily by the control layer (``ctl.board()``, ``_repr_mimebundle_``), so that
``import chongming_nb`` does not pull in ipywidgets.
"""

from __future__ import annotations

from chongming_nb.notebook.display import make_table, task_bundle
from chongming_nb.notebook.widget import TaskTable

__all__ = ["TaskTable", "make_table", "task_bundle"]

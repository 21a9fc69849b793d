"""The end of every cell: a callback on an IPython shell's ``post_run_cell`` event,
registered once per shell and callback (tracked loops end with their cell; tables with no
one to see their widget drop it from their outputs)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_registered: set[tuple[int, Callable[..., Any]]] = set()


def after_each_cell(shell: Any, callback: Callable[..., Any]) -> bool:
    """Have ``callback(result)`` run after each cell of ``shell``; False if the shell has
    no such event (not IPython's)."""
    key = (id(shell), callback)
    with _lock:
        if key in _registered:
            return True
        try:
            shell.events.register("post_run_cell", callback)
        except Exception:
            return False
        _registered.add(key)
    return True

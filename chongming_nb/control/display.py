"""Where the control layer's objects find their notebook rendering.

The control layer must not import the notebook layer (imports point downward). The
package root wires the notebook renderer in with ``set_renderer``; without one, objects
fall back to their ``repr``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_bundle: Callable[..., Any] | None = None
_board: Callable[..., Any] | None = None


def set_renderer(bundle: Callable[..., Any], board: Callable[..., Any]) -> None:
    """``bundle(ctl, **kw) -> (data, metadata)`` for _repr_mimebundle_; ``board(ctl,
    **filters)`` -> a widget."""
    global _bundle, _board
    _bundle, _board = bundle, board


def bundle(obj: Any, ctl: Any, **kw: Any) -> Any:
    if _bundle is None:
        return {"text/plain": repr(obj)}
    return _bundle(ctl, **kw)


def board(ctl: Any, **filters: Any) -> Any:
    if _board is None:
        raise RuntimeError("no notebook renderer is installed (import chongming_nb)")
    return _board(ctl, **filters)

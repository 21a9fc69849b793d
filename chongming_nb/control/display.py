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
_show: Callable[..., Any] | None = None
_live_timeline: Callable[..., Any] | None = None


def set_renderer(
    bundle: Callable[..., Any],
    board: Callable[..., Any],
    show: Callable[..., Any] | None = None,
    live_timeline: Callable[..., Any] | None = None,
) -> None:
    """``bundle(ctl, **kw) -> (data, metadata)`` for _repr_mimebundle_; ``board(ctl,
    **filters)`` -> a widget; ``show(ctl, **kw)`` displays the live table in a notebook
    output that is updated when its tasks change state (``_ipython_display_``);
    ``live_timeline(first, refresh)`` does the same for a timeline."""
    global _bundle, _board, _show, _live_timeline
    _bundle, _board, _show, _live_timeline = bundle, board, show, live_timeline


def live_timeline(first: Any, refresh: Callable[[], Any]) -> None:
    """A live timeline's ``show_live`` (``pictures.from_source``): the notebook
    renderer's display that redraws it as its work goes on, else the picture once."""
    if _live_timeline is not None:
        _live_timeline(first, refresh)
        return
    from IPython.display import display

    display(first._repr_mimebundle_(), raw=True)


def bundle(obj: Any, ctl: Any, **kw: Any) -> Any:
    if _bundle is None:
        return {"text/plain": repr(obj)}
    return _bundle(ctl, **kw)


def show(obj: Any, ctl: Any, **kw: Any) -> None:
    """``_ipython_display_``: the notebook renderer's ``show``, else the plain bundle."""
    if _show is not None:
        _show(ctl, **kw)
        return
    from IPython.display import display

    display(bundle(obj, ctl, **kw), raw=True)


def board(ctl: Any, **filters: Any) -> Any:
    if _board is None:
        raise RuntimeError("no notebook renderer is installed (import chongming_nb)")
    return _board(ctl, **filters)

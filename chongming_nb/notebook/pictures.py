"""Live pictures in a notebook output: a run's graph (or any picture with a mime bundle)
displayed with a display id and redrawn while its work runs, so the cell shows it live and
the saved notebook and its HTML export keep the final picture.

One redraw thread per picture. The controller's events only mark the picture dirty (they
come from the recorder thread and must return at once); the thread redraws at most
``rate`` times a second, and once more after ``finished()`` holds, then unsubscribes.

Invariants:

* the picture shown last is the one drawn after ``finished()`` was seen true (published
  then, or already shown when identical): the saved output is final;
* at most one redraw per ``1 / rate`` seconds, however many events arrive, and none that
  would publish the picture already shown;
* an error while drawing or publishing is logged and never reaches the controller.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

log = logging.getLogger("chongming_nb.notebook")

Publisher = Callable[[dict[str, Any], str, bool], None]


def _ipython_publish(data: dict[str, Any], display_id: str, first: bool) -> None:
    from IPython.display import display, update_display

    if first:
        display(data, raw=True, display_id=display_id)
    else:
        update_display(data, raw=True, display_id=display_id)


def _bundle(picture: Any) -> dict[str, Any]:
    data = picture._repr_mimebundle_()
    return dict(data[0] if isinstance(data, tuple) else data)


class LivePicture:
    """Show ``make()`` now and redraw it as ``ctl`` reports changes, until ``finished()``."""

    def __init__(
        self,
        ctl: Any,
        make: Callable[[], Any],
        finished: Callable[[], bool],
        *,
        rate: float = 2.0,
        publish: Publisher | None = None,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0 redraws a second, got {rate!r}")
        self._make = make
        self._finished = finished
        self._interval = 1.0 / rate
        self._publish = publish or _ipython_publish
        self.display_id = uuid.uuid4().hex
        self.redraws = 0
        self._dirty = threading.Event()
        self._done = threading.Event()
        self._last = _bundle(make())
        self._publish(self._last, self.display_id, True)
        if finished():
            self._done.set()
            return
        self._unsubscribe = ctl.watch(lambda _event: self._dirty.set())
        self._thread = threading.Thread(
            target=self._redraw_loop, name="chongming-live-picture", daemon=True
        )
        self._thread.start()

    def _redraw_loop(self) -> None:
        try:
            while True:
                # a look every second as well: the work can end with no event after the
                # last change it drew (a run's status is settled after its tasks' events)
                self._dirty.wait(timeout=1.0)
                # finished is read before the drawing: a drawing made after it held is final
                final = self._finished()
                if not final and not self._dirty.is_set():
                    continue
                self._dirty.clear()
                try:
                    data = _bundle(self._make())
                    # the same picture again is not sent: the output stops changing with
                    # the last change drawn (a notebook saved after it stays saved)
                    if data != self._last:
                        self._publish(data, self.display_id, False)
                        self._last = data
                        self.redraws += 1
                except Exception:
                    log.debug("redrawing a live picture failed", exc_info=True)
                if final:
                    return
                time.sleep(self._interval)  # the rate limit (events are coalesced meanwhile)
        finally:
            self._unsubscribe()
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the final picture was published; False on timeout."""
        return self._done.wait(timeout)


def show_run_graph(run: Any, publish: Publisher | None = None) -> LivePicture:
    """Display a pipeline run's static graph as an output of its own, redrawn while the run
    goes on (a displayed run draws its live graph in its table widget: ``RunTable``)."""
    return LivePicture(run.ctl, run.graph, run.done, publish=publish)


def show_live_timeline(
    first: Any, refresh: Callable[[], Any], publish: Publisher | None = None
) -> LivePicture:
    """Display a timeline whose work still goes on (``first``, from a controller or a run)
    and redraw it with ``refresh()`` as the controller reports changes, until nothing is
    running or waiting any more: the saved output keeps the final picture."""
    pending = [first]  # the first drawing is the timeline already built
    drawn = [first]

    def make() -> Any:
        drawn[0] = pending.pop() if pending else refresh()
        return drawn[0]

    return LivePicture(first.meta["source"], make, lambda: not drawn[0].live, publish=publish)

"""Compensation (rollback) of a run: the ``compensate`` callables of its succeeded nodes,
in reverse order of success, each at most once, on a thread of its own."""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chongming_nb.control.pipeline._record import append_manifest, save_record
from chongming_nb.core.errors import TaskEvicted
from chongming_nb.core.events import CompensationRan
from chongming_nb.core.states import STATUS

if TYPE_CHECKING:
    from chongming_nb.control.pipeline._state import RunState

__all__ = ["Rollback"]

log = logging.getLogger("chongming_nb.pipeline")

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)


class Rollback:
    """A run's compensations: what was compensated, what each did, whether a rollback
    thread is busy. Every field is guarded by the run's lock."""

    __slots__ = ("active", "compensated", "entries", "run")

    def __init__(self, run: RunState) -> None:
        self.run = run
        self.compensated: set[str] = set()  # task ids
        self.entries: list[dict[str, Any]] = []  # node, task_id, ok, error — in order
        self.active = False

    def start(self) -> None:
        """Start a rollback thread unless one is busy (caller holds the run lock)."""
        if self.active:
            return
        self.active = True
        run = self.run
        order = [t for t in reversed(list(run._success_order)) if t not in self.compensated]
        threading.Thread(
            target=self._compensate,
            args=(order,),
            name=f"chongming-rollback-{run.id}",
            daemon=True,
        ).start()

    def _compensate(self, order: list[str]) -> None:
        run = self.run
        ctl = run.ctl
        try:
            for tid in order:
                with run._lock:
                    info = run._tasks[tid]
                    nr = run._nodes[info.node]
                    comp = nr.node.compensate
                    if (
                        comp is None
                        or info.role not in ("node", "child")
                        or tid in self.compensated
                        or run._status.get(tid, (0, None))[1] is not S.SUCCEEDED
                    ):
                        continue
                    self.compensated.add(tid)
                label = info.node if info.index is None else f"{info.node}[{info.index}]"
                try:
                    _call_compensation(comp, ctl.result(tid))
                    ok, error = True, None
                except TaskEvicted as exc:  # a big run: its result left memory
                    ok, error = False, str(exc)
                    log.warning("compensation of %s in run %s: %s", label, run.id, error)
                except Exception as exc:
                    ok, error = False, f"{type(exc).__name__}: {exc}"
                    log.warning("compensation of %s in run %s raised %s", label, run.id, error)
                ctl.record_event(
                    CompensationRan(
                        event_id=ctl.new_event_id(),
                        at=run._now(),
                        task_id=tid,
                        ok=ok,
                        error=error,
                    )
                )
                with run._lock:
                    self.entries.append({"node": label, "task_id": tid, "ok": ok, "error": error})
                    if ok and info.role == "node":
                        append_manifest(run, {"event": "compensated", "node": info.node})
        finally:
            with run._lock:
                self.active = False
                save_record(run, force=True)
                run._done.set()


def _call_compensation(comp: Callable[..., Any], value: Any) -> None:
    """``comp(output)``, or ``comp()`` when it takes no argument."""
    try:
        sig = inspect.signature(comp)
    except (TypeError, ValueError):
        comp(value)
        return
    takes = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        for p in sig.parameters.values()
    )
    if takes:
        comp(value)
    else:
        comp()

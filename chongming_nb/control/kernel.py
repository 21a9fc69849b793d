"""The kernel-wide controller: one per process, on the embedded SQLite store."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

from chongming_nb.control.controller import Controller
from chongming_nb.control.ownership import kernel_id, owner_kind, this_process
from chongming_nb.stores.protocol import TaskStore

_lock = threading.Lock()
_controller: Controller | None = None


def owner_id() -> str:
    """A new owner id for this process: ``host:pid:kernel id:START-NONCE``
    (``control/ownership.py``); the sidebar maps the kernel id back to a notebook."""
    return str(this_process(kernel_id()))


def get_controller(store: TaskStore | str | Path | None = None, **kwargs: Any) -> Controller:
    """The kernel-wide controller, created on first use.

    Store: the argument, else ``$CHONGMING_STORE`` (a path or a ``postgresql://`` URL),
    else SQLite at ``<jupyter data dir>/chongming/tasks.db``.
    """
    global _controller
    with _lock:
        if _controller is None:
            if store is None:
                from chongming_nb.stores import default_store_path

                store = default_store_path()
            kwargs.setdefault("owner", owner_id())
            ctl = Controller(store=store, **kwargs)
            # tasks left behind by a dead kernel become LOST (never silently re-run)
            report = ctl.reconcile("fail")
            if report.get("scheduled"):
                _report_missed_starts(ctl, report["scheduled"])
            _controller = ctl
        elif store is not None or kwargs:
            raise RuntimeError(
                "the kernel-wide controller already exists; create your own "
                "cn.Controller(...) for a different configuration"
            )
        return _controller


def _report_missed_starts(ctl: Controller, task_ids: list[str]) -> None:
    """Say which tasks of an owner that is gone (a kernel, or a script's controller)
    were waiting for a delayed start: they were cancelled, not run; whoever scheduled
    them decides whether to resubmit."""
    snaps = [s for s in map(ctl.store.get, task_ids) if s is not None]
    lines = [f"  {s.name} ({s.task_id}): {s.failure.message if s.failure else ''}" for s in snaps]
    kinds = sorted({owner_kind(s.lease_owner) for s in snaps})
    if len(kinds) == 1:
        whose = f"a {kinds[0]} that is gone"
    else:
        whose = "kernels and controllers that are gone"
    warnings.warn(
        f"{len(snaps)} scheduled task(s) of {whose} were not run:\n"
        + "\n".join(lines)
        + "\nResubmit them if they are still needed.",
        UserWarning,
        stacklevel=3,
    )


def _reset_for_tests() -> None:
    global _controller
    with _lock:
        if _controller is not None:
            _controller.close()
        _controller = None

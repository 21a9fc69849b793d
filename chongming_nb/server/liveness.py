"""Is the kernel that owns a task still there, as this server sees it?

A task that is not finished is only ever moved by its owner (the controller in the kernel
that ran it). When that kernel restarted or died, nothing will claim a command for the
task until the store is reconciled (which records it ``lost``), so the sidebar shows it
as "kernel gone", disables its buttons, and a command for it is refused at once with the
reason.

:func:`owner_gone` is the one place that decides, from the server's view:

* the server's kernel manager knows the owner's kernel and is shutting it down (a
  restart or a shutdown in progress: the old process may linger for the manager's
  shutdown wait, 5 s by default, but it will claim nothing more), or runs it in
  *another* process than the owner's pid (it restarted);
* otherwise ``chongming_nb.control.ownership.judge`` (same host: is the pid alive and
  still the same process; another host: the lease).

:class:`Liveness` applies it to the rows of a listing or a feed poll, asking once per
owner (a listing of 2,000 tasks has a handful of owners).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chongming_nb.control.ownership import OwnerId, Verdict, gone_tasks, judge
from chongming_nb.core.models import TaskSnapshot

__all__ = ["KernelPids", "KernelView", "Liveness", "kernel_pids_of", "owner_gone"]

log = logging.getLogger("chongming_nb.server")


@dataclass(frozen=True, slots=True)
class KernelView:
    """What this server's kernel manager says about one of its kernels."""

    pid: int | None  # its process (None: unknown)
    stopping: bool = False  # a shutdown or restart is in progress


#: ``kernel id -> KernelView`` for the kernels this server runs.
KernelPids = Mapping[str, KernelView]


def owner_gone(
    owner: str | None,
    *,
    lease_until: datetime | None,
    now: datetime,
    owners: Mapping[str, Any] | None = None,
    kernels: KernelPids | None = None,
) -> Verdict:
    """Is ``owner`` (a task's ``lease_owner``) provably gone? See the module docstring."""
    oid = OwnerId.parse(owner)
    if oid is not None and oid.kernel and kernels is not None and oid.kernel in kernels:
        view = kernels[oid.kernel]
        pid = view.pid
        if pid is not None and oid.pid is not None and pid != oid.pid:
            return Verdict(
                True,
                f"kernel {oid.kernel} restarted (its process is now pid {pid}, "
                f"the task's controller was pid {oid.pid})",
            )
        if view.stopping and (pid is None or pid == oid.pid):
            return Verdict(True, f"kernel {oid.kernel} is restarting or shutting down")
    verdict = judge(owner, lease_until=lease_until, now=now, owners=owners)
    if verdict.gone and oid is not None and oid.kernel:
        return Verdict(True, f"kernel {oid.kernel} is gone ({verdict.reason})")
    return verdict


class Liveness:
    """The gone owners among some tasks, from a kernel-manager snapshot taken once."""

    def __init__(self, kernel_pids: Callable[[], KernelPids] | None = None) -> None:
        self._kernel_pids = kernel_pids

    def kernels(self) -> KernelPids | None:
        if self._kernel_pids is None:
            return None
        try:
            return dict(self._kernel_pids())
        except Exception:  # never let a kernel manager hiccup break a listing
            log.debug("reading the kernel manager failed", exc_info=True)
            return None

    def gone(
        self,
        snaps: Iterable[TaskSnapshot],
        *,
        now: datetime,
        owners: Mapping[str, Any] | None = None,
        finished: bool = True,
    ) -> dict[str, str]:
        """``task id -> reason`` for every task whose owner is gone. A finished task
        (``finished``) is judged by its owner alone (its old lease ran out when it ended):
        nothing can retry it, since its code lived in that kernel and no other
        controller holds it."""
        decide = functools.partial(owner_gone, kernels=self.kernels())
        return gone_tasks(snaps, now=now, owners=owners, finished=finished, decide=decide)


def kernel_pids_of(kernel_manager: Any) -> Callable[[], KernelPids]:
    """``kernel id -> KernelView`` from a jupyter_server kernel manager."""

    def read() -> KernelPids:
        views: dict[str, KernelView] = {}
        for kid in list(kernel_manager.list_kernel_ids()):
            try:
                km = kernel_manager.get_kernel(kid)
            except KeyError:
                continue
            prov = getattr(km, "provisioner", None)
            pid = getattr(prov, "pid", None)
            # jupyter_client sets shutting_down from the shutdown request of a restart
            # or shutdown until the new process starts
            stopping = getattr(km, "shutting_down", False) is True
            views[str(kid)] = KernelView(pid if isinstance(pid, int) else None, stopping)
        return views

    return read

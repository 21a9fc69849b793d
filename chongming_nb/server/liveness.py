"""Is the kernel that owns a task still there, as this server sees it?

A task that is not finished is only ever moved by its owner (the controller in the kernel
that ran it). When that kernel restarted or died, nothing will claim a command for the
task until the store is reconciled (which records it ``lost``), so the sidebar shows it
as "kernel gone", disables its buttons, and a command for it is refused at once with the
reason.

:func:`owner_gone` is the one place that decides, from the server's view:

* the server's kernel manager knows the owner's kernel and runs it in *another* process
  than the owner's pid: the kernel restarted (the owner is gone even while the old
  process is still exiting);
* otherwise ``chongming_nb.control.ownership.judge`` (same host: is the pid alive and
  still the same process; another host: the lease).

:class:`Liveness` applies it to the rows of a listing or a feed poll, asking once per
owner (a listing of 2,000 tasks has a handful of owners).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from chongming_nb.control.ownership import OwnerId, Verdict, judge
from chongming_nb.core.models import TaskSnapshot

__all__ = ["KernelPids", "Liveness", "owner_gone"]

log = logging.getLogger("chongming_nb.server")

#: ``kernel id -> pid of its process`` (None: pid unknown) for the kernels this server runs.
KernelPids = Mapping[str, int | None]


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
        pid = kernels[oid.kernel]
        if pid is not None and oid.pid is not None and pid != oid.pid:
            return Verdict(
                True,
                f"kernel {oid.kernel} restarted (its process is now pid {pid}, "
                f"the task's controller was pid {oid.pid})",
            )
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
    ) -> dict[str, str]:
        """``task id -> reason`` for every unfinished task whose owner is gone."""
        kernels = self.kernels()
        memo: dict[tuple[str | None, datetime | None], Verdict] = {}
        out: dict[str, str] = {}
        for s in snaps:
            if s.is_terminal or s.lease_owner is None:
                continue
            key = (s.lease_owner, s.lease_until)
            verdict = memo.get(key)
            if verdict is None:
                verdict = owner_gone(
                    s.lease_owner,
                    lease_until=s.lease_until,
                    now=now,
                    owners=owners,
                    kernels=kernels,
                )
                memo[key] = verdict
            if verdict.gone:
                out[s.task_id] = verdict.reason
        return out


def kernel_pids_of(kernel_manager: Any) -> Callable[[], KernelPids]:
    """``kernel id -> pid`` from a jupyter_server kernel manager (its provisioners)."""

    def read() -> KernelPids:
        pids: dict[str, int | None] = {}
        for kid in list(kernel_manager.list_kernel_ids()):
            try:
                km = kernel_manager.get_kernel(kid)
            except KeyError:
                continue
            prov = getattr(km, "provisioner", None)
            pid = getattr(prov, "pid", None)
            pids[str(kid)] = pid if isinstance(pid, int) else None
        return pids

    return read

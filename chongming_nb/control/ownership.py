"""Who owns a task, and when that owner is provably gone.

Every controller with a store has an *owner id*: the host, the pid, the kernel id (``-``
outside a kernel), the process start time and a random nonce,

    ``host:pid:kernel:START-NONCE``     e.g. ``box:4242:kernel-1:176480123456-1f0c9a2e``

(START is the process start time in hundredths of a second since the epoch, as the OS
reports it). The id is the ``lease_owner`` of the tasks it runs, so a task row alone
says which process incarnation holds it, and each owner renews a lease on its tasks
(``lease_until``; ``Controller(lease_seconds=...)``).

The rules (one place; the reconciler, the server's sidebar and the ``chongming`` CLI all
use ``judge``):

* **same host** — ask the operating system. The owner is gone when its pid is not
  running (or is a zombie), or when the pid now belongs to another process (its start
  time differs from the one in the id). While that process is alive the owner is
  alive, whatever its lease says: a process frozen by SIGSTOP, swapped out or stuck
  in a long GC keeps its tasks.
* **another host** — the OS cannot be asked, so the lease decides: the owner is gone
  when the task's lease (else the owner's last heartbeat plus one lease) ended more
  than ``grace`` seconds ago.
* **no owner recorded** (rows written before every controller had one) — the lease
  rule, when there is a lease; without one the owner cannot be proven gone and the
  task is left alone (``reconcile`` reports it as unowned).

Invariant: ``judge`` returns ``gone`` only with a reason a person can check; anything
it cannot prove (a pid it may not signal, a start time it cannot read) counts as alive.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from chongming_nb.core.models import TaskSnapshot

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "OwnerId",
    "Verdict",
    "gone_tasks",
    "judge",
    "kernel_id",
    "owner_kind",
    "process_alive",
    "process_start",
    "refusal",
    "this_process",
]

#: How long an owner's lease on its tasks lasts (``Controller(lease_seconds=...)``); the
#: owner renews it every sixth of that.
DEFAULT_LEASE_SECONDS = 60.0
#: How long past its lease end an owner on another host is still given.
DEFAULT_GRACE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class OwnerId:
    """The parts of an owner id (see the module docstring)."""

    host: str
    pid: int | None
    kernel: str | None = None
    #: process start time, hundredths of a second since the epoch (None: unknown)
    started: int | None = None
    nonce: str | None = None

    def __str__(self) -> str:
        base = f"{self.host}:{'' if self.pid is None else self.pid}:{self.kernel or '-'}"
        if self.started is None and self.nonce is None:
            return base
        started = "" if self.started is None else str(self.started)
        return f"{base}:{started}-{self.nonce or ''}"

    @classmethod
    def parse(cls, text: str | None) -> OwnerId | None:
        """An owner id (or the older ``host:pid:kernel``) -> its parts; None for
        None, an empty string or text with no pid field."""
        if not text:
            return None
        parts = text.split(":", 3)
        if len(parts) < 2:
            return None
        host, pid_text = parts[0], parts[1]
        try:
            pid: int | None = int(pid_text)
        except ValueError:
            pid = None
        kernel = parts[2] if len(parts) > 2 and parts[2] not in ("", "-") else None
        started: int | None = None
        nonce: str | None = None
        if len(parts) == 4:
            start_text, _, nonce_text = parts[3].partition("-")
            try:
                started = int(start_text)
            except ValueError:
                started = None
            nonce = nonce_text or None
        return cls(host=host, pid=pid, kernel=kernel, started=started, nonce=nonce)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``judge``'s answer: is the owner provably gone, and why (shown to people)."""

    gone: bool
    reason: str


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in hundredths of a second since the epoch, or
    None when there is no such process (or it cannot be read)."""
    import psutil

    try:
        return round(psutil.Process(pid).create_time() * 100)
    except (psutil.Error, OSError, ValueError):
        return None


def process_alive(pid: int) -> bool:
    """Is ``pid`` a running (not zombie) process? A process we may not signal exists."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError):
        return True


def kernel_id() -> str | None:
    """The Jupyter kernel id of this process, if it is a kernel (else None).

    Read only when ipykernel is already imported: a plain script does not pay for
    importing it to learn that it is not a kernel."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from ipykernel.connect import get_connection_file

        name = os.path.basename(get_connection_file())
    except Exception:
        return None
    if name.startswith("kernel-") and name.endswith(".json"):
        return name[len("kernel-") : -len(".json")]
    return None


def this_process(kernel: str | None = None) -> OwnerId:
    """A fresh owner id for a controller in this process (a new nonce every call)."""
    pid = os.getpid()
    return OwnerId(
        host=socket.gethostname(),
        pid=pid,
        kernel=kernel,
        started=process_start(pid),
        nonce=os.urandom(4).hex(),  # (what secrets.token_hex does, without its imports)
    )


def _when(d: datetime) -> str:
    return d.isoformat(timespec="seconds")


def judge(
    owner: str | None,
    *,
    lease_until: datetime | None,
    now: datetime,
    owners: Mapping[str, Any] | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    grace: float = DEFAULT_GRACE_SECONDS,
    host: str | None = None,
) -> Verdict:
    """Is the owner of a task provably gone? (the rules: module docstring)

    ``owners`` maps owner ids to ``OwnerRecord``s (their ``heartbeat_at`` stands in
    for a missing lease on another host); ``host`` is this machine's name (default
    ``socket.gethostname()``)."""
    here = host if host is not None else socket.gethostname()
    oid = OwnerId.parse(owner)
    if oid is not None and oid.host == here and oid.pid is not None:
        if not process_alive(oid.pid):
            return Verdict(True, f"owner {owner} is gone: pid {oid.pid} is not running")
        if oid.started is not None:
            actual = process_start(oid.pid)
            if actual is None and not process_alive(oid.pid):  # it died meanwhile
                return Verdict(True, f"owner {owner} is gone: pid {oid.pid} is not running")
            if actual is not None and actual != oid.started:
                return Verdict(
                    True,
                    f"owner {owner} is gone: pid {oid.pid} now belongs to another process "
                    f"(started at {actual}, the owner at {oid.started})",
                )
        return Verdict(False, f"owner {owner} is alive (pid {oid.pid} on this host)")
    # another host, or no usable owner: the lease decides
    end = lease_until
    rec = (owners or {}).get(owner or "")
    beat = getattr(rec, "heartbeat_at", None)
    if end is None and beat is not None:
        end = beat + timedelta(seconds=lease_seconds)
    who = f"owner {owner}" if owner else "no owner recorded"
    if end is None:
        return Verdict(False, f"{who}: no lease, so it cannot be proven gone")
    if now > end + timedelta(seconds=grace):
        return Verdict(True, f"{who} is gone: its lease ended at {_when(end)}, over {grace:g}s ago")
    return Verdict(False, f"{who}: lease valid until {_when(end)} (+{grace:g}s grace)")


#: How one owner is judged: ``(owner, *, lease_until, now, owners) -> Verdict`` (``judge``,
#: or the server's ``owner_gone``, which also asks its kernel manager).
Decide = Callable[..., Verdict]


def gone_tasks(
    snaps: Iterable[TaskSnapshot],
    *,
    now: datetime,
    owners: Mapping[str, Any] | None = None,
    finished: bool = True,
    decide: Decide = judge,
) -> dict[str, str]:
    """``task id -> reason`` for every task among ``snaps`` whose owner is gone, each
    owner judged once (a listing of 2,000 tasks has a handful). A finished task
    (``finished``) is judged by its owner alone (its old lease ran out when it ended):
    nothing can retry it, since its code lived in that process and no other controller
    holds it."""
    memo: dict[tuple[str, datetime | None], Verdict] = {}
    out: dict[str, str] = {}
    for s in snaps:
        if s.lease_owner is None or (s.is_terminal and not finished):
            continue
        lease_until = None if s.is_terminal else s.lease_until
        key = (s.lease_owner, lease_until)
        verdict = memo.get(key)
        if verdict is None:
            verdict = memo[key] = decide(
                s.lease_owner, lease_until=lease_until, now=now, owners=owners
            )
        if verdict.gone:
            out[s.task_id] = verdict.reason
    return out


def owner_kind(lease_owner: str | None) -> str:
    """What owns a task, in the words the user sees: ``"kernel"`` for a notebook
    kernel's controller (its id names the kernel), else ``"controller"`` (a script's, a
    job's, or an owner id in no known format)."""
    oid = OwnerId.parse(lease_owner)
    return "kernel" if oid is not None and oid.kernel else "controller"


def refusal(snap: TaskSnapshot, gone: str) -> str:
    """Why no verb reaches a task whose owner is gone (``gone``: why, as ``owner_gone``
    says it): nothing would claim the command. The sidebar's tooltips, the REST API's
    409 and the ``chongming`` CLI give these words."""
    who = owner_kind(snap.lease_owner)
    if snap.is_terminal:
        # a finished task is retried by the controller that holds its code: none now
        return (
            f"the {who} that ran it is gone ({gone}): no controller holds its code to run it again"
        )
    # until a controller on the store settles it (reconcile: lost if it had started, else
    # cancelled)
    return f"the {who} that runs it is gone: {gone}"

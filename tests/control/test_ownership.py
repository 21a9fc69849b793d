"""The owner rules (control/ownership.py): a task's owner is gone only when that is
provable — same host: the OS says the pid is dead or reused; another host: the lease
ended more than a grace ago (issue 20). Real processes, real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from chongming_nb.control.ownership import (
    DEFAULT_GRACE_SECONDS,
    OwnerId,
    judge,
    process_alive,
    process_start,
    this_process,
)
from chongming_nb.server.serialize import parse_owner
from chongming_nb.stores import OwnerRecord

NOW = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=1)
HOST = socket.gethostname()


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not us (it waits on its stdin)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _owner_of(proc: subprocess.Popen[bytes]) -> str:
    started = process_start(proc.pid)
    assert started is not None
    return str(OwnerId(HOST, proc.pid, "kernel-1", started, "abcd1234"))


def test_owner_ids_round_trip_and_older_ids_parse() -> None:
    me = this_process("kernel-9")
    assert me.host == HOST and me.pid == os.getpid() and me.kernel == "kernel-9"
    assert me.started == process_start(os.getpid()) and me.nonce and len(me.nonce) == 8
    assert OwnerId.parse(str(me)) == me
    assert this_process().nonce != this_process().nonce, "two controllers, two owners"
    assert OwnerId.parse("box:42:-") == OwnerId("box", 42, None)
    assert OwnerId.parse("box:42:k") == OwnerId("box", 42, "k")
    assert OwnerId.parse(None) is None and OwnerId.parse("") is None
    assert OwnerId.parse("justahost") is None
    # what the sidebar maps to a notebook reads both forms
    assert parse_owner(str(me)) == (HOST, os.getpid(), "kernel-9")
    assert parse_owner("box:42:kernel-1") == ("box", 42, "kernel-1")
    assert parse_owner(f"{HOST}:7:-:12-ab") == (HOST, 7, None)


def test_a_live_owner_on_this_host_is_alive_whatever_its_lease(
    child: subprocess.Popen[bytes],
) -> None:
    owner = _owner_of(child)
    v = judge(owner, lease_until=LONG_AGO, now=NOW)
    assert not v.gone and "alive" in v.reason


def test_a_frozen_owner_is_alive(child: subprocess.Popen[bytes]) -> None:
    """SIGSTOP for longer than any lease: the process is there, its tasks stay its."""
    owner = _owner_of(child)
    os.kill(child.pid, signal.SIGSTOP)
    try:
        assert not judge(owner, lease_until=LONG_AGO, now=NOW).gone
    finally:
        os.kill(child.pid, signal.SIGCONT)


def test_a_dead_owner_is_gone_reaped_or_zombie(child: subprocess.Popen[bytes]) -> None:
    owner = _owner_of(child)
    child.kill()
    # not reaped yet: a zombie still answers kill(pid, 0)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert not process_alive(child.pid)
    v = judge(owner, lease_until=NOW + timedelta(hours=1), now=NOW)
    assert v.gone and f"pid {child.pid} is not running" in v.reason
    child.wait(10)
    assert judge(owner, lease_until=NOW + timedelta(hours=1), now=NOW).gone


def test_a_reused_pid_is_a_gone_owner(child: subprocess.Popen[bytes]) -> None:
    """The pid is alive but belongs to a process started at another time."""
    started = process_start(child.pid)
    assert started is not None
    owner = str(OwnerId(HOST, child.pid, None, started - 500, "abcd1234"))
    v = judge(owner, lease_until=NOW + timedelta(hours=1), now=NOW)
    assert v.gone and "now belongs to another process" in v.reason


def test_another_host_is_judged_by_its_lease_plus_grace() -> None:
    owner = "elsewhere:4242:kernel-1:12345-abcd1234"
    g = DEFAULT_GRACE_SECONDS
    inside = judge(owner, lease_until=NOW - timedelta(seconds=g - 1), now=NOW)
    assert not inside.gone and "grace" in inside.reason
    past = judge(owner, lease_until=NOW - timedelta(seconds=g + 1), now=NOW)
    assert past.gone and "lease ended at" in past.reason
    # no lease on the row: the owner's last heartbeat plus one lease stands in
    rec = OwnerRecord(owner, "elsewhere", 4242, "kernel-1", LONG_AGO, NOW - timedelta(seconds=5))
    assert not judge(owner, lease_until=None, now=NOW, owners={owner: rec}).gone
    assert judge(owner, lease_until=None, now=NOW + timedelta(seconds=60 + g + 1),
                 owners={owner: rec}).gone  # fmt: skip
    # custom lease and grace
    assert judge(owner, lease_until=NOW - timedelta(seconds=2), now=NOW, grace=1).gone


def test_no_owner_and_no_lease_cannot_be_proven_gone() -> None:
    v = judge(None, lease_until=None, now=NOW)
    assert not v.gone and "no owner recorded" in v.reason
    assert judge(None, lease_until=LONG_AGO, now=NOW).gone

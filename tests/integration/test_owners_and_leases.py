"""Owners, leases and fencing with real processes (issue 20): every controller with a
store has an owner; a task becomes LOST only when its owner is provably gone; an owner
whose tasks were settled without it converges, so memory and store agree."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

import chongming_nb as cn
from chongming_nb.control.ownership import DEFAULT_LEASE_SECONDS, OwnerId, process_start
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore

HOST = socket.gethostname()

#: An owner process: runs one task that checkpoints until the file ``release`` exists,
#: then reports what its memory says once memory and store agree (``flush``).
OWNER = """
import json, os, sys, time
import chongming_nb as cn

db, release, lease, owner = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] or None
ctl = cn.Controller(store=db, lease_seconds=lease, owner=owner)

def work(ctx):
    while not os.path.exists(release):
        ctx.checkpoint()
        time.sleep(0.005)
    return 42

h = ctl.submit(work, name="work")
print(json.dumps({"id": h.id, "owner": ctl.owner}), flush=True)
h.wait(120)
ctl.flush()
s = h.snapshot
print(json.dumps({"status": s.status.value, "version": s.status_version,
                  "failure": s.failure.message if s.failure else None}), flush=True)
"""


def _poll(pred: Callable[[], bool], timeout: float = 30.0) -> bool:
    """State in another process has no event to wait on: poll with a deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


class Owner:
    def __init__(self, db: Path, tmp: Path, *, lease: float = 60.0, owner: str = "") -> None:
        self.release = tmp / f"release-{os.urandom(4).hex()}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(db), str(self.release), str(lease), owner],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        first = json.loads(self.proc.stdout.readline())
        self.task_id: str = first["id"]
        self.owner: str = first["owner"]

    def finish(self) -> dict[str, object]:
        self.release.touch()
        assert self.proc.stdout is not None
        report: dict[str, object] = json.loads(self.proc.stdout.readline())
        assert self.proc.wait(30) == 0
        return report

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def _running(store: SqliteStore, tid: str) -> bool:
    s = store.get(tid)
    return s is not None and s.status is TaskStatus.RUNNING


def test_a_controller_with_a_store_has_an_owner_and_a_lease(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    ctl = cn.Controller(store=store)
    try:
        oid = OwnerId.parse(ctl.owner)
        assert oid is not None and oid.host == HOST and oid.pid == os.getpid()
        assert oid.started == process_start(os.getpid()) and oid.nonce
        assert ctl.lease_seconds == DEFAULT_LEASE_SECONDS == 60.0
        h = ctl.submit(lambda ctx: 1)
        h.wait(10)
        ctl.flush()
        assert store.get(h.id).lease_owner == ctl.owner
        assert {o.owner_id for o in store.owners()} == {ctl.owner}
    finally:
        ctl.close()
        store.close()
    assert cn.Controller().owner is None, "no store, no owner"
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ConfigurationError, match="lease_seconds"):
            cn.Controller(store=str(tmp_path / "u.db"), lease_seconds=bad)


def test_kill_9_of_an_ownerless_looking_controller_then_lost(tmp_path: Path) -> None:
    """``cn.Controller(store=cn.SqliteStore(path))`` (no owner= given), killed -9 while
    its task runs: another controller's reconcile settles it LOST, saying why."""
    db = tmp_path / "t.db"
    SqliteStore(db).close()
    owner = Owner(db, tmp_path)
    store = SqliteStore(db)
    try:
        assert _poll(lambda: _running(store, owner.task_id))
        assert OwnerId.parse(store.get(owner.task_id).lease_owner).pid == owner.proc.pid
        owner.kill()
        other = cn.Controller(store=str(db))
        try:
            report = other.reconcile()
        finally:
            other.close()
        assert report["lost"] == [owner.task_id]
        s = store.get(owner.task_id)
        assert s.status is TaskStatus.LOST and s.failure is not None
        assert s.failure.message.startswith("lease lost at ")
        assert f"pid {owner.proc.pid} is not running" in s.failure.message
    finally:
        owner.kill()
        store.close()


def test_a_live_owner_keeps_its_tasks_when_another_process_reconciles(tmp_path: Path) -> None:
    """Another process's get_controller() (which reconciles at start) leaves a live
    owner's running task alone; it then succeeds, in memory and in the store."""
    db = tmp_path / "t.db"
    SqliteStore(db).close()
    owner = Owner(db, tmp_path)
    store = SqliteStore(db)
    try:
        assert _poll(lambda: _running(store, owner.task_id))
        probe = subprocess.run(
            [sys.executable, "-c",
             "import sys, json, chongming_nb as cn\n"
             "ctl = cn.get_controller(sys.argv[1])\n"
             "print(json.dumps(ctl.reconcile()))\n",
             str(db)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        assert json.loads(probe.stdout)["lost"] == []
        assert _running(store, owner.task_id)
        report = owner.finish()
        assert report["status"] == "succeeded"
        s = store.get(owner.task_id)
        assert s.status is TaskStatus.SUCCEEDED and s.status_version == report["version"]
    finally:
        owner.kill()
        store.close()


def test_a_frozen_owner_past_its_lease_keeps_its_tasks(tmp_path: Path) -> None:
    """SIGSTOP for longer than the lease: same host, the process is alive, so nothing
    is LOST; after SIGCONT the task succeeds and the store agrees."""
    db = tmp_path / "t.db"
    SqliteStore(db).close()
    owner = Owner(db, tmp_path, lease=0.3)
    store = SqliteStore(db)
    try:
        assert _poll(lambda: _running(store, owner.task_id))
        assert _poll(lambda: store.get(owner.task_id).lease_until is not None)
        os.kill(owner.proc.pid, signal.SIGSTOP)
        try:
            # the wall clock must pass the frozen owner's lease end (and a grace)
            assert _poll(
                lambda: (
                    datetime.now(UTC).timestamp()
                    > store.get(owner.task_id).lease_until.timestamp() + 1.0
                )
            )
            ctl = cn.Controller(store=str(db))
            try:
                assert ctl.reconcile(grace=0)["lost"] == []
            finally:
                ctl.close()
            assert _running(store, owner.task_id)
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
        report = owner.finish()
        assert report["status"] == "succeeded"
        assert store.get(owner.task_id).status is TaskStatus.SUCCEEDED
    finally:
        owner.kill()
        store.close()


def test_a_reused_pid_is_a_gone_owner(tmp_path: Path) -> None:
    """A task whose owner id names a live pid with another start time: the process
    behind the pid is not its owner, so the task is settled."""
    store = SqliteStore(tmp_path / "t.db")
    started = process_start(os.getpid())
    assert started is not None
    impostor = str(OwnerId(HOST, os.getpid(), None, started - 1000, "deadbeef"))
    old = cn.Controller(store=store, owner=impostor)
    done = threading.Event()

    def stuck(ctx: cn.TaskContext) -> None:
        while not done.wait(0.01):
            ctx.checkpoint()

    h = old.submit(stuck, name="stuck")
    assert _poll(lambda: h.status is TaskStatus.RUNNING)
    old.flush()
    store2 = SqliteStore(tmp_path / "t.db")
    new = cn.Controller(store=store2)
    try:
        assert new.reconcile()["lost"] == [h.id]
        assert "now belongs to another process" in store2.get(h.id).failure.message
    finally:
        done.set()
        new.close()
        old.close()
        store2.close()
        store.close()


def test_fencing_an_owner_on_another_host_converges(tmp_path: Path) -> None:
    """An owner on another host (its id names another machine, so only its lease
    speaks for it) is frozen past lease + grace and reconciled. When it wakes, its
    write is refused and it adopts the store's LOST: memory == store, with
    "lease lost at" in the row."""
    db = tmp_path / "t.db"
    SqliteStore(db).close()
    remote = f"elsewhere-{os.urandom(3).hex()}:1:-:1-cafe0001"
    owner = Owner(db, tmp_path, lease=0.3, owner=remote)
    store = SqliteStore(db)
    try:
        assert _poll(lambda: _running(store, owner.task_id))
        assert _poll(lambda: store.get(owner.task_id).lease_until is not None)
        os.kill(owner.proc.pid, signal.SIGSTOP)
        try:
            assert _poll(
                lambda: (
                    datetime.now(UTC).timestamp()
                    > store.get(owner.task_id).lease_until.timestamp() + 0.5
                )
            )
            ctl = cn.Controller(store=str(db))
            try:
                assert ctl.reconcile(grace=0.2)["lost"] == [owner.task_id]
            finally:
                ctl.close()
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
        report = owner.finish()
        s = store.get(owner.task_id)
        assert s.status is TaskStatus.LOST
        assert report["status"] == "lost" and report["version"] == s.status_version
        assert isinstance(report["failure"], str) and report["failure"].startswith("lease lost at ")
        assert report["failure"] == s.failure.message
        from chongming_nb.control.persistence import verify

        ok, why = verify(store.history(owner.task_id), s)
        assert ok, why
    finally:
        owner.kill()
        store.close()


def test_fencing_in_one_process_memory_adopts_the_store(tmp_path: Path) -> None:
    """The same story without processes: a reconciler whose clock says the lease of a
    remote-looking owner ended long ago settles its running task; the owner's next
    write is refused and it adopts the store's LOST (history included)."""
    from datetime import timedelta

    from chongming_nb.control.recovery import reconcile_store
    from chongming_nb.testing.clock import FakeClock

    store = SqliteStore(tmp_path / "t.db")
    ctl = cn.Controller(store=store, owner="far-away:1:-:1-0000cafe", lease_seconds=1)
    gate = threading.Event()

    def work(ctx: cn.TaskContext) -> int:
        while not gate.wait(0.005):
            ctx.checkpoint()
        return 1

    other = SqliteStore(tmp_path / "t.db")
    try:
        h = ctl.submit(work, name="work")
        assert _poll(lambda: h.status is TaskStatus.RUNNING)
        ctl.flush()
        later = FakeClock(datetime.now(UTC) + timedelta(hours=1))
        assert reconcile_store(other, later, me="rec", lease_seconds=1, grace=1)["lost"] == [h.id]
        gate.set()
        assert h.wait(10)
        ctl.flush()
        mem, disk = ctl.get(h.id), store.get(h.id)
        assert mem.status is TaskStatus.LOST
        assert (mem.status, mem.status_version, mem.failure) == (
            disk.status,
            disk.status_version,
            disk.failure,
        )
        assert mem.failure is not None and mem.failure.message.startswith("lease lost at ")
        assert ctl.history(h.id) == store.history(h.id)
        assert ctl.health()["saved"] is True
    finally:
        gate.set()
        ctl.close()
        other.close()
        store.close()


def test_health_without_a_store() -> None:
    ctl = cn.Controller()
    try:
        health = ctl.health()
        assert health["store"] is None and health["owner"] is None
        assert health["saved"] is True and health["not_saved"] is None
    finally:
        ctl.close()

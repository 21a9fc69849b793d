"""The durable store under a real controller: crash recovery, cross-process control,
write-through and verification (issue 5)."""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import chongming_nb as cn
from chongming_nb.control.persistence import PersistenceWarning
from chongming_nb.core.models import Command, CommandState
from chongming_nb.core.states import NON_TERMINAL, TaskStatus
from chongming_nb.stores import SqliteStore, TaskQuery

HERE = Path(__file__).parent


def _wait_for(pred, timeout: float = 10.0) -> bool:
    """Poll a condition with a deadline (state in another process has no event to wait on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_sigkill_rounds_then_reconcile(tmp_path: Path) -> None:
    from chongming_nb.control.persistence import verify

    db = tmp_path / "tasks.db"
    rng = random.Random(1234)
    for _round in range(10):
        child = subprocess.Popen(
            [sys.executable, str(HERE / "crash_worker.py"), str(db)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.4))  # a random moment in the child's life
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    store = SqliteStore(str(db))
    before = {s.task_id: s for s in store.query()}
    succeeded_before = {tid for tid, s in before.items() if s.status is TaskStatus.SUCCEEDED}
    assert succeeded_before, "the child never finished a task"
    orphans = {tid for tid, s in before.items() if s.status in NON_TERMINAL}
    assert orphans, "the child was never killed mid-task"

    ctl = cn.Controller(store=store, owner=f"{socket.gethostname()}:{os.getpid()}:-")
    try:
        report = ctl.reconcile("fail")
        assert set(report["lost"]) == orphans
        after = {s.task_id: s for s in store.query()}
        for tid in orphans:
            s = after[tid]
            assert s.status in (TaskStatus.LOST, TaskStatus.CANCELLED), (tid, s.status)
            if s.status is TaskStatus.LOST:
                assert s.failure is not None and s.failure.kind is cn.FailureKind.LOST
        for tid in succeeded_before:
            s = after[tid]
            assert s.status is TaskStatus.SUCCEEDED
            hist = store.history(tid)
            assert [t.version for t in hist] == list(range(1, s.status_version + 1))
            assert hist[-1].to_status is TaskStatus.SUCCEEDED
            ok, why = verify(hist, s)
            assert ok, why
        assert not store.query(TaskQuery(status=frozenset(NON_TERMINAL)))
    finally:
        ctl.close()
        store.close()
    con = sqlite3.connect(db)
    try:
        assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()


def test_history_replays_for_every_task_after_crashes(tmp_path: Path) -> None:
    from chongming_nb.control.persistence import verify

    db = tmp_path / "tasks.db"
    child = subprocess.Popen(
        [sys.executable, str(HERE / "crash_worker.py"), str(db)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    child.kill()
    child.wait(10)
    store = SqliteStore(str(db))
    try:
        snaps = store.query()
        assert snaps
        for s in snaps:
            ok, why = verify(store.history(s.task_id), s)
            assert ok, (s.task_id, why)
    finally:
        store.close()


CONTROLLED = """
import sys, time, os
import chongming_nb as cn
from chongming_nb.control.persistence import PersistenceWarning
ctl = cn.Controller(store=sys.argv[1], owner=f"{os.uname().nodename}:{os.getpid()}:kernel-x")
def loop(ctx):
    while True:
        ctx.checkpoint()
        time.sleep(0.001)
h = ctl.submit(loop, name="long-loop")
print(h.id, flush=True)
h.wait(30)
ctl.flush()
print(h.status.value, flush=True)
"""


def test_cli_stop_of_a_task_owned_by_another_live_process(tmp_path: Path) -> None:
    from chongming_nb.cli.main import main as cli

    db = tmp_path / "tasks.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CONTROLLED, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        task_id = child.stdout.readline().strip()
        store = SqliteStore(str(db))
        assert _wait_for(
            lambda: (s := store.get(task_id)) is not None and s.status is TaskStatus.RUNNING
        )
        code = cli(["--store", str(db), "stop", task_id, "--wait", "5"])
        assert code == 0
        assert _wait_for(lambda: store.get(task_id).status is TaskStatus.STOPPED, 5)
        assert child.stdout.readline().strip() == "stopped"
        cmds = store.commands(task_id)
        assert cmds and cmds[-1].state is CommandState.DONE
        store.close()
    finally:
        child.kill()
        child.wait(10)


def test_store_command_for_an_illegal_verb_is_rejected_not_applied(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "t.db"))
    ctl = cn.Controller(store=store, owner=f"{socket.gethostname()}:{os.getpid()}:-")
    try:
        h = ctl.submit(lambda ctx: 42)
        h.wait(5)
        ctl.flush()
        cid = uuid.uuid4().hex
        store.submit_command(
            Command(
                command_id=cid,
                task_id=h.id,
                verb="pause",
                actor="test",
                created_at=ctl._clock.now(),
            )
        )
        # CLAIMED is a visible step of the leased queue: wait for the completion
        assert _wait_for(
            lambda: (
                (c := store.get_command(cid)) is not None
                and c.state in (CommandState.DONE, CommandState.REJECTED)
            ),
            5,
        )
        c = store.get_command(cid)
        assert c is not None and c.state is CommandState.REJECTED
        assert c.outcome is not None and c.outcome["ok"] is False and "pause" in c.outcome["reason"]
        assert h.status is TaskStatus.SUCCEEDED
    finally:
        ctl.close()
        store.close()


def test_write_through_matches_memory_and_failures_never_fail_a_task(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "t.db"))
    ctl = cn.Controller(store=store, owner=f"{socket.gethostname()}:{os.getpid()}:-")
    try:
        hs = [ctl.submit(lambda ctx, i: i * i, i) for i in range(50)]
        for i, h in enumerate(hs):
            assert h.result(10) == i * i
        ctl.flush()
        for h in hs:
            mem = ctl.get(h.id)
            disk = store.get(h.id)
            assert disk is not None
            assert (disk.status, disk.status_version) == (mem.status, mem.status_version)
            assert [t.version for t in store.history(h.id)] == [
                t.version for t in ctl.history(h.id)
            ]
        assert ctl.persist_failures == 0

        class Broken:
            def __getattr__(self, name):
                def fail(*a, **k):
                    raise OSError("disk on fire")

                return fail

        link = ctl._link
        assert link is not None
        link.store = Broken()  # every write now fails: held, and said
        with pytest.warns(PersistenceWarning, match="disk on fire"):
            h = ctl.submit(lambda ctx: "still fine")
            assert h.result(10) == "still fine"
            ctl.flush()
        assert ctl.persist_failures > 0
        assert ctl.health()["saved"] is False
    finally:
        if ctl._link is not None:
            ctl._link.store = store
        ctl.close()
        store.close()


def test_reconcile_requeue_runs_registered_tasks_again(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    store = SqliteStore(db)
    # a dead owner left a RUNNING task behind, with its call recorded
    dead = cn.Controller(store=store, owner=f"{socket.gethostname()}:999999:-")
    gate = threading.Event()

    def square(ctx, x):
        gate.wait(10)
        return x * x

    h = dead.submit(square, 7, name="square")
    assert _wait_for(lambda: h.status is TaskStatus.RUNNING)
    dead.flush()
    dead.close()
    store2 = SqliteStore(db)
    live = cn.Controller(store=store2, owner=f"{socket.gethostname()}:{os.getpid()}:-")
    try:
        live.registry.register(square, "square")
        report = live.reconcile("requeue")
        gate.set()
        assert report["requeued"] == [h.id]
        again = live.list_tasks(name_prefix="square")
        assert len(again) == 1 and again[0].task_id != h.id
        assert live.handle(again[0].task_id).result(10) == 49
        live.flush()
        assert store2.get(h.id).status is TaskStatus.LOST
    finally:
        live.close()
        store2.close()


def test_reconcile_rejects_unknown_policy(tmp_path: Path) -> None:
    ctl = cn.Controller(store=str(tmp_path / "t.db"))
    try:
        with pytest.raises(cn.ConfigurationError, match="on_orphan"):
            ctl.reconcile("explode")
    finally:
        ctl.close()


def test_open_store_reads_a_dead_kernels_history_as_dataframes(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    ctl = cn.Controller(store=db, owner=f"{socket.gethostname()}:{os.getpid()}:-")
    ok = ctl.submit(lambda ctx: 1, name="fine")
    bad = ctl.submit(lambda ctx: 1 / 0, name="broken")
    ok.wait(5)
    bad.wait(5)
    ctl.flush()
    ctl.close()
    with cn.open_store(db) as reader:
        snaps = reader.snapshots_df()
        assert set(snaps["name"]) == {"fine", "broken"}
        assert str(snaps["status"].dtype) == "category"
        att = reader.attempts_df()
        row = att[att["name"] == "broken"].iloc[0]
        assert row["failure_kind"] == "exception"
        assert "ZeroDivisionError" in row["traceback"]
        ev = reader.events_df()
        assert list(ev[ev["name"] == "fine"]["to_status"]) == [
            "queued",
            "starting",
            "running",
            "succeeded",
        ]
        assert reader.stats()["failed"] == 1
        with pytest.raises(cn.TaskNotFound):
            reader.get("nope")

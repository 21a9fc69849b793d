"""Commands are exact (issue 20): a command the owner applied is completed in the store
even when the owner exits the moment its task ends, so ``chongming stop ID --wait``
never reports a timeout for a stop that happened.

Each round is a fresh owner process forked from a warm parent (imports done once), so
100 rounds stay cheap."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from chongming_nb.cli.main import main as cli
from chongming_nb.core.models import CommandState
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore

ROUNDS = 100

#: A warm parent: one forked owner per line on stdin. Each owner runs one endless loop
#: task, prints its id, and returns as soon as the task has ended: no flush, no close.
ZYGOTE = """
import os, sys, time
import chongming_nb as cn
import chongming_nb.control.controller  # warm: every module an owner needs, loaded once
import chongming_nb.runtime.executors.thread
import psutil

db = sys.argv[1]


def loop(ctx):
    while True:
        ctx.checkpoint()
        time.sleep(0.001)


for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        ctl = cn.Controller(store=db)
        h = ctl.submit(loop, name="loop")
        print(h.id, flush=True)
        h.wait(60)
        print(h.status.value, flush=True)
        sys.exit(0)  # the interpreter exits: whatever the owner owes the store is paid now
    _, status = os.waitpid(pid, 0)
    print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)
"""


def _wait_running(store: SqliteStore, task_id: str, timeout: float = 30.0) -> None:
    """State in another process has no event to wait on: poll with a deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = store.get(task_id)
        if s is not None and s.status is TaskStatus.RUNNING:
            return
        time.sleep(0.005)
    raise AssertionError(f"{task_id} never ran: {store.get(task_id)}")


def test_stop_wait_is_exact_when_the_owner_exits_at_once(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    SqliteStore(db).close()
    zygote = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    store = SqliteStore(db)
    codes: list[int] = []
    try:
        for _ in range(ROUNDS):
            zygote.stdin.write("go\n")
            zygote.stdin.flush()
            task_id = zygote.stdout.readline().strip()
            _wait_running(store, task_id)
            codes.append(cli(["--store", str(db), "stop", task_id, "--wait", "10"]))
            assert zygote.stdout.readline().strip() == "stopped"
            assert zygote.stdout.readline().strip() == "exit 0"
            (cmd,) = store.commands(task_id)
            assert cmd.state is CommandState.DONE, (cmd, codes)
            snap = store.get(task_id)
            assert snap is not None and snap.status is TaskStatus.STOPPED
    finally:
        zygote.stdin.close()
        zygote.wait(30)
        store.close()
    assert codes == [0] * ROUNDS

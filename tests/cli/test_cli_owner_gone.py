"""A task whose controller is gone is not shown as if it would still move.

``chongming ps`` and ``chongming status`` judge each unfinished task's owner by the rules
the Tasks sidebar uses (a pid on this host that is not running); a verb for such a task
is refused at once (exit 3) instead of being queued for an owner that will never claim
it. Each case is a real script in its own interpreter: one that closes cleanly with a
delayed task, one killed with SIGKILL while its task runs.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from chongming_nb import Controller, SqliteStore, TaskStatus
from chongming_nb.cli.common import EXIT_ILLEGAL, EXIT_OK
from chongming_nb.cli.main import main


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def script(tmp_path: Path, body: str) -> subprocess.Popen[str]:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return subprocess.Popen(
        [sys.executable, str(path), str(tmp_path / "tasks.db")],
        stdout=subprocess.PIPE,
        text=True,
    )


def line(rows: str, task_id: str) -> str:
    (found,) = [ln for ln in rows.splitlines() if ln.startswith(task_id)]
    return found


def test_a_closed_scripts_delayed_task_says_it_was_to_start_not_when_it_starts(
    tmp_path: Path,
) -> None:
    job = script(
        tmp_path,
        """
        import sys
        import chongming_nb as cn

        ctl = cn.Controller(store=cn.SqliteStore(sys.argv[1]))
        h = ctl.submit(print, "report", name="later", delay=3600)
        ctl.close()
        print(h.id, ctl.get(h.id).retry_at.strftime("%H:%M"))
        """,
    )
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 0
    task_id, at = out.split()
    db = str(tmp_path / "tasks.db")

    code, rows, _ = run("--store", db, "ps")
    assert code == EXIT_OK
    assert f"blocked, was to start at {at} UTC (owner gone)" in line(rows, task_id)
    assert "(in " not in rows  # nothing counts down to a start nobody will make

    code, detail, _ = run("--store", db, "status", task_id)
    assert code == EXIT_OK
    assert f"was to start at {at} UTC (owner gone)" in line(detail, "status")
    gone = line(detail, "owner gone")
    assert f"pid {job.pid} is not running" in gone and "cn.get_controller()" in gone

    code, listed, _ = run("--store", db, "--json", "ps")
    assert code == EXIT_OK
    (item,) = json.loads(listed)
    assert f"pid {job.pid} is not running" in item["owner_gone"]


def test_a_killed_scripts_running_task_is_owner_gone_and_a_verb_is_refused_at_once(
    tmp_path: Path,
) -> None:
    job = script(
        tmp_path,
        """
        import sys, threading
        import chongming_nb as cn

        ctl = cn.Controller(
            store=cn.SqliteStore(sys.argv[1]), concurrency=cn.ConcurrencyPolicy(max_parallel=1)
        )
        started, hold = threading.Event(), threading.Event()

        def work():
            started.set()
            hold.wait()

        busy = ctl.submit(work, name="busy")
        queued = ctl.submit(print, "next", name="queued")
        assert started.wait(30)
        assert ctl.get(busy.id).status.value == "running"  # a read shows the start report
        assert ctl.flush(30)
        print(busy.id, queued.id, flush=True)
        hold.wait()  # until the test kills this process
        """,
    )
    assert job.stdout is not None
    busy, queued = job.stdout.readline().split()
    db = str(tmp_path / "tasks.db")
    code, rows, _ = run("--store", db, "ps")
    assert code == EXIT_OK
    assert "running" in line(rows, busy) and "owner gone" not in rows  # alive: as it is

    os.kill(job.pid, signal.SIGKILL)
    job.wait(30)
    code, rows, _ = run("--store", db, "ps")
    assert code == EXIT_OK
    assert "running (owner gone)" in line(rows, busy)
    assert "queued (owner gone)" in line(rows, queued)

    code, _, err = run("--store", db, "stop", busy, "--wait", "30")
    assert code == EXIT_ILLEGAL
    assert f"cannot stop task {busy}: the controller that runs it is gone" in err
    assert f"pid {job.pid} is not running" in err
    store = SqliteStore(db)
    try:
        assert store.commands(busy) == []  # nothing queued for an owner that is gone
    finally:
        store.close()


def test_a_live_controllers_tasks_are_shown_and_controlled_as_before(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    ctl = Controller(store=SqliteStore(db))
    try:
        later = ctl.submit(print, "x", delay=3600)
        assert ctl.get(later.id).status is TaskStatus.BLOCKED
        assert ctl.flush(30)
        code, rows, _ = run("--store", str(db), "ps")
        assert code == EXIT_OK
        assert "starts at" in line(rows, later.id) and "owner gone" not in rows
        code, out, _ = run("--store", str(db), "skip", later.id, "--wait", "30")
        assert code == EXIT_OK, out
        assert ctl.get(later.id).status is TaskStatus.SKIPPED
    finally:
        ctl.close()

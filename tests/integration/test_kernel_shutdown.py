"""A kernel that shuts down or restarts while a task runs records the truth.

On a graceful shutdown IPython clears the user namespace at exit while task threads
still run; a task then dies of a made-up exception (``NameError: name 'time' is not
defined``: its globals vanished under it). The record must say the kernel went away —
LOST (or STOPPED, when the task reached a checkpoint in time) with "the kernel shut
down" — never FAILED with an exception its own code did not raise. The same holds for
a plain ``python script.py`` that ends while tasks run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from _kernel import run_cell
from jupyter_client.manager import KernelManager

import chongming_nb as cn
from chongming_nb.core.models import TaskSnapshot

# A task whose loop uses a module imported in the cell: once the namespace is cleared
# under it, `time` is gone. It prints the task id once its loop runs.
_CELL = textwrap.dedent(
    """
    import time
    import chongming_nb as cn
    ctl = cn.get_controller()

    def slow(ctx):
        for i in ctx.track(range(10_000)):
            time.sleep(0.05)

    h = ctl.submit(slow, name="slow")
    while ctl.get(h.id).progress is None or not ctl.get(h.id).progress.done:
        time.sleep(0.01)
    print(h.id, flush=True)
    """
)

# The same, with a loop that never reaches a checkpoint while the namespace goes away.
_CELL_NO_CHECKPOINT = _CELL.replace(
    "for i in ctx.track(range(10_000)):\n        time.sleep(0.05)",
    "ctx.progress(done=1)\n    for i in range(100_000):\n        time.sleep(0.05)",
)


def _start(tmp_path: Path, cell: str) -> tuple[KernelManager, str]:
    km = KernelManager(kernel_name="python3")
    env = {
        **os.environ,
        "CHONGMING_STORE": str(tmp_path / "tasks.db"),
    }
    env.pop("JPY_SESSION_NAME", None)
    km.start_kernel(env=env, cwd=str(tmp_path))
    task_id = run_cell(km, cell).split()[-1]
    return km, task_id


def _read(
    tmp_path: Path, task_id: str, said: str = "the kernel shut down while it ran"
) -> TaskSnapshot:
    """The task's record in the store, checked to be honest: LOST (outcome unknown) or
    STOPPED, with the kernel's shutdown as the reason; never FAILED (no attempt or
    transition after the shutdown blames the task's code)."""
    store = cn.open_store(tmp_path / "tasks.db")
    try:
        snap = store.get(task_id)
        history = store.history(task_id)
        attempts = store.attempts(task_id)
    finally:
        store.close()
    assert snap is not None
    assert snap.status in (cn.TaskStatus.LOST, cn.TaskStatus.STOPPED), (snap, history)
    assert all(tr.to_status is not cn.TaskStatus.FAILED for tr in history), history
    assert said in (history[-1].reason or ""), history[-1]
    for a in attempts:
        assert a.outcome is not cn.TaskStatus.FAILED and a.traceback is None, a
    if snap.failure is not None:
        assert snap.failure.exception_type is None, snap.failure
        assert said in snap.failure.message, snap.failure
    return snap


def _shutdown(km: KernelManager) -> None:
    km.shutdown_kernel(now=False)


def _restart(km: KernelManager) -> None:
    km.restart_kernel(now=False)
    km.shutdown_kernel(now=False)


@pytest.mark.parametrize("cell", [_CELL, _CELL_NO_CHECKPOINT], ids=["checkpoints", "no-checkpoint"])
@pytest.mark.parametrize("end", [_shutdown, _restart], ids=["shutdown", "restart"])
def test_a_kernel_that_goes_away_records_it_not_a_made_up_failure(
    tmp_path: Path, cell: str, end: Callable[[KernelManager], None]
) -> None:
    km, task_id = _start(tmp_path, cell)
    end(km)
    snap = _read(tmp_path, task_id)
    # a checkpoint within the grace: stopped; none: abandoned, the outcome is unknown
    assert snap.status is (
        cn.TaskStatus.LOST if cell is _CELL_NO_CHECKPOINT else cn.TaskStatus.STOPPED
    )


# A task whose clean-up breaks while the process goes away: what it raises then is the
# teardown's business, not a failure of its work.
_CELL_BREAKS_ON_STOP = _CELL.replace(
    "for i in ctx.track(range(10_000)):\n        time.sleep(0.05)",
    "try:\n"
    "        for i in ctx.track(range(10_000)):\n"
    "            time.sleep(0.05)\n"
    "    except cn.TaskCancelled:\n"
    "        raise RuntimeError('clean-up broke')",
)


@pytest.mark.parametrize(
    ("cell", "status"),
    [
        (_CELL_NO_CHECKPOINT, cn.TaskStatus.LOST),
        (_CELL, cn.TaskStatus.STOPPED),
        (_CELL_BREAKS_ON_STOP, cn.TaskStatus.LOST),
    ],
    ids=["no-checkpoint", "checkpoints", "breaks-on-stop"],
)
def test_a_script_that_ends_while_a_task_runs_records_it(
    tmp_path: Path, cell: str, status: cn.TaskStatus
) -> None:
    script = tmp_path / "job.py"
    script.write_text(cell)
    env = {**os.environ, "CHONGMING_STORE": str(tmp_path / "tasks.db")}
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    snap = _read(tmp_path, proc.stdout.split()[-1], said="the process exited while it ran")
    assert snap.status is status


def test_the_exit_drain_runs_before_a_hook_that_clears_the_namespace(tmp_path: Path) -> None:
    """An exit hook registered after ``import chongming_nb`` but before the controller
    (as IPython's shell is, when the import comes first) clears the task's globals: the
    drain still runs before it, so the task is LOST, not FAILED with a NameError."""
    clears = textwrap.dedent(
        """
        import atexit
        import chongming_nb.control.controller  # registers the exit drain now

        def clear():  # what IPython's shell does at exit: the user namespace goes away
            g = globals()
            ctl, h = g["ctl"], g["h"]
            for k in [k for k in g if not k.startswith("__")]:
                del g[k]
            ctl.wait(h.id, timeout=60)  # the task's end (its NameError) is recorded

        atexit.register(clear)
        """
    )
    script = tmp_path / "job.py"
    script.write_text(clears + _CELL_NO_CHECKPOINT)
    env = {**os.environ, "CHONGMING_STORE": str(tmp_path / "tasks.db")}
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    snap = _read(tmp_path, proc.stdout.split()[-1], said="the process exited while it ran")
    assert snap.status is cn.TaskStatus.LOST

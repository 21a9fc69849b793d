"""Logging stays the user's: task output capture takes only the records made inside a
task; the root logger's handlers and ``logging.lastResort`` are left as they were."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable

from chongming_nb import Controller, TaskContext

SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import chongming_nb as cn

    root_handlers = list(logging.getLogger().handlers)
    last_resort = logging.lastResort
    ctl = cn.Controller()

    def talk(ctx):
        logging.getLogger("inside").warning("said inside the task")
        return 1

    h = ctl.submit(talk)
    assert h.result(timeout=10) == 1
    assert logging.getLogger().handlers == root_handlers, logging.getLogger().handlers
    assert logging.lastResort is last_resort
    logging.getLogger("outside").warning("said outside any task")
    logs = [(r.stream, r.level, r.line) for r in h.logs()]
    print("LOGS", logs, flush=True)
    logging.basicConfig(format="configured: %(message)s")
    logging.getLogger("later").warning("after basicConfig")
    ctl.close()
    """
)


def test_a_warning_outside_tasks_still_reaches_stderr_once_a_task_ran() -> None:
    # a fresh interpreter: pytest puts its own handlers on the root logger
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "said outside any task" in proc.stderr
    # the task's record went to the task, once, with its level; not to the cell's stderr
    assert "said inside the task" not in proc.stderr
    assert "LOGS [('log', 'WARNING', 'inside: said inside the task')]" in proc.stdout
    # basicConfig is not a no-op: the root logger had no handler of ours
    assert "configured: after basicConfig" in proc.stderr


def test_root_handlers_are_untouched_and_task_records_still_reach_them(
    make_ctl: Callable[..., Controller],
) -> None:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    root = logging.getLogger()
    keep = Keep()
    root.addHandler(keep)
    try:
        before = list(root.handlers)
        ctl = make_ctl()

        def talk(ctx: TaskContext) -> None:
            logging.getLogger("user.lib").warning("from the task")
            ctx.log.warning("through ctx.log")

        h = ctl.submit(talk)
        h.result(timeout=10)
        logging.getLogger("user.lib").warning("from the cell")
        assert root.handlers == before
        # the user's handler gets what it always got: the task's record and the cell's
        assert seen == ["from the task", "from the cell"]
        lines = [(r.stream, r.line) for r in h.logs()]
        assert lines == [
            ("log", "user.lib: from the task"),
            ("log", "through ctx.log"),  # the task's own log needs no logger name
        ]
    finally:
        root.removeHandler(keep)

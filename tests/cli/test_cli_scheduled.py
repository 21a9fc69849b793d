"""A task waiting for a delayed start says when it starts in ``chongming ps`` and
``chongming status``, as its row does: "starts at 14:05 UTC (in 3m)"."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

from chongming_nb import Controller, SqliteStore, TaskStatus
from chongming_nb.cli.common import EXIT_OK
from chongming_nb.cli.main import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out, err=io.StringIO())
    return code, out.getvalue()


def test_ps_and_status_say_when_a_delayed_task_starts(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    ctl = Controller(store=SqliteStore(path))
    try:
        at = datetime.now(UTC) + timedelta(hours=3, seconds=30)  # "in 3h" for 30 s
        later = ctl.submit(lambda: None, not_before=at)
        now = ctl.submit(lambda: None)
        now.wait(30)
        assert ctl.get(later.id).status is TaskStatus.BLOCKED
        assert ctl.flush(30)
        text = f"blocked, starts at {at:%H:%M} UTC (in 3h)"
        code, out = run("--store", str(path), "ps")
        assert code == EXIT_OK
        (row,) = [ln for ln in out.splitlines() if ln.startswith(later.id)]
        assert text in row
        (done,) = [ln for ln in out.splitlines() if ln.startswith(now.id)]
        assert "succeeded" in done and "starts" not in done
        code, out = run("--store", str(path), "status", later.id)
        assert code == EXIT_OK
        (status,) = [ln for ln in out.splitlines() if ln.startswith("status")]
        assert text in status
    finally:
        ctl.close()

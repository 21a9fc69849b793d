"""A row's elapsed time is the work of the task's current attempt: its wall time minus the
time it spent paused in place (PAUSED), frozen while paused. The notebook's board (the
kernel's rows, ``notebook/rows.py``) and the Tasks sidebar (the server's listing,
``server/serialize.py``) both take the paused time from the task's transitions and send
it as the row's ``paused``, so they agree however late each heard of what happened.

The lead's case: a task ran 2 s, was paused 9 s, then stopped. The board read "2s" (it
had frozen the row at the pause), the sidebar "11s" (``ended - started`` counted the
pause); the saved HTML said 0:11.

A real Controller on a fake clock writes to the SQLite store the server reads; the
kernel's board and the REST listing are read after the same steps."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import chongming_nb as cn
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing import FakeClock
from chongming_nb.testing.widgets import recording_comms

S = cn.TaskStatus
API = ("chongming", "api")


class Loop:
    """A task that works (a checkpoint at a time) until released; ``reach(status)``
    waits until the task's next transition into ``status`` has been published."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._seen: dict[S, int] = dict.fromkeys(S, 0)
        self._waited: dict[S, int] = dict.fromkeys(S, 0)
        self._cond = threading.Condition()

    def work(self, ctx: Any) -> str:
        while not self.release.is_set():
            ctx.checkpoint()
            self.release.wait(0.001)
        return "done"

    def on(self, event: Any) -> None:
        to = getattr(event, "to_status", None)
        if to is not None:
            with self._cond:
                self._seen[to] += 1
                self._cond.notify_all()

    def reach(self, status: S) -> None:
        with self._cond:
            want = self._waited[status] + 1
            assert self._cond.wait_for(lambda: self._seen[status] >= want, 30), status
            self._waited[status] = want


@dataclass
class Run:
    """A real Controller on a fake clock, on the store the server reads, with a board
    whose notebook output (rewritten when a row finishes) lands in ``saved``."""

    ctl: cn.Controller
    clock: FakeClock
    loop: Loop
    board: TaskTable
    saved: list[dict[str, Any]]

    def paused_after_two_seconds(self, name: str) -> str:
        h = self.ctl.submit(self.loop.work, name=name)
        self.loop.reach(S.RUNNING)
        self.clock.advance(2)
        self.ctl.pause(h.id)
        self.loop.reach(S.PAUSED)
        return h.id

    def row(self) -> dict[str, Any]:
        """The board's one row once the store and the board have every change."""
        self.ctl.flush()
        self.board.flush(force=True)
        (row,) = self.board.current_rows()
        return row


@pytest.fixture
def run(store_path: Path) -> Iterator[Run]:
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    ctl = cn.Controller(store=store_path, clock=clock)
    loop = Loop()
    ctl.watch(loop.on)
    saved: list[dict[str, Any]] = []
    try:
        with recording_comms():
            board = TaskTable(ctl, kind="board", clock=clock, autoflush=False)
            board.keep_display_updated("out-1", publish=lambda data, _id: saved.append(data))
            yield Run(ctl, clock, loop, board, saved)
            board.close()
    finally:
        loop.release.set()
        ctl.close()


def _elapsed(row: dict[str, Any]) -> float:
    """What every view shows for a finished row (labextension/src/row.ts elapsedSeconds)."""
    return (row["ended"] - row["started"] - row.get("paused", 0)) / 1000


async def _rows_of(jp_fetch: Any, task_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task's row in the listing, and in its detail."""
    listing = json.loads((await jp_fetch(*API, "tasks")).body)
    (row,) = [r for r in listing["tasks"] if r["id"] == task_id]
    detail = json.loads((await jp_fetch(*API, "tasks", task_id)).body)["task"]
    return row, detail


async def test_paused_nine_seconds_then_stopped_reads_two_seconds_on_the_board_and_sidebar(
    run: Run, jp_fetch: Any
) -> None:
    tid = run.paused_after_two_seconds("paused-then-stopped")
    run.clock.advance(9)
    run.ctl.stop(tid)
    run.loop.reach(S.STOPPED)
    mine = run.row()
    assert mine["status"] == "stopped"
    assert _elapsed(mine) == 2.0, mine
    # the saved output, rewritten when the row finished (a saved notebook, HTML export)
    html = run.saved[-1]["text/html"]
    assert "<td>stopped</td>" in html and "<td>0:02</td>" in html, html
    assert mine.get("paused") == 9000, mine
    listed, detail = await _rows_of(jp_fetch, tid)
    for row in (listed, detail):
        assert _elapsed(row) == _elapsed(mine) == 2.0, row
        assert row.get("paused") == 9000, row


async def test_paused_then_resumed_then_finished_leaves_the_pause_out(
    run: Run, jp_fetch: Any
) -> None:
    tid = run.paused_after_two_seconds("paused-then-finished")
    paused = run.row()
    run.clock.advance(9)
    run.ctl.resume(tid)
    run.loop.reach(S.RUNNING)
    run.clock.advance(3)
    run.loop.release.set()
    run.loop.reach(S.SUCCEEDED)
    mine = run.row()
    # while paused: frozen at the pause, nothing paused before it
    assert paused["status"] == "paused" and paused["frozen"] == paused["started"] + 2000
    assert mine["status"] == "succeeded"
    assert _elapsed(mine) == 5.0, mine  # 2 s + 3 s of work; the 9 s paused left out
    html = run.saved[-1]["text/html"]
    assert "<td>succeeded</td>" in html and "<td>0:05</td>" in html, html
    assert paused.get("paused") == 0 and mine.get("paused") == 9000, mine
    listed, detail = await _rows_of(jp_fetch, tid)
    for row in (listed, detail):
        assert _elapsed(row) == 5.0, row
        assert row.get("paused") == 9000, row

"""A paused row's elapsed time is the same on the board and in the Tasks sidebar: both
rows carry ``frozen``, the instant the task's current status began, taken from the same
transition (the kernel's history for the board, the store's for the sidebar's REST
rows). Before, each view froze the clock when it first drew the row paused: the board
heard of the pause within a patch, the sidebar through the store and its feed, ~1 s
later, and the two read "1m02s" and "1m03s"."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import chongming_nb as cn
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.notebook.rows import epoch_ms
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.server.serialize import pause_clocks, task_rows
from chongming_nb.testing import FakeClock
from chongming_nb.testing.widgets import FakeController, recording_comms


def test_the_board_and_the_sidebar_rows_of_a_paused_task_freeze_at_the_same_instant(
    tmp_path: Path,
) -> None:
    ctl = cn.Controller(store=tmp_path / "tasks.db")
    go = threading.Event()
    paused = threading.Event()

    counted = threading.Event()

    def work(ctx: Any) -> None:
        for i in ctx.track(range(1_000_000), total=1_000_000):
            if i == 10:
                counted.set()  # the loop has a count to keep: paused later, not before
            go.wait(0.001)

    def on(e: Any) -> None:
        if getattr(e, "to_status", None) is cn.TaskStatus.PAUSED:
            paused.set()

    try:
        with recording_comms():
            ctl.watch(on)
            h = ctl.submit(work, name="loop")
            board = TaskTable(ctl, kind="board", autoflush=False)
            assert counted.wait(30)
            ctl.pause(h.id)
            assert paused.wait(30)
            ctl.flush()  # (the store has the transition)
            board.flush(force=True)
            (row,) = board.current_rows()
            assert row["status"] == "paused"
            entered = ctl.history(h.id)[-1]
            assert entered.to_status is cn.TaskStatus.PAUSED
            assert row["frozen"] == epoch_ms(entered.at)
            # the sidebar's row: the REST listing's, from the store
            store = ctl.store
            snaps = [s for s in store.query() if s.task_id == h.id]
            (rest,) = task_rows(
                snaps,
                sm=StateMachine(FakeClock()),
                now=entered.at,
                owners={},
                sessions={},
                pauses=pause_clocks(store, snaps),
            )
            assert rest["frozen"] == row["frozen"]
            # and its progress: the store's copy of the paused task has the count reached
            # (the transition was saved with the live progress, which ran ahead of it)
            assert rest["done"] == row["done"] > 0 and rest["total"] == row["total"]
            # running again: no frozen instant, the clock moves
            ctl.resume(h.id)
            ctl.flush()
            board.flush(force=True)
            (row,) = board.current_rows()
            assert row["status"] == "running" and row["frozen"] is None
            board.close()
    finally:
        go.set()
        ctl.stop(h.id)
        ctl.close()


def test_a_board_row_freezes_when_the_pause_was_reached_not_when_it_was_drawn(
    fctl: FakeController, clock: FakeClock, comms: Any
) -> None:
    tid = fctl.add("loop", status="running", total=10).task_id
    t = TaskTable(fctl, kind="task", task_ids=[tid], clock=clock, autoflush=False)
    assert t.current_rows()[0]["frozen"] is None
    fctl.apply(tid, "pause")
    clock.advance(2)
    fctl.settle(tid)  # paused here ...
    reached = clock.now()
    clock.advance(5)
    t.flush()  # ... the board hears of it 5 s later
    (row,) = t.current_rows()
    assert row["status"] == "paused" and row["frozen"] == epoch_ms(reached)
    t.close()

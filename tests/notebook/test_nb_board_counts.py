"""A board's counts are every task's, also after finished tasks left the kernel's memory
(``HistoryLimits.memory_finished_tasks``): with a store and without. The board shows the
live tasks and the newest finished ones (as many as the controller keeps), counts the
older ones per status in its summary, and a line says how many are not shown and where
they are. Through the real controller, with a recording comm (no kernel, no browser)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _board import patches

import chongming_nb as cn
from chongming_nb.notebook import display
from chongming_nb.notebook.older import STORED_HINT, UNSTORED_HINT
from chongming_nb.notebook.outputs import SNAPSHOT_MIME
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing.widgets import recording_comms

CAP = 50


def ok(x: int) -> int:
    return x


def boom(x: int) -> int:
    raise ValueError(f"no {x}")


@pytest.fixture(params=["no store", "sqlite"])
def ctl(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[cn.Controller]:
    store = None if request.param == "no store" else tmp_path / "tasks.db"
    c = cn.Controller(
        executor="inline", store=store, history=cn.HistoryLimits(memory_finished_tasks=CAP)
    )
    try:
        with recording_comms():
            yield c
    finally:
        c.close()


def run(ctl: cn.Controller, n: int, fn: Any = ok) -> None:
    for i in range(n):
        ctl.submit(fn, i).wait(timeout=30)


def shown(table: TaskTable) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in table.current_rows():
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def test_the_controllers_counts_stay_whole_after_eviction(ctl: cn.Controller) -> None:
    run(ctl, 100)
    run(ctl, 20, boom)
    assert len(ctl._book.tasks) == CAP  # (the rest left memory)
    assert ctl.stats()["succeeded"] == 100
    # a status filter counts the tasks that left memory too, without reading the store
    assert ctl.stats(status="succeeded")["succeeded"] == 100
    assert ctl.stats(status=["failed", "succeeded"]) == {
        **dict.fromkeys((s.value for s in cn.TaskStatus), 0),
        "succeeded": 100,
        "failed": 20,
    }


def test_a_board_opened_after_eviction_counts_every_task_and_shows_the_newest(
    ctl: cn.Controller,
) -> None:
    run(ctl, 100)
    run(ctl, 20, boom)
    board = display.board(ctl)
    try:
        assert shown(board) == {"succeeded": 30, "failed": 20}  # the newest 50 finished
        assert board.hidden == {"succeeded": 70}
        assert board.hidden_where == (STORED_HINT if ctl.store is not None else UNSTORED_HINT)
        data = board.snapshot_data()
        snap = data[SNAPSHOT_MIME]
        assert snap["summary"] == {"succeeded": 100, "failed": 20}
        assert snap["total_rows"] == 120
        plain = data["text/plain"]
        assert "120 tasks: 100 succeeded, 20 failed" in plain
        assert "70 older finished tasks not shown" in plain and board.hidden_where in plain
        assert "70 older finished tasks not shown" in data["text/html"]
    finally:
        board.close()


def test_an_open_board_keeps_the_newest_finished_rows_and_counts_the_rest(
    ctl: cn.Controller,
) -> None:
    board = TaskTable(ctl, kind="board", autoflush=False)
    try:
        for _ in range(6):  # 120 tasks ending, the board flushing as it goes
            run(ctl, 20)
            ctl.flush()  # (every event delivered to the board)
            board.flush(force=True)
        assert len(board.current_rows()) == CAP
        assert board.hidden == {"succeeded": 70}  # (the trait, for a reload)
        last = patches(board)[-1]
        assert last["summary"] == {"succeeded": 120}
        # every row the board dropped was named in a patch, and counted
        removed = [tid for p in patches(board) for tid in p["remove"]]
        assert len(removed) == 70 == len(set(removed))
        assert [p["hidden"] for p in patches(board) if "hidden" in p][-1] == {"succeeded": 70}
        assert not set(removed) & set(board.task_ids)
        # the rows kept are the newest finished
        newest = [s.task_id for s in ctl.list_tasks(limit=CAP)]
        assert set(board.task_ids) == set(newest)
        assert board.snapshot_data()[SNAPSHOT_MIME]["summary"] == {"succeeded": 120}
    finally:
        board.close()


def test_a_live_task_stays_on_the_board_while_many_finish_after_it() -> None:
    import threading

    release = threading.Event()
    ctl = cn.Controller(history=cn.HistoryLimits(memory_finished_tasks=5))
    try:
        with recording_comms():
            long = ctl.submit(lambda: release.wait(30), name="long")
            board = TaskTable(ctl, kind="board", autoflush=False)
            for i in range(30):
                ctl.submit(ok, i, name=f"quick{i}").wait(timeout=30)
            ctl.flush()
            board.flush(force=True)
            rows = {r["name"]: r["status"] for r in board.current_rows()}
            assert rows["long"] == "running"
            assert len(rows) == 6  # the live one and the newest 5 finished
            assert patches(board)[-1]["summary"] == {"running": 1, "succeeded": 30}
            release.set()
            long.wait(timeout=30)
            ctl.flush()
            board.flush(force=True)
            assert patches(board)[-1]["summary"] == {"succeeded": 31}
            assert len(board.current_rows()) == 5
            board.close()
    finally:
        release.set()
        ctl.close()


def test_tasks_that_left_memory_before_the_board_first_showed_them_are_counted(
    ctl: cn.Controller,
) -> None:
    board = TaskTable(ctl, kind="board", autoflush=False)
    mine = TaskTable(ctl, kind="board", filter={"name_prefix": "mine"}, autoflush=False)
    try:
        run(ctl, 2 * CAP)  # 100 tasks end before either board flushes: 50 already left
        ctl.submit(ok, 0, name="mine-1").wait(timeout=30)
        ctl.flush()
        board.flush(force=True)
        mine.flush(force=True)
        assert len(board.current_rows()) == CAP
        assert patches(board)[-1]["summary"] == {"succeeded": 2 * CAP + 1}
        assert board.hidden == {"succeeded": CAP + 1}
        # a filtered board counts only its own
        assert [r["name"] for r in mine.current_rows()] == ["mine-1"]
        assert mine.hidden == {}
    finally:
        board.close()
        mine.close()


def test_the_older_line_reads_as_the_front_end_writes_it() -> None:
    from chongming_nb.notebook.older import hidden_text

    # the same words labextension/test/format.test.ts asserts of olderText()
    assert hidden_text({"succeeded": 9_000, "failed": 1_000}, STORED_HINT) == (
        "10,000 older finished tasks not shown — ctl.snapshots_df() and the Tasks sidebar list them"
    )
    assert hidden_text({"stopped": 1}, "x") == "1 older finished task not shown — x"
    assert hidden_text({}, "x") is None


def test_a_task_that_left_memory_alone_before_its_first_flush_moves_the_summary() -> None:
    """The patch holds nothing else: the count alone changes, and the patch says so."""
    ctl = cn.Controller(executor="inline", history=cn.HistoryLimits(memory_finished_tasks=1))
    try:
        with recording_comms():
            board = TaskTable(ctl, kind="board", filter={"name_prefix": "a"}, autoflush=False)
            ctl.submit(ok, 0, name="a0").wait(timeout=30)
            ctl.flush()
            board.flush(force=True)
            assert patches(board)[-1]["summary"] == {"succeeded": 1}
            ctl.submit(ok, 1, name="a1").wait(timeout=30)
            ctl.submit(ok, 2, name="b1").wait(timeout=30)  # (a1 leaves memory; not ours)
            ctl.flush()
            board.flush(force=True)
            last = patches(board)[-1]
            assert last["upsert"] == last["update"] == last["remove"] == []
            assert last["summary"] == {"succeeded": 2} and last["hidden"] == {"succeeded": 1}
            board.close()
    finally:
        ctl.close()

"""Bounded history per task, said out loud: the store keeps at most the newest
``store_log_bytes`` of a task's log (a "… N lines dropped" line stands for the rest,
which ``h.logs()`` and the CLI show), the kernel keeps a bounded tail and lets go of what
it queued for the store, and failure texts are cut with their full size given."""

from __future__ import annotations

import gc
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from chongming_nb import (
    ConfigurationError,
    Controller,
    Exponential,
    HistoryLimits,
    RetryPolicy,
    SqliteStore,
    TaskContext,
    TaskStatus,
)
from chongming_nb.cli.main import main as cli
from chongming_nb.control.attempts import ENDED_LOG_CHARS, ENDED_LOG_LINES
from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing.widgets import recording_comms

S = TaskStatus
MB = 1_000_000


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _store_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def test_200_mb_printed_keeps_the_store_within_the_cap_and_the_kernel_lets_go(
    make_ctl: Callable[..., Controller], tmp_path: Path
) -> None:
    path = tmp_path / "big.db"
    ctl = make_ctl(store=SqliteStore(path))
    cap = HistoryLimits().store_log_bytes
    assert cap == 10 * MB
    warm = ctl.submit(lambda ctx: print("warm up"))
    warm.wait(10)
    ctl.flush()
    gc.collect()
    base_size, base_rss = _store_size(path), _rss()
    line = "y" * 1023

    def loud(ctx: TaskContext) -> int:
        for _ in range(200_000):  # 200 MB (each print writes 1,024 bytes)
            print(line)
        return 1

    h = ctl.submit(loud)
    assert h.result(timeout=600) == 1
    assert ctl.flush(120)
    peak_rss = _rss()
    # the task ended: the kernel let go of its log tail (the store has the log), and
    # h.logs() reads the store
    entry = ctl._book.task(h.id)
    assert entry.logs is not None and len(entry.logs) <= ENDED_LOG_LINES
    assert entry.log_bytes <= ENDED_LOG_CHARS
    mine = h.logs()
    assert mine == ctl.store.logs(h.id)
    assert mine[0].stream == "dropped" and len(mine) > 2_000  # more than the kernel kept
    gc.collect()
    assert _rss() - base_rss < 50 * MB, "the kernel holds on to the ended task's output"
    ctl.close()
    ctl.store.close()  # at rest: SQLite folds its write-ahead log back into the file
    store = SqliteStore(path)
    grown = _store_size(path) - base_size
    assert grown <= cap * 1.05, f"the store grew by {grown / MB:.1f} MB for a {cap / MB} MB cap"
    assert ctl.persist_failures == 0
    stored = store.logs(h.id)
    assert stored[0].stream == "dropped" and stored[0].line.endswith("lines dropped")
    dropped = int(stored[0].line.split()[1])
    assert dropped + len(stored) - 1 == 200_000  # every line either kept or counted
    assert all(r.line == line for r in stored[1:])
    # the CLI says so: its first line is the marker, with the count
    full = io.StringIO()
    assert cli(["--store", str(path), "logs", h.id], out=full) == 0
    shown = full.getvalue().splitlines()
    assert shown[0].endswith(f"[dropped] … {dropped} lines dropped")
    assert len(shown) == len(stored)
    last = io.StringIO()
    assert cli(["--store", str(path), "logs", h.id, "--limit", "2"], out=last) == 0
    assert [ln.endswith(f"[stdout] {line}") for ln in last.getvalue().splitlines()] == [True] * 2
    gc.collect()
    store.close()
    grew = _rss() - base_rss
    assert grew < 50 * MB, f"kernel RSS {grew / MB:.0f} MB above where it started"
    assert peak_rss - base_rss < 50 * MB  # bounded while it ran, not only released after


def test_the_kernel_keeps_a_bounded_tail_and_says_how_much_it_dropped(
    make_ctl: Callable[..., Controller],
) -> None:
    ctl = make_ctl(history=HistoryLimits(memory_log_lines=10, memory_log_bytes=1_000))

    def chatty(ctx: TaskContext) -> None:
        for i in range(25):
            print(f"line {i}")
        print("z" * 600)  # the byte bound drops more old lines
        print("w" * 600)

    h = ctl.submit(chatty)
    h.wait(10)
    lines = h.logs()
    assert lines[0].stream == "dropped"
    dropped = int(lines[0].line.split()[1])
    assert dropped + len(lines) - 1 == 27
    assert [r.line for r in lines[1:]] == ["w" * 600]  # 1,200 characters do not fit 1,000
    assert h.logs(limit=1) == lines[-1:]  # the newest line asked for is there: no marker


def test_an_ended_task_logs_come_from_the_store_and_its_tail_answers_without_it(
    make_ctl: Callable[..., Controller], tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "logs.db")
    ctl = make_ctl(store=store, history=HistoryLimits(memory_log_lines=10))

    def chatty(ctx: TaskContext) -> None:
        for i in range(50):
            print(f"line {i}")

    h = ctl.submit(chatty)
    h.wait(10)
    # the kernel kept 10 lines while it ran; the store has all 50, and h.logs() says so
    assert [r.line for r in h.logs()] == [f"line {i}" for i in range(50)]
    assert [r.line for r in h.logs(limit=3)] == ["line 47", "line 48", "line 49"]
    assert h.logs(limit=0) == h.logs()  # 0: no limit, as for a running task
    assert len(ctl._book.task(h.id).logs or ()) <= 10
    store.close()  # the store cannot be read: the kernel's short tail answers, said so
    lines = h.logs()
    assert lines[0].stream == "dropped" and lines[0].line == "… 40 lines dropped"
    assert [r.line for r in lines[1:]] == [f"line {i}" for i in range(40, 50)]


def raise_huge(ctx: TaskContext) -> None:
    raise ValueError("m" * 10_000_000)


def test_a_10_mb_exception_message_is_cut_with_its_full_size_over_every_attempt(
    make_ctl: Callable[..., Controller], tmp_path: Path
) -> None:
    path = tmp_path / "fail.db"
    ctl = make_ctl(store=SqliteStore(path))
    base = _store_size(path)
    no_wait = Exponential(base=0, jitter="none")
    h = ctl.submit(raise_huge, retry=RetryPolicy(max_attempts=3, backoff=no_wait))
    snap = h.wait(30)
    assert snap.status is S.FAILED and snap.attempt == 3
    limit = HistoryLimits().text_chars
    assert snap.failure is not None
    assert len(snap.failure.message) < limit + 100
    assert "10000012 characters in all" in snap.failure.message  # "ValueError: " + 10 MB
    for rec in ctl.attempts(h.id):
        assert rec.failure_message is not None and len(rec.failure_message) < limit + 100
        assert rec.traceback is not None and len(rec.traceback) < limit + 100
        assert "characters in all" in rec.traceback
    assert ctl.flush(30)
    assert _store_size(path) - base < 3 * MB  # was 321 MB on disk
    # the widget: its saved output (the html snapshot shows the traceback), its full
    # state and the row's detail reply stay small too (the bundle was 10 MB)
    with recording_comms() as comms:
        table = TaskTable(ctl, autoflush=False)
        try:
            bundle = json.dumps(table.snapshot_data())
            assert "characters in all" in bundle and len(bundle) < limit * 3
            table._on_custom_msg(table, {"type": "detail", "task_id": h.id, "request_id": 1})
            table._on_custom_msg(table, {"type": "sync", "request_id": 2})
            sent = comms[-1].custom_messages()
            assert {m["type"] for m in sent} >= {"detail", "full"}
            assert all(len(json.dumps(m)) < limit * 3 for m in sent)
            assert len(json.dumps(comms[-1].state_updates())) < limit * 3
        finally:
            table.close()


def test_history_limits_are_checked() -> None:
    for bad in ({"store_log_bytes": 0}, {"memory_log_lines": 2**63}, {"text_chars": 10}):
        with pytest.raises(ConfigurationError, match=next(iter(bad))):
            HistoryLimits(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="history must be a HistoryLimits"):
        Controller(history={"text_chars": 100})  # type: ignore[arg-type]

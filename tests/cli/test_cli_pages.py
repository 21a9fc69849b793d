"""``chongming ps`` pages through a big store: one keyset page for ``--limit N`` (with the
cursor of the next), every page streamed for ``--limit 0`` with memory that does not
grow with the store; ``export`` streams pages the same way."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from chongming_nb.cli.main import main
from chongming_nb.stores import SqliteStore, TaskQuery
from chongming_nb.testing.history import generate_history


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _store(path: Path, tasks: int) -> list[str]:
    store = SqliteStore(path)
    generate_history(store, tasks, attempts=1, sql=True)
    newest = [s.task_id for s in store.query(TaskQuery())]
    store.close()
    return newest


def _ids(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines()[1:] if line.startswith("g")]


def test_limit_pages_follow_each_other_by_cursor(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    newest = _store(db, 23)
    seen: list[str] = []
    code, out, _ = run("--store", str(db), "ps", "--limit", "10")
    assert code == 0
    while True:
        seen += _ids(out)
        last = out.splitlines()[-1]
        if not last.startswith("(more: --after "):
            break
        cursor = last.removeprefix("(more: --after ").removesuffix(")")
        code, out, _ = run("--store", str(db), "ps", "--limit", "10", "--after", cursor)
        assert code == 0
    assert seen == newest


def test_json_pages_follow_each_other_by_the_cursor_on_stderr(tmp_path: Path) -> None:
    """``--json`` keeps stdout one JSON array; the cursor of the next page, which the table
    prints last, goes to stderr (it was nowhere: a JSON page was a dead end)."""
    db = tmp_path / "t.db"
    newest = _store(db, 23)
    seen: list[str] = []
    argv = ["--store", str(db), "--json", "ps", "--limit", "10"]
    code, out, err = run(*argv)
    while True:
        assert code == 0
        seen += [r["task_id"] for r in json.loads(out)]
        if not err:
            break
        assert err.startswith("(more: --after ") and err.endswith(")\n"), err
        cursor = err.removeprefix("(more: --after ").removesuffix(")\n")
        code, out, err = run(*argv, "--after", cursor)
    assert seen == newest


def test_limit_zero_streams_every_task_in_order(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    newest = _store(db, 2_345)  # more than two stream pages
    code, out, _ = run("--store", str(db), "ps", "--limit", "0")
    assert code == 0 and _ids(out) == newest and "(more" not in out
    assert out.splitlines()[0].split() == [
        "ID",
        "NAME",
        "STATUS",
        "ATTEMPT",
        "PROGRESS",
        "CREATED",
        "OWNER",
    ]
    assert sum(line.startswith("ID ") for line in out.splitlines()) == 1  # one header
    code, out, _ = run("--store", str(db), "--json", "ps", "--limit", "0", "--status", "failed")
    rows = json.loads(out)
    assert code == 0 and [r["task_id"] for r in rows] == [
        t for t in newest if int(t[1:], 16) % 10 == 9
    ]
    code, out, _ = run("--store", str(db), "--json", "ps", "--status", "stopped", "--limit", "0")
    assert code == 0 and json.loads(out) == []


def test_a_bad_cursor_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _store(db, 3)
    code, out, err = run("--store", str(db), "ps", "--after", "nonsense")
    assert code == 2 and "--after" in err and "cursor" in err and out == ""


class _Sink(io.TextIOBase):
    """Counts what is written and keeps nothing (so only ps's own memory is measured)."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)


def _peak(db: Path) -> tuple[int, int]:
    sink = _Sink()
    tracemalloc.start()
    try:
        code = main(["--store", str(db), "ps", "--limit", "0"], out=sink, err=io.StringIO())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0
    return peak, sink.lines


def test_limit_zero_memory_does_not_grow_with_the_store(tmp_path: Path) -> None:
    small, big = tmp_path / "small.db", tmp_path / "big.db"
    _store(small, 2_000)
    _store(big, 10_000)
    peak_small, lines_small = _peak(small)
    peak_big, lines_big = _peak(big)
    assert lines_small == 2_001 and lines_big == 10_001
    # five times the tasks, not five times the memory: one page is held at a time
    assert peak_big < 1.5 * peak_small, (peak_small, peak_big)


def _export_peak(db: Path, out: Path, what: str) -> int:
    tracemalloc.start()
    try:
        code, _, err = run(
            "--store", str(db), "export", "--format", "csv", "--out", str(out), "--what", what
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0, err
    return peak


@pytest.mark.parametrize("what", ["tasks", "attempts", "transitions"])
def test_export_memory_does_not_grow_with_the_store(tmp_path: Path, what: str) -> None:
    small, big = tmp_path / "small.db", tmp_path / "big.db"
    _store(small, 2_000)
    _store(big, 10_000)
    peak_small = _export_peak(small, tmp_path / "small.csv", what)
    peak_big = _export_peak(big, tmp_path / "big.csv", what)
    assert len(pd.read_csv(tmp_path / "big.csv")) == 10_000 * (4 if what == "transitions" else 1)
    # five times the tasks, not five times the memory: one page is held at a time
    assert peak_big < 1.5 * peak_small, (peak_small, peak_big)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("what", ["tasks", "attempts", "transitions"])
def test_export_streams_pages_into_one_file(tmp_path: Path, fmt: str, what: str) -> None:
    db = tmp_path / "t.db"
    newest = _store(db, 2_345)  # three export pages
    out = tmp_path / f"out.{fmt}"
    code, text, err = run(
        "--store", str(db), "export", "--format", fmt, "--out", str(out), "--what", what
    )
    assert code == 0, err
    if fmt == "csv":
        df = pd.read_csv(out)
    elif fmt == "json":
        df = pd.DataFrame(json.loads(out.read_text()))
    else:
        df = pd.read_parquet(out)
    oldest = list(reversed(newest))
    if what == "tasks":
        assert list(df["task_id"]) == oldest
    else:  # every task's rows together, oldest task first
        firsts = list(dict.fromkeys(df["task_id"]))
        assert firsts == oldest
        per_task = 4 if what == "transitions" else 1
        assert len(df) >= per_task * len(oldest)
    assert f"wrote {len(df)} {what} rows" in text


def test_export_of_an_empty_store_writes_the_columns(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _store(db, 0)
    for fmt in ("csv", "json", "parquet"):
        out = tmp_path / f"empty.{fmt}"
        code, text, _ = run("--store", str(db), "export", "--format", fmt, "--out", str(out))
        assert code == 0 and "wrote 0 tasks rows" in text and out.exists()
    assert json.loads((tmp_path / "empty.json").read_text()) == []
    assert "task_id" in (tmp_path / "empty.csv").read_text()

"""``python -m benchmarks.ab``: two checkouts take turns on the same benchmark modules."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture
def ab(repo_root: Path) -> Iterator[ModuleType]:
    sys.path.insert(0, str(repo_root))
    try:
        from benchmarks import ab

        yield ab
    finally:
        sys.path.remove(str(repo_root))


def _row(
    metric: str, ours: float | None, ratio: float | None, unit: str = "tasks/s"
) -> dict[str, Any]:
    return {"metric": metric, "ours": ours, "peer": None, "ratio": ratio, "target": "",
            "pass": None, "unit": unit}  # fmt: skip


def test_compare_takes_medians_and_the_spread_of_the_rounds(ab: ModuleType) -> None:
    rounds = [
        {"this": [_row("rate", 90.0, 0.30)], "other": [_row("rate", 100.0, 0.30)]},
        {"this": [_row("rate", 120.0, 0.40)], "other": [_row("rate", 100.0, 0.32)]},
        {"this": [_row("rate", 99.0, 0.36)], "other": [_row("rate", 110.0, 0.40)]},
    ]
    (got,) = ab.compare(rounds)
    assert got["metric"] == "rate" and got["unit"] == "tasks/s" and got["rounds"] == 3
    assert got["this"] == 99.0 and got["other"] == 100.0
    assert got["quotient"] == pytest.approx(0.99)
    low, mid, high = got["round_quotients"]
    assert (low, mid, high) == pytest.approx((0.9, 0.9, 1.2))
    assert got["ratio_this"] == 0.36 and got["ratio_other"] == 0.32
    assert got["ratio_quotient"] == pytest.approx(0.36 / 0.32)


def test_compare_lists_a_row_only_one_tree_reports(ab: ModuleType) -> None:
    rounds = [{"this": [_row("new row", 5.0, None, "ms")], "other": []}]
    (got,) = ab.compare(rounds)
    assert got["this"] == 5.0 and got["other"] is None and got["quotient"] is None
    assert got["round_quotients"] is None and got["ratio_quotient"] is None
    assert "| new row | ms | 0 | 5 | - | - | - |" in ab.format_comparison([got])


def _other_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "other"
    (tree / "chongming_nb").mkdir(parents=True)
    (tree / "chongming_nb" / "__init__.py").write_text("")
    return tree


def test_the_trees_take_turns_and_the_table_and_json_say_how_they_compare(
    ab: ModuleType, tmp_path: Path
) -> None:
    other = _other_tree(tmp_path)
    calls: list[tuple[str, str, Path]] = []
    rates = iter([100.0, 110.0, 104.0, 100.0])

    def run(name: str, size: str, tree: Path) -> tuple[list[dict[str, Any]], str | None, float]:
        calls.append((name, size, tree))
        return [_row("throughput: rate", next(rates), 0.5)], None, 0.1

    out = io.StringIO()
    report = tmp_path / "ab.json"
    argv = ["--against", str(other), "--rounds", "2", "--size", "tiny", "--json", str(report)]
    assert ab.main(argv, out=out, run=run) == 0
    this = ab.THIS_TREE
    assert calls == [("throughput", "tiny", t) for t in (this, other.resolve()) * 2]
    text = out.getvalue()
    assert "| throughput: rate | tasks/s | 2 | 102 | 105 | 0.971 | 0.909/0.975/1.04 |" in text
    saved = json.loads(report.read_text())
    assert saved["against"] == str(other.resolve()) and len(saved["rounds"]) == 2
    assert saved["comparison"][0]["quotient"] == pytest.approx(102 / 105)


def test_a_failing_tree_ends_the_comparison_with_its_error(ab: ModuleType, tmp_path: Path) -> None:
    other = _other_tree(tmp_path)

    def run(name: str, size: str, tree: Path) -> tuple[list[dict[str, Any]], str | None, float]:
        if tree != ab.THIS_TREE:
            return [], "import failed: ImportError('no such name')", 0.0
        return [_row("rate", 1.0, 1.0)], None, 0.0

    out = io.StringIO()
    assert ab.main(["--against", str(other), "--rounds", "3"], out=out, run=run) == 1
    assert "bench_throughput failed with the other tree" in out.getvalue()
    assert "no such name" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--against", "{tmp}"], "holds no chongming_nb package"),
        (["--against", "{this}"], "that is this checkout"),
        (["--against", "{other}", "--rounds", "0"], "--rounds must be at least 1, got 0"),
        (["--against", "{other}", "--only", "nonesuch"], "unknown benchmark(s) nonesuch"),
    ],
)
def test_bad_arguments_are_named_and_nothing_runs(
    ab: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    other = _other_tree(tmp_path)
    names = {"tmp": str(tmp_path), "this": str(ab.THIS_TREE), "other": str(other)}
    ran: list[str] = []

    def run(name: str, size: str, tree: Path) -> tuple[list[dict[str, Any]], str | None, float]:
        ran.append(name)
        return [], None, 0.0

    with pytest.raises(SystemExit) as exc:
        ab.main([a.format(**names) for a in args], out=io.StringIO(), run=run)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err
    assert ran == []


def test_the_child_imports_the_package_of_the_tree_it_is_given(
    repo_root: Path, tmp_path: Path
) -> None:
    """A real child interpreter: the tree's chongming_nb is the one imported, not this
    checkout's (a tree whose package cannot be imported fails with that package's error)."""
    sys.path.insert(0, str(repo_root))
    try:
        from benchmarks.run import run_isolated
    finally:
        sys.path.remove(str(repo_root))
    broken = tmp_path / "broken"
    (broken / "chongming_nb").mkdir(parents=True)
    (broken / "chongming_nb" / "__init__.py").write_text("raise ImportError('the broken tree')\n")
    rows, err, _ = run_isolated("overhead", "tiny", tree=broken)
    assert rows == [] and err is not None and "the broken tree" in err

    same = tmp_path / "same"
    same.mkdir()
    (same / "chongming_nb").symlink_to(repo_root / "chongming_nb")
    rows, err, _ = run_isolated("overhead", "tiny", tree=same)
    assert err is None and rows


def test_every_interpreter_the_benchmark_starts_sees_the_tree(
    repo_root: Path, tmp_path: Path
) -> None:
    """A CLI call or a process worker of the benchmark is a new interpreter: the tree leads
    its PYTHONPATH and its working directory holds no other chongming_nb (bench_store's
    CLI rows ran this checkout's CLI against the other tree's store before)."""
    sys.path.insert(0, str(repo_root))
    try:
        from benchmarks.run import run_isolated
    finally:
        sys.path.remove(str(repo_root))
    seen = tmp_path / "seen.json"
    exe = tmp_path / "python"
    exe.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nargs = sys.argv[1:]\n"
        "json.dump({'cwd': os.getcwd(), 'path': os.environ.get('PYTHONPATH', ''),"
        " 'listing': sorted(os.listdir('.')),"
        " 'benchmarks': os.path.realpath('benchmarks')}, open(" + repr(str(seen)) + ", 'w'))\n"
        "answer = {'rows': [], 'error': None, 'seconds': 0.0}\n"
        "open(args[args.index('--module-json') + 1], 'w').write(json.dumps(answer))\n"
    )
    exe.chmod(0o755)
    tree = tmp_path / "tree"
    tree.mkdir()
    run_isolated("overhead", "tiny", python=str(exe), tree=tree)
    got = json.loads(seen.read_text())
    assert got["path"].split(":")[0] == str(tree)
    assert got["listing"] == ["benchmarks"]
    assert got["benchmarks"] == str((repo_root / "benchmarks").resolve())

"""The benchmark runner at its tiny size, so the benchmarks never rot (each module in a
fresh interpreter, as the runner does by default).

Not a performance test: it checks that every benchmark runs and that the table and the
JSON report carry every metric (targets may pass or fail at this size).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

MY_METRICS = (
    "per-item overhead: ctx.track",
    "ctx.checkpoint() call",
    "in-memory Controller",
    "Controller + SqliteStore",
    "cooperative stop latency",
    "cooperative pause latency",
    "stop latency through ctx.track",
    "memory per finished task",
    "RSS growth",
    "attempts_df() over",
    "per finished no-op task",
    "chongming ps --limit 20",
    "sidebar first page",
    "sidebar next page",
)


@pytest.fixture
def runner(repo_root: Path):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(repo_root))
    try:
        from benchmarks import run

        yield run
    finally:
        sys.path.remove(str(repo_root))


def test_runner_tiny_table_and_json(runner, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = io.StringIO()
    target = tmp_path / "latest.json"
    code = runner.main(["--size", "tiny", "--json", str(target)], out=out)
    text = out.getvalue()
    report = json.loads(target.read_text())

    problems = {n: m["status"] for n, m in report["modules"].items() if m["status"] != "ok"}
    broken = {n: s for n, s in problems.items() if s != "missing"}
    assert broken == {}, broken
    assert code == 0

    rows = report["results"]
    metrics = [r["metric"] for r in rows]
    for wanted in MY_METRICS:
        assert any(wanted in m for m in metrics), f"no metric like {wanted!r} in {metrics}"
    for r in rows:
        assert set(r) >= {"metric", "ours", "peer", "ratio", "target", "pass", "unit"}
        assert r["metric"] in text  # every metric is a row of the printed table
        assert r["pass"] in (True, False, None)
    for header in ("metric", "this project", "peer(s)", "ratio", "target", "result"):
        assert header in text
    for name in problems:  # expected-but-absent benchmarks are reported, not fatal
        assert f"[bench_{name}]" in text and "MISSING" in text
    assert report["size"] == "tiny"
    assert report["sizes"]["throughput"]["tasks"] == 300
    assert report["machine"]["cpu_count"] >= 1
    assert report["versions"]["pandas"]
    assert report["table"] in text


def test_runner_rejects_unknown_benchmark(runner, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as info:
        runner.main(["--only", "nope", "--json", str(tmp_path / "x.json")], out=io.StringIO())
    assert info.value.code == 2
    assert not (tmp_path / "x.json").exists()


def test_runner_reports_a_broken_module(runner, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import benchmarks.bench_memory as mem

    def boom(size: str) -> list[dict[str, object]]:
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(mem, "run", boom)
    out = io.StringIO()
    code = runner.main(["--size", "tiny", "--only", "memory", "--in-process",
                        "--json", str(tmp_path / "r.json")], out=out)  # fmt: skip
    assert code == 1
    assert "ERROR" in out.getvalue() and "broken on purpose" in out.getvalue()
    report = json.loads((tmp_path / "r.json").read_text())
    assert "broken on purpose" in report["modules"]["memory"]["status"]


def _fake_python(tmp_path: Path, body: str) -> str:
    """An executable standing in for the interpreter ``run_isolated`` starts."""
    exe = tmp_path / "python"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[1:]\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


def test_each_module_runs_in_a_fresh_interpreter(runner, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    row = {"metric": "m", "ours": 1.5, "peer": None, "ratio": None, "target": None,
           "pass": None, "unit": "s", "module": "memory"}  # fmt: skip
    seen = tmp_path / "argv.json"
    python = _fake_python(
        tmp_path,
        f"open({str(seen)!r}, 'w').write(json.dumps(args))\n"
        "answer = {'rows': [" + repr(row) + "], 'error': None, 'seconds': 0.25}\n"
        "open(args[args.index('--module-json') + 1], 'w').write(json.dumps(answer))",
    )
    rows, err, secs = runner.run_isolated("memory", "tiny", python=python)
    assert (rows, err, secs) == ([row], None, 0.25)
    argv = json.loads(seen.read_text())
    assert argv[:6] == ["-m", "benchmarks.run", "--module", "memory", "--size", "tiny"]


def test_a_module_whose_interpreter_dies_is_reported(runner, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    python = _fake_python(tmp_path, "sys.exit(3)")
    rows, err, _ = runner.run_isolated("memory", "tiny", python=python)
    assert rows == [] and err == "run failed: its interpreter exited with 3"


def test_memory_rss_rows_can_be_left_out(runner, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import benchmarks.bench_memory as mem

    def no_child(*args: object) -> dict[str, float]:
        raise AssertionError("an RSS child ran although the RSS rows were left out")

    monkeypatch.setattr(mem, "_child_rss", no_child)
    monkeypatch.setenv(mem.SKIP_RSS_ENV, "1")
    rows = mem.run("tiny")
    assert [r["metric"].split(" (")[0] for r in rows] == ["memory per finished task kept"]


def test_interleaved_takes_turns_and_drops_an_unavailable_contender() -> None:
    from benchmarks.common import interleaved

    calls: list[str] = []

    def contender(name: str, value: float | None) -> Callable[[], float | None]:
        def run() -> float | None:
            calls.append(name)
            return value

        return run

    samples = interleaved(
        {"a": contender("a", 1.0), "gone": contender("gone", None), "b": contender("b", 2.0)}, 3
    )
    assert calls == ["a", "gone", "b", "a", "b", "a", "b"]  # in turn; None asked once
    assert samples == {"a": [1.0, 1.0, 1.0], "gone": [], "b": [2.0, 2.0, 2.0]}

"""Run the benchmarks and print one table: metric, this project, peer(s), ratio, target,
pass/fail. Results also go to ``benchmarks/results/latest.json`` with machine info,
package versions and the sizes used.

    python -m benchmarks.run [--size tiny|full] [--only NAME ...] [--json PATH] [--in-process]

Every ``benchmarks/bench_*.py`` module exposing ``run(size) -> list[dict]`` is picked
up. A module that is expected but absent, or that fails, is reported in the table and
the JSON; it does not stop the others.

Each module runs in a fresh interpreter (``run_isolated``): what one leaves behind does
not weigh on the next. A dask cluster's IO loop and its threads outlive
``client.close()``, and after ``bench_executors`` and ``bench_latency`` in the same
process the ``ThreadPoolExecutor`` peer of the throughput rows ran at 53,000-97,000
tasks/s instead of 155,000, the controller at 24,000-30,000 instead of 32,000: a row's
ratio depended on which modules ran before it. ``--in-process`` runs them all in this
interpreter (for a debugger, or a test that patches a module).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from benchmarks.common import KEYS
from benchmarks.sizes import SIZES

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "latest.json"

#: The benchmark set of issue 10 (module names without the ``bench_`` prefix).
EXPECTED = ("overhead", "throughput", "latency", "memory", "frames", "dag", "executors", "widget")

PACKAGES = (
    "chongming-nb",
    "pandas",
    "numpy",
    "tqdm",
    "dask",
    "distributed",
    "anywidget",
    "ipywidgets",
    "psycopg",
)


def discover() -> list[str]:
    """Names of the benchmark modules present (``bench_<name>.py``), expected ones first."""
    present = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    return [n for n in EXPECTED if n in present] + [n for n in present if n not in EXPECTED]


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
    }
    try:
        info["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        info["loadavg_at_start"] = None
    return info


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def run_module(name: str, size: str) -> tuple[list[dict[str, Any]], str | None, float]:
    """Import ``benchmarks.bench_<name>`` and call its ``run(size)``.

    Returns (rows, error, seconds). Never raises: a broken benchmark is a row in the
    report, not a crash of the whole run."""
    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(f"benchmarks.bench_{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"benchmarks.bench_{name}":
            return [], "missing", 0.0
        return [], f"import failed: {exc!r}", time.perf_counter() - t0
    except Exception as exc:
        return [], f"import failed: {exc!r}", time.perf_counter() - t0
    fn = getattr(mod, "run", None)
    if not callable(fn):
        return [], "no run(size) function", time.perf_counter() - t0
    try:
        rows = list(fn(size))
    except Exception:
        return [], "run failed:\n" + traceback.format_exc(), time.perf_counter() - t0
    bad = [r for r in rows if not isinstance(r, dict) or any(k not in r for k in KEYS)]
    if bad:
        return [], f"rows missing keys {KEYS}: {bad[:1]!r}", time.perf_counter() - t0
    for r in rows:
        r.setdefault("module", name)
    return rows, None, time.perf_counter() - t0


def run_isolated(
    name: str, size: str, *, python: str = sys.executable, tree: Path | None = None
) -> tuple[list[dict[str, Any]], str | None, float]:
    """``run_module(name, size)`` in a fresh interpreter (``python``), as a user's
    process would run that benchmark alone. Same result; never raises.

    ``tree``: a checkout whose ``chongming_nb`` the benchmark imports instead of this
    one's, the benchmark's code staying this checkout's (``benchmarks.ab``). So that
    every interpreter the benchmark starts in turn (a CLI call, a process executor's
    worker) imports the tree's package too, the tree leads ``PYTHONPATH`` and the child
    runs in a directory that holds only this checkout's ``benchmarks``."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="chongming-bench-") as tmp:
        answer = Path(tmp) / "module.json"
        cmd = [python, "-m", "benchmarks.run", "--module", name, "--size", size,
               "--module-json", str(answer)]  # fmt: skip
        cwd, env = HERE.parent, None
        if tree is not None:
            cmd += ["--tree", str(tree.absolute())]
            cwd = Path(tmp) / "run"
            cwd.mkdir()
            (cwd / "benchmarks").symlink_to(HERE, target_is_directory=True)
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(tree.absolute()), env.get("PYTHONPATH")) if p
            )
        code = subprocess.call(cmd, cwd=cwd, env=env)
        if not answer.exists():
            return [], f"run failed: its interpreter exited with {code}", time.perf_counter() - t0
        got = json.loads(answer.read_text())
    return got["rows"], got["error"], got["seconds"]


def _not_from(tree: Path) -> str | None:
    """Why the ``chongming_nb`` a benchmark ran is not ``tree``'s (None when it is)."""
    loaded = sys.modules.get("chongming_nb")
    where = Path(getattr(loaded, "__file__", None) or "?").absolute().parent.parent
    if where == tree.absolute():
        return None
    return f"chongming_nb was imported from {where}, not from the tree {tree}"


# ------------------------------------------------------------------- table


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return str(v)
        a = abs(v)
        if a == 0:
            return "0"
        if a >= 1e5:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.3g}"
        return f"{v:.3g}"
    return str(v)


def _peer(v: Any) -> str:
    if isinstance(v, dict):
        return "; ".join(f"{k} {_num(x)}" for k, x in v.items()) or "-"
    return _num(v)


def _verdict(p: Any) -> str:
    if p is None:
        return "n/a"
    return "PASS" if p else "FAIL"


def format_table(rows: list[dict[str, Any]], problems: dict[str, str]) -> str:
    header = ("metric", "this project", "peer(s)", "ratio", "target", "result")
    body = [
        (
            str(r["metric"]),
            f"{_num(r['ours'])} {r['unit']}".strip() if r["ours"] is not None else "-",
            _peer(r["peer"]),
            "-" if r["ratio"] is None else f"{_num(r['ratio'])}x",
            str(r["target"]),
            _verdict(r["pass"]),
        )
        for r in rows
    ]
    for name, why in problems.items():
        first = why.strip().splitlines()[0] if why.strip() else why
        if why != "missing" and "\n" in why.strip():
            first = why.strip().splitlines()[-1]
        body.append((f"[bench_{name}]", "-", "-", "-", "-", "MISSING" if why == "missing" else
                     f"ERROR: {first}"[:80]))  # fmt: skip
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(header)]  # fmt: skip
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(out)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The same table as Markdown, for docs/performance.md."""
    out = [
        "| metric | this project | peer(s) | ratio | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours = f"{_num(r['ours'])} {r['unit']}".strip() if r["ours"] is not None else "-"
        ratio = "-" if r["ratio"] is None else f"{_num(r['ratio'])}x"
        cells = [
            str(r["metric"]),
            ours,
            _peer(r["peer"]),
            ratio,
            str(r["target"]),
            _verdict(r["pass"]),
        ]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)


# -------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    ap.add_argument(
        "--only", action="append", default=[], metavar="NAME",
        help="run only this benchmark (e.g. throughput or bench_throughput); repeatable",
    )  # fmt: skip
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the results")
    ap.add_argument(
        "--markdown", type=Path, metavar="RESULTS_JSON",
        help="print the table of an earlier run (its JSON file) as Markdown, run nothing",
    )  # fmt: skip
    ap.add_argument(
        "--in-process", action="store_true",
        help="run every module in this interpreter (default: each in a fresh one)",
    )  # fmt: skip
    # the child's side of run_isolated (not for people)
    ap.add_argument("--module", help=argparse.SUPPRESS)
    ap.add_argument("--module-json", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.module is not None:
        if args.module_json is None:
            ap.error("--module needs --module-json")
        if args.tree is not None:
            sys.path.insert(0, str(args.tree))
        got, err, secs = run_module(args.module, args.size)
        if err is None and args.tree is not None:
            err = _not_from(args.tree)
        answer = {"rows": got, "error": err, "seconds": secs}
        args.module_json.write_text(json.dumps(answer, default=str))
        return 0
    if args.markdown is not None:
        print(markdown_table(json.loads(args.markdown.read_text())["results"]), file=out)
        return 0

    names = discover()
    wanted = [n.removeprefix("bench_").removesuffix(".py") for n in args.only]
    unknown = [n for n in wanted if n not in names and n not in EXPECTED]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}")
    selected = wanted or list(dict.fromkeys([*EXPECTED, *names]))

    started = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    problems: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in selected:
        print(f"... bench_{name} ({args.size})", file=out, flush=True)
        if args.in_process:
            # each module starts without the previous one's garbage (the collector stays
            # on while it runs: a module pays for what it allocates, not for what came
            # before); its threads and caches stay
            gc.collect()
            got, err, secs = run_module(name, args.size)
        else:
            got, err, secs = run_isolated(name, args.size)
        seconds[name] = round(secs, 3)
        rows.extend(got)
        if err is not None:
            problems[name] = err
    table = format_table(rows, problems)
    print(file=out)
    print(table, file=out)
    missed = [r["metric"] for r in rows if r["pass"] is False]
    print(
        f"\n{len(rows)} metrics, {sum(r['pass'] is True for r in rows)} pass, "
        f"{len(missed)} fail, {len(problems)} module problem(s)",
        file=out,
    )

    report = {
        "started_at": started.isoformat(),
        "size": args.size,
        "sizes": {n: SIZES[args.size].get(n, {}) for n in selected},
        "machine": machine_info(),
        "versions": versions(),
        "modules": {n: {"status": problems.get(n, "ok"), "seconds": seconds[n]} for n in selected},
        "results": rows,
        "table": table,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"results written to {args.json}", file=out)
    real_errors = {n: e for n, e in problems.items() if e != "missing"}
    return 1 if real_errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

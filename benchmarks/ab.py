"""Is this checkout as fast as another one? The same benchmark modules, both trees.

    python -m benchmarks.ab --against ../other-checkout [--only NAME ...] [--rounds 8]
                            [--size full] [--json PATH]

Two full runs a day apart cannot say whether a change cost 10% on this kind of machine:
its rows move by more than that between two runs of the same code an hour apart. Here
the trees take turns instead: round after round, a fresh interpreter with this tree's
``chongming_nb``, then one with the other tree's, each running *this* checkout's
benchmark modules (the same measuring code on both sides), so a burst of load lands on
both trees alike.

For every row it prints the median over the rounds of the row's value (``ours``) and of
its ratio against the peers measured in the same process, for each tree, and this
tree's over the other's; and the spread of the round-by-round quotient of the values
(lowest, median, highest): the width to judge a 10% by. Whether a higher value is
better depends on the row's unit (tasks/s: higher; ms, ns/item, bytes: lower).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from benchmarks.run import discover, run_isolated
from benchmarks.sizes import SIZES

HERE = Path(__file__).resolve().parent
THIS_TREE = HERE.parent

#: (rows, error, seconds) of one benchmark module run with one tree's package
Runner = Callable[[str, str, Path], tuple[list[dict[str, Any]], str | None, float]]


def _isolated(name: str, size: str, tree: Path) -> tuple[list[dict[str, Any]], str | None, float]:
    return run_isolated(name, size, tree=tree)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _quotient(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def compare(rounds: Sequence[dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Rows of both trees, round by round (``{"this": rows, "other": rows}`` each), ->
    one comparison per metric, in the order this tree reported them. A metric only one
    tree reports is listed with None for the other side."""
    order: list[str] = []
    units: dict[str, str] = {}
    seen: dict[str, dict[str, list[tuple[float | None, float | None]]]] = {}
    for rnd in rounds:
        for side in ("this", "other"):
            for row in rnd.get(side, []):
                metric = row["metric"]
                if metric not in seen:
                    order.append(metric)
                    seen[metric] = {"this": [], "other": []}
                units.setdefault(metric, row.get("unit") or "")
                seen[metric][side].append((_number(row["ours"]), _number(row["ratio"])))
    out: list[dict[str, Any]] = []
    for metric in order:
        mine, theirs = seen[metric]["this"], seen[metric]["other"]
        value_this = _median([v for v, _ in mine])
        value_other = _median([v for v, _ in theirs])
        ratio_this = _median([r for _, r in mine])
        ratio_other = _median([r for _, r in theirs])
        pairs = sorted(
            q
            for q in (_quotient(a, b) for (a, _), (b, _) in zip(mine, theirs, strict=False))
            if q is not None
        )
        out.append(
            {
                "metric": metric,
                "unit": units[metric],
                "rounds": min(len(mine), len(theirs)),
                "this": value_this,
                "other": value_other,
                "quotient": _quotient(value_this, value_other),
                "round_quotients": (pairs[0], statistics.median(pairs), pairs[-1])
                if pairs
                else None,
                "ratio_this": ratio_this,
                "ratio_other": ratio_other,
                "ratio_quotient": _quotient(ratio_this, ratio_other),
            }
        )
    return out


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.{digits}g}"


def format_comparison(rows: Sequence[dict[str, Any]]) -> str:
    head = ("metric", "unit", "rounds", "this tree", "other tree", "this/other",
            "per round (low/median/high)", "ratio: this", "other", "this/other")  # fmt: skip
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        spread = r["round_quotients"]
        cells = (
            r["metric"],
            r["unit"],
            str(r["rounds"]),
            _fmt(r["this"]),
            _fmt(r["other"]),
            _fmt(r["quotient"]),
            "/".join(_fmt(q) for q in spread) if spread else "-",
            _fmt(r["ratio_this"]),
            _fmt(r["ratio_other"]),
            _fmt(r["ratio_quotient"]),
        )
        lines.append(" | ".join(cells))
    return "\n".join(f"| {line} |" for line in lines)


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, run: Runner = _isolated
) -> int:
    out = out or sys.stdout
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--against", type=Path, required=True, metavar="CHECKOUT",
        help="the other tree: a checkout holding a chongming_nb package",
    )  # fmt: skip
    ap.add_argument(
        "--only", action="append", default=[], metavar="NAME",
        help="run only this benchmark (e.g. throughput); repeatable; default: throughput",
    )  # fmt: skip
    ap.add_argument("--rounds", type=int, default=8, help="rounds of both trees (default 8)")
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    ap.add_argument("--json", type=Path, help="also write the comparison and every round here")
    args = ap.parse_args(argv)
    other = args.against.resolve()
    if not (other / "chongming_nb" / "__init__.py").is_file():
        ap.error(f"--against: {args.against} holds no chongming_nb package")
    if other == THIS_TREE.resolve():
        ap.error("--against: that is this checkout; name another one")
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    names = discover()
    wanted = [n.removeprefix("bench_").removesuffix(".py") for n in args.only] or ["throughput"]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}")

    rounds: list[dict[str, list[dict[str, Any]]]] = []
    for i in range(args.rounds):
        rnd: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
        for side, tree in (("this", THIS_TREE), ("other", other)):
            for name in wanted:
                print(f"... round {i + 1}/{args.rounds}: bench_{name}, {side} tree", file=out)
                rows, err, _ = run(name, args.size, tree)
                if err is not None:
                    which = "this tree" if side == "this" else "the other tree"
                    print(f"bench_{name} failed with {which} ({tree}): {err}", file=out)
                    return 1
                rnd[side].extend(rows)
        rounds.append(rnd)
    table = compare(rounds)
    print(file=out)
    print(format_comparison(table), file=out)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"against": str(other), "size": args.size, "comparison": table, "rounds": rounds}
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"written to {args.json}", file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Write docs/api.md: the public namespace (``chongming_nb.__all__``) with signatures
and the first paragraph of each docstring, plus the Controller and TaskHandle methods.

    .venv/bin/python tools/gen_api.py           # rewrite the file
    .venv/bin/python tools/gen_api.py --check   # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api.md"
COMMAND = ".venv/bin/python tools/gen_api.py"


def _first_paragraph(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n\n")[0].replace("\n", " ").strip()


def _sig(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _members(cls: type) -> dict[str, Any]:
    """The class's own members and those it inherits from the package's classes (e.g.
    the Controller's ``list_tasks`` from ``TaskLister``), the nearest definition first."""
    found: dict[str, Any] = {}
    for base in cls.__mro__:
        if base.__module__.startswith("chongming_nb"):
            for name, member in vars(base).items():
                found.setdefault(name, member)
    return found


def _methods(cls: type) -> list[str]:
    out = []
    for name, member in sorted(_members(cls).items()):
        if name.startswith("_") and name not in ("__await__",):
            continue
        if inspect.isdatadescriptor(member) and not inspect.ismemberdescriptor(member):
            out.append(f"- `.{name}` (property) — {_first_paragraph(member)}".rstrip(" —"))
        elif callable(member):
            out.append(f"- `.{name}{_sig(member)}` — {_first_paragraph(member)}".rstrip(" —"))
    return out


def render() -> str:
    import chongming_nb as cn

    lines = [
        "# API reference",
        "",
        f"Generated from the code by `{COMMAND}`; a test fails when it is stale.",
        "Everything here is importable as `chongming_nb.<name>` (`import chongming_nb as cn`).",
        "",
        "## Public names",
        "",
    ]
    for name in cn.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(cn, name)
        kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else "constant"
        sig = _sig(obj) if kind == "function" else ""
        lines.append(f"### `{name}{sig}`" if sig else f"### `{name}`")
        lines.append("")
        para = _first_paragraph(obj) if kind != "constant" else ""
        lines.append(f"*{kind}*" + (f" — {para}" if para else ""))
        lines.append("")
    for cls_name in ("Controller", "TaskHandle", "TaskContext"):
        cls = getattr(cn, cls_name)
        lines += [f"## `{cls_name}` methods", "", *_methods(cls), ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else None
        if current != text:
            print(f"docs/api.md is stale; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

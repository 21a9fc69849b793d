"""The size limits of issue 18, held: every module of the controller's rooms
(``control/`` and ``control/pipeline/``) under 600 lines, no class in ``chongming_nb/``
over 600 lines, and no module in ``chongming_nb/`` over 1,000 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "chongming_nb"
ROOMS = [
    *sorted((PACKAGE / "control").glob("*.py")),
    *(PACKAGE / "control" / "pipeline").glob("*.py"),
]


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_every_room_module_is_under_600_lines() -> None:
    big = {p.relative_to(PACKAGE).as_posix(): n for p in ROOMS if (n := lines(p)) >= 600}
    assert not big, f"room modules of 600 lines or more (issue 18): {big}"


def test_no_module_over_1000_lines_and_no_class_over_600() -> None:
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if (n := lines(path)) > 1000:
            modules[name] = n
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > 600:
                    classes[f"{name}:{node.name}"] = size
    assert not modules, f"modules over 1,000 lines (issue 18): {modules}"
    assert not classes, f"classes over 600 lines (issue 18): {classes}"


def test_the_check_sees_a_big_class(tmp_path: Path) -> None:
    """The class measure can fail: a 601-line class is seen as one."""
    body = "\n".join(f"    x{i} = {i}" for i in range(600))
    tree = ast.parse(f"class Big:\n{body}\n")
    (cls,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    assert cls.end_lineno is not None and cls.end_lineno - cls.lineno + 1 == 601

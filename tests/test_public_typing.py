"""The lazily loaded package namespace keeps its static types.

``chongming_nb`` loads most of its public names on first use (PEP 562 ``__getattr__``,
so the ``chongming`` CLI does not import the controller and executors). A type checker
does not run ``__getattr__``: it sees a name's real type only through the package's
``if TYPE_CHECKING:`` imports, and ``object`` (what ``__getattr__`` returns) otherwise.
This runs mypy on ``reveal_type(cn.NAME)`` for every public name and optional backend.
"""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

import chongming_nb as cn

ROOT = Path(__file__).resolve().parents[1]

#: Provided lazily, outside ``__all__`` (they need optional extras).
OPTIONAL = ("PostgresStore", "DaskExecutor")


def test_every_public_name_has_its_static_type(tmp_path: Path) -> None:
    names = [n for n in cn.__all__ if not n.startswith("__")] + list(OPTIONAL)
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import chongming_nb as cn\n" + "".join(f"reveal_type(cn.{n})\n" for n in names),
        encoding="utf-8",
    )
    out, err, status = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),  # git-ignored; warm after the first run
            str(probe),
        ]
    )
    revealed: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r".*probe\.py:(\d+): note: Revealed type is \"(.*)\"$", line)
        if m:
            revealed[names[int(m[1]) - 2]] = m[2]
    assert set(revealed) == set(names), (out, err)
    untyped = sorted(n for n, t in revealed.items() if t in ("object", "Any"))
    assert not untyped, f"typed as object/Any (missing from the TYPE_CHECKING imports): {untyped}"
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not errors and status in (0, 1), (out, err)

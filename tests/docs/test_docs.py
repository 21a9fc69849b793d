"""Generated docs stay in step with the code; docs link to files that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_api_reference_is_current() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_api.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


def test_relative_links_in_docs_resolve() -> None:
    broken = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", md.read_text(encoding="utf-8")):
            if not (md.parent / target).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_user_facing_docs_speak_the_products_words() -> None:
    """ "Seed" and "frozen contract" name our internal design documents; users never see them."""
    internal = re.compile(r"\bseeds?\b|\bfrozen (?:contract|table|transition)", re.IGNORECASE)
    found = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            if internal.search(line):
                found.append(f"{md.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, found


def test_no_test_or_benchmark_writes_into_docs_img() -> None:
    """The pictures in docs/img come from the example notebooks (scripts/render_pictures.py),
    never from a test's fixtures."""
    # a path built to it ("docs" / "img") or a string naming a file in it; comments that
    # merely mention the folder do not count
    written = re.compile(r"""["']docs["']\s*/\s*["']img["']|["'][^"'\n]*docs/img/[^"'\n]+["']""")
    writers = []
    for folder in ("tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():
                continue
            if written.search(path.read_text(encoding="utf-8")):
                writers.append(str(path.relative_to(ROOT)))
    assert not writers, writers

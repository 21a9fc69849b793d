"""Every `chongming COMMAND` the README and the docs name is a command the CLI has
(docs/labextension.md sent readers to a `chongming reconcile` that does not exist)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from chongming_nb.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _commands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_every_command_the_docs_name_exists() -> None:
    commands = _commands()
    named = {
        (page.name, m.group(1))
        for page in PAGES
        # in code spans and shell lines: `chongming ps`, $ chongming --json status ...
        for m in re.finditer(
            r"(?:`|^\$ )chongming(?: --?[\w-]+(?: [^\s`-][^\s`]*)?)* ([a-z]+)\b",
            page.read_text(encoding="utf-8"),
            flags=re.M,
        )
    }
    assert {c for _, c in named} & commands, "no command found: the pattern is broken"
    unknown = sorted((page, c) for page, c in named if c not in commands)
    assert not unknown, unknown

"""Write docs/states.md from chongming_nb.core.docs.render_state_table().

Usage (from the repository root or anywhere):

    .venv/bin/python tools/gen_docs.py           # rewrite the file
    .venv/bin/python tools/gen_docs.py --check   # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chongming_nb.core.docs import GENERATED_PATH, REGENERATE_COMMAND, render_state_table

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether it is stale")
    args = parser.parse_args(argv)
    path = ROOT / GENERATED_PATH
    text = render_state_table()
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if args.check:
        if current != text:
            print(f"{GENERATED_PATH} is stale; run: {REGENERATE_COMMAND}", file=sys.stderr)
            return 1
        print(f"{GENERATED_PATH} is up to date")
        return 0
    if current == text:
        print(f"{GENERATED_PATH} already up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {GENERATED_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

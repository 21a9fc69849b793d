"""Regenerate labextension/src/contract.ts from the Python enums (one source of truth)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chongming_nb.server.contract import write_contract  # noqa: E402

if __name__ == "__main__":
    print(write_contract(ROOT))

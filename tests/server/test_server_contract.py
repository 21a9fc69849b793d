"""One source of truth: labextension/src/contract.ts is generated from the Python enums."""

from __future__ import annotations

from pathlib import Path

from chongming_nb.core.state_machine import CONTROL_VERBS
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.server.contract import CONTRACT_TS, render_contract


def test_committed_contract_matches_a_fresh_generation(repo_root: Path) -> None:
    committed = (repo_root / CONTRACT_TS).read_text(encoding="utf-8")
    assert committed == render_contract(), (
        "labextension/src/contract.ts is stale: run `python scripts/gen_ts_contract.py`"
    )


def test_contract_names_every_status_and_verb() -> None:
    text = render_contract()
    statuses_line = next(x for x in text.splitlines() if x.startswith("export const TASK_STATUSES"))
    for status in TaskStatus:
        assert f'"{status.value}"' in statuses_line
    terminal_line = next(x for x in text.splitlines() if "TERMINAL_STATUSES" in x and "=" in x)
    assert terminal_line.count('"') // 2 == len(TERMINAL)
    verbs_line = next(x for x in text.splitlines() if x.startswith("export const CONTROL_VERBS"))
    assert verbs_line.count('"') // 2 == len(CONTROL_VERBS)

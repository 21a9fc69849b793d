"""The store contract suite against every backend (PostgreSQL is a real server)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chongming_nb.stores import TaskStore
from chongming_nb.testing.store_contract import StoreContract

StoreFactory = Callable[[], TaskStore]


def test_the_contract_has_cases() -> None:
    names = StoreContract.cases()
    assert len(names) >= 20
    with pytest.raises(ValueError, match="no contract case"):
        StoreContract(lambda: None).run("case_missing")  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("case", StoreContract.cases())
def test_contract(store_factory: StoreFactory, case: str) -> None:
    StoreContract(store_factory).run(case)


def test_run_all_reports_failures() -> None:
    """A broken backend fails the suite, naming the cases (the suite can fail)."""
    from chongming_nb.stores import InMemoryStore

    class Forgetful(InMemoryStore):
        def history(self, task_id: str, *, since_version: int = 0):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(AssertionError) as info:
        StoreContract(Forgetful).run_all()
    assert "case_history_append_only_idempotent" in str(info.value)
    assert "case_query_filters" not in str(info.value)

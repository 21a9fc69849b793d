"""A lease renewal looks back at the store without reading tasks back one at a time.

The renewal (the dispatcher's, every sixth of a lease, the first right after start)
asks the store which of this owner's unfinished tasks it still holds open; the rest
were settled elsewhere, or are not written yet. The ones not written yet (the recorder
behind, e.g. just after a burst of submits) used to be read back one by one
(``store.get`` each, behind the recorder's writes): in a 3,000-task throughput run on
SQLite, ~200 reads of ~6 ms at the start of the run. Now one query names the ones the
store holds settled (or under another owner) while memory still has them open, and
only those are converged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chongming_nb import Controller, SqliteStore, TaskStatus
from chongming_nb.testing.stores import ForwardingStore


# the store refuses every write here on purpose: the controller says so, once
@pytest.mark.filterwarnings("ignore::chongming_nb.control.persistence.PersistenceWarning")
def test_a_renewal_does_not_read_back_each_task_the_recorder_has_not_written(
    tmp_path: Path,
) -> None:
    store = ForwardingStore(SqliteStore(tmp_path / "t.db"))
    ctl = Controller(store=store)
    try:
        ctl._dispatcher.store_tick = None  # this test drives the store link itself
        store.fail("record_batch")  # nothing reaches the store: the recorder is "behind"
        handles = [ctl.submit(print, i, delay=3600) for i in range(50)]  # stay open
        assert all(store.inner.get(h.id) is None for h in handles)
        gets = store.calls["get"]
        assert ctl._leases is not None
        ctl._leases.renew_leases()
        assert store.calls["get"] == gets  # no read per unwritten task
        assert {ctl.get(h.id).status for h in handles} == {TaskStatus.BLOCKED}
        store.heal()
        assert ctl.flush(30)
        assert {store.inner.get(h.id).status for h in handles} == {TaskStatus.BLOCKED}
    finally:
        ctl.close()
        store.close()

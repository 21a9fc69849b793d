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

from datetime import timedelta
from pathlib import Path

import pytest

from chongming_nb import Controller, SqliteStore, TaskStatus
from chongming_nb.testing import FakeClock
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


def test_a_task_is_leased_when_it_is_created_and_renewed_only_when_its_lease_runs_short(
    tmp_path: Path,
) -> None:
    """A burst of submits is written once: each task's row carries a whole lease from
    its creation, so a renewal right after writes nothing (it used to lease every task
    it found open again, thousands of row updates at the start of a throughput run).
    A lease is renewed once less than a lease minus a renewal period is left of it,
    and the renewal writes the new end only, never the owner column."""
    clock = FakeClock()
    store = ForwardingStore(SqliteStore(tmp_path / "t.db"), batch=False)
    ctl = Controller(store=store, clock=clock, lease_seconds=60)
    try:
        ctl._dispatcher.store_tick = None  # this test drives the leases itself
        leases = ctl._leases
        assert leases is not None
        created = clock.now()
        handles = [ctl.submit(print, i, delay=3600) for i in range(20)]  # stay open
        assert ctl.flush(30)
        for h in handles:
            row = store.inner.get(h.id)
            assert row is not None
            assert row.lease_owner == ctl.owner
            assert row.lease_until == created + timedelta(seconds=60)
        touches = store.calls["touch_many"]
        leases.renew_leases()
        assert ctl.flush(30)
        assert store.calls["touch_many"] == touches  # nothing to renew yet

        clock.advance(leases.renew_every - 1)  # still more than 50 s of each lease left
        leases.renew_leases()
        assert ctl.flush(30)
        assert store.calls["touch_many"] == touches

        clock.advance(2)  # now less: every lease is renewed, in one write
        renewed = clock.now() + timedelta(seconds=60)
        leases.renew_leases()
        assert ctl.flush(30)
        assert store.calls["touch_many"] == touches + 1
        for h in handles:
            row = store.inner.get(h.id)
            assert row is not None
            assert row.lease_until == renewed == ctl.get(h.id).lease_until
            assert row.lease_owner == ctl.owner
    finally:
        ctl.close()
        store.close()


def test_a_renewal_never_takes_a_task_back_from_the_owner_the_store_names(
    tmp_path: Path,
) -> None:
    """The store files a task under another owner (a controller elsewhere adopted it
    while this one was frozen): this owner's renewal renews the end of the lease only,
    it does not write itself back as the owner (it used to, racing its own look back,
    which then found the task under this owner again)."""
    clock = FakeClock()
    store = SqliteStore(tmp_path / "t.db")
    ctl = Controller(store=store, clock=clock, lease_seconds=60)
    try:
        ctl._dispatcher.store_tick = None
        leases = ctl._leases
        assert leases is not None
        h = ctl.submit(print, 1, delay=3600)
        assert ctl.flush(30)
        clock.advance(leases.renew_every + 1)  # its lease is due for renewal
        store.touch(h.id, lease_owner="elsewhere:1:-:1-1", lease_until=clock.now())
        leases.renew_leases()
        assert ctl.flush(30)
        row = store.get(h.id)
        assert row is not None and row.lease_owner == "elsewhere:1:-:1-1"
        assert row.lease_until == clock.now() + timedelta(seconds=60)
    finally:
        ctl.close()
        store.close()

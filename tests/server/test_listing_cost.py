"""What one task listing costs the server, counted rather than timed: the store calls and
the state-machine questions of ``GET tasks`` must not grow with the number of rows, and
the shared ``can`` answers (``CanFlags``) must be exactly what ``sm.can`` says per row."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers_server import put_task, register_owner
from hypothesis import given, settings
from hypothesis import strategies as st

from chongming_nb.core.models import Failure, FailureKind, Progress, TaskSnapshot, Transition
from chongming_nb.core.state_machine import CONTROL_VERBS, StateMachine
from chongming_nb.core.states import RequestedAction, TaskStatus
from chongming_nb.runtime.clock import SYSTEM_CLOCK
from chongming_nb.server.extension import SETTINGS_KEY, ServerState
from chongming_nb.server.serialize import CanFlags, can_flags, task_rows
from chongming_nb.stores import SqliteStore
from chongming_nb.testing import FakeClock
from chongming_nb.testing.stores import ForwardingStore

S = TaskStatus
API = ("chongming", "api")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class CountingMachine(StateMachine):
    __slots__ = ("asked",)

    def __init__(self) -> None:
        super().__init__(SYSTEM_CLOCK)
        self.asked = 0

    def can(self, s: TaskSnapshot, verb: str, *, force: bool = False) -> tuple[bool, str | None]:
        self.asked += 1
        return super().can(s, verb, force=force)


class StillFeed:
    """A feed that never reads the store: the count is the listing's alone."""

    async def primed(self) -> int:
        return 7

    def nudge(self) -> None:
        pass

    async def close(self) -> None:
        pass


def finished(i: int, status: TaskStatus = S.SUCCEEDED) -> TaskSnapshot:
    created = T0 + timedelta(seconds=i)
    return TaskSnapshot(
        task_id=f"bulk{i:05d}",
        name=f"part-{i} <b>",
        status=status,
        status_version=4,
        attempt=1,
        max_attempts=3,
        created_at=created,
        queued_at=created,
        started_at=created + timedelta(seconds=1),
        ended_at=created + timedelta(seconds=3),
        progress=Progress(5.0, 10.0, "rows", f"chunk {i}", created),
        failure=Failure(FailureKind.EXCEPTION, f"ValueError: row {i}")
        if status is S.FAILED
        else None,
        tags=frozenset({"bulk"}),
    )


@pytest.fixture
def state(jp_serverapp: Any) -> ServerState:
    cm: ServerState = jp_serverapp.web_app.settings[SETTINGS_KEY]
    return cm


def paused_then_stopped(i: int) -> tuple[TaskSnapshot, list[Transition]]:
    """A task that ran 2 s, was paused 9 s and was stopped, with its transitions."""
    sm = StateMachine(FakeClock(T0 + timedelta(minutes=i)))
    clock = sm.clock
    assert isinstance(clock, FakeClock)
    s = TaskSnapshot(task_id=f"pause{i:05d}", name=f"paused-{i}", created_at=clock.now())
    trs: list[Transition] = []
    for step, wait in (
        (sm.mark_queued, 0),
        (sm.mark_starting, 0),
        (sm.mark_running, 2),
        (sm.request_pause, 0),
        (sm.confirm_paused, 9),
        (sm.request_stop, 0),
    ):
        s, tr = step(s)
        trs.append(tr)
        clock.advance(wait)
    return s, trs


async def _list_counted(
    jp_fetch: Any, state: ServerState, store_path: Any, writer: SqliteStore, grow: range
) -> tuple[dict[str, Any], Counter[str], int]:
    kinds = [S.SUCCEEDED, S.SUCCEEDED, S.FAILED, S.STOPPED]
    writer.save_many([(finished(i, kinds[i % 4]), None) for i in grow])
    # and one task in ten paused, then stopped: its row's 'paused' is read from its history
    pauses = [paused_then_stopped(i) for i in grow if i % 10 == 0]
    writer.save_many([(snap, None) for snap, _ in pauses], [t for _, trs in pauses for t in trs])
    store = ForwardingStore(SqliteStore(store_path))
    sm = CountingMachine()
    state.set_store(store)
    state.feed = StillFeed()  # type: ignore[assignment]
    state.sm = sm
    try:
        r = await jp_fetch(*API, "tasks", params={"limit": "5000"})
    finally:
        store.close()
    return json.loads(r.body), store.calls, sm.asked


async def test_store_calls_and_can_questions_do_not_grow_with_the_rows(
    jp_fetch: Any, state: ServerState, store_path: Any, kernel_store: SqliteStore
) -> None:
    owner = register_owner(kernel_store, "kernel-a")
    for tid, status in (("t-run", S.RUNNING), ("t-paused", S.PAUSED), ("t-queued", S.QUEUED)):
        put_task(kernel_store, tid, status, owner=owner)
    small, small_calls, small_asked = await _list_counted(
        jp_fetch, state, store_path, kernel_store, range(20)
    )
    big, big_calls, big_asked = await _list_counted(
        jp_fetch, state, store_path, kernel_store, range(20, 600)
    )
    assert len(small["tasks"]) == 25 and len(big["tasks"]) == 663
    # the pauses of every row of a page ('frozen', 'paused') are one read of the store,
    # never one per row: 2 paused tasks or 60, the same calls
    assert small_calls["histories"] == 1 and big_calls["histories"] == 1, (small_calls, big_calls)
    assert big_calls["history"] == 0, big_calls
    assert big_calls == small_calls, (small_calls, big_calls)
    assert sum(big_calls.values()) <= 4, big_calls  # owners, page, counts, pauses
    by_row = {r["id"]: r for r in big["tasks"]}
    for tid in ("pause00000", "pause00020", "pause00590"):
        row = by_row[tid]
        assert row["status"] == "stopped" and row["paused"] == 9000, row
        assert row["ended"] - row["started"] - row["paused"] == 2000, row
    assert by_row["t-paused"]["frozen"] is not None and by_row["t-paused"]["paused"] == 0
    assert by_row["bulk00001"]["paused"] == 0 and by_row["bulk00001"]["frozen"] is None
    assert big_asked == small_asked, (small_asked, big_asked)
    assert big_asked <= len(CONTROL_VERBS) * 7  # one round per distinct lifecycle
    # and each row still carries exactly what the predicate says about it
    check = StateMachine(SYSTEM_CLOCK)
    by_id = {r["id"]: r for r in big["tasks"]}
    for tid in ("t-run", "t-paused", "t-queued", "bulk00002", "bulk00003", "bulk00599"):
        snap = kernel_store.get(tid)
        assert snap is not None
        can, why = can_flags(check, snap)
        assert by_id[tid]["can"] == can and by_id[tid]["why"] == why, tid
        assert all(tid in text for text in why.values())


_STATUS = st.sampled_from(list(TaskStatus))
_MAYBE_TIME = st.none() | st.just(T0)


@st.composite
def snapshots(draw: Callable[..., Any]) -> TaskSnapshot:
    return TaskSnapshot(
        task_id=draw(st.text(min_size=0, max_size=12)),
        name=draw(st.text(max_size=5)),
        status=draw(_STATUS),
        status_version=draw(st.integers(0, 9)),
        requested_action=draw(st.none() | st.sampled_from(list(RequestedAction))),
        attempt=draw(st.integers(0, 4)),
        max_attempts=draw(st.integers(1, 4)),
        created_at=draw(_MAYBE_TIME),
        queued_at=draw(_MAYBE_TIME),
        started_at=draw(_MAYBE_TIME),
        ended_at=draw(_MAYBE_TIME),
        retry_at=draw(_MAYBE_TIME),
        lease_owner=draw(st.none() | st.text(max_size=8)),
        overridden=draw(st.booleans()),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(snapshots(), max_size=25))
def test_shared_can_answers_equal_the_predicate_per_row(snaps: list[TaskSnapshot]) -> None:
    sm = StateMachine(SYSTEM_CLOCK)
    shared = CanFlags(sm)
    for snap in snaps:
        assert shared(snap) == can_flags(sm, snap)
    rows = task_rows(snaps, sm=sm, now=T0, owners={}, sessions={})
    assert [(r["can"], r["why"]) for r in rows] == [can_flags(sm, s) for s in snaps]

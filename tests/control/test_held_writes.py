"""Writes made while the store refuses them are held and written once it is back —
on a store that implements only the ``TaskStore`` protocol too (no ``record_batch``:
the memory store, a user's own store; here the memory store, SQLite and PostgreSQL
with their batch method hidden). Meanwhile ``health()`` says what is pending; after,
memory and store agree: snapshots, transitions, attempts, log lines, progress."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ctl_helpers import Rig, wait_status
from fencing import StorePair, agree
from hypothesis import given, settings
from hypothesis import strategies as st

from chongming_nb import Controller, TaskContext, TaskStatus
from chongming_nb.control.messages import (
    AppendLog,
    ClearAttempts,
    CreateTask,
    Outgoing,
    SaveAttempt,
    SaveSnapshot,
)
from chongming_nb.control.persistence import PersistenceWarning
from chongming_nb.control.writes import StoreOutage, is_outage, write_batch
from chongming_nb.core.models import AttemptRecord
from chongming_nb.stores import InMemoryStore
from chongming_nb.stores.protocol import LogRecord
from chongming_nb.testing.store_contract import at, snap, transition
from chongming_nb.testing.stores import ForwardingStore

S = TaskStatus

#: Every method through which a controller writes to a store without ``record_batch``.
WRITES = (
    "create",
    "save",
    "save_many",
    "append",
    "save_attempt",
    "clear_attempts",
    "append_logs",
    "trim_logs",
    "append_events",
    "touch_many",
)


def talker(ctx: TaskContext, n: int) -> int:
    for i in ctx.track(range(n), total=n, unit="lines"):
        print(f"line {i}")
    return n


def _logs(store: object, tid: str) -> list[str]:
    return [r.line for r in store.logs(tid) if r.stream == "stdout"]  # type: ignore[attr-defined]


def _same_everywhere(ctl: Controller, main: object, tid: str, lines: list[str]) -> None:
    agree(ctl, main, tid)  # type: ignore[arg-type]
    assert _logs(main, tid) == lines
    assert main.get(tid).progress == ctl.get(tid).progress  # type: ignore[attr-defined]


@pytest.mark.parametrize("failing", [WRITES, ("append_logs",), ("touch_many",)])
def test_writes_during_an_outage_of_a_store_without_record_batch_are_not_lost(
    pair: StorePair, rig: Rig, make_ctl: Callable[..., Controller], failing: tuple[str, ...]
) -> None:
    main, _ = pair
    store = ForwardingStore(main, batch=False)
    ctl = make_ctl(store=store)
    ctl._dispatcher.store_tick = None  # flush() drives the store link
    before = ctl.submit(talker, 2, name="before")
    assert before.result(10) == 2
    ctl.flush()
    _same_everywhere(ctl, main, before.id, ["line 0", "line 1"])

    store.fail(*failing)
    with pytest.warns(PersistenceWarning):
        during = ctl.submit(talker, 3, name="during")
        assert during.result(10) == 3
        wait_status(ctl, during, S.SUCCEEDED)
        ctl.flush()
    assert store.refused > 0
    health = ctl.health()
    assert health["saved"] is False, health
    assert health["held_writes"] > 0 and health["dropped_writes"] == 0, health
    assert "could not connect" in (health["not_saved"] or "")
    ctl.flush()  # tried again, refused again: still held, nothing lost
    assert ctl.health()["held_writes"] >= health["held_writes"]

    store.heal()
    ctl.flush()
    health = ctl.health()
    assert health["saved"] is True and health["held_writes"] == 0, health
    _same_everywhere(ctl, main, during.id, ["line 0", "line 1", "line 2"])
    _same_everywhere(ctl, main, before.id, ["line 0", "line 1"])


# ---------------------------------------------------------------- the property

TASKS = ("a", "b", "c")
#: (progress is left out: a touch is applied after the batch's snapshots, so one held
#: from before a save lands after it — as in any batch; the test above checks progress)
KINDS = ("save", "log", "attempt", "clear")


@st.composite
def recorder_batches(draw: st.DrawFn) -> list[list[Outgoing]]:
    """Batches as a controller's recorder hands them over: each task created first,
    its snapshots a chain of versions, attempts, a reset's clear, log lines."""
    version: dict[str, int] = {}
    out: list[list[Outgoing]] = []
    k = 0
    for _ in range(draw(st.integers(1, 8))):
        batch: list[Outgoing] = []
        for _ in range(draw(st.integers(1, 6))):
            k += 1
            tid = draw(st.sampled_from(TASKS))
            if tid not in version:
                version[tid] = 0
                batch.append(CreateTask(snap(tid)))
                continue
            kind = draw(st.sampled_from(KINDS))
            if kind == "save":
                v = version[tid] = version[tid] + 1
                batch.append(SaveSnapshot(snap(tid, status_version=v), v - 1, transition(tid, v)))
            elif kind == "log":
                batch.append(AppendLog(tid, LogRecord(at(k), "stdout", f"line {k}")))
            elif kind == "attempt":
                n = draw(st.integers(1, 2))
                batch.append(SaveAttempt(AttemptRecord(tid, n, at(k), executor=f"x{k}")))
            else:
                batch.append(ClearAttempts(tid))
        out.append(batch)
    return out


@settings(max_examples=60, deadline=None)
@given(
    batches=recorder_batches(),
    outages=st.lists(
        st.lists(st.booleans(), min_size=len(WRITES), max_size=len(WRITES)).map(
            lambda on: frozenset(w for w, down in zip(WRITES, on, strict=True) if down)
        ),
        min_size=8,
        max_size=8,
    ),
)
def test_whatever_a_store_without_record_batch_refuses_lands_once_it_is_back(
    batches: list[list[Outgoing]], outages: list[frozenset[str]]
) -> None:
    """The recorder's holding (``StoreLink.persist``): each batch is written after the
    ones held; what an outage refuses is held (``StoreOutage``: all of it, or what was
    not written). Whatever methods fail, batch after batch, once the store is back it
    holds exactly what a store that never failed holds — nothing lost, nothing twice."""
    steady = InMemoryStore()
    store = ForwardingStore(InMemoryStore(), batch=False)
    held: list[Outgoing] = []
    for batch, failing in zip(batches, outages, strict=False):
        assert write_batch(steady, batch) == 0
        store.failing = set(failing)
        try:
            assert write_batch(store, [*held, *batch], raise_outage=True) == 0
            held = []
        except StoreOutage as exc:
            assert is_outage(exc.cause)
            held = [*held, *batch] if exc.remainder is None else exc.remainder
    store.heal()
    if held:
        assert write_batch(store, held, raise_outage=True) == 0
    for tid in TASKS:
        assert store.get(tid) == steady.get(tid), tid
        assert store.history(tid) == steady.history(tid), tid
        assert store.attempts(tid) == steady.attempts(tid), tid
        assert store.logs(tid) == steady.logs(tid), tid

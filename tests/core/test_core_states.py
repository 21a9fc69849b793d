"""The 15 states and the frozen transition table (seed 001 §2.3, v1.3), row by row."""

from __future__ import annotations

import pytest

import chongming_nb as cn
from chongming_nb.core.states import (
    NON_TERMINAL,
    OCCUPIED,
    REVIVABLE,
    TERMINAL,
    TRANSITIONS,
    UNOCCUPIED,
    RequestedAction,
    TaskStatus,
    is_terminal,
)

# Written out independently from the seed's §2.3 v1.3 block (values, not enum members),
# so a typo in states.py cannot be copied into the expectation.
SEED_TABLE: dict[str, set[str]] = {
    "pending": {"blocked", "queued", "skipped", "cancelled", "stopped"},
    "blocked": {"queued", "skipped", "cancelled", "stopped"},
    "queued": {"starting", "paused", "skipped", "stopped", "cancelled"},
    "starting": {"running", "retry_wait", "pausing", "stopping", "failed", "lost"},
    "running": {"succeeded", "failed", "retry_wait", "pausing", "stopping", "lost"},
    "pausing": {"paused", "running", "failed", "stopping", "lost"},
    "paused": {"queued", "running", "stopped", "cancelled"},
    "retry_wait": {"starting", "queued", "paused", "stopped", "failed", "cancelled"},
    "stopping": {"stopped", "succeeded", "failed", "lost"},
    "succeeded": set(),
    "failed": set(),
    "stopped": set(),
    "cancelled": set(),
    "skipped": set(),
    "lost": set(),
}


def test_fifteen_states_with_the_seed_values() -> None:
    assert [s.value for s in TaskStatus] == list(SEED_TABLE)
    assert len(TaskStatus) == 15


def test_table_has_a_row_for_every_state_and_nothing_else() -> None:
    assert set(TRANSITIONS) == set(TaskStatus)


@pytest.mark.parametrize("state", list(SEED_TABLE))
def test_row_equals_seed(state: str) -> None:
    row = TRANSITIONS[TaskStatus(state)]
    assert isinstance(row, frozenset)
    assert {t.value for t in row} == SEED_TABLE[state]


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[TaskStatus.FAILED] = frozenset({TaskStatus.QUEUED})  # type: ignore[index]


def test_no_self_edges() -> None:
    assert all(s not in out for s, out in TRANSITIONS.items())


def test_terminal_is_derived_from_the_table() -> None:
    assert {s.value for s in TERMINAL} == {s for s, out in SEED_TABLE.items() if not out}
    assert {s.value for s in TERMINAL} == {
        "succeeded",
        "failed",
        "stopped",
        "cancelled",
        "skipped",
        "lost",
    }
    assert frozenset(TaskStatus) - TERMINAL == NON_TERMINAL
    assert all(is_terminal(s) == (s in TERMINAL) for s in TaskStatus)


def test_revivable() -> None:
    assert {s.value for s in REVIVABLE} == {"failed", "stopped", "cancelled", "lost"}
    assert REVIVABLE < TERMINAL
    assert TaskStatus.SUCCEEDED not in REVIVABLE
    assert TaskStatus.SKIPPED not in REVIVABLE


def test_occupied_and_unoccupied_partition_the_non_terminal_states() -> None:
    assert {s.value for s in UNOCCUPIED} == {"pending", "blocked", "queued", "paused", "retry_wait"}
    assert {s.value for s in OCCUPIED} == {"starting", "running", "pausing", "stopping"}
    assert OCCUPIED | UNOCCUPIED == NON_TERMINAL
    assert not OCCUPIED & UNOCCUPIED


def test_finished_is_a_legacy_alias_of_succeeded() -> None:
    assert TaskStatus.FINISHED is TaskStatus.SUCCEEDED
    assert TaskStatus("succeeded") is TaskStatus.FINISHED
    assert TaskStatus["FINISHED"] is TaskStatus.SUCCEEDED
    assert "FINISHED" not in [s.name for s in TaskStatus]  # an alias, not a 16th state


def test_status_is_a_str_enum() -> None:
    assert TaskStatus.RUNNING == "running"
    assert f"{TaskStatus.RETRY_WAIT}" == "retry_wait"


def test_requested_action() -> None:
    assert {a.value for a in RequestedAction} == {"stop", "pause"}


def test_public_namespace_prints_the_seed_row_for_paused() -> None:
    assert cn.TRANSITIONS[cn.TaskStatus.PAUSED] == frozenset(
        {
            cn.TaskStatus.QUEUED,
            cn.TaskStatus.RUNNING,
            cn.TaskStatus.STOPPED,
            cn.TaskStatus.CANCELLED,
        }
    )


def test_status_members_read_as_plain_attributes_are_the_enums_members() -> None:
    from chongming_nb.core.states import STATUS, Members, RequestedAction

    for name, member in TaskStatus.__members__.items():  # aliases too (FINISHED)
        assert getattr(STATUS, name) is member
    assert Members(RequestedAction).STOP is RequestedAction.STOP
    with pytest.raises(AttributeError):
        STATUS.NOT_A_STATUS  # noqa: B018

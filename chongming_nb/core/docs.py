"""The generated state-table document (``docs/states.md``), built from the data.

``render_state_table()`` is pure: it reads TRANSITIONS / TERMINAL / REVIVABLE /
OCCUPIED and asks ``StateMachine`` which states accept each verb and event, so the
document cannot drift from the code. ``tools/gen_docs.py`` writes it to disk and a test
fails when the committed file is stale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from chongming_nb.core.errors import TaskError
from chongming_nb.core.models import Failure, FailureKind, TaskSnapshot
from chongming_nb.core.state_machine import VERBS, Result, StateMachine
from chongming_nb.core.states import (
    OCCUPIED,
    REVIVABLE,
    TERMINAL,
    TRANSITIONS,
    TaskStatus,
)

__all__ = ["GENERATED_PATH", "REGENERATE_COMMAND", "render_state_table"]

#: Where the rendered document lives, relative to the repository root.
GENERATED_PATH = "docs/states.md"
#: The command that rewrites it.
REGENERATE_COMMAND = ".venv/bin/python tools/gen_docs.py"

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_NONE = "—"


class _FixedClock:
    """A clock that always says the same time: rendering must not read the real one."""

    def now(self) -> datetime:
        return _EPOCH

    def monotonic(self) -> float:
        return 0.0


@dataclass(frozen=True)
class _Case:
    """One row of the verb and event tables: a label and a representative snapshot."""

    label: str
    snapshot: TaskSnapshot


def _cases() -> list[_Case]:
    """One representative snapshot per state; PAUSED twice (in place / before start).

    Occupied and terminal states have a ``started_at``; every case has budget for another
    attempt (attempt 1 of 3) so that budget guards do not hide the table.
    """
    cases: list[_Case] = []
    for st in TaskStatus:
        started = st in OCCUPIED or st in TERMINAL
        base = TaskSnapshot(
            task_id="doc",
            name="doc",
            status=st,
            attempt=1,
            max_attempts=3,
            created_at=_EPOCH,
            started_at=_EPOCH if started else None,
            ended_at=_EPOCH if st in TERMINAL else None,
        )
        if st is TaskStatus.PAUSED:
            cases.append(_Case("paused (in place)", base.evolve(started_at=_EPOCH)))
            cases.append(_Case("paused (before start)", base))
        else:
            cases.append(_Case(st.value, base))
    return cases


def _verb_methods(sm: StateMachine) -> dict[str, Callable[[TaskSnapshot], Result]]:
    return {
        "start": lambda s: sm.start(s),
        "stop": lambda s: sm.request_stop(s),
        "pause": lambda s: sm.request_pause(s),
        "resume": lambda s: sm.resume(s),
        "cancel": lambda s: sm.cancel(s, reason="doc"),
        "retry": lambda s: sm.retry(s),
        "skip": lambda s: sm.skip(s),
        "reset": lambda s: sm.reset(s),
    }


def _event_methods(sm: StateMachine) -> dict[str, Callable[[TaskSnapshot], Result]]:
    retryable = Failure(FailureKind.EXCEPTION, "doc", retryable=True)
    fatal = Failure(FailureKind.EXCEPTION, "doc", retryable=False)
    return {
        "mark_blocked": lambda s: sm.mark_blocked(s),
        "mark_queued": lambda s: sm.mark_queued(s),
        "mark_starting": lambda s: sm.mark_starting(s),
        "mark_running": lambda s: sm.mark_running(s),
        "confirm_paused": lambda s: sm.confirm_paused(s),
        "abort_pause": lambda s: sm.abort_pause(s),
        "confirm_stopped": lambda s: sm.confirm_stopped(s),
        "mark_succeeded": lambda s: sm.mark_succeeded(s),
        "mark_failed (retryable)": lambda s: sm.mark_failed(s, retryable),
        "mark_failed (fatal)": lambda s: sm.mark_failed(s, fatal),
        "mark_lost": lambda s: sm.mark_lost(s, reason="doc"),
    }


def _outcome(fn: Callable[[TaskSnapshot], Result], snap: TaskSnapshot) -> str:
    try:
        new, _ = fn(snap)
    except TaskError:
        return _NONE
    return f"→ {new.status.value}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]


def _ordered(states: frozenset[TaskStatus]) -> list[TaskStatus]:
    order = list(TaskStatus)
    return sorted(states, key=order.index)


def _states_section() -> list[str]:
    rows = []
    for st in TaskStatus:
        rows.append(
            [
                f"`{st.value}`",
                "terminal" if st in TERMINAL else "non-terminal",
                "yes" if st in REVIVABLE else "",
                "yes" if st in OCCUPIED else "",
            ]
        )
    return [
        "## States",
        "",
        "`TERMINAL` is derived from the table (the states with no out-edges). `REVIVABLE`",
        "states may be brought back to `queued` by `retry`. A task *holds an execution*",
        "(`OCCUPIED`) while a thread or process is working on its current attempt: this",
        "decides whether stop and pause act at once or go through `stopping` / `pausing`",
        "(the v1.2 rule). A task paused in place still has its thread parked in",
        "`checkpoint()` but consumes nothing, so it counts as not holding one: stop acts at",
        "once and the executor wakes the parked thread with `TaskCancelled`; `reset` is",
        "still refused for it (see the guards). The legacy name `TaskStatus.FINISHED` is an",
        "alias of `succeeded`.",
        "",
        *_table(["state", "kind", "revivable", "holds an execution"], rows),
    ]


def _transitions_section() -> list[str]:
    rows = []
    for st in TaskStatus:
        out = _ordered(TRANSITIONS[st])
        rows.append(
            [f"`{st.value}`", ", ".join(f"`{t.value}`" for t in out) if out else "(terminal)"]
        )
    diagram = ["```mermaid", "stateDiagram-v2", "    [*] --> pending"]
    for st in TaskStatus:
        for t in _ordered(TRANSITIONS[st]):
            diagram.append(f"    {st.value} --> {t.value}")
    for st in _ordered(TERMINAL):
        diagram.append(f"    {st.value} --> [*]")
    diagram.append("```")
    return [
        "## Transition table",
        "",
        "Every status change made by the state machine is an edge of this table, except",
        "`retry` and `reset` (the only ways out of a terminal state) and the audited",
        "`force_transition`.",
        "",
        *_table(["from", "allowed next states"], rows),
        "",
        *diagram,
    ]


def _matrix(title_col: str, methods: dict[str, Callable[[TaskSnapshot], Result]]) -> list[str]:
    rows = []
    for case in _cases():
        rows.append([case.label, *(_outcome(fn, case.snapshot) for fn in methods.values())])
    return _table([title_col, *methods], rows)


def _verbs_section(sm: StateMachine) -> list[str]:
    accepted = []
    cases = _cases()
    for verb in VERBS:
        labels = [c.label for c in cases if sm.check(c.snapshot, verb) is None]
        accepted.append([f"`{verb}`", ", ".join(labels) if labels else _NONE])
    return [
        "## User verbs",
        "",
        "Which states accept each verb (`StateMachine.check` / `can`) and where it leads.",
        "A dash means the verb raises `InvalidTransition(current, requested, allowed)` and",
        "changes nothing. Repeating a verb on a task already where it leads is made",
        "idempotent by the Controller, not here. The rows use a task that has budget left",
        "(attempt 1 of 3); see the guards below for what changes when it has none.",
        "",
        *_table(["verb", "accepted from"], accepted),
        "",
        *_matrix("state", _verb_methods(sm)),
    ]


def _events_section(sm: StateMachine) -> list[str]:
    return [
        "## Lifecycle events",
        "",
        "Reported by the scheduler, the executor and the supervisor.",
        "",
        *_matrix("state", _event_methods(sm)),
    ]


_GUARDS = [
    "## Guards the table cannot express",
    "",
    "- `mark_running` needs `started_at` (written by `mark_starting`), so no path reaches",
    "  `running` without a start time.",
    "- `abort_pause` only from `pausing`: it may not use the `paused → running` edge.",
    "- `mark_starting` needs `attempt + 1 <= max_attempts`, else `AttemptsExhausted`.",
    "  `attempt` counts started attempts: `mark_starting` increments it.",
    "- `retry` (from a revivable state) needs `attempt < max_attempts`, else",
    "  `AttemptsExhausted`; `retry(force=True)` raises `max_attempts` to `attempt + 1`",
    "  when needed. `retry` keeps the attempt history; the next `mark_starting` opens the",
    "  new attempt.",
    "- `reset` clears the attempt counter and goes to `pending`; it is refused while the",
    "  task holds an execution (`starting`, `running`, `pausing`, `stopping`, or `paused`",
    "  in place): stop it first.",
    "- `resume` goes to `running` for an in-place pause (`starting`/`running` → `pausing`",
    "  → `paused`) and to `queued` for a task paused before it started",
    "  (`queued`/`retry_wait` → `paused`).",
    "- `mark_failed` goes to `retry_wait` when the failure is retryable, the budget allows",
    "  another attempt and the table has the edge; otherwise to `failed`.",
    "- `force_transition(to, actor, reason)` goes anywhere, needs a non-empty actor and",
    "  reason, marks the snapshot `overridden` and is recorded as an `AdminOverride`.",
    "",
    "## Where the transition table overrides a verb",
    "",
    "The transition table is fixed, and it wins wherever a verb would want another edge:",
    "",
    "- `skip` is listed from `failed`, but `failed` has no out-edges, so `skip` is",
    "  accepted only from states whose row contains `skipped`: `pending`, `blocked`,",
    "  `queued`. Use `retry` or `force_transition` for a failed task.",
    "- `pause` acts at once only where the table has an edge to `paused` (`queued`,",
    "  `retry_wait`); `pending` and `blocked` have none, and `paused` has no self-edge.",
    "- `cancel` on a task holding an execution goes through `stopping` like `stop` (the",
    "  execution must still notice); it then ends `stopped`, as `stopping` has no edge to",
    "  `cancelled`.",
    "- `stop` on `stopping` and `pause` on `pausing` are not transitions (no self-edges);",
    "  the Controller treats the repeat as already done.",
]


_FAILURE_MEANINGS = {
    "exception": "the task raised (full traceback kept)",
    "nonzero_exit": "a process exited with a non-zero code or crashed",
    "timeout_start": "the attempt did not start within `Timeout.start`",
    "timeout_attempt": "the attempt ran longer than `Timeout.per_attempt`",
    "timeout_idle": "no checkpoint or heartbeat within `Timeout.idle`",
    "cancelled": "the orchestrator cancelled it (a pipeline's fail-fast, reconcile)",
    "lost": "the carrier vanished or did not stop in time: result unknown",
    "dependency_failed": "a dependency failed, so it never ran",
    "condition_false": "a pipeline condition said no (the node is skipped)",
}


def _failures_section() -> list[str]:
    from chongming_nb.core.models import ACTOR_SOURCE_LABELS, ACTOR_SOURCES, FailureKind

    return [
        "## Failures, and who ended a task",
        "",
        "`Failure.kind` says why an attempt did not succeed (timeouts are kinds, not",
        "states):",
        "",
        "| kind | meaning |",
        "| --- | --- |",
        *(f"| `{k.value}` | {_FAILURE_MEANINGS[k.value]} |" for k in FailureKind),
        "",
        "**A stop is not a failure.** A task someone stopped (the widget, the sidebar, the",
        "CLI, `h.stop()`, a pipeline's `run.stop()`) ends `stopped` with no `failure`; its",
        "attempt has outcome `stopped` and no `failure_kind` in `attempts_df()`. A skip by",
        "a person records no failure either. A cancel keeps its failure (`cancelled` or",
        "`dependency_failed`): it is the orchestrator's consequence of something else",
        "failing. A stop that the executor had to enforce is recorded honestly: a thread",
        "that never reached a checkpoint is `lost` (kind `lost`); a process terminated",
        "after the stop window is `stopped`, with that noted in the outcome.",
        "",
        "Who ended a `stopped`, `cancelled` or `skipped` task, and why, is kept in its",
        'snapshot\'s `outcome`: `{"by": actor, "reason": reason}` (plus `"detail"` when the',
        "executor had to step in); when is `ended_at`. Rows show it as the source of the",
        "verb (`ended_by`) and the reason (`end_reason`):",
        "",
        "| `ended_by` | row text |",
        "| --- | --- |",
        *(f"| `{src}` | stopped {ACTOR_SOURCE_LABELS[src]} at 14:03:07 |" for src in ACTOR_SOURCES),
        "",
        "`retry` and `reset` clear the outcome with the failure.",
    ]


def render_state_table() -> str:
    """The full Markdown text of ``docs/states.md``."""
    sm = StateMachine(_FixedClock())
    lines = [
        "# Task states and transitions",
        "",
        "<!-- Generated by `" + REGENERATE_COMMAND + "` from chongming_nb.core; do not edit",
        "     by hand. tests/core/test_core_docs.py fails when this file is stale. -->",
        "",
        *_states_section(),
        "",
        *_transitions_section(),
        "",
        *_verbs_section(sm),
        "",
        *_events_section(sm),
        "",
        *_GUARDS,
        "",
        *_failures_section(),
    ]
    return "\n".join(lines) + "\n"

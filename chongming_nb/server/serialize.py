"""JSON shapes of the REST API: task rows (with server-computed ``can`` flags), details,
commands. Pure functions of store records, a clock reading and the session map."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from chongming_nb.control.ownership import OwnerId, refusal
from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import AttemptRecord, Command, TaskSnapshot, Transition, iso_utc
from chongming_nb.core.state_machine import CONTROL_VERBS, StateMachine
from chongming_nb.core.states import TaskStatus
from chongming_nb.notebook.rows import NO_PAUSE, PauseClock, average_rate, build_row, pause_clock
from chongming_nb.stores.protocol import EventRecord, LogRecord, OwnerRecord, TaskStore

log = logging.getLogger("chongming_nb.server")


def iso(value: datetime | None) -> str | None:
    """A time in the API's JSON (``iso_utc``: the same width on a whole second)."""
    return None if value is None else iso_utc(value)


def parse_owner(owner: str | None) -> tuple[str | None, int | None, str | None]:
    """An owner id (``host:pid:kernel_id:START-NONCE``, or the older
    ``host:pid:kernel_id``) -> ``(host, pid, kernel_id)``; missing parts are None (a
    controller outside a kernel writes ``-`` for the kernel id). The format is
    ``chongming_nb.control.ownership.OwnerId``'s."""
    if not owner:
        return None, None, None
    oid = OwnerId.parse(owner)
    if oid is None:
        return owner, None, None
    return oid.host or None, oid.pid, oid.kernel


def can_flags(sm: StateMachine, snap: TaskSnapshot) -> tuple[dict[str, bool], dict[str, str]]:
    """The same predicate the kernel uses; ``retry`` from a person is forced (the attempt
    budget only limits automatic retries)."""
    can: dict[str, bool] = {}
    why: dict[str, str] = {}
    for verb in CONTROL_VERBS:
        ok, reason = sm.can(snap, verb, force=(verb == "retry"))
        can[verb] = ok
        if not ok and reason:
            why[verb] = reason
    return can, why


#: Stands in for a task id while ``CanFlags`` asks the predicate: no real id holds a NUL.
_ID_PLACEHOLDER = "\x00task-id\x00"

Flags = tuple[dict[str, bool], dict[str, str]]


class CanFlags:
    """``can_flags`` for the many rows of one listing, asking ``sm.can`` once per distinct
    lifecycle instead of once per row and verb (5 verbs x 2,000 rows built 9,400 refusal
    errors, half the server's time of a listing).

    The lifecycle key holds every field of a snapshot that says where the task is in its
    life (status, requested action, attempt and budget, which of its times are set, the
    override mark); the rest (identity, name, progress, results, owner) is not the
    predicate's business. The predicate is asked on a copy of the first snapshot of a key
    whose id is a placeholder, and the real id is put back into the refusal texts, so every
    row gets exactly the texts ``sm.can`` gives for it (tests/server/test_listing_cost.py
    checks that on generated snapshots). One instance per listing: nothing outlives it."""

    __slots__ = ("_memo", "_sm")

    def __init__(self, sm: StateMachine) -> None:
        self._sm = sm
        self._memo: dict[tuple[Any, ...], Flags] = {}

    def __call__(self, snap: TaskSnapshot) -> Flags:
        if not snap.task_id:
            return can_flags(self._sm, snap)
        key = (
            snap.status,
            snap.requested_action,
            snap.attempt,
            snap.max_attempts,
            snap.started_at is None,
            snap.ended_at is None,
            snap.queued_at is None,
            snap.retry_at is None,
            snap.overridden,
        )
        hit = self._memo.get(key)
        if hit is None:
            hit = can_flags(self._sm, snap.evolve(task_id=_ID_PLACEHOLDER))
            self._memo[key] = hit
        can, why = hit
        tid = snap.task_id
        return dict(can), {verb: text.replace(_ID_PLACEHOLDER, tid) for verb, text in why.items()}


_PAUSED = frozenset({TaskStatus.PAUSED})


def pause_clocks(store: TaskStore, snaps: Iterable[TaskSnapshot]) -> dict[str, PauseClock]:
    """Task id -> the pauses of its current attempt (``rows.pause_clock``: the row's
    ``frozen`` and ``paused``), for the tasks among ``snaps`` that were paused in it; the
    kernel's board takes them from the same transitions. One read of the store for all
    of them (the transitions into and out of PAUSED of the started ones), whatever their
    number. Run it on a store thread."""
    started = {s.task_id: s for s in snaps if s.started_at is not None}
    if not started:
        return {}
    try:
        found = store.histories(list(started), touching=_PAUSED)
    except StoreError as err:  # the rows go out without their pauses, said in the log
        log.warning("chongming_nb: the pauses of %d tasks were not read: %s", len(started), err)
        return {}
    out: dict[str, PauseClock] = {}
    for tid, trs in found.items():
        snap = started.get(tid)
        if snap is not None and (clock := pause_clock(snap, trs)) is not NO_PAUSE:
            out[tid] = clock
    return out


def task_row(
    snap: TaskSnapshot,
    *,
    sm: StateMachine,
    now: datetime,
    owners: Mapping[str, OwnerRecord],
    sessions: Mapping[str, str],
    flags: CanFlags | None = None,
    gone: str | None = None,
    pauses: PauseClock = NO_PAUSE,
) -> dict[str, Any]:
    """One task as the sidebar lists it: the row the widget draws
    (:func:`chongming_nb.notebook.rows.build_row`, keys ``schema.ROW_TYPES``) plus
    ``schema.LISTING_ROW_TYPES``; ``flags`` shares the ``can`` answers of a listing's
    rows (see ``CanFlags``). ``now`` is not read: a row says when things happened, the
    front end counts. ``gone``: why the task's owning kernel is gone
    (``server.liveness``): the row says "kernel gone" and no verb is possible.
    ``pauses``: the pauses of its current attempt (``pause_clocks``)."""
    host, pid, kernel = parse_owner(snap.lease_owner)
    rec = owners.get(snap.lease_owner) if snap.lease_owner else None
    if rec is not None:
        host, pid, kernel = rec.host, rec.pid, rec.kernel_id or kernel
    can, why = can_flags(sm, snap) if flags is None else flags(snap)
    running_gone = gone is not None and not snap.is_terminal
    if gone is not None and snap.is_terminal:
        # a finished task is retried by the controller that holds its code: none now
        # (the row says how it ended, not "kernel gone"; the reason stays for the group)
        can = {**can, "retry": False}
        why = {**why, "retry": refusal(snap, gone)}
    elif gone is not None:
        # nothing would claim a command: every verb waits for reconcile (-> lost)
        can = dict.fromkeys(can, False)
        why = dict.fromkeys(can, refusal(snap, gone))
    row = build_row(
        snap,
        {verb: (ok, why.get(verb)) for verb, ok in can.items()},
        rate=average_rate(snap),
        pauses=pauses,
    )
    row["why"] = why
    row["owner"] = snap.lease_owner
    row["host"] = host
    row["pid"] = pid
    row["kernel_id"] = kernel
    row["notebook"] = sessions.get(kernel) if kernel else None
    row["kernel_gone"] = running_gone
    row["kernel_gone_reason"] = gone
    return row


def task_rows(
    snaps: Iterable[TaskSnapshot],
    *,
    sm: StateMachine,
    now: datetime,
    owners: Mapping[str, OwnerRecord],
    sessions: Mapping[str, str],
    gone: Mapping[str, str] | None = None,
    pauses: Mapping[str, PauseClock] | None = None,
) -> list[dict[str, Any]]:
    """The rows of a listing (or a feed answer), sharing one ``CanFlags``; ``gone``:
    task id -> why its kernel is gone; ``pauses``: task id -> the pauses of its current
    attempt (``pause_clocks``; a task left out was not paused)."""
    flags = CanFlags(sm)
    g = gone or {}
    paused = pauses or {}
    return [
        task_row(
            s,
            sm=sm,
            now=now,
            owners=owners,
            sessions=sessions,
            flags=flags,
            gone=g.get(s.task_id),
            pauses=paused.get(s.task_id, NO_PAUSE),
        )
        for s in snaps
    ]


def attempt_row(a: AttemptRecord) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "started_at": iso(a.started_at),
        "ended_at": iso(a.ended_at),
        "duration_s": None if a.duration is None else a.duration.total_seconds(),
        "outcome": None if a.outcome is None else a.outcome.value,
        "failure_kind": None if a.failure_kind is None else a.failure_kind.value,
        "failure_message": a.failure_message,
        "traceback": a.traceback,
        "executor": a.executor,
        "abandoned": a.abandoned,
        "exit_code": a.exit_code,
    }


def transition_row(t: Transition) -> dict[str, Any]:
    return {
        "from_status": t.from_status.value,
        "to_status": t.to_status.value,
        "trigger": t.trigger,
        "actor": t.actor,
        "reason": t.reason,
        "at": iso(t.at),
        "version": t.version,
        "override": t.override,
    }


def log_row(rec: LogRecord) -> dict[str, Any]:
    return {"at": iso(rec.at), "stream": rec.stream, "level": rec.level, "line": rec.line}


def event_row(e: EventRecord) -> dict[str, Any]:
    return {"event_id": e.event_id, "at": iso(e.at), "type": e.type, "payload": dict(e.payload)}


def task_detail(
    snap: TaskSnapshot,
    row: dict[str, Any],
    *,
    attempts: Sequence[AttemptRecord],
    history: Sequence[Transition],
    logs: Sequence[LogRecord],
    events: Sequence[EventRecord],
) -> dict[str, Any]:
    """One task's detail: its listing ``row`` (``task_row`` of ``snap``) with the
    failure's traceback, its attempts, history, log lines and events."""
    if snap.failure is not None and row["failure"] is not None:
        row["failure"]["traceback"] = snap.failure.traceback
    return {
        "task": row,
        "attempts": [attempt_row(a) for a in attempts],
        "history": [transition_row(t) for t in history],
        "logs": [log_row(rec) for rec in logs],
        "events": [event_row(e) for e in events],
    }


def command_info(c: Command) -> dict[str, Any]:
    return {
        "command_id": c.command_id,
        "task_id": c.task_id,
        "verb": c.verb,
        "state": c.state.value,
        "actor": c.actor,
        "created_at": iso(c.created_at),
        "completed_at": iso(c.completed_at),
        "claimed_by": c.claimed_by,
        "outcome": None if c.outcome is None else dict(c.outcome),
    }


def owner_row(o: OwnerRecord, sessions: Mapping[str, str]) -> dict[str, Any]:
    return {
        "owner_id": o.owner_id,
        "host": o.host,
        "pid": o.pid,
        "kernel_id": o.kernel_id,
        "notebook": sessions.get(o.kernel_id) if o.kernel_id else None,
        "started_at": iso(o.started_at),
        "heartbeat_at": iso(o.heartbeat_at),
    }

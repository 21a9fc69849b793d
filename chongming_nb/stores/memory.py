"""The in-memory store: tests, single-process use, and the reference the others follow."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import (
    AttemptRecord,
    Command,
    CommandState,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import TERMINAL, TaskStatus
from chongming_nb.stores._base import Batch, Only, StoreBase
from chongming_nb.stores._codec import check_snapshot_times, utc, utc_req
from chongming_nb.stores.protocol import (
    DROPPED_STREAM,
    SCHEMA_VERSION,
    EventRecord,
    LogRecord,
    OwnerRecord,
    RunRecord,
    SaveItem,
    TaskQuery,
    Touch,
    dropped_count,
    dropped_marker,
    fold_ascii,
    log_size,
)

__all__ = ["InMemoryStore", "matches", "order_snapshots"]


def matches(q: TaskQuery, s: TaskSnapshot) -> bool:
    """Does snapshot ``s`` satisfy every criterion of ``q``?"""
    if q.status is not None and s.status not in q.status:
        return False
    if q.tag is not None and q.tag not in s.tags:
        return False
    if q.name_prefix is not None and not s.name.startswith(q.name_prefix):
        return False
    if q.text is not None:
        text = fold_ascii(q.text)
        if text not in fold_ascii(s.name) and text not in fold_ascii(s.task_id):
            return False
    if q.pipeline_run_id is not None and s.pipeline_run_id != q.pipeline_run_id:
        return False
    if q.owner is not None and s.lease_owner != q.owner:
        return False
    if q.owners is not None and s.lease_owner not in q.owners:
        return False
    if q.buckets is not None and s.bucket not in q.buckets:
        return False
    return not (q.ids is not None and s.task_id not in q.ids)


def order_snapshots(
    rows: Sequence[tuple[int, TaskSnapshot]], order: str = "newest"
) -> list[TaskSnapshot]:
    """Order ``(creation_seq, snapshot)`` pairs the way every backend does."""
    return [s for _, s in _order_rows(rows, order)]


def _order_rows(
    rows: Sequence[tuple[int, TaskSnapshot]], order: str
) -> list[tuple[int, TaskSnapshot]]:
    dated = [r for r in rows if r[1].created_at is not None]
    undated = [r for r in rows if r[1].created_at is None]
    dated.sort(key=lambda r: (r[1].created_at, r[0]), reverse=order == "newest")
    undated.sort(key=lambda r: r[0], reverse=order == "newest")
    return dated + undated


R = TypeVar("R", LogRecord, EventRecord)


def _newest(rows: list[tuple[int, R]], limit: int | None) -> list[R]:
    """The records of ``(seq, record)`` rows in time order (ties: as written), the
    newest ``limit`` of them."""
    rows.sort(key=lambda r: (r[1].at, r[0]))
    if limit is not None:
        rows = rows[-limit:] if limit > 0 else []
    return [rec for _, rec in rows]


class InMemoryStore(StoreBase):
    """A ``TaskStore`` in process memory, guarded by one lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False
        self._seq = 0
        self._tasks: dict[str, tuple[int, TaskSnapshot]] = {}
        self._history: dict[str, dict[int, Transition]] = {}
        self._attempts: dict[str, dict[int, AttemptRecord]] = {}
        self._logs: dict[str, list[tuple[int, LogRecord]]] = {}
        self._events: list[tuple[int, EventRecord]] = []
        self._event_ids: set[str] = set()
        self._commands: dict[str, tuple[int, Command]] = {}
        self._owners: dict[str, OwnerRecord] = {}
        self._runs: dict[str, RunRecord] = {}

    # ------------------------------------------------------------ identity
    @property
    def url(self) -> str:
        return "memory:"

    @property
    def schema_version(self) -> int:
        return SCHEMA_VERSION

    def __repr__(self) -> str:
        return f"InMemoryStore({len(self._tasks)} tasks)"

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store memory: is closed")

    # --------------------------------------------------------------- writes
    def _record(self, batch: Batch) -> None:
        items, transitions, attempts, events, clears, logs, touches = batch
        items = [(check_snapshot_times(snap), expect) for snap, expect in items]
        for t in transitions:
            utc_req(t.at, f"task {t.task_id}: transition {t.version} at")
        for a in attempts:
            utc_req(a.started_at, f"task {a.task_id}: attempt {a.attempt} started_at")
            utc(a.ended_at, f"task {a.task_id}: attempt {a.attempt} ended_at")
        for e in events:
            utc_req(e.at, f"event {e.event_id} at")
        for task_id, lines in logs:
            for rec in lines:
                utc_req(rec.at, f"task {task_id}: log line at")
        for tc in touches:
            utc(tc.heartbeat_at, f"task {tc.task_id}: heartbeat_at")
            utc(tc.lease_until, f"task {tc.task_id}: lease_until")
            if tc.progress is not None:
                utc(tc.progress.updated_at, f"task {tc.task_id}: progress.updated_at")
        with self._lock:
            self._check_open()
            staged = self._staged(items)
            # all checks passed: apply
            for task_id in clears:
                self._attempts.pop(task_id, None)
            for task_id, (seq, snap) in staged.items():
                self._tasks[task_id] = (self._next() if seq is None else seq, snap)
            for t in transitions:
                self._history.setdefault(t.task_id, {}).setdefault(t.version, t)
            for a in attempts:
                self._attempts.setdefault(a.task_id, {})[a.attempt] = a
            self._append_events(events)
            for task_id, lines in logs:
                bucket = self._logs.setdefault(task_id, [])
                bucket.extend((self._next(), rec) for rec in lines)
            for tc in touches:
                self._touch(tc)

    def _staged(self, items: Sequence[SaveItem]) -> dict[str, tuple[int | None, TaskSnapshot]]:
        """The snapshots ``items`` leave, by task, with their creation seq (None: new);
        StoreError or ConcurrencyConflict if one does not follow what is stored."""
        staged: dict[str, tuple[int | None, TaskSnapshot]] = {}
        for snap, expect in items:
            if snap.task_id in staged:
                current: TaskSnapshot | None = staged[snap.task_id][1]
                seq: int | None = staged[snap.task_id][0]
            else:
                held = self._tasks.get(snap.task_id)
                current = None if held is None else held[1]
                seq = None if held is None else held[0]
            if expect is None:
                if current is not None:
                    raise StoreError(f"task {snap.task_id} already exists in memory:")
            else:
                actual = None if current is None else current.status_version
                if actual != expect:
                    raise ConcurrencyConflict(snap.task_id, expect, actual)
            staged[snap.task_id] = (seq, snap)
        return staged

    def _touch(self, t: Touch) -> None:
        held = self._tasks.get(t.task_id)
        if held is None:
            return
        changes: dict[str, Any] = {}
        if t.progress is not None:
            changes["progress"] = t.progress
        if t.heartbeat_at is not None:
            changes["last_heartbeat_at"] = t.heartbeat_at
        if t.lease_owner is not None:
            changes["lease_owner"] = t.lease_owner
        if t.lease_until is not None:
            changes["lease_until"] = t.lease_until
        if t.pid is not None:
            changes["pid"] = t.pid
        if changes:
            self._tasks[t.task_id] = (held[0], replace(held[1], **changes))

    # ------------------------------------------------------------ snapshots
    def get(self, task_id: str) -> TaskSnapshot | None:
        with self._lock:
            self._check_open()
            held = self._tasks.get(task_id)
            return None if held is None else held[1]

    def query(self, query: TaskQuery | None = None) -> list[TaskSnapshot]:
        q = query or TaskQuery()
        with self._lock:
            self._check_open()
            rows = [r for r in self._tasks.values() if matches(q, r[1])]
        out = order_snapshots(rows, q.order)
        return out if q.limit is None else out[: q.limit]

    def page(
        self, query: TaskQuery | None = None, *, after: str | None = None
    ) -> tuple[list[TaskSnapshot], str | None]:
        """As ``SqlStore.page``: ``query.limit`` rows (default 100) after the cursor."""
        q = query or TaskQuery()
        size = 100 if q.limit is None else q.limit
        with self._lock:
            self._check_open()
            rows = [r for r in self._tasks.values() if matches(q, r[1])]
        ordered = _order_rows(rows, q.order)
        start = 0
        if after is not None:
            seqs = [seq for seq, _ in ordered]
            try:
                start = seqs.index(int(after)) + 1
            except ValueError:
                raise StoreError(
                    f"bad page cursor {str(after)[:60]!r} for {self.url}: "
                    "use the cursor a page returned"
                ) from None
        chunk = ordered[start : start + size]
        more = start + size < len(ordered) and bool(chunk)
        return [s for _, s in chunk], str(chunk[-1][0]) if more else None

    def counts(self, query: TaskQuery | None = None) -> dict[TaskStatus, int]:
        q = query or TaskQuery()
        out = dict.fromkeys(TaskStatus, 0)
        with self._lock:
            self._check_open()
            for _, s in self._tasks.values():
                if matches(q, s):
                    out[s.status] += 1
        return out

    # -------------------------------------------------------------- history
    def history(self, task_id: str, *, since_version: int = 0) -> list[Transition]:
        with self._lock:
            self._check_open()
            hist = self._history.get(task_id, {})
            return [hist[v] for v in sorted(hist) if v > since_version]

    def histories(
        self, task_ids: Sequence[str], *, touching: frozenset[TaskStatus] | None = None
    ) -> dict[str, list[Transition]]:
        out: dict[str, list[Transition]] = {}
        with self._lock:
            self._check_open()
            for tid in sorted(set(task_ids)):
                hist = self._history.get(tid)
                if not hist:
                    continue
                kept = [
                    hist[v]
                    for v in sorted(hist)
                    if touching is None
                    or hist[v].to_status in touching
                    or hist[v].from_status in touching
                ]
                if kept:
                    out[tid] = kept
        return out

    def attempts(self, task_id: str) -> list[AttemptRecord]:
        with self._lock:
            self._check_open()
            held = self._attempts.get(task_id, {})
            return [held[n] for n in sorted(held)]

    def clear_attempts(self, task_id: str) -> int:
        with self._lock:
            self._check_open()
            return len(self._attempts.pop(task_id, {}))

    def trim_logs(self, task_id: str, max_bytes: int) -> int:
        with self._lock:
            self._check_open()
            rows = sorted(self._logs.get(task_id, []), key=lambda r: (r[1].at, r[0]))
            total, keep_from = 0, len(rows)
            while keep_from > 0:
                rec = rows[keep_from - 1][1]
                if rec.stream == DROPPED_STREAM:
                    break
                total += log_size(rec.line)
                if total > max_bytes:
                    break
                keep_from -= 1
            gone = rows[:keep_from]
            if not gone:
                return 0
            dropped = sum(1 for _, r in gone if r.stream != DROPPED_STREAM)
            before = sum(dropped_count(r.line) for _, r in gone if r.stream == DROPPED_STREAM)
            seq, last = gone[-1]
            marker = LogRecord(last.at, DROPPED_STREAM, dropped_marker(before + dropped))
            self._logs[task_id] = [(seq, marker), *rows[keep_from:]]
            return dropped

    def _logs_since(
        self, task_id: str, since: datetime | None, limit: int | None
    ) -> list[LogRecord]:
        with self._lock:
            self._check_open()
            rows = list(self._logs.get(task_id, []))
        if since is not None:
            rows = [r for r in rows if r[1].at > since]
        return _newest(rows, limit)

    def _append_events(self, events: Sequence[EventRecord]) -> None:
        for e in events:
            if e.event_id in self._event_ids:
                continue
            self._event_ids.add(e.event_id)
            self._events.append((self._next(), e))

    def _events_since(
        self, task_id: str | None, since: datetime | None, types: Only, limit: int | None
    ) -> list[EventRecord]:
        with self._lock:
            self._check_open()
            rows = list(self._events)
        rows = [
            r
            for r in rows
            if (task_id is None or r[1].task_id == task_id)
            and (since is None or r[1].at > since)
            and (types is None or r[1].type in types)
        ]
        return _newest(rows, limit)

    # -------------------------------------------------------------- commands
    def submit_command(self, command: Command) -> None:
        utc(command.created_at, f"command {command.command_id} created_at")
        with self._lock:
            self._check_open()
            if command.command_id in self._commands:
                return
            fresh = replace(
                command,
                state=CommandState.PENDING,
                claimed_by=None,
                lease_until=None,
                completed_at=None,
                outcome=None,
                args=dict(command.args),
            )
            self._commands[command.command_id] = (self._next(), fresh)

    def _claim(
        self, owner: str, now: datetime, until: datetime, limit: int, task_ids: Only
    ) -> list[Command]:
        out: list[Command] = []
        with self._lock:
            self._check_open()
            for cid, (seq, c) in sorted(self._commands.items(), key=lambda kv: kv[1][0]):
                if len(out) >= limit:
                    break
                if task_ids is not None and c.task_id not in task_ids:
                    continue
                claimable = c.state is CommandState.PENDING or (
                    c.state is CommandState.CLAIMED
                    and c.lease_until is not None
                    and c.lease_until <= now
                )
                if not claimable:
                    continue
                claimed = replace(
                    c, state=CommandState.CLAIMED, claimed_by=owner, lease_until=until
                )
                self._commands[cid] = (seq, claimed)
                out.append(claimed)
        return out

    def _complete(
        self, command_id: str, now: datetime, outcome: Mapping[str, Any] | None, state: CommandState
    ) -> None:
        with self._lock:
            self._check_open()
            held = self._commands.get(command_id)
            if held is None:
                raise StoreError(f"no command with id {command_id!r} in memory:")
            seq, c = held
            if c.state in (CommandState.DONE, CommandState.REJECTED):
                return
            done = replace(
                c,
                state=state,
                completed_at=now,
                outcome=None if outcome is None else dict(outcome),
            )
            self._commands[command_id] = (seq, done)

    def get_command(self, command_id: str) -> Command | None:
        with self._lock:
            self._check_open()
            held = self._commands.get(command_id)
            return None if held is None else held[1]

    def commands(
        self, task_id: str | None = None, *, state: CommandState | None = None
    ) -> list[Command]:
        with self._lock:
            self._check_open()
            rows = sorted(self._commands.values(), key=lambda r: r[0])
        return [
            c
            for _, c in rows
            if (task_id is None or c.task_id == task_id) and (state is None or c.state is state)
        ]

    # ---------------------------------------------------------------- owners
    def upsert_owner(self, owner: OwnerRecord) -> None:
        utc_req(owner.started_at, f"owner {owner.owner_id} started_at")
        utc_req(owner.heartbeat_at, f"owner {owner.owner_id} heartbeat_at")
        with self._lock:
            self._check_open()
            self._owners[owner.owner_id] = owner

    def owners(self) -> list[OwnerRecord]:
        with self._lock:
            self._check_open()
            return [self._owners[k] for k in sorted(self._owners)]

    # ------------------------------------------------------------------ runs
    def save_run(self, run: RunRecord) -> None:
        utc_req(run.created_at, f"run {run.run_id} created_at")
        utc_req(run.updated_at, f"run {run.run_id} updated_at")
        with self._lock:
            self._check_open()
            self._runs[run.run_id] = replace(run, spec=dict(run.spec))

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            self._check_open()
            return self._runs.get(run_id)

    def list_runs(
        self, limit: int | None = None, *, status: Collection[str] | None = None
    ) -> list[RunRecord]:
        with self._lock:
            self._check_open()
            wanted = None if status is None else set(status)
            chosen = [r for r in self._runs.values() if wanted is None or r.status in wanted]
            runs = sorted(chosen, key=lambda r: r.created_at, reverse=True)
        return runs if limit is None else runs[:limit]

    # ------------------------------------------------------------------- ops
    def _purge(
        self, cutoff: datetime, statuses: list[str], keep: frozenset[str], dry_run: bool
    ) -> dict[str, int]:
        chosen = set(statuses)
        with self._lock:
            self._check_open()
            doomed = {
                tid
                for tid, (_, s) in self._tasks.items()
                if s.status.value in chosen
                and tid not in keep
                and (s.ended_at or s.created_at) is not None
                and (s.ended_at or s.created_at) < cutoff  # type: ignore[operator]
            }
            counts = {
                "transitions": sum(len(self._history.get(t, {})) for t in doomed),
                "attempts": sum(len(self._attempts.get(t, {})) for t in doomed),
                "events": sum(1 for _, e in self._events if e.task_id in doomed),
                "logs": sum(len(self._logs.get(t, [])) for t in doomed),
                "commands": sum(1 for _, c in self._commands.values() if c.task_id in doomed),
                "tasks": len(doomed),
            }
            if dry_run:
                return counts
            for t in doomed:
                del self._tasks[t]
                self._history.pop(t, None)
                self._attempts.pop(t, None)
                self._logs.pop(t, None)
            self._events = [(n, e) for n, e in self._events if e.task_id not in doomed]
            self._commands = {k: v for k, v in self._commands.items() if v[1].task_id not in doomed}
        return counts

    def _prune(self, keep_terminal: int) -> int:
        with self._lock:
            self._check_open()
            terminal = [r for r in self._tasks.values() if r[1].status in TERMINAL]
            doomed = order_snapshots(terminal, "newest")[keep_terminal:]
            for s in doomed:
                del self._tasks[s.task_id]
            return len(doomed)

    def close(self) -> None:
        with self._lock:
            self._closed = True

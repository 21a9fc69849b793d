"""The store contract (seed 001 §5.6): what every persistence backend provides.

Four kinds of data are kept apart on purpose, because they are written at very
different rates and need different consistency:

1. **Task snapshots** — the query surface. Written with optimistic concurrency:
   ``save(snapshot, expect_version=n)`` succeeds only if the stored
   ``status_version`` is ``n``; otherwise ``ConcurrencyConflict``. One writer per
   task, so a conflict is a bug and is raised, never retried away.
2. **History** — the append-only audit trail of transitions, idempotent on
   ``(task_id, version)``; attempts, log lines and events ride alongside.
3. **The touch side channel** — progress, heartbeats, lease renewal and pid, many
   times a second. It never checks or bumps ``status_version``.
4. **Commands** — a leased queue through which other processes (CLI, the JupyterLab
   sidebar) control tasks owned by a kernel. A claimed command is leased: a claimer
   that dies lets the lease expire and another claimer picks it up. The store carries
   commands; it never interprets or executes them.

Every method of every backend is thread-safe. Times are aware datetimes (the stores
normalise them to UTC; equality of instants is preserved). A naive datetime is
rejected with ``StoreError``.

Conventions shared by all backends (the contract suite in
``chongming_nb.testing.store_contract`` checks each of them):

* ``query`` orders newest first by ``created_at`` (``order="newest"``), ties broken
  by creation order (later-created first); ``order="oldest"`` reverses both.
  Snapshots without ``created_at`` sort last in either order.
* ``logs`` and ``events`` return records oldest first; ``since`` keeps records with
  ``at`` strictly after it; ``limit`` keeps the *newest* ``limit`` of what matched
  (like ``tail -n``), still oldest first.
* ``counts`` returns every ``TaskStatus`` as a key, zeros included.
* ``prune(keep_terminal=n)`` deletes terminal *snapshots* beyond the ``n`` newest
  (by ``created_at``, ties by creation order) from the snapshot table only. History
  (transitions), attempts, log lines, events, commands, owners and pipeline runs of
  pruned tasks are kept and stay queryable by task id. ``get`` of a pruned task
  returns None. Non-terminal snapshots are never pruned.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from chongming_nb.core.models import (
    AttemptRecord,
    Command,
    CommandState,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import TaskStatus

__all__ = [
    "SCHEMA_VERSION",
    "EventRecord",
    "LogRecord",
    "OwnerRecord",
    "QueryOrder",
    "RunRecord",
    "SaveItem",
    "TaskQuery",
    "TaskStore",
    "Touch",
]

#: The schema version the durable backends of this release write.
SCHEMA_VERSION = 2

QueryOrder = Literal["newest", "oldest"]

#: Longest ``TaskQuery.text``.
MAX_TEXT = 200


def fold_ascii(text: str) -> str:
    """``text`` with ASCII capitals made small (what SQLite's ``lower`` does), the case
    folding of ``TaskQuery.text`` on every backend."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True, slots=True)
class TaskQuery:
    """A filter over task snapshots. Every given criterion must hold (AND).

    ``status``: any of these statuses; ``tag``: has this tag; ``name_prefix``: name
    starts with it (case-sensitive); ``pipeline_run_id``: belongs to this run;
    ``owner``: ``lease_owner`` equals it; ``owners``: ``lease_owner`` is one of them (an
    empty set: no task; no index serves it, as with ``text``); ``buckets``: ``bucket`` is
    one of them;
    ``ids``: task id is one of them; ``limit``: at most this many (after ordering);
    ``order``: ``"newest"`` (default) or ``"oldest"`` by ``created_at``; ``text``: the
    name or the task id contains it, ignoring the case of ASCII letters (``%`` and ``_``
    are literal; no index serves it: a page with a rare text reads many rows).
    """

    status: frozenset[TaskStatus] | None = None
    tag: str | None = None
    name_prefix: str | None = None
    pipeline_run_id: str | None = None
    owner: str | None = None
    owners: frozenset[str] | None = None
    buckets: frozenset[int] | None = None
    ids: frozenset[str] | None = None
    limit: int | None = None
    order: QueryOrder = "newest"
    text: str | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"TaskQuery.limit must be >= 0, got {self.limit}")
        if self.order not in ("newest", "oldest"):
            raise ValueError(f"TaskQuery.order must be 'newest' or 'oldest', got {self.order!r}")
        if self.text is not None and (not self.text or len(self.text) > MAX_TEXT):
            raise ValueError(f"TaskQuery.text must hold 1-{MAX_TEXT} characters")


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One captured output line of a task. ``stream`` is e.g. ``stdout``, ``stderr`` or
    ``log``; ``level`` is the logging level name for ``log`` lines, else None."""

    at: datetime
    stream: str
    line: str
    level: str | None = None


#: The ``stream`` of the marker line that stands for lines no longer kept.
DROPPED_STREAM = "dropped"
#: The log budget's byte model, one for every store and for the controller: a line
#: counts ``LOG_TEXT_WEIGHT * len(line) + LOG_ROW_OVERHEAD`` (``log_size``).
#: Its text counts twice: a row of ~1 KB fills a 4 KB page only three times, and the
#: pages of trimmed lines are reused, not returned — so what a store's file grows by
#: stays within the budget, and the text kept is about half of it.
LOG_TEXT_WEIGHT = 2
#: What one log line costs a store beside its text (time, stream, task id, indexes).
LOG_ROW_OVERHEAD = 100


def log_size(line: str) -> int:
    """What a line counts against a task's log budget (see ``LOG_TEXT_WEIGHT``);
    ``len`` counts characters, as SQL's ``LENGTH`` does."""
    return LOG_TEXT_WEIGHT * len(line) + LOG_ROW_OVERHEAD


def dropped_marker(n: int) -> str:
    """The marker line's text for ``n`` lines dropped (oldest first)."""
    return f"… {n} lines dropped"


def dropped_count(line: str) -> int:
    """The ``n`` of a marker line (0 for any other text)."""
    parts = line.split(" ")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One persisted event. ``payload`` is a JSON object; ``task_id`` is None for
    events not about one task (e.g. a pipeline run). Idempotent on ``event_id``."""

    event_id: str
    task_id: str | None
    at: datetime
    type: str
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OwnerRecord:
    """A controller that owns tasks (``lease_owner`` of its snapshots is ``owner_id``)."""

    owner_id: str
    host: str
    pid: int
    kernel_id: str | None
    started_at: datetime
    heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A pipeline run. ``spec`` is a JSON object describing it (nodes, policies...)."""

    run_id: str
    name: str
    status: str
    created_at: datetime
    updated_at: datetime
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Touch:
    """One side-channel update for ``touch_many``; None fields are left unchanged."""

    task_id: str
    progress: Progress | None = None
    heartbeat_at: datetime | None = None
    lease_owner: str | None = None
    lease_until: datetime | None = None
    pid: int | None = None


#: ``(snapshot, expect_version)`` for ``save_many``; ``expect_version=None`` creates.
SaveItem = tuple[TaskSnapshot, int | None]


@runtime_checkable
class TaskStore(Protocol):
    """The persistence contract. All methods are thread-safe."""

    # ------------------------------------------------------------ identity
    @property
    def url(self) -> str:
        """Where this store lives (``memory:``, ``sqlite:///...``, ``postgresql://...``
        with any password removed)."""
        ...

    @property
    def schema_version(self) -> int:
        """The schema version of the underlying storage."""
        ...

    # ------------------------------------------------------- 1. snapshots
    def create(self, snapshot: TaskSnapshot) -> None:
        """Store a new task. ``StoreError`` if the id already exists."""
        ...

    def save(self, snapshot: TaskSnapshot, *, expect_version: int) -> None:
        """Replace a task's snapshot if its stored ``status_version`` equals
        ``expect_version``; else ``ConcurrencyConflict(task_id, expected, actual)``
        (``actual`` None when the task does not exist). Nothing changes on conflict."""
        ...

    def save_many(
        self,
        items: Sequence[SaveItem],
        transitions: Sequence[Transition] = (),
        *,
        attempts: Sequence[AttemptRecord] = (),
        events: Sequence[EventRecord] = (),
    ) -> None:
        """Group commit: creates (``expect_version=None``), saves, transition appends,
        attempt upserts and event appends in ONE transaction — all land or none does.
        A conflict or duplicate raises (ConcurrencyConflict / StoreError) and writes
        nothing. Items for the same task may appear several times in order (each
        expecting the version the previous one wrote)."""
        ...

    def get(self, task_id: str) -> TaskSnapshot | None: ...

    def query(self, query: TaskQuery | None = None) -> list[TaskSnapshot]: ...

    def page(
        self, query: TaskQuery | None = None, *, after: str | None = None
    ) -> tuple[list[TaskSnapshot], str | None]:
        """``query``'s rows one page at a time: ``query.limit`` rows (default 100) after
        the row named by ``after`` (a cursor from the previous page), and the cursor of
        the next page (None after the last). Rows created meanwhile are never repeated;
        a bad cursor raises StoreError."""
        ...

    def counts(self, query: TaskQuery | None = None) -> dict[TaskStatus, int]:
        """Number of snapshots per status among those matching ``query`` (its
        ``limit`` and ``order`` are ignored). Every status is a key."""
        ...

    # --------------------------------------------------------- 2. history
    def append(self, transition: Transition) -> None:
        """Append to the audit trail; a second append of the same (task_id, version)
        is ignored (the first one wins)."""
        ...

    def history(self, task_id: str, *, since_version: int = 0) -> list[Transition]:
        """Transitions with ``version > since_version``, ascending by version."""
        ...

    def histories(
        self, task_ids: Sequence[str], *, touching: frozenset[TaskStatus] | None = None
    ) -> dict[str, list[Transition]]:
        """The transitions of several tasks in one read: task id -> its transitions,
        ascending by version (a task with none, or unknown, is left out).
        ``touching``: only the transitions into or out of one of these statuses (the
        Tasks sidebar reads the pauses of a page of rows so)."""
        ...

    def save_attempt(self, attempt: AttemptRecord) -> None:
        """Insert or replace the attempt keyed by (task_id, attempt)."""
        ...

    def attempts(self, task_id: str) -> list[AttemptRecord]:
        """Attempts ascending by number."""
        ...

    def clear_attempts(self, task_id: str) -> int:
        """Delete all attempts of a task (``reset``); returns how many were deleted."""
        ...

    def append_logs(self, task_id: str, lines: Sequence[LogRecord]) -> None: ...

    def trim_logs(self, task_id: str, max_bytes: int) -> int:
        """Keep the newest lines of the task that fit ``max_bytes`` (``log_size`` each:
        twice the text plus 100);
        the older ones are replaced by one marker line (stream ``dropped``, "… N lines
        dropped", N counting every line dropped so far) that sorts first. Returns the
        number of lines dropped by this call."""
        ...

    def logs(
        self, task_id: str, *, limit: int | None = None, since: datetime | None = None
    ) -> list[LogRecord]: ...

    def append_events(self, events: Sequence[EventRecord]) -> None:
        """Append events; one whose ``event_id`` is already stored is ignored."""
        ...

    def events(
        self,
        task_id: str | None = None,
        *,
        since: datetime | None = None,
        types: frozenset[str] | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]: ...

    # -------------------------------------------------- 3. side channel
    def touch(
        self,
        task_id: str,
        *,
        progress: Progress | None = None,
        heartbeat_at: datetime | None = None,
        lease_owner: str | None = None,
        lease_until: datetime | None = None,
        pid: int | None = None,
    ) -> None:
        """Update the given fields in place; never checks or bumps ``status_version``.
        A touch of an unknown (e.g. pruned) task is ignored. (A backend that derives
        from ``TaskStore`` gets this one: ``touch_many`` of one touch.)"""
        self.touch_many([Touch(task_id, progress, heartbeat_at, lease_owner, lease_until, pid)])

    def touch_many(self, touches: Sequence[Touch]) -> None:
        """Several touches in one transaction."""
        ...

    # ------------------------------------------------------- 4. commands
    def submit_command(self, command: Command) -> None:
        """Enqueue a command (state PENDING). Re-submitting an existing
        ``command_id`` is ignored, so a client may retry a submit safely."""
        ...

    def claim_commands(
        self,
        *,
        owner: str,
        now: datetime,
        lease_seconds: float,
        limit: int = 50,
        task_ids: frozenset[str] | None = None,
    ) -> list[Command]:
        """Atomically lease up to ``limit`` commands, oldest first: PENDING ones and
        CLAIMED ones whose lease ended (``lease_until <= now``). Two claimers never
        get the same command while its lease holds. ``task_ids`` restricts the claim
        to commands addressed to those tasks. Returned commands are CLAIMED with
        ``claimed_by=owner`` and ``lease_until=now+lease_seconds``."""
        ...

    def complete_command(
        self,
        command_id: str,
        *,
        now: datetime,
        outcome: Mapping[str, Any] | None = None,
        state: CommandState = CommandState.DONE,
    ) -> None:
        """Mark a command DONE or REJECTED with a JSON ``outcome``. Completing an
        already-completed command is ignored (the first completion wins); an unknown
        ``command_id`` raises ``StoreError``."""
        ...

    def get_command(self, command_id: str) -> Command | None: ...

    def commands(
        self, task_id: str | None = None, *, state: CommandState | None = None
    ) -> list[Command]:
        """Commands (optionally of one task / in one state), oldest first."""
        ...

    # --------------------------------------------------------- owners
    def upsert_owner(self, owner: OwnerRecord) -> None: ...

    def owners(self) -> list[OwnerRecord]:
        """All owners, ordered by ``owner_id``."""
        ...

    # -------------------------------------------------- pipeline runs
    def save_run(self, run: RunRecord) -> None:
        """Insert or replace a run keyed by ``run_id``."""
        ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(
        self, limit: int | None = None, *, status: Collection[str] | None = None
    ) -> list[RunRecord]:
        """Newest first by ``created_at``; ``status``: only the runs in one of these
        statuses (recovery reads the open ones of a store of many finished runs)."""
        ...

    # ------------------------------------------------------------ ops
    def prune(self, *, keep_terminal: int) -> int:
        """Delete terminal snapshots beyond the ``keep_terminal`` newest; returns how
        many were deleted. See the module docstring for exactly what is kept."""
        ...

    def purge(
        self,
        *,
        older_than: datetime,
        status: frozenset[TaskStatus] | None = None,
        keep: frozenset[str] = frozenset(),
        dry_run: bool = False,
    ) -> dict[str, int]:
        """Retention: delete the finished tasks (``status``: only these, all terminal;
        a live status is a StoreError) that ended (or, never started, were created)
        before ``older_than``, except those in ``keep``, with their transitions,
        attempts, events, log lines and commands, in one transaction. Returns the rows
        per table (tasks, transitions, attempts, events, logs, commands); ``dry_run``
        counts them and deletes nothing."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent. Using a closed store raises StoreError."""
        ...

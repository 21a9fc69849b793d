"""What the controller hands its recorder thread: store writes and events, in order.

The outbox (``TaskBook.outbox``) is a list of ``Outgoing`` items. Events are published
to subscribers and hooks (and the durable ones kept in the store's event table); the
store writes below are only for the store (``writes.write_batch``); the store markers
(``Unfence``, ``RetryHeld``) only for the store link's recorder side. A run note is
what a pipeline run follows its tasks by (``bus.RunNote``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import get_args

from chongming_nb.control.bus import RunNote
from chongming_nb.core.events import Event
from chongming_nb.core.models import AttemptRecord, Progress, TaskSnapshot, Transition
from chongming_nb.stores.protocol import EventRecord, LogRecord


@dataclass(slots=True)
class CreateTask:
    """A new task's first snapshot."""

    snap: TaskSnapshot


@dataclass(slots=True)
class SaveSnapshot:
    """An accepted transition: the snapshot it leads to, written only over ``expect``."""

    snap: TaskSnapshot
    expect: int
    transition: Transition


@dataclass(slots=True)
class SaveAttempt:
    """An attempt record, new or updated (the latest write of one attempt wins)."""

    record: AttemptRecord


@dataclass(slots=True)
class ClearAttempts:
    """``reset``: drop the attempts recorded so far (not those recorded after it)."""

    task_id: str


@dataclass(slots=True)
class KeepRecord:
    """An event-table record that is not a published event (the recorded call)."""

    record: EventRecord


@dataclass(slots=True)
class TouchProgress:
    """Live progress: the side channel that never bumps the status version."""

    task_id: str
    progress: Progress


@dataclass(slots=True)
class TouchHeartbeat:
    task_id: str
    at: datetime


@dataclass(slots=True)
class TouchLease:
    """A lease renewal: the task's lease ends at ``until``; ``owner`` None when the
    row already names this owner (the indexed column is not rewritten)."""

    task_id: str
    owner: str | None
    until: datetime


@dataclass(slots=True)
class AppendLog:
    task_id: str
    line: LogRecord


@dataclass(slots=True)
class TrimLogs:
    """Keep the newest ``keep`` bytes of a task's log in the store (after the lines
    written before it in the same batch); see ``TaskStore.trim_logs``."""

    task_id: str
    keep: int


#: A store write (never published).
StoreWrite = (
    CreateTask
    | SaveSnapshot
    | SaveAttempt
    | ClearAttempts
    | KeepRecord
    | TouchProgress
    | TouchHeartbeat
    | TouchLease
    | AppendLog
    | TrimLogs
)


@dataclass(frozen=True, slots=True)
class Unfence:
    """Outbox marker: memory adopted the store's state of ``task_id``; its writes
    queued after this marker are new and go to the store again."""

    task_id: str


@dataclass(frozen=True, slots=True)
class RetryHeld:
    """Outbox marker: try the writes held since the store refused them again (the
    dispatcher queues one a second while writes are held; ``flush`` queues one)."""


#: What the store link (``persistence.StoreLink``) queues for its own recorder side.
StoreMarker = Unfence | RetryHeld

#: One outbox item.
Outgoing = StoreWrite | StoreMarker | Event | RunNote

#: The classes of StoreWrite (the recorder tells writes from events by them).
STORE_WRITES: frozenset[type] = frozenset(get_args(StoreWrite))

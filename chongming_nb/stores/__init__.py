"""Durable stores behind one protocol (seed 001 §5.6): memory, SQLite, PostgreSQL."""

from chongming_nb.stores.protocol import (
    SCHEMA_VERSION,
    EventRecord,
    LogRecord,
    OwnerRecord,
    RunRecord,
    TaskQuery,
    TaskStore,
    Touch,
)

__all__ = [
    "SCHEMA_VERSION",
    "EventRecord",
    "LogRecord",
    "OwnerRecord",
    "RunRecord",
    "TaskQuery",
    "TaskStore",
    "Touch",
]

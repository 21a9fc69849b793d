"""Durable stores behind one protocol (seed 001 §5.6): memory, SQLite, PostgreSQL.

``open_store(target)`` picks the backend from a URL or path:

* ``"memory:"`` -> ``InMemoryStore``
* ``"sqlite:///abs/path.db"``, ``"sqlite:relative.db"`` or a plain path -> ``SqliteStore``
* ``"postgresql://..."`` / ``"postgres://..."`` or a libpq keyword string
  (``"host=db dbname=tasks password=..."``) -> ``PostgresStore`` (a ``schema=NAME``
  URL query parameter selects the PostgreSQL schema; default ``chongming``)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from chongming_nb.core._lazy import lazy_getattr
from chongming_nb.core.errors import StoreError
from chongming_nb.stores._target import parse_target
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
from chongming_nb.stores.sqlite import SqliteStore

if TYPE_CHECKING:
    from chongming_nb.stores.memory import InMemoryStore
    from chongming_nb.stores.postgres import PostgresStore

__all__ = [
    "SCHEMA_VERSION",
    "EventRecord",
    "InMemoryStore",
    "LogRecord",
    "OwnerRecord",
    "PostgresStore",
    "RunRecord",
    "SqliteStore",
    "TaskQuery",
    "TaskStore",
    "Touch",
    "default_store_path",
    "open_store",
]


# PostgresStore imports psycopg (an optional dependency); the chongming CLI reaching a
# SQLite file needs neither
__getattr__ = lazy_getattr(
    __name__,
    {
        "PostgresStore": "chongming_nb.stores.postgres",
        "InMemoryStore": "chongming_nb.stores.memory",
    },
)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def default_store_path() -> str:
    """``$CHONGMING_STORE`` if set, else ``<jupyter data dir>/chongming/tasks.db``."""
    env = os.environ.get("CHONGMING_STORE")
    if env:
        return env
    from jupyter_core.paths import jupyter_data_dir

    return os.path.join(jupyter_data_dir(), "chongming", "tasks.db")


def open_store(
    target: str | os.PathLike[str] | None = None, *, readonly: bool = False, create: bool = True
) -> TaskStore:
    """Open the store at ``target`` (see the module docstring); None means the default
    (``$CHONGMING_STORE`` or the Jupyter data dir).

    ``readonly=True`` opens it for reading only and creates nothing (a missing SQLite
    file or PostgreSQL schema is ``StoreError("no store at ...")``); ``create=False``
    opens an existing store for writing without creating one. Error messages never
    carry a password (see ``chongming_nb.stores._target.redact``)."""
    raw = default_store_path() if target is None else os.fspath(target)
    if not isinstance(raw, str) or not raw.strip():
        raise StoreError(f"store location must be a non-empty path or URL, got {target!r}")
    try:
        where = parse_target(raw)
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    if where.kind == "memory":
        from chongming_nb.stores.memory import InMemoryStore

        return InMemoryStore()
    if where.kind == "postgres":
        from chongming_nb.stores.postgres import PostgresStore

        return PostgresStore(where.location, readonly=readonly)
    return SqliteStore(where.location, readonly=readonly, create=create and not readonly)

"""What a finished task costs in a SQLite store, measured the way the docs report it.

``bytes_per_noop_task(n)``: ``n`` no-op tasks run by a ``Controller`` into a new
SQLite file; the file's growth over the empty store's, each after a WAL checkpoint and
a ``VACUUM`` (so free pages and the WAL are not counted), divided by ``n``.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

__all__ = ["bytes_per_noop_task", "vacuumed_size"]


def vacuumed_size(path: str | Path) -> int:
    """The size of the SQLite file at ``path`` after a checkpoint and a VACUUM."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return Path(path).stat().st_size


def _noop() -> None:
    return None


def bytes_per_noop_task(n: int, *, owner: str | None = None) -> tuple[float, int]:
    """(bytes of store per finished no-op task, the empty store's size), over ``n``
    tasks. ``owner``: the controller's owner id (default: this process's, which holds
    the host name: every task row keeps it)."""
    from chongming_nb.control.controller import Controller
    from chongming_nb.stores.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "size.db"
        SqliteStore(path).close()
        empty = vacuumed_size(path)
        ctl = Controller(store=SqliteStore(path), owner=owner)
        try:
            handles = [ctl.submit(_noop) for _ in range(n)]
            for h in handles:
                h.result(timeout=600)
        finally:
            ctl.close()
        return (vacuumed_size(path) - empty) / n, empty

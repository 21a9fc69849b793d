"""The finished rows an open-ended table (a board) keeps, and the counts of those it
does not show.

A controller keeps the newest ``HistoryLimits.memory_finished_tasks`` finished tasks in
memory (10,000 by default); older ones leave it. A board follows the same rule: it shows
every live task and the newest that many finished ones, and counts the older finished
ones per status, so its summary ("12,000 tasks: 12,000 succeeded") stays the count of
every task of the board while its kernel and browser memory stay bounded. A line says
how many are not shown and where they are (``ctl.snapshots_df()`` and the Tasks sidebar
read the store; without a store only their counts are kept).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from chongming_nb.core.errors import TaskEvicted, TaskNotFound
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.notebook.schema import STATUSES, TERMINAL_STATUSES

__all__ = [
    "STORED_HINT",
    "UNSTORED_HINT",
    "Older",
    "add_counts",
    "ctl_now",
    "departed_status",
    "hidden_text",
    "initial_snapshots",
    "kept_finished",
    "status_matches",
    "where_hint",
]

_TERMINAL = frozenset(TERMINAL_STATUSES)

#: Where a board's older finished tasks are, with a store and without.
STORED_HINT = "ctl.snapshots_df() and the Tasks sidebar list them"
UNSTORED_HINT = "counted only: without a store their rows are not kept"


def kept_finished(ctl: Any) -> int | None:
    """The finished rows a board of ``ctl`` shows at most: its
    ``history_limits.memory_finished_tasks`` (None: no limit, or not a controller)."""
    n = getattr(getattr(ctl, "history_limits", None), "memory_finished_tasks", None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def where_hint(ctl: Any) -> str:
    return STORED_HINT if getattr(ctl, "store", None) is not None else UNSTORED_HINT


def hidden_text(hidden: Mapping[str, int], where: str) -> str | None:
    """ "10,000 older finished tasks not shown — <where>", or None when none is hidden."""
    n = sum(hidden.values())
    if not n:
        return None
    return f"{n:,} older finished task{'s' if n != 1 else ''} not shown — {where}"


def add_counts(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Counts per status of both, in lifecycle order, zero counts left out."""
    return {s: n for s in STATUSES if (n := a.get(s, 0) + b.get(s, 0))}


def ctl_now(ctl: Any) -> datetime:
    """The controller's clock now (the system clock when it has none)."""
    now = getattr(getattr(ctl, "clock", None), "now", None)
    value = now() if callable(now) else None
    return value if isinstance(value, datetime) else datetime.now(UTC)


def departed_status(ctl: Any, task_id: str) -> str | None:
    """The status of a task that left ``ctl``'s memory (None: it did not, or unknown)."""
    try:
        ctl.get(task_id)
    except TaskEvicted as exc:
        return str(exc.status.value)
    except TaskNotFound:
        return None
    return None


def status_matches(status: str, query: Mapping[str, Any]) -> bool:
    """Does a row of this status belong to a table of ``query`` (its status filter)?"""
    wanted = _statuses(query.get("status"))
    return wanted is None or status in wanted


def _statuses(status: Any) -> list[str] | None:
    if status is None:
        return None
    values = [status] if isinstance(status, str) else list(status)
    return [str(getattr(s, "value", s)) for s in values]


def initial_snapshots(
    ctl: Any, query: Mapping[str, Any], keep: int
) -> tuple[list[TaskSnapshot], dict[str, int]]:
    """A board's first rows: every live task of ``query`` and the newest ``keep``
    finished ones (by creation; the store is read for no more), and the counts per
    status of the finished tasks of ``query`` not among them (``ctl.stats``, asked
    first: a task that ends meanwhile is never counted twice)."""
    wanted = _statuses(query.get("status"))
    filters = {k: v for k, v in query.items() if k not in ("status", "ids")}
    stats = getattr(ctl, "stats", None)
    counts: Mapping[str, int] = {}
    if callable(stats):
        counts = stats(**filters, **({} if wanted is None else {"status": wanted}))
    live = [s for s in STATUSES if s not in _TERMINAL and (wanted is None or s in wanted)]
    done = [s for s in TERMINAL_STATUSES if wanted is None or s in wanted]
    snaps: list[TaskSnapshot] = []
    if live:
        snaps.extend(ctl.list_tasks(**filters, status=live))
    if done and keep > 0:
        snaps.extend(ctl.list_tasks(**filters, status=done, limit=keep))
    shown: dict[str, int] = {}
    for snap in snaps:
        shown[snap.status.value] = shown.get(snap.status.value, 0) + 1
    hidden = {s: n for s in TERMINAL_STATUSES if (n := int(counts.get(s, 0)) - shown.get(s, 0)) > 0}
    return snaps, hidden


class Older:
    """The finished rows of a table in the order they finished, and the counts per
    status of the finished tasks it no longer shows. Not thread-safe: the table calls it
    under its lock."""

    __slots__ = ("finished", "hidden", "keep")

    def __init__(self, keep: int | None, hidden: Mapping[str, int] | None = None) -> None:
        #: finished rows shown at most (None: every row is kept)
        self.keep = keep
        self.finished: OrderedDict[str, None] = OrderedDict()
        self.hidden: dict[str, int] = dict(hidden or {})

    def start(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """The rows a table opened with (oldest finished first)."""
        done = [r for r in rows if r["status"] in _TERMINAL]
        done.sort(key=lambda r: r.get("ended") or 0)
        for r in done:
            self.finished[str(r["id"])] = None

    def seen(self, task_id: str, status: str) -> None:
        """A row has this status now."""
        if status in _TERMINAL:
            self.finished[task_id] = None
        else:
            self.finished.pop(task_id, None)

    def gone(self, task_id: str, status: str) -> bool:
        """A row's task is no longer found (it left memory without a store): a finished
        one is counted. True if the counts changed."""
        self.finished.pop(task_id, None)
        if status not in _TERMINAL:
            return False
        self.hidden[status] = self.hidden.get(status, 0) + 1
        return True

    def overflow(self, status_of: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """The rows past ``keep``, oldest finished first: counted, to be dropped."""
        keep = self.keep
        out: list[str] = []
        if keep is None:
            return out
        finished = self.finished
        hidden = self.hidden
        while len(finished) > keep:
            tid, _ = finished.popitem(last=False)
            row = status_of.get(tid)
            if row is None:
                continue
            status = str(row["status"])
            hidden[status] = hidden.get(status, 0) + 1
            out.append(tid)
        return out

"""Read access to a store without a controller: inspect the history of a dead kernel
from a new one, with the same queries and DataFrame exports as the Controller."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chongming_nb.control.queries import TaskLister
from chongming_nb.control.queries import status_set as _status_set
from chongming_nb.core.errors import ConfigurationError, TaskNotFound
from chongming_nb.core.models import AttemptRecord, TaskSnapshot, Transition
from chongming_nb.core.states import TaskStatus
from chongming_nb.pictures import Timeline, from_source
from chongming_nb.stores.protocol import LogRecord, TaskQuery, TaskStore

#: The filters of ``list_tasks`` (the frames take ``since`` and ``until`` too).
_FILTERS = frozenset({"status", "tag", "name_prefix", "pipeline_run_id", "limit", "ids"})


class StoreReader(TaskLister):
    """Wraps a TaskStore. Every store method is reachable as an attribute too."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def get(self, task_id: str) -> TaskSnapshot:
        snap = self.store.get(task_id)
        if snap is None:
            raise TaskNotFound(task_id)
        return snap

    def _matching(self, query: TaskQuery, ids: list[str] | None) -> list[TaskSnapshot]:
        """The store's snapshots, filtered like ``Controller.list_tasks``."""
        return list(self.store.query(query if ids is None else replace(query, ids=frozenset(ids))))

    def history(self, task_id: str) -> list[Transition]:
        return list(self.store.history(task_id))

    def attempts(self, task_id: str) -> list[AttemptRecord]:
        return list(self.store.attempts(task_id))

    def logs(self, task_id: str, limit: int | None = None) -> list[LogRecord]:
        return list(self.store.logs(task_id, limit=limit))

    def stats(self, **filters: Any) -> dict[str, int]:
        counts = dict.fromkeys((s.value for s in TaskStatus), 0)
        for s in self.list_tasks(**filters):
            counts[s.status.value] += 1
        return counts

    def _query(self, filters: dict[str, Any]) -> TaskQuery:
        """``list_tasks``' filters as a TaskQuery (a bad status names itself)."""
        unknown = set(filters) - _FILTERS
        if unknown:
            raise TypeError(
                f"unknown filter {sorted(unknown)[0]!r}; use one of {', '.join(sorted(_FILTERS))}"
            )
        limit = filters.get("limit")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ConfigurationError(f"limit must be an int >= 0, got {limit!r}")
        return TaskQuery(
            status=_status_set(filters.get("status")),
            tag=filters.get("tag"),
            name_prefix=filters.get("name_prefix"),
            pipeline_run_id=filters.get("pipeline_run_id"),
            limit=limit,
            ids=None if filters.get("ids") is None else frozenset(filters["ids"]),
        )

    def _frame(self, kind: str, filters: dict[str, Any]) -> Any:
        """A frame of ``kind`` in one query of a SQL store (``frame_columns``); other
        stores build it from their records."""
        from chongming_nb import frames

        since, until = filters.pop("since", None), filters.pop("until", None)
        q = self._query(filters)
        columns = getattr(self.store, "frame_columns", None)
        if columns is not None:
            return frames.frame_from_columns(kind, columns(kind, q, since=since, until=until))
        snaps = list(self.store.query(q))
        names = {s.task_id: s.name for s in snaps}
        if kind == "tasks":
            df, at = frames.snapshots_frame(snaps), "created_at"
        elif kind == "attempts":
            recs = [r for s in reversed(snaps) for r in self.store.attempts(s.task_id)]
            df, at = frames.attempts_frame(recs, names), "started_at"
        else:
            trs = [t for s in reversed(snaps) for t in self.store.history(s.task_id)]
            df, at = frames.transitions_frame(trs, names), "at"
        return frames.between(df, at, since, until)

    def snapshots_df(self, **filters: Any) -> Any:
        """One row per task, newest first; filters as ``list_tasks`` plus ``since`` /
        ``until`` on ``created_at`` (since <= created_at < until)."""
        return self._frame("tasks", filters)

    def attempts_df(self, **filters: Any) -> Any:
        """One row per attempt of the tasks matching the filters (``since`` / ``until``
        on ``started_at``), oldest task first."""
        return self._frame("attempts", filters)

    def transitions_df(self, **filters: Any) -> Any:
        """One row per status transition of the tasks matching the filters (``since``
        / ``until`` on ``at``), oldest task first."""
        return self._frame("transitions", filters)

    def events_df(self, **filters: Any) -> Any:
        """The status changes, as ``transitions_df`` (the name the Controller uses)."""
        return self._frame("transitions", filters)

    def timeline(self, **filters: Any) -> Timeline:
        """The attempt timeline of the tasks ``filters`` select (the DataFrame filters,
        plus ``since`` / ``until``): one lane per task, a slots strip underneath."""
        return from_source(
            self, title=f"attempts in {getattr(self.store, 'url', 'the store')}", **filters
        )

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<StoreReader {getattr(self.store, 'url', self.store)!r}>"


def open_store(url: str | None = None) -> StoreReader:
    """Open a store for reading (default: the kernel-wide default store)."""
    from chongming_nb.stores import default_store_path
    from chongming_nb.stores import open_store as _open

    return StoreReader(_open(url or default_store_path()))

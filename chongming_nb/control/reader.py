"""Read access to a store without a controller: inspect the history of a dead kernel
from a new one, with the same queries and DataFrame exports as the Controller."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chongming_nb.control.controller import _status_set
from chongming_nb.core.errors import TaskNotFound
from chongming_nb.core.models import AttemptRecord, TaskSnapshot, Transition
from chongming_nb.core.states import TaskStatus
from chongming_nb.pictures import Timeline, from_source
from chongming_nb.stores.protocol import LogRecord, TaskQuery


class StoreReader:
    """Wraps a TaskStore. Every store method is reachable as an attribute too."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def get(self, task_id: str) -> TaskSnapshot:
        snap = self.store.get(task_id)
        if snap is None:
            raise TaskNotFound(task_id)
        return snap

    def list_tasks(
        self,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        tag: str | None = None,
        name_prefix: str | None = None,
        pipeline_run_id: str | None = None,
        limit: int | None = None,
    ) -> list[TaskSnapshot]:
        """Snapshots from the store, newest first, filtered like ``Controller.list_tasks``."""
        statuses = _status_set(status)
        return list(
            self.store.query(
                TaskQuery(
                    status=statuses,
                    tag=tag,
                    name_prefix=name_prefix,
                    pipeline_run_id=pipeline_run_id,
                    limit=limit,
                )
            )
        )

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

    def snapshots_df(self, **filters: Any) -> Any:
        from chongming_nb.frames import snapshots_frame

        return snapshots_frame(self.list_tasks(**filters))

    def attempts_df(self, **filters: Any) -> Any:
        from chongming_nb.frames import attempts_frame

        snaps = self.list_tasks(**filters)
        recs = [r for s in reversed(snaps) for r in self.store.attempts(s.task_id)]
        return attempts_frame(recs, {s.task_id: s.name for s in snaps})

    def events_df(self, **filters: Any) -> Any:
        from chongming_nb.frames import transitions_frame

        snaps = self.list_tasks(**filters)
        trs = [t for s in reversed(snaps) for t in self.store.history(s.task_id)]
        return transitions_frame(trs, {s.task_id: s.name for s in snaps})

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

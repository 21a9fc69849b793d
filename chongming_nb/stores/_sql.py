"""SQL text shared by the SQLite and PostgreSQL backends (two small dialects)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chongming_nb.core.errors import ConcurrencyConflict, StoreError
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.stores.protocol import SaveItem, TaskQuery


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a backend spells placeholders, set membership, tags and prefixes."""

    name: str
    ph: str  # placeholder

    def in_list(self, column: str, values: list[Any]) -> tuple[str, list[Any]]:
        if self.name == "sqlite":
            return f"{column} IN (SELECT value FROM json_each({self.ph}))", [json.dumps(values)]
        return f"{column} = ANY({self.ph})", [values]

    def has_tag(self) -> str:
        if self.name == "sqlite":
            return f"EXISTS (SELECT 1 FROM json_each(tasks.tags) WHERE value = {self.ph})"
        return f"(tasks.tags::jsonb ? {self.ph})"

    def prefix(self) -> tuple[str, bool]:
        """SQL for ``name starts with prefix``; True if it takes (len, prefix)."""
        if self.name == "sqlite":
            return f"substr(name, 1, {self.ph}) = {self.ph}", True
        return f"left(name, {self.ph}) = {self.ph}", True


SQLITE = Dialect("sqlite", "?")
POSTGRES = Dialect("postgres", "%s")


def task_where(q: TaskQuery, d: Dialect) -> tuple[str, list[Any]]:
    """The WHERE clause (possibly empty) and its parameters for ``q``."""
    parts: list[str] = []
    params: list[Any] = []
    if q.status is not None:
        sql, p = d.in_list("status", sorted(s.value for s in q.status))
        parts.append(sql)
        params += p
    if q.tag is not None:
        parts.append(d.has_tag())
        params.append(q.tag)
    if q.name_prefix is not None:
        sql, _ = d.prefix()
        parts.append(sql)
        params += [len(q.name_prefix), q.name_prefix]
    if q.pipeline_run_id is not None:
        parts.append(f"pipeline_run_id = {d.ph}")
        params.append(q.pipeline_run_id)
    if q.owner is not None:
        parts.append(f"lease_owner = {d.ph}")
        params.append(q.owner)
    if q.buckets is not None:
        sql, p = d.in_list("bucket", sorted(q.buckets))
        parts.append(sql)
        params += p
    if q.ids is not None:
        sql, p = d.in_list("task_id", sorted(q.ids))
        parts.append(sql)
        params += p
    return ("WHERE " + " AND ".join(parts)) if parts else "", params


def task_order(order: str) -> str:
    """Newest (or oldest) first by created_at, ties by creation order, undated last."""
    direction = "DESC" if order == "newest" else "ASC"
    return f"ORDER BY (created_at IS NULL), created_at {direction}, seq {direction}"


def collapse(items: Sequence[SaveItem]) -> list[tuple[TaskSnapshot, int | None]]:
    """Group commit: several items for one task in a batch become one write of the last
    snapshot, expecting the first item's version (or a create). A chain whose links do
    not follow (item k expects another version than item k-1 wrote) is a conflict."""
    chains: dict[str, list[Any]] = {}
    for snap, expect in items:
        chain = chains.get(snap.task_id)
        if chain is None:
            chains[snap.task_id] = [snap, expect]
            continue
        staged: TaskSnapshot = chain[0]
        if expect is None or expect != staged.status_version:
            if expect is None:
                raise StoreError(f"task {snap.task_id} is created twice in one batch")
            raise ConcurrencyConflict(snap.task_id, expect, staged.status_version)
        chain[0] = snap
    return [(c[0], c[1]) for c in chains.values()]

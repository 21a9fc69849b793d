"""The task listing behind ``GET /chongming/api/tasks``: its query string checked, and
one keyset page read from the store.

Kept apart from the handlers (no tornado, no jupyter_server) so the benchmarks read a
page exactly as the server does. Every filter is a WHERE clause of the store
(``TaskQuery``): a filter over a million tasks reads one page of them, never all.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.core.states import TaskStatus
from chongming_nb.server.contract import LIST_MAX_ROWS
from chongming_nb.stores.protocol import MAX_TEXT, TaskQuery, TaskStore

DEFAULT_LIMIT = 500
MAX_LIMIT = LIST_MAX_ROWS
_STATUS_VALUES = tuple(s.value for s in TaskStatus)
#: A cursor ``store.page`` makes: ``SEQ:TIME`` (the time may be empty: an undated row).
_CURSOR = re.compile(r"^[0-9]{1,19}:[0-9A-Za-z:.+\- ]{0,40}$")


class BadQuery(ValueError):
    """A listing query the server refuses (answered 400 with the message)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """What one listing request asks for (after checking)."""

    statuses: frozenset[TaskStatus] | None = None
    name: str | None = None
    text: str | None = None
    limit: int = DEFAULT_LIMIT
    after: str | None = None
    #: the tasks of these controllers only (``lease_owner``): a notebook's or a kernel's
    owners: frozenset[str] | None = None

    def query(self) -> TaskQuery:
        return TaskQuery(
            status=self.statuses,
            name_prefix=self.name,
            text=self.text,
            owners=self.owners,
            limit=self.limit,
        )


@dataclass(frozen=True, slots=True)
class Page:
    """One page: its rows, the cursor of the next page (None after the last), the
    counts per status of every task the filter matches (None when unknown: see
    ``read_page``), and of the whole store."""

    tasks: list[TaskSnapshot]
    next: str | None
    counts: dict[TaskStatus, int] | None
    totals: dict[TaskStatus, int]


def parse_listing(args: Callable[[str], list[str]]) -> Listing:
    """A ``Listing`` from the query arguments (``args(name)``: every value given for
    ``name``); BadQuery names the first argument that is wrong and why."""
    statuses: set[TaskStatus] = set()
    for raw in args("status"):
        for part in raw.split(","):
            part = part.strip()
            if not part:
                continue
            if part not in _STATUS_VALUES:
                raise BadQuery(f"unknown status {part[:40]!r}; known: {', '.join(_STATUS_VALUES)}")
            statuses.add(TaskStatus(part))
    name = _last(args, "name")
    text = _last(args, "text")
    for key, value in (("name", name), ("text", text)):
        if value is not None and (len(value) > MAX_TEXT or not value.isprintable()):
            raise BadQuery(f"{key} must be printable text of at most {MAX_TEXT} characters")
    limit = DEFAULT_LIMIT
    raw_limit = _last(args, "limit")
    if raw_limit is not None:
        try:
            limit = int(raw_limit)
        except ValueError:
            raise BadQuery(f"limit must be an integer, got {raw_limit[:40]!r}") from None
        if not 0 <= limit <= MAX_LIMIT:
            raise BadQuery(f"limit must be between 0 and {MAX_LIMIT}, got {limit}")
    after = _last(args, "after")
    if after is not None and not _CURSOR.match(after):
        raise BadQuery(
            f"after: {after[:60]!r} is not a page cursor (pass the 'next' of the previous page)"
        )
    return Listing(frozenset(statuses) or None, name, text, limit, after)


def _last(args: Callable[[str], list[str]], name: str) -> str | None:
    values = args(name)
    return values[-1] if values and values[-1] != "" else None


def read_page(store: TaskStore, listing: Listing) -> Page:
    """One keyset page (its cost does not grow with the rows before it) and the counts.
    Without a name, text or owner the counts are the store's kept ones (a few rows).
    With one, no index counts the matches (a million tasks: seconds), so they are
    counted only when this page holds every match, and are None otherwise."""
    q = listing.query()
    try:
        snaps, following = store.page(q, after=listing.after)
    except StoreError:
        if listing.after is None:
            raise
        raise BadQuery(
            f"after: {listing.after[:60]!r} is not a page cursor of this store "
            "(pass the 'next' of the previous page)"
        ) from None
    totals = store.counts()
    if q.name_prefix is None and q.text is None and q.owners is None:
        wanted = q.status
        counts = {s: (n if wanted is None or s in wanted else 0) for s, n in totals.items()}
    elif listing.after is None and following is None:
        counts = dict.fromkeys(TaskStatus, 0)
        for snap in snaps:
            counts[snap.status] += 1
    else:
        counts = None
    return Page(snaps, following, counts, totals)

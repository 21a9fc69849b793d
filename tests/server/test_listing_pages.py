"""The REST list the Tasks sidebar pages through, on a generated store of 100,000 tasks:
keyset pages (``after=``), filters applied by the store, counts of the whole store and
of the filter, and 400s that name what was wrong. Counts and order only, no timings."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore, TaskQuery
from chongming_nb.testing.history import generate_history

S = TaskStatus
API = ("chongming", "api")
N = 100_000


def tid(i: int) -> str:
    return f"g{i:08x}"


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pages") / "tasks.db"
    store = SqliteStore(path)
    try:
        generate_history(store, N, sql=True)
    finally:
        store.close()
    return path


@pytest.fixture
def store_path(big_store: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server reads the generated store (every test here only reads it)."""
    monkeypatch.setenv("CHONGMING_STORE", str(big_store))
    return big_store


@pytest.fixture
def counts(big_store: Path) -> dict[str, int]:
    store = SqliteStore(big_store, readonly=True)
    try:
        return {k.value: v for k, v in store.counts().items()}
    finally:
        store.close()


async def listing(jp_fetch: Any, **params: str) -> Any:
    r = await jp_fetch(*API, "tasks", params=params)
    return json.loads(r.body)


async def test_pages_follow_each_other_and_count_the_whole_store(
    jp_fetch: Any, counts: dict[str, int], big_store: Path
) -> None:
    first = await listing(jp_fetch, limit="200")
    assert [r["id"] for r in first["tasks"]] == [tid(i) for i in range(N - 1, N - 201, -1)]
    assert first["next"] is not None
    assert first["totals"] == counts and first["counts"] == counts
    assert counts["succeeded"] == N - N // 10 and counts["failed"] == N // 10
    second = await listing(jp_fetch, limit="200", after=first["next"])
    assert [r["id"] for r in second["tasks"]] == [tid(i) for i in range(N - 201, N - 401, -1)]
    assert second["totals"] == counts
    # far down the history, the same: a page after the row the cursor names
    deep = await listing(jp_fetch, limit="3", after=cursor_of(big_store, tid(3)))
    assert [r["id"] for r in deep["tasks"]] == [tid(2), tid(1), tid(0)]
    assert deep["next"] is None


def cursor_of(path: Path, task_id: str) -> str:
    """The cursor a page ending at ``task_id`` returns (``SEQ:CREATED``)."""
    with sqlite3.connect(path) as db:
        seq, created = db.execute(
            "SELECT seq, created_at FROM tasks WHERE task_id = ?", (task_id,)
        ).fetchone()
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=created)
    return f"{seq}:{when.isoformat(timespec='microseconds')}"


async def test_a_status_filter_is_paged_by_the_store(
    jp_fetch: Any, counts: dict[str, int], big_store: Path
) -> None:
    first = await listing(jp_fetch, status="failed", limit="50")
    second = await listing(jp_fetch, status="failed", limit="50", after=first["next"])
    got = [r["id"] for r in first["tasks"] + second["tasks"]]
    store = SqliteStore(big_store, readonly=True)
    try:
        want = [s.task_id for s in store.query(TaskQuery(status=frozenset({S.FAILED}), limit=100))]
    finally:
        store.close()
    assert got == want and want[0] == tid(N - 1) and len(set(got)) == 100
    assert {r["status"] for r in first["tasks"] + second["tasks"]} == {"failed"}
    # the filter's counts are its own; the totals are the whole store's
    assert first["counts"] == {k: (v if k == "failed" else 0) for k, v in counts.items()}
    assert first["totals"] == counts


async def test_text_matches_name_or_id_in_any_case(jp_fetch: Any) -> None:
    # ids g00000000 .. g0000000f (hex) are the 16 oldest tasks: the page scans to the end
    by_id = await listing(jp_fetch, text="G0000000", limit="20")
    assert [r["id"] for r in by_id["tasks"]] == [tid(i) for i in range(15, -1, -1)]
    assert by_id["next"] is None and sum(by_id["counts"].values()) == 16
    by_name = await listing(jp_fetch, text="LOAD", status="failed", limit="5")
    # task i is named "load" when i % 3 == 2 and failed when i % 10 == 9
    want = [i for i in range(N - 1, -1, -1) if i % 3 == 2 and i % 10 == 9][:10]
    assert [r["id"] for r in by_name["tasks"]] == [tid(i) for i in want[:5]]
    # no index counts the matches of a text: unknown while they span more than a page
    assert by_name["counts"] is None and by_name["totals"]["failed"] == N // 10
    after = await listing(jp_fetch, text="LOAD", status="failed", limit="5", after=by_name["next"])
    assert [r["id"] for r in after["tasks"]] == [tid(i) for i in want[5:]]


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"after": "nope"}, "after: 'nope' is not a page cursor"),
        ({"after": "12:not-a-time"}, "is not a page cursor of this store"),
        ({"after": "1" * 30 + ":"}, "is not a page cursor"),
        ({"status": "failed,done"}, "unknown status 'done'; known: pending,"),
        ({"text": "x" * 201}, "text must be printable text of at most 200 characters"),
        ({"name": "a\tb"}, "name must be printable text"),
        ({"limit": "10001"}, "limit must be between 0 and 10000, got 10001"),
    ],
)
async def test_bad_listing_input_is_a_400_naming_it(
    jp_fetch: Any, params: dict[str, str], needle: str
) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*API, "tasks", params=params)
    assert info.value.code == 400 and info.value.response is not None
    assert needle in json.loads(info.value.response.body)["message"]

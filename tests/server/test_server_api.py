"""The REST API of the server extension against a real Jupyter server and SQLite store."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from helpers_server import Claimer, put_task, register_owner
from tornado.httpclient import HTTPClientError

from chongming_nb.core.models import AttemptRecord, CommandState, Progress
from chongming_nb.core.state_machine import CONTROL_VERBS, StateMachine
from chongming_nb.core.states import TaskStatus
from chongming_nb.notebook import schema as NS
from chongming_nb.runtime.clock import SYSTEM_CLOCK
from chongming_nb.server.serialize import attempt_row
from chongming_nb.server.state import ServerState
from chongming_nb.stores import SqliteStore
from chongming_nb.testing import FakeClock

S = TaskStatus
API = ("chongming", "api")


async def get_json(jp_fetch: Any, *path: str, **params: Any) -> Any:
    r = await jp_fetch(*API, *path, params=params or None)
    return json.loads(r.body)


async def fail(jp_fetch: Any, *path: str, method: str = "GET", body: Any = None, **params: Any):
    kwargs: dict[str, Any] = {"method": method, "params": params or None}
    if body is not None:
        kwargs["body"] = body
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*API, *path, **kwargs)
    err = info.value
    assert err.response is not None
    return err.code, json.loads(err.response.body)


@pytest.fixture
def two_kernels(kernel_store: SqliteStore) -> dict[str, str]:
    a = register_owner(kernel_store, "kernel-a", pid=11)
    b = register_owner(kernel_store, "kernel-b", pid=22)
    put_task(
        kernel_store,
        "t-run",
        S.RUNNING,
        name="extract <script>",
        owner=a,
        progress=Progress(done=30, total=120, unit="rows", message="chunk 3"),
    )
    put_task(kernel_store, "t-paused", S.PAUSED, name="clean", owner=a)
    put_task(kernel_store, "t-failed", S.FAILED, name="load", owner=b)
    put_task(kernel_store, "t-done", S.SUCCEEDED, name="report", owner=b)
    return {"a": a, "b": b}


async def test_lists_tasks_with_server_side_can_flags(jp_fetch, kernel_store, two_kernels):
    data = await get_json(jp_fetch, "tasks")
    rows = {r["id"]: r for r in data["tasks"]}
    assert set(rows) == {"t-run", "t-paused", "t-failed", "t-done"}
    sm = StateMachine(SYSTEM_CLOCK)
    for tid, row in rows.items():
        snap = kernel_store.get(tid)
        assert snap is not None
        expected = {v: sm.can(snap, v, force=(v == "retry"))[0] for v in CONTROL_VERBS}
        assert row["can"] == expected, tid
    assert rows["t-run"]["can"]["stop"] and not rows["t-run"]["can"]["resume"]
    assert rows["t-paused"]["can"]["resume"] and rows["t-failed"]["can"]["retry"]
    assert "resume" in rows["t-run"]["why"]
    run = rows["t-run"]
    assert run["name"] == "extract <script>"  # data, not markup: escaping is the client's job
    assert run["kernel_id"] == "kernel-a" and run["pid"] == 11 and run["host"] == "testhost"
    # the row the widget draws, plus the listing's own keys (one shape, generated for TS)
    assert list(run) == [*NS.ROW_FIELDS, *NS.LISTING_ROW_TYPES]
    assert run["done"] / run["total"] == pytest.approx(0.25)
    assert run["started"] is not None and run["ended"] is None
    assert rows["t-failed"]["failure"]["kind"] == "exception"
    assert data["counts"]["running"] == 1 and data["counts"]["failed"] == 1
    assert data["counts"]["succeeded"] == 1 and data["cursor"] >= 1


async def test_filters_status_kernel_name_and_limit(jp_fetch, two_kernels):
    data = await get_json(jp_fetch, "tasks", status="running,paused")
    assert {r["id"] for r in data["tasks"]} == {"t-run", "t-paused"}
    data = await get_json(jp_fetch, "tasks", kernel="kernel-b")
    assert {r["id"] for r in data["tasks"]} == {"t-failed", "t-done"}
    assert data["counts"]["failed"] == 1 and data["counts"]["running"] == 0
    data = await get_json(jp_fetch, "tasks", name="cle")
    assert [r["id"] for r in data["tasks"]] == ["t-paused"]
    data = await get_json(jp_fetch, "tasks", limit="2")
    assert len(data["tasks"]) == 2


async def test_listing_pages_by_cursor(jp_fetch, two_kernels):
    """``next`` names the following page: every task once, newest first, then null."""
    whole = [r["id"] for r in (await get_json(jp_fetch, "tasks"))["tasks"]]
    seen: list[str] = []
    params: dict[str, str] = {"limit": "3"}
    while True:
        data = await get_json(jp_fetch, "tasks", **params)
        seen += [r["id"] for r in data["tasks"]]
        assert data["counts"]["running"] == 1  # the counts are of the whole listing
        if data["next"] is None:
            break
        params["after"] = data["next"]
    assert seen == whole and len(whole) == 4
    code, body = await fail(jp_fetch, "tasks", after="12x:nope")
    assert code == 400 and "cursor" in body["message"]


async def test_a_notebooks_tasks_page_by_cursor_however_old(jp_fetch, kernel_store, monkeypatch):
    """The Tasks panel's notebook filter over a store whose newest tasks are another
    notebook's: ``notebook=`` / ``kernel=`` read one page of that kernel's controllers'
    tasks (a restarted kernel's too) with the cursor to the next; they read every task of
    the store and answered one page with no cursor."""
    a = register_owner(kernel_store, "kernel-a", pid=11)
    b = register_owner(kernel_store, "kernel-b", pid=22)
    b_again = register_owner(kernel_store, "kernel-b", pid=23)  # the same kernel, restarted
    base = datetime.now(UTC) - timedelta(hours=1)
    for i in range(12):
        owner = (b if i % 2 else b_again) if i < 5 else a
        clock = FakeClock(base + timedelta(seconds=i))
        put_task(kernel_store, f"t{i:02d}", S.SUCCEEDED, owner=owner, clock=clock)

    async def sessions(self: ServerState) -> dict[str, str]:
        return {"kernel-b": "etl.ipynb", "kernel-a": "report.ipynb"}

    monkeypatch.setattr(ServerState, "sessions", sessions)
    for params in ({"notebook": "etl.ipynb"}, {"kernel": "kernel-b"}):
        seen: list[str] = []
        query = {**params, "limit": "2"}
        first = await get_json(jp_fetch, "tasks", **query)
        assert first["next"] is not None and first["counts"] is None  # not counted: no index
        assert first["totals"]["succeeded"] == 12
        data = first
        while True:
            seen += [r["id"] for r in data["tasks"]]
            assert {r["notebook"] for r in data["tasks"]} <= {"etl.ipynb"}
            if data["next"] is None:
                break
            data = await get_json(jp_fetch, "tasks", **query, after=data["next"])
        assert seen == ["t04", "t03", "t02", "t01", "t00"], params
    whole = await get_json(jp_fetch, "tasks", notebook="etl.ipynb")
    assert whole["next"] is None and whole["counts"]["succeeded"] == 5  # one page: counted
    both = await get_json(jp_fetch, "tasks", notebook="etl.ipynb", kernel="kernel-a")
    assert both["tasks"] == []  # both must hold
    nowhere = await get_json(jp_fetch, "tasks", notebook="nowhere.ipynb")
    assert nowhere["tasks"] == [] and nowhere["next"] is None


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"status": "runing"}, "unknown status 'runing'"),
        ({"limit": "ten"}, "limit must be an integer"),
        ({"limit": "-1"}, "limit must be between"),
        ({"kernel": "a b"}, "not a valid id"),
    ],
)
async def test_bad_listing_queries_are_400(jp_fetch, two_kernels, params, needle):
    code, body = await fail(jp_fetch, "tasks", **params)
    assert code == 400 and needle in body["message"]


def test_api_times_have_one_width() -> None:
    """ISO-8601 UTC with microseconds, also on a whole second (``isoformat()`` cut the
    fraction there: a reader of a fixed format broke on one time in a million)."""
    whole = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
    row = attempt_row(
        AttemptRecord("t", 1, whole, ended_at=whole.astimezone(timezone(timedelta(hours=8))))
    )
    assert row["started_at"] == "2026-02-01T09:00:00.000000+00:00"
    assert row["ended_at"] == "2026-02-01T09:00:00.000000+00:00"  # (in UTC)


async def test_task_details(jp_fetch, two_kernels):
    data = await get_json(jp_fetch, "tasks", "t-failed")
    assert data["task"]["status"] == "failed"
    assert "ValueError: boom" in data["task"]["failure"]["traceback"]
    assert [a["attempt"] for a in data["attempts"]] == [1]
    assert [h["to_status"] for h in data["history"]] == ["queued", "starting", "running", "failed"]
    assert data["logs"][0]["line"] == "hello <i>log</i>"
    code, body = await fail(jp_fetch, "tasks", "nope")
    assert code == 404 and "unknown task 'nope'" in body["message"]


async def test_command_round_trip(jp_fetch, kernel_store, two_kernels):
    r = await jp_fetch(*API, "tasks", "t-run", "commands", method="POST", body='{"verb": "stop"}')
    assert r.code == 202
    sent = json.loads(r.body)
    assert sent["verb"] == "stop" and sent["state"] == "pending"
    queued = kernel_store.get_command(sent["command_id"])
    assert queued is not None and queued.verb == "stop" and queued.task_id == "t-run"
    assert queued.actor.startswith("sidebar:")
    # nothing changed yet: the server only queues
    assert kernel_store.get("t-run").status is S.RUNNING  # type: ignore[union-attr]
    info = await get_json(jp_fetch, "commands", sent["command_id"])
    assert info["state"] == "pending"

    claimer = Claimer(kernel_store, two_kernels["a"])
    assert claimer.step() == 1
    info = await get_json(jp_fetch, "commands", sent["command_id"])
    assert info["state"] == "done" and info["outcome"]["ok"] is True
    assert info["claimed_by"] == two_kernels["a"]
    row = (await get_json(jp_fetch, "tasks", "t-run"))["task"]
    assert row["status"] == "stopped" and row["can"]["retry"]
    # a stop is not a failure; the row says where it came from
    assert row["failure"] is None
    assert (row["ended_by"], row["end_reason"]) == ("sidebar", None)
    assert row["ended"] is not None


async def test_the_widgets_fallback_is_recorded_as_the_widgets_verb(
    jp_fetch, kernel_store, two_kernels
):
    body = '{"verb": "stop", "request_key": "wabc:1", "reason": "enough rows"}'
    r = await jp_fetch(*API, "tasks", "t-run", "commands", method="POST", body=body)
    sent = json.loads(r.body)
    queued = kernel_store.get_command(sent["command_id"])
    assert queued is not None and queued.actor.startswith("widget:")
    Claimer(kernel_store, two_kernels["a"]).step()
    row = (await get_json(jp_fetch, "tasks", "t-run"))["task"]
    assert row["status"] == "stopped" and row["ended_by"] == "widget"


async def test_retry_is_forced_for_a_person(jp_fetch, kernel_store, two_kernels):
    # t-failed used its only attempt: an automatic retry is exhausted, a click is not
    r = await jp_fetch(
        *API, "tasks", "t-failed", "commands", method="POST", body='{"verb":"retry"}'
    )
    cmd = kernel_store.get_command(json.loads(r.body)["command_id"])
    assert cmd is not None and cmd.args == {"force": True}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("{not json", "must be JSON"),
        ('["stop"]', "must be a JSON object"),
        ('{"verb": "rm -rf /"}', "unknown verb"),
        ('{"verb": "start"}', "unknown verb"),
        ('{"verb": 3}', "unknown verb"),
        ('{"verb": "stop", "code": "print(1)"}', "unknown field(s): code"),
        ('{"verb": "skip", "reason": 5}', "reason must be a string"),
    ],
)
async def test_bad_commands_are_400_and_queue_nothing(
    jp_fetch, kernel_store, two_kernels, body, needle
):
    code, reply = await fail(jp_fetch, "tasks", "t-run", "commands", method="POST", body=body)
    assert code == 400 and needle in reply["message"]
    assert kernel_store.commands() == []


async def test_illegal_or_unknown_targets(jp_fetch, kernel_store, two_kernels):
    code, reply = await fail(
        jp_fetch, "tasks", "t-run", "commands", method="POST", body='{"verb": "resume"}'
    )
    assert code == 409 and "cannot resume" in reply["message"]
    code, reply = await fail(
        jp_fetch, "tasks", "ghost", "commands", method="POST", body='{"verb": "stop"}'
    )
    assert code == 404
    code, reply = await fail(jp_fetch, "commands", "0123abcd")
    assert code == 404 and "unknown command" in reply["message"]
    assert kernel_store.commands() == []


async def test_feed_long_poll_reports_changes(jp_fetch, kernel_store, two_kernels):
    first = await get_json(jp_fetch, "feed", since="0", timeout="0")
    assert first["reset"] and len(first["tasks"]) == 4
    cursor = first["cursor"]
    quiet = await get_json(jp_fetch, "feed", since=str(cursor), timeout="0")
    assert not quiet["reset"] and quiet["tasks"] == []

    pending = asyncio.ensure_future(get_json(jp_fetch, "feed", since=str(cursor), timeout="10"))
    await asyncio.sleep(0)  # let the request reach the server before the change
    kernel_store.touch("t-run", progress=Progress(done=60, total=120, unit="rows"))
    changed = await asyncio.wait_for(pending, 10)
    assert [r["id"] for r in changed["tasks"]] == ["t-run"]
    assert changed["tasks"][0]["done"] == 60
    assert changed["cursor"] > cursor

    code, reply = await fail(jp_fetch, "feed", since="0", timeout="999")
    assert code == 400 and "timeout must be between" in reply["message"]


async def test_owners(jp_fetch, two_kernels):
    data = await get_json(jp_fetch, "owners")
    assert {o["kernel_id"] for o in data["owners"]} == {"kernel-a", "kernel-b"}


async def test_command_state_values_are_the_model_enum(jp_fetch, kernel_store, two_kernels):
    r = await jp_fetch(
        *API, "tasks", "t-paused", "commands", method="POST", body='{"verb":"resume"}'
    )
    state = json.loads(r.body)["state"]
    assert state in {s.value for s in CommandState}

"""The sidebar's pictures through the REST API, against a real Jupyter server and a
SQLite store a real controller wrote: ``GET tasks/{id}/timeline`` (a task's attempts as
timeline data) and ``GET runs/{id}/graph`` (a pipeline run's graph from the store).
Bad ids answer a clear 4xx and change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_server_api import fail, get_json

import chongming_nb as cn
from chongming_nb.stores import SqliteStore
from chongming_nb.stores.protocol import TaskQuery

DEADLINE = 60


@pytest.fixture
def retried_run(kernel_store: SqliteStore) -> Iterator[tuple[Any, dict[str, str]]]:
    """A finished run: extract -> flaky (fails once, then succeeds) -> report, and a
    branch whose condition is false."""
    ctl = cn.Controller(store=kernel_store, executor="thread")
    tries: list[int] = []

    def flaky(ctx: Any) -> int:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("the first attempt fails <b>")
        return 2

    pipe = cn.Pipeline("nightly <etl>")
    a = pipe.add(lambda ctx: 1, name="extract")
    b = pipe.add(
        flaky,
        deps=[a],
        name="flaky",
        retry=cn.RetryPolicy(max_attempts=3, backoff=cn.Exponential(base=0.05, jitter="none")),
    )
    pipe.add(lambda ctx: 0, deps=[a], when=lambda up: False, name="branch")
    pipe.add(lambda ctx: 3, deps=[b], name="report", join="all_done")
    run = pipe.submit(ctl)
    try:
        assert run.wait(DEADLINE).value == "succeeded"
        ctl.flush()
        ids = {name: run.handle(name).id for name in ("extract", "flaky", "branch", "report")}
        yield run, ids
    finally:
        ctl.close()


async def test_a_runs_graph_comes_from_the_store(jp_fetch: Any, retried_run: Any) -> None:
    run, ids = retried_run
    data = await get_json(jp_fetch, "runs", run.id, "graph")
    assert data["id"] == run.id and data["name"] == "nightly <etl>"  # data, escaped by the client
    assert data["status"] == "succeeded" and data["finished"] is True
    nodes = {n["name"]: n for n in data["nodes"]}
    assert list(nodes) == ["extract", "flaky", "branch", "report"]
    assert {k: n["deps"] for k, n in nodes.items()} == {
        "extract": [],
        "flaky": ["extract"],
        "branch": ["extract"],
        "report": ["flaky"],
    }
    assert {k: n["status"] for k, n in nodes.items()} == {
        "extract": "succeeded",
        "flaky": "succeeded",
        "branch": "skipped",
        "report": "succeeded",
    }
    assert {k: n["task"] for k, n in nodes.items()} == ids
    assert nodes["branch"]["condition"] is True and nodes["flaky"]["condition"] is False
    assert nodes["report"]["join"] == "all_done" and nodes["flaky"]["join"] == "all_succeeded"
    # the same shape the run table's graph draws
    assert set(nodes["flaky"]) == set(run.graph_spec()["nodes"][0])
    # the rows of the node tasks, with the server's can flags
    rows = {r["id"]: r for r in data["tasks"]}
    assert set(rows) == set(ids.values())
    assert rows[ids["flaky"]]["attempt"] == 2 and rows[ids["flaky"]]["run"] == run.id
    assert rows[ids["flaky"]]["can"]["retry"] in (True, False)


async def test_a_tasks_timeline_has_its_attempts_and_retry_wait(
    jp_fetch: Any, retried_run: Any, store_path: Path
) -> None:
    _, ids = retried_run
    data = await get_json(jp_fetch, "tasks", ids["flaky"], "timeline")
    assert data["lanes"] == ["flaky"] and data["lane_ids"] == [ids["flaky"]]
    assert data["bars"]["attempt"] == [1, 2]
    assert data["bars"]["tone"] == ["bad", "ok"]
    assert data["bars"]["running"] == [0, 0]
    assert "retry_wait" in data["marks"]["kind"]
    wait = data["marks"]["kind"].index("retry_wait")
    first_end, second_start = data["bars"]["end"][0], data["bars"]["start"][1]
    assert data["marks"]["start"][wait] == pytest.approx(first_end, abs=0.05)
    assert data["marks"]["end"][wait] <= second_start + 1e-6
    rows = [dict(zip(data["keys"], d, strict=True)) for d in data["details"]]
    assert rows[0]["outcome"] == "failed"
    assert rows[0]["failure_message"] == "RuntimeError: the first attempt fails <b>"
    assert rows[1]["outcome"] == "succeeded"
    # exactly the picture the DataFrames give (the store reader's timeline of that task)
    with cn.open_store(str(store_path)) as reader:
        expected = reader.timeline(ids=[ids["flaky"]]).to_json()
    assert {k: v for k, v in data.items() if k != "title"} == {
        k: v for k, v in expected.items() if k != "title"
    }
    assert data["title"] == "flaky"
    # a task that never ran: one lane's worth of nothing
    branch = await get_json(jp_fetch, "tasks", ids["branch"], "timeline")
    assert branch["bars"]["attempt"] == []


@pytest.mark.parametrize(
    ("path", "code", "message"),
    [
        (("tasks", "bad id!", "timeline"), 400, "task id 'bad id!' is not a valid id"),
        (("tasks", "nope", "timeline"), 404, "unknown task 'nope'"),
        (("runs", "bad id!", "graph"), 400, "run id 'bad id!' is not a valid id"),
        (("runs", "nope", "graph"), 404, "unknown pipeline run 'nope'"),
    ],
)
async def test_bad_ids_answer_a_clear_error_and_change_nothing(
    jp_fetch: Any,
    kernel_store: SqliteStore,
    retried_run: Any,
    path: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    before = [(s.task_id, s.status_version) for s in kernel_store.query(TaskQuery())]
    runs = kernel_store.list_runs()
    got, body = await fail(jp_fetch, *path)
    assert (got, body["message"]) == (code, message)
    assert [(s.task_id, s.status_version) for s in kernel_store.query(TaskQuery())] == before
    assert kernel_store.list_runs() == runs
    assert kernel_store.commands() == []

"""A pipeline run's graph read back from the store alone (``server.pictures.run_graph``),
on SQLite and PostgreSQL: the run's record keeps each node's dependency edges, join mode,
``when`` condition and compensation step; a map's item tasks are found among the run's
tasks; the statuses are the tasks' own. A record written before joins and conditions were
kept still draws (their defaults)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import chongming_nb as cn
from chongming_nb.server.pictures import run_graph
from chongming_nb.stores import SqliteStore, TaskStore
from chongming_nb.stores.protocol import RunRecord, TaskQuery

DEADLINE = 60


@pytest.fixture(params=["sqlite", "postgres"])
def store_pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """(the store a controller writes, another connection to the same data)."""
    if request.param == "sqlite":
        path = tmp_path / "tasks.db"
        writer: Any = SqliteStore(path)
        reader: Any = SqliteStore(path)
    else:
        from chongming_nb.stores.postgres import PostgresStore

        url: str = request.getfixturevalue("postgres_url")
        schema = f"rg_{uuid.uuid4().hex[:12]}"
        writer = PostgresStore(url, schema=schema)
        reader = PostgresStore(url, schema=schema)
    yield writer, reader
    reader.close()
    if request.param == "postgres":
        writer.drop_schema()
    writer.close()


def graph_of(store: TaskStore, run_id: str) -> dict[str, Any]:
    record = store.get_run(run_id)
    assert record is not None
    return run_graph(record, store.query(TaskQuery(pipeline_run_id=run_id)))


def test_a_runs_graph_from_the_store(store_pair: tuple[Any, Any]) -> None:
    writer, reader = store_pair
    ctl = cn.Controller(store=writer, executor="thread")
    try:
        pipe = cn.Pipeline("shapes")
        a = pipe.add(lambda ctx: [1, 2, 3], name="extract", compensate=lambda ctx, out: None)
        m = pipe.map(lambda ctx, x: x * 2, items=a, name="double")
        pipe.add(lambda ctx: 0, deps=[a], when=lambda up: False, name="branch")
        pipe.add(lambda ctx: 1, deps=[m, "branch"], join="all_done", name="report")
        run = pipe.submit(ctl)
        assert run.wait(DEADLINE).value == "succeeded"
        ctl.flush()
        data = graph_of(reader, run.id)
    finally:
        ctl.close()
    nodes = {n["name"]: n for n in data["nodes"]}
    assert {k: n["deps"] for k, n in nodes.items()} == {
        "extract": [],
        "double": ["extract"],
        "branch": ["extract"],
        "report": ["double", "branch"],
    }
    assert {k: n["join"] for k, n in nodes.items()} == {
        "extract": "all_succeeded",
        "double": "all_succeeded",
        "branch": "all_succeeded",
        "report": "all_done",
    }
    assert [k for k, n in nodes.items() if n["condition"]] == ["branch"]
    assert [k for k, n in nodes.items() if n["compensate"]] == ["extract"]
    assert {k: n["status"] for k, n in nodes.items()} == {
        "extract": "succeeded",
        "double": "succeeded",
        "branch": "skipped",
        "report": "succeeded",
    }
    # the map: one node standing for its fan-out, its items the run's tasks double[i]
    double = nodes["double"]
    assert double["is_map"] is True
    assert double["items"] == 3 and double["items_done"] == 3
    assert sorted(reader.get(t).name for t in double["children"]) == [
        "double[0]",
        "double[1]",
        "double[2]",
    ]
    # the same structure the run's own graph spec has
    spec = {n["name"]: n for n in run.graph_spec()["nodes"]}
    for name, n in nodes.items():
        for key in ("deps", "join", "condition", "compensate", "is_map", "task", "status"):
            assert n[key] == spec[name][key], (name, key)
        assert sorted(n["children"]) == sorted(spec[name]["children"]), name
    assert data["finished"] is True and data["status"] == "succeeded"


def test_a_record_written_before_joins_were_kept_still_draws(
    store_pair: tuple[Any, Any],
) -> None:
    writer, reader = store_pair
    now = datetime.now(UTC)
    writer.save_run(
        RunRecord(
            run_id="old-run",
            name="old",
            status="running",
            created_at=now,
            updated_at=now,
            spec={
                "nodes": [
                    {"name": "a", "deps": [], "map": False, "task_id": None, "status": None},
                    {"name": "b", "deps": ["a"], "map": False, "task_id": None, "status": None},
                ]
            },
        )
    )
    data = graph_of(reader, "old-run")
    assert [(n["name"], n["deps"], n["join"], n["condition"]) for n in data["nodes"]] == [
        ("a", [], "all_succeeded", False),
        ("b", ["a"], "all_succeeded", False),
    ]
    assert [n["status"] for n in data["nodes"]] == [None, None]
    assert data["finished"] is False

"""Fixtures for the Controller tests: a fake clock the controller's timers follow, and a
controller factory that releases every gate and closes every controller afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ctl_helpers import Rig
from fencing import StorePair

from chongming_nb import Controller
from chongming_nb.stores import InMemoryStore, SqliteStore
from chongming_nb.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rig(clock: FakeClock) -> Iterator[Rig]:
    r = Rig(clock)
    yield r
    r.close()


@pytest.fixture
def make_ctl(rig: Rig) -> Callable[..., Controller]:
    return rig.controller


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StorePair]:
    """(the controller's store, a reconciler's connection to the same data)."""
    if request.param == "memory":
        mem = InMemoryStore()
        yield mem, mem
        return
    if request.param == "sqlite":
        a, b = SqliteStore(tmp_path / "t.db"), SqliteStore(tmp_path / "t.db")
    else:
        from chongming_nb.stores.postgres import PostgresStore
        from tests.stores.conftest import drop_pg_schema

        url: str = request.getfixturevalue("postgres_url")
        schema = f"rec_{uuid.uuid4().hex[:12]}"
        request.addfinalizer(lambda: drop_pg_schema(url, schema))
        a, b = PostgresStore(url, schema=schema), PostgresStore(url, schema=schema)
    try:
        yield a, b
    finally:
        a.close()
        b.close()

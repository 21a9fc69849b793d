"""Fixtures for the hardening tests (the fault and bad-input probe's cases, one module per
concern): controllers that are closed afterwards, and each kind of store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chongming_nb import Controller, SqliteStore
from chongming_nb.stores import InMemoryStore


@pytest.fixture
def make_ctl() -> Iterator[Callable[..., Controller]]:
    made: list[Controller] = []

    def make(**kwargs: Any) -> Controller:
        ctl = Controller(**kwargs)
        made.append(ctl)
        return ctl

    yield make
    for ctl in made:
        ctl.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemoryStore()
        return
    if request.param == "sqlite":
        s = SqliteStore(tmp_path / "sweep.db")
        yield s
        s.close()
        return
    url: str = request.getfixturevalue("postgres_url")
    from chongming_nb.stores.postgres import PostgresStore

    schema = f"t_{uuid.uuid4().hex[:16]}"
    s = PostgresStore(url, schema=schema)
    yield s
    s.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

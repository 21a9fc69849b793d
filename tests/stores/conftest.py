"""Backends for the store tests: a factory per backend giving fresh, empty stores."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chongming_nb.stores import InMemoryStore, SqliteStore, TaskStore

BACKENDS = ("memory", "sqlite", "postgres")

StoreFactory = Callable[[], TaskStore]


def drop_pg_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_schemas(request: pytest.FixtureRequest) -> Iterator[list[tuple[str, str]]]:
    """Schemas created by a test; dropped afterwards."""
    made: list[tuple[str, str]] = []
    yield made
    for url, schema in made:
        drop_pg_schema(url, schema)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_factory(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> StoreFactory:
    """A factory of fresh stores of ``backend`` (each its own file or PG schema)."""
    if backend == "memory":
        return InMemoryStore
    if backend == "sqlite":
        counter = iter(range(10**6))
        return lambda: SqliteStore(tmp_path / f"store-{next(counter)}.db")
    url: str = request.getfixturevalue("postgres_url")
    made: list[tuple[str, str]] = request.getfixturevalue("pg_schemas")

    def make() -> TaskStore:
        from chongming_nb.stores.postgres import PostgresStore

        schema = f"t_{uuid.uuid4().hex[:16]}"
        made.append((url, schema))
        return PostgresStore(url, schema=schema)

    return make


@pytest.fixture
def store(store_factory: StoreFactory) -> Iterator[TaskStore]:
    s = store_factory()
    yield s
    s.close()

"""PostgreSQL specifics, against the real throwaway cluster (CHONGMING_TEST_POSTGRES)."""

from __future__ import annotations

import multiprocessing as mp
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import Command, TaskSnapshot
from chongming_nb.stores import open_store
from chongming_nb.stores.protocol import SCHEMA_VERSION

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_open_store_with_schema_parameter(postgres_url: str, schema: str) -> None:
    from chongming_nb.stores.postgres import PostgresStore

    sep = "&" if "?" in postgres_url else "?"
    store = open_store(f"{postgres_url}{sep}schema={schema}")
    assert isinstance(store, PostgresStore)
    assert store.schema == schema and store.schema_version == SCHEMA_VERSION
    password = postgres_url.split("://", 1)[1].split("@", 1)[0].partition(":")[2]
    if password:
        assert password not in store.url and password not in repr(store)
    store.create(TaskSnapshot(task_id="a", name="a", created_at=T0))
    store.close()
    again = open_store(f"{postgres_url}{sep}schema={schema}")
    assert again.get("a") is not None
    again.close()


def test_newer_schema_refused(postgres_url: str, schema: str) -> None:
    import psycopg

    from chongming_nb.stores.postgres import PostgresStore

    PostgresStore(postgres_url, schema=schema).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".chongming_schema SET version = %s', (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=rf"schema {schema}.*schema version {SCHEMA_VERSION + 1}"):
        PostgresStore(postgres_url, schema=schema)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute(f'SELECT version FROM "{schema}".chongming_schema').fetchone()
    assert row is not None and row[0] == SCHEMA_VERSION + 1


def test_a_version_1_schema_migrates(postgres_url: str, schema: str) -> None:
    """A schema made by version 1 (its tables and indexes) gets version 2's indexes and
    keeps its rows."""
    import psycopg

    from chongming_nb.stores import postgres as pg_mod

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        for stmt in pg_mod.MIGRATIONS[1]:
            conn.execute(stmt)
        conn.execute("INSERT INTO chongming_schema (version) VALUES (1)")
    store = pg_mod.PostgresStore(postgres_url, schema=schema)
    store.create(TaskSnapshot(task_id="a", name="a", created_at=T0))
    assert store.schema_version == SCHEMA_VERSION == 2
    store.close()

    def indexes(name: str) -> set[str]:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (name,)
            ).fetchall()
        return {r[0] for r in rows}

    fresh = f"{schema}_fresh"
    try:
        pg_mod.PostgresStore(postgres_url, schema=fresh).close()
        assert indexes(schema) == indexes(fresh) and "tasks_status_created" in indexes(schema)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{fresh}" CASCADE')


def test_foreign_schema_refused(postgres_url: str, schema: str) -> None:
    import psycopg

    from chongming_nb.stores.postgres import PostgresStore

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".invoices (id int)')
    with pytest.raises(StoreError, match=r"something else.*invoices"):
        PostgresStore(postgres_url, schema=schema)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    assert tables == [("invoices",)]


def test_bad_schema_name(postgres_url: str) -> None:
    from chongming_nb.stores.postgres import PostgresStore

    with pytest.raises(StoreError, match="schema name"):
        PostgresStore(postgres_url, schema='x"; DROP TABLE y; --')


def test_unreachable_server_names_url_without_password() -> None:
    from chongming_nb.stores.postgres import PostgresStore

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://u:sekrit@127.0.0.1:{port}/db"
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{port}/db") as info:
        PostgresStore(url, connect_timeout=2)
    assert "sekrit" not in str(info.value)


def _claimer(url: str, schema: str, owner: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from chongming_nb.stores.postgres import PostgresStore

    store = PostgresStore(url, schema=schema)
    got: list[str] = []
    while True:
        batch = store.claim_commands(owner=owner, now=T0, lease_seconds=600, limit=3)
        if not batch:
            break
        got += [c.command_id for c in batch]
    store.close()
    out.put((owner, got))


def test_claims_exclusive_across_processes(postgres_url: str, schema: str) -> None:
    from chongming_nb.stores.postgres import PostgresStore

    store = PostgresStore(postgres_url, schema=schema)
    for i in range(300):
        store.submit_command(Command(f"c{i:04d}", "t", "stop", created_at=T0))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_claimer, args=(postgres_url, schema, f"p{i}", out)) for i in range(3)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    claimed = [cid for _, ids in results for cid in ids]
    assert sorted(claimed) == [f"c{i:04d}" for i in range(300)]
    assert len(set(claimed)) == len(claimed)
    store.close()


def test_reconnects_after_connection_loss(postgres_url: str, schema: str) -> None:
    from chongming_nb.stores.postgres import PostgresStore

    store = PostgresStore(postgres_url, schema=schema)
    store.create(TaskSnapshot(task_id="a", name="a", created_at=T0))
    store._conn.close()  # simulate a dropped connection
    assert store.get("a") is not None
    store.close()

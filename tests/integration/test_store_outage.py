"""Persistence failures are loud and lose nothing (issue 20): a real database turned
read-only under a running controller. The first failure warns once, ``ctl.health()``
says "not saved: <reason>", writes are held in memory, and when the database takes
writes again they are written in order — the store then replays to memory's state;
``chongming verify`` finds no gap."""

from __future__ import annotations

import io
import uuid
import warnings
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

import chongming_nb as cn
from chongming_nb.cli.main import main as cli
from chongming_nb.control.persistence import PersistenceWarning, verify
from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import open_store


@pytest.fixture
def own_database(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A database of its own (it is made read-only: no other test may share it):
    (admin URL, URL of the new database)."""
    import psycopg

    name = f"ro_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(postgres_url)
    url = urlunsplit(parts._replace(path=f"/{name}"))
    try:
        yield postgres_url, url
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _set_read_only(admin: str, database: str, on: bool) -> None:
    """Make the database refuse writes (or take them again) and drop its sessions, so
    the controller's store reconnects into the new setting."""
    import psycopg

    name = urlsplit(database).path.lstrip("/")
    with psycopg.connect(admin, autocommit=True) as conn:
        if on:
            conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        else:
            conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )


def test_a_read_only_database_warns_once_holds_writes_and_catches_up(
    own_database: tuple[str, str],
) -> None:
    admin, url = own_database
    store = open_store(url)
    ctl = cn.Controller(store=store)
    try:
        first = ctl.submit(lambda ctx: 1, name="before")
        assert first.result(10) == 1
        ctl.flush()
        assert ctl.health()["saved"] is True and ctl.health()["not_saved"] is None

        _set_read_only(admin, url, True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hs = [ctl.submit(lambda ctx, i: i * 2, i, name="during") for i in range(13)]
            assert [h.result(10) for h in hs] == [i * 2 for i in range(13)]
            ctl.flush()
        # the tasks ran regardless; the failure is loud, once
        ours = [w for w in caught if issubclass(w.category, PersistenceWarning)]
        assert len(ours) == 1, [str(w.message) for w in caught]
        assert "not being saved" in str(ours[0].message)
        health = ctl.health()
        assert health["saved"] is False
        assert health["not_saved"].startswith("not saved: ")
        assert "read-only" in health["not_saved"] or "terminat" in health["not_saved"]
        assert health["held_writes"] > 0 and health["dropped_writes"] == 0, health
        # each task's row says so: the last line of its log
        for h in hs:
            assert ctl.logs(h.id)[-1].line.startswith("not saved: "), ctl.logs(h.id)
        reader = open_store(url, readonly=True)
        try:
            assert {s.name for s in reader.query()} == {"before"}, "nothing landed"
        finally:
            reader.close()

        _set_read_only(admin, url, False)
        last = ctl.submit(lambda ctx: "back", name="after")
        assert last.result(10) == "back"
        ctl.flush()
        health = ctl.health()
        assert health["saved"] is True and health["held_writes"] == 0
        assert health["outages"] == 1 and health["first_failure"] is not None
        for h in hs:
            assert ctl.logs(h.id)[-1].line.startswith("saved again"), ctl.logs(h.id)
        # everything held was written, in order: the store replays to memory's state
        for h in [first, *hs, last]:
            mem = ctl.get(h.id)
            disk = store.get(h.id)
            assert disk is not None and disk.status is TaskStatus.SUCCEEDED
            assert (disk.status, disk.status_version) == (mem.status, mem.status_version)
            ok, why = verify(store.history(h.id), disk)
            assert ok, why
    finally:
        ctl.close()
        store.close()
    out, err = io.StringIO(), io.StringIO()
    assert cli(["--store", url, "verify"], out=out, err=err) == 0, err.getvalue()
    assert out.getvalue().splitlines()[-1] == "15 tasks checked: 15 ok, 0 with gaps"

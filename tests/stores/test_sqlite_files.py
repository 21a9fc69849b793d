"""Store files are private to their user: the database, its -wal and -shm are 0600 and
directories the store creates are 0700, whatever the umask and whatever mode a file
had before (issue 20)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chongming_nb.core.errors import StoreError
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.stores import SqliteStore
from chongming_nb.stores.sqlite import StoreFileModeWarning

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def lax_umask() -> Iterator[None]:
    """umask 000: anything not chosen explicitly would come out world-writable."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _side_files(db: Path) -> list[Path]:
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


@pytest.mark.usefixtures("lax_umask")
def test_new_store_files_and_every_created_directory_are_private(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "c" / "tasks.db"
    store = SqliteStore(db)
    try:
        store.create(TaskSnapshot(task_id="t", name="n", created_at=T0))
        for f in _side_files(db):
            assert f.exists() and _mode(f) == 0o600, (f, oct(_mode(f)))
    finally:
        store.close()
    for d in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert _mode(d) == 0o700, (d, oct(_mode(d)))


@pytest.mark.usefixtures("lax_umask")
def test_a_looser_existing_file_is_tightened_with_a_warning(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    SqliteStore(db).close()
    # left behind world-readable (by hand, by a backup tool, by an old release)
    for f in _side_files(db):
        if not f.exists():
            f.touch()
        os.chmod(f, 0o644)
    with pytest.warns(StoreFileModeWarning, match="had mode 0644; tightened to 0600") as caught:
        store = SqliteStore(db)
    try:
        assert {str(w.message).split()[3] for w in caught} == {str(f) for f in _side_files(db)}
        store.create(TaskSnapshot(task_id="t", name="n", created_at=T0))
        for f in _side_files(db):
            assert _mode(f) == 0o600, (f, oct(_mode(f)))
    finally:
        store.close()


def test_a_read_only_open_tightens_too_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    SqliteStore(db).close()
    os.chmod(db, 0o664)
    with pytest.warns(StoreFileModeWarning):
        ro = SqliteStore(db, readonly=True)
    try:
        assert ro.query() == [] and _mode(db) == 0o600
    finally:
        ro.close()
    with pytest.raises(StoreError, match=r"^no store at "):
        SqliteStore(tmp_path / "new" / "x.db", readonly=True)
    with pytest.raises(StoreError, match=r"^no store at "):
        SqliteStore(tmp_path / "new" / "x.db", create=False)
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file as another user")
def test_a_loose_file_that_cannot_be_tightened_is_refused_for_writing() -> None:
    """A file of another user (mode 0666, so we could write it): chmod is not ours to do,
    so the store refuses to write there rather than keep task data readable by all."""
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="chongming-shared-"))  # /tmp: reachable by all
    try:
        os.chmod(shared, 0o777)
        db = shared / "tasks.db"
        SqliteStore(db).close()
        os.chmod(db, 0o666)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os.close(r)
            try:
                os.setuid(65534)  # nobody: not the file's owner
                SqliteStore(db)
                message = "opened"
            except BaseException as exc:
                message = f"{type(exc).__name__}: {exc}"
            os.write(w, message.encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            message = fh.read().decode()
        os.waitpid(pid, 0)
        assert message.startswith("StoreError: ") and message.endswith(
            "has mode 0666 (readable by other users) and cannot be made private; fix it "
            "with chmod 600: [Errno 1] Operation not permitted: " + repr(str(db))
        ), message
        assert _mode(db) == 0o666
    finally:
        shutil.rmtree(shared)


def test_a_foreign_database_keeps_its_mode(tmp_path: Path) -> None:
    """Refused as someone else's: nothing about it changes, its mode included."""
    import sqlite3
    import warnings

    path = tmp_path / "other.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE invoices (id INTEGER)")
    raw.commit()
    raw.close()
    os.chmod(path, 0o644)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreFileModeWarning)
        with pytest.raises(StoreError, match="something else"):
            SqliteStore(path)
    assert _mode(path) == 0o644

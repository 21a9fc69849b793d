"""Fixtures for the server-extension tests: a real Jupyter server (pytest-jupyter) with
chongming_nb.server enabled, on a SQLite store in the test's temp folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# pytest-jupyter's fixtures, imported here instead of a root-level pytest_plugins entry
from pytest_jupyter.jupyter_server import *  # noqa: F403

from chongming_nb.stores import SqliteStore


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "store" / "tasks.db"
    path.parent.mkdir()
    monkeypatch.setenv("CHONGMING_STORE", str(path))
    return path


@pytest.fixture
def jp_server_config(store_path: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"chongming_nb.server": True}}}


@pytest.fixture
def kernel_store(store_path: Path) -> Iterator[SqliteStore]:
    """The same SQLite file, opened separately: how a kernel's controller sees it."""
    store = SqliteStore(store_path)
    yield store
    store.close()

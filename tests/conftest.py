"""Fixtures shared by every test folder. Keep this file small: put a folder's own fixtures
in that folder's conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top folder (where pyproject.toml is)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """URL of the throwaway PostgreSQL database that scripts/test.sh starts.

    It comes from CHONGMING_TEST_POSTGRES. Under CI a missing URL is an error (the test
    command always sets it); in a bare local `pytest` run the test is skipped with the way
    to get one: ``./scripts/test.sh tests/...``, or ``scripts/pg_cluster.sh start DIR``.
    """
    url = os.environ.get("CHONGMING_TEST_POSTGRES", "")
    if url:
        return url
    message = (
        "CHONGMING_TEST_POSTGRES is not set: run ./scripts/test.sh, or export the URL "
        "printed by `scripts/pg_cluster.sh start DIR`"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the real-browser tests last.

    Playwright's sync API keeps an asyncio loop marked as running on the main thread
    for as long as the (session-scoped) browser lives; any later test that calls
    ``asyncio.run`` or drives a Jupyter server's loop would find it busy.
    """
    browser = [i for i in items if "tests/browser/" in i.nodeid or i.get_closest_marker("browser")]
    if browser:
        rest = [i for i in items if i not in set(browser)]
        items[:] = rest + browser

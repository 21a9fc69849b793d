"""Real JupyterLab in real Chromium (DESIGN §7), as pytest fixtures over the harness in
:mod:`chongming_nb.testing.lab` (the benchmarks use the same one).

Session fixtures:

* ``jupyter_lab`` -> :class:`~chongming_nb.testing.lab.LabServer`: a ``jupyter lab``
  server on 127.0.0.1 with a random token, its root in a temp dir, ``expose_app_in_browser``
  on (so tests can call ``window.jupyterapp.commands``), and ``CHONGMING_STORE`` pointing
  at a temp SQLite file (kernels never touch the user's store).
  ``lab.write_notebook(name, cells)`` writes a notebook with kernelspec metadata (no
  "Select Kernel" dialog); ``lab.url_for(path)``.
* ``browser``: Playwright Chromium at /usr/bin/chromium with DESIGN §7's flags.

Function fixtures:

* ``page``: a fresh browser context + page (1400x900), closed after the test.
* ``notebook``: a factory ``notebook(name, cells) -> Notebook`` that writes, opens and
  waits for an idle kernel (see :class:`~chongming_nb.testing.lab.Notebook`).

Chromium is installed by the test command (``apt-get install -y chromium``); if
``/usr/bin/chromium`` is missing the session fails with that instruction (no skip).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chongming_nb.testing.lab import LabServer, Notebook, UnavailableError, chromium, jupyter_lab

__all__ = ["LabServer", "Notebook"]


@pytest.fixture(scope="session", name="jupyter_lab")
def _jupyter_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    with jupyter_lab(tmp_path_factory.mktemp("lab")) as lab:
        yield lab


@pytest.fixture
def finished_tasks_cleared(jupyter_lab: LabServer) -> None:
    """The shared server's store without the finished tasks of earlier tests: a test that
    looks for its own rows in the Tasks sidebar's pages (200 newest a page, the list
    windowed) must not find them pushed past the first page by other tests' thousands."""
    from chongming_nb.stores import SqliteStore

    store = SqliteStore(jupyter_lab.store)
    try:
        store.prune(keep_terminal=0)
    finally:
        store.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        with chromium() as b:
            yield b
    except UnavailableError as exc:
        pytest.fail(f"{exc} (the test command installs it)")


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    p = context.new_page()
    p.set_default_timeout(60_000)
    try:
        yield p
    finally:
        context.close()


@pytest.fixture
def notebook(jupyter_lab: LabServer, page: Any) -> Iterator[Callable[[str, list[str]], Notebook]]:
    opened: list[Notebook] = []

    def make(name: str, cells: list[str]) -> Notebook:
        jupyter_lab.write_notebook(name, cells)
        nb = Notebook(jupyter_lab, page, name).open()
        opened.append(nb)
        return nb

    yield make
    for nb in opened:
        with contextlib.suppress(Exception):
            nb.shutdown()

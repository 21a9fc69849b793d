"""One 2-worker LocalCluster for every dask test in this folder (it takes seconds to
start on this 2-core machine, so it is started once)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="session")
def dask_executor(dask_client: Any) -> Iterator[Any]:
    from chongming_nb.runtime.executors.dask import DaskExecutor

    ex = DaskExecutor(dask_client)
    ex.start()
    try:
        yield ex
    finally:
        ex.shutdown()

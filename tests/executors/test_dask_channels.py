"""The dask executor's channels: control changes are pushed to the workers, with the
control Variable as the fallback an agent reads now and then; reports are read as they
arrive; shutdown ends the kernel-side threads."""

from __future__ import annotations

from typing import Any

import exec_targets as T
import pytest

from chongming_nb.runtime.executors.dask import DaskExecutor
from chongming_nb.testing.executor_contract import (
    RecordingReporter,
    make_request,
    poll_until,
    spin_quietly,
    spin_with_progress,
)

WAIT = 90.0


class _NoPushExecutor(DaskExecutor):
    """Control changes never pushed: agents only learn them from the Variable."""

    def _push_loop(self) -> None:
        return


@pytest.mark.parametrize("cls", [DaskExecutor, _NoPushExecutor], ids=["pushed", "refreshed"])
def test_pause_and_stop_reach_the_worker(cls: type[DaskExecutor], dask_client: Any) -> None:
    dask_client.wait_for_workers(2, timeout=WAIT)
    ex = cls(dask_client)
    try:
        rep = RecordingReporter()
        h = ex.launch(make_request(spin_with_progress), rep)
        assert rep.wait_for(lambda: rep.progress_calls > 0, WAIT)
        h.request_pause()
        assert rep.wait_for(lambda: rep.pause_calls == 1, WAIT)
        assert poll_until(lambda: h.token.paused, WAIT)
        pushed = dask_client.run(T.pushed_version, ex.exec_id)
        if cls is DaskExecutor:  # every worker was told, not only the one that runs it
            assert poll_until(
                lambda: all(
                    (v or 0) >= 1 for v in dask_client.run(T.pushed_version, ex.exec_id).values()
                ),
                WAIT,
            )
        else:
            assert set(pushed.values()) == {None}
        h.resume()
        assert rep.wait_for(lambda: rep.resumed_calls == 1, WAIT)
        h.request_stop("enough")
        out = rep.outcome(WAIT)
        assert out.kind == "cancelled" and "enough" in (out.message or "")
    finally:
        ex.shutdown()


def test_shutdown_ends_the_kernel_side_threads(dask_client: Any) -> None:
    ex = DaskExecutor(dask_client)
    rep = RecordingReporter()
    h = ex.launch(make_request(spin_quietly), rep)
    assert rep.wait_for(lambda: bool(rep.started_calls), WAIT)
    h.request_stop("done")
    assert rep.outcome(WAIT).kind == "cancelled"
    threads = [ex._thread, ex._reports_thread, ex._push_thread]
    ex.shutdown()
    assert all(t is not None and not t.is_alive() for t in threads)

"""Text that comes out of a task is saved, whatever it holds: a printed line, a ``ctx.log``
message, an exception message and a progress unit or message with lone surrogates (which
UTF-8 cannot hold, so a store's write of them failed and the batch was lost) reach every
store with the surrogates escaped (``\\udcff``), in memory and in the store alike."""

from __future__ import annotations

from typing import Any

from chongming_nb import Controller, TaskContext, TaskStatus

S = TaskStatus


def odd_text(ctx: TaskContext) -> str:
    print("printed \udcff line")
    ctx.log.warning("logged \ud800 message")
    ctx.progress(1, 2, unit="it\udcff", message="step \udcfe")
    raise ValueError("bad \udcff value")


def odd_result(ctx: TaskContext) -> str:
    return "result \udcff"


def test_lone_surrogates_from_a_task_are_escaped_and_saved(store: Any) -> None:
    ctl = Controller(store=store)
    try:
        h = ctl.submit(odd_text)
        ok = ctl.submit(odd_result)
        assert h.wait(30).status is S.FAILED
        assert ok.wait(30).status is S.SUCCEEDED
        assert ctl.flush(30)
        assert ctl.persist_failures == 0
        for snap in (ctl.get(h.id), store.get(h.id)):
            assert snap.failure is not None
            assert snap.failure.message == "ValueError: bad \\udcff value"
            assert snap.failure.traceback is not None
            assert snap.failure.traceback.endswith("ValueError: bad \\udcff value\n")
            assert snap.progress is not None
            assert (snap.progress.unit, snap.progress.message) == ("it\\udcff", "step \\udcfe")
        for lines in (h.logs(), store.logs(h.id)):
            assert [r.line for r in lines] == ["printed \\udcff line", "logged \\ud800 message"]
        (rec,) = store.attempts(h.id)
        assert rec.failure_message == "ValueError: bad \\udcff value"
        assert store.get(ok.id).outcome == ctl.get(ok.id).outcome
        described = {"type": "builtins.str", "len": 8, "value": "result \\udcff"}
        assert ctl.get(ok.id).outcome == described
        assert ok.result() == "result \udcff"  # the value itself is the task's own
    finally:
        ctl.close()

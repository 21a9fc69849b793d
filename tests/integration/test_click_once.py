"""One click, two routes (widget comm and server/store), applied once."""

from __future__ import annotations

import threading

import chongming_nb as cn


def test_same_request_key_is_applied_once() -> None:
    ctl = cn.Controller()
    gate = threading.Event()
    try:
        started = threading.Event()

        def loop(ctx):
            started.set()
            while not gate.is_set():
                ctx.checkpoint()
                gate.wait(0.001)

        h = ctl.submit(loop)
        assert started.wait(5)
        ok1, why1 = ctl.apply(h.id, "pause", actor="widget", args={"request_key": "w1:7"})
        ok2, why2 = ctl.apply(h.id, "pause", actor="store", args={"request_key": "w1:7"})
        assert ok1 and why1 is None
        assert ok2 and why2 == "already applied"
        pauses = [t for t in ctl.history(h.id) if t.trigger == "user:pause"]
        assert len(pauses) == 1
        # a refused click does not burn its key: the same click applies once it is legal
        early, _ = ctl.apply(h.id, "resume", actor="widget", args={"request_key": "w1:8"})
        if not early:  # still PAUSING: resume binds to the state machine's can(), like the UI
            assert h.pause(wait=True).status is cn.TaskStatus.PAUSED
        ok3, _ = ctl.apply(h.id, "resume", actor="widget", args={"request_key": "w1:8"})
        assert ok3
        gate.set()
        h.wait(5)
        ok4, why4 = ctl.apply(h.id, "pause", args={"request_key": "w1:9"})
        assert not ok4 and "pause" in (why4 or "")
        bad, why5 = ctl.apply(h.id, "stop", args={"request_key": 5})
        assert not bad and "request_key" in (why5 or "")
        bad, why6 = ctl.apply(h.id, "stop", args={"code": "print(1)"})
        assert not bad and "unknown option" in (why6 or "")
    finally:
        gate.set()
        ctl.close()

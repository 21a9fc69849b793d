"""ctx.sleep without a controller behind it (the process and dask executors' case): it
waits on the token, so a stop ends it at once and a pause pauses it; it counts as alive
for idle detection; the token's sleep cannot lose a wake."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from test_runtime_units import Recorder, make_ctx, until

from chongming_nb import CancellationToken, ConfigurationError, TaskCancelled
from chongming_nb.runtime.heartbeat import Heartbeat


def _sleep_in_thread(ctx: Any, seconds: float) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            ctx.sleep(seconds)
            out["returned"] = True
        except BaseException as exc:
            out["raised"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, out


def test_stop_ends_an_hour_of_sleep_at_once() -> None:
    tok = CancellationToken()
    t, out = _sleep_in_thread(make_ctx(tok), 3600)
    until(lambda: tok.sleeping)
    tok.request_stop("enough")
    t.join(5)
    assert not t.is_alive()
    assert isinstance(out["raised"], TaskCancelled) and "enough" in str(out["raised"])


def test_pause_during_a_sleep_pauses_the_task_and_stop_still_ends_it() -> None:
    tok = CancellationToken()
    t, out = _sleep_in_thread(make_ctx(tok), 3600)
    until(lambda: tok.sleeping)
    tok.request_pause()
    until(lambda: tok.paused)  # the sleep returned and the checkpoint blocks in the pause
    assert not tok.sleeping
    tok.request_stop()
    t.join(5)
    assert isinstance(out["raised"], TaskCancelled)


def test_a_sleeping_task_is_alive_for_the_idle_check() -> None:
    tok = CancellationToken()
    hb = Heartbeat(tok, now=0.0)
    t, _out = _sleep_in_thread(make_ctx(tok), 3600)
    until(lambda: tok.sleeping)
    hb.sample(now=50.0)  # takes in the beat of the checkpoint before the sleep
    assert hb.sample(now=100.0)  # no checkpoint since, yet it counts as a sign of life
    assert hb.last_beat == 100.0
    tok.request_stop()
    t.join(5)


def test_zero_seconds_returns_and_bad_values_are_refused() -> None:
    ctx = make_ctx(rep=Recorder())
    ctx.sleep(0)
    for bad in (-1, "5", True, None, float("inf")):
        with pytest.raises(ConfigurationError, match=r"ctx\.sleep seconds must be a"):
            ctx.sleep(bad)  # type: ignore[arg-type]


def test_a_wake_before_the_sleep_is_not_lost() -> None:
    tok = CancellationToken()
    tok.wake()
    assert tok.sleep(None) is False  # returns at once: woken, not stopped or paused
    # the wake was used up: the next sleep waits for a wake of its own
    done = threading.Event()
    t = threading.Thread(target=lambda: (tok.sleep(None), done.set()), daemon=True)
    t.start()
    until(lambda: tok.sleeping)
    assert not done.is_set()
    tok.wake()
    assert done.wait(5)

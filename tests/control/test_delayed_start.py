"""Delayed and scheduled starts: ``delay=`` / ``not_before=`` on submit, ``@task`` and
``Pipeline.add``. The task waits BLOCKED ("waiting until ..."), holding no slot, with its
start time in the snapshot (and the store); it can be cancelled, skipped or started now;
after its kernel died it is cancelled and reported, never run by someone else."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from ctl_helpers import DEADLINE, S, wait_status

import chongming_nb as cn
from chongming_nb import ConcurrencyPolicy, ConfigurationError, Controller
from chongming_nb.control import kernel
from chongming_nb.core.models import FailureKind
from chongming_nb.notebook.rows import build_row, render_plain, starts_text
from chongming_nb.stores import SqliteStore
from chongming_nb.testing import FakeClock


def _waiting_reason(ctl: Controller, tid: str) -> str | None:
    blocked = [e for e in ctl.events(tid) if getattr(e, "to_status", None) is S.BLOCKED]
    return blocked[-1].reason if blocked else None


def test_delay_waits_on_the_fake_clock_without_a_slot(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl(concurrency=ConcurrencyPolicy(max_parallel=1))
    h = ctl.submit(lambda: "late", delay=120)
    snap = ctl.get(h.id)
    assert snap.status is S.BLOCKED
    assert snap.retry_at == clock.now() + timedelta(seconds=120)
    assert _waiting_reason(ctl, h.id) == f"waiting until {snap.retry_at}"
    other = ctl.submit(lambda: "now")  # the only slot is free meanwhile
    assert other.result(timeout=DEADLINE) == "now"
    clock.advance(119)
    assert ctl.get(h.id).status is S.BLOCKED
    clock.advance(1)
    assert h.result(timeout=DEADLINE) == "late"
    assert ctl.get(h.id).retry_at is None  # queued: nothing to wait for any more


def test_not_before_a_datetime_and_a_time_already_passed(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl()
    at = clock.now() + timedelta(minutes=5)
    h = ctl.submit(lambda: "at five past", not_before=at)
    assert ctl.get(h.id).retry_at == at
    past = ctl.submit(lambda: "at once", not_before=clock.now() - timedelta(hours=1))
    assert past.result(timeout=DEADLINE) == "at once"
    clock.advance(300)
    assert h.result(timeout=DEADLINE) == "at five past"


def test_a_real_clock_delay_starts_no_earlier_than_asked() -> None:
    ctl = cn.Controller()
    try:
        h = ctl.submit(lambda: "ok", delay=0.3)
        assert h.result(timeout=DEADLINE) == "ok"
        snap = ctl.get(h.id)
        assert snap.started_at is not None and snap.created_at is not None
        assert snap.started_at - snap.created_at >= timedelta(seconds=0.3)
    finally:
        ctl.close()


def test_a_waiting_task_can_be_cancelled_skipped_or_started_now(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl()
    c = ctl.submit(lambda: "never", delay=600)
    k = ctl.submit(lambda: "never", delay=600)
    n = ctl.submit(lambda: "now", delay=600)
    for h in (c, k, n):
        assert ctl.can(h.id, "cancel")[0] and ctl.can(h.id, "skip")[0]
        assert ctl.can(h.id, "start")[0]
    ctl.cancel(c.id, "not needed")
    ctl.skip(k.id, "later")
    ctl.start(n.id)
    assert n.result(timeout=DEADLINE) == "now"  # no clock advance
    assert ctl.get(c.id).status is S.CANCELLED and ctl.get(k.id).status is S.SKIPPED
    clock.advance(600)  # their timers fire into terminal tasks: nothing happens
    assert ctl.get(c.id).status is S.CANCELLED and ctl.get(k.id).status is S.SKIPPED


def test_task_decorator_and_submit_delays(
    make_ctl: Callable[..., Controller], clock: FakeClock
) -> None:
    ctl = make_ctl()

    @cn.task(delay=60)
    def nightly() -> str:
        return "ran"

    a = ctl.submit(nightly)
    b = ctl.submit(nightly, delay=5)  # the call's own timing wins
    c = ctl.submit(nightly, not_before=clock.now() + timedelta(seconds=30))
    clock.advance(5)
    assert b.result(timeout=DEADLINE) == "ran"
    assert ctl.get(a.id).status is S.BLOCKED and ctl.get(c.id).status is S.BLOCKED
    clock.advance(25)
    assert c.result(timeout=DEADLINE) == "ran"
    clock.advance(30)
    assert a.result(timeout=DEADLINE) == "ran"


def test_a_delay_after_dependencies(make_ctl: Callable[..., Controller], clock: FakeClock) -> None:
    ctl = make_ctl()
    up = ctl.submit(lambda: 1)
    down = ctl.submit(lambda: 2, after=[up], delay=60)
    assert up.result(timeout=DEADLINE) == 1
    wait_status(ctl, down, S.BLOCKED)
    assert ctl.get(down.id).retry_at is not None
    clock.advance(60)
    assert down.result(timeout=DEADLINE) == 2


def test_pipeline_add_delay(make_ctl: Callable[..., Controller], clock: FakeClock) -> None:
    ctl = make_ctl()
    p = cn.Pipeline("later")
    a = p.add(lambda: "a", name="a", delay=90)
    p.add(lambda: "b", name="b", deps=[a])
    run = p.submit(ctl)
    assert run.handle("a").status is S.BLOCKED
    clock.advance(90)
    assert run.wait(DEADLINE) is cn.PipelineRunStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delay": 1, "not_before": datetime.now(UTC)}, "delay= or not_before=, not both"),
        ({"delay": -1}, "delay must be a finite number of seconds"),
        ({"delay": "soon"}, "delay must be a number of seconds"),
        ({"not_before": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"not_before": "tomorrow"}, "timezone-aware"),
    ],
)
def test_bad_start_times_are_refused_and_create_nothing(
    make_ctl: Callable[..., Controller], kwargs: dict[str, object], match: str
) -> None:
    ctl = make_ctl()
    with pytest.raises(ConfigurationError, match=match):
        ctl.submit(lambda: None, **kwargs)
    with pytest.raises(ConfigurationError, match=match):
        cn.task(**kwargs)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match=match):
        cn.Pipeline("p").add(lambda: None, **kwargs)  # type: ignore[arg-type]
    assert ctl.list_tasks() == []


def test_the_start_time_is_stored_and_shown_on_the_row(tmp_path: Path, clock: FakeClock) -> None:
    ctl = cn.Controller(store=str(tmp_path / "t.db"), clock=clock)
    try:
        h = ctl.submit(lambda: None, name="report", delay=180)
        ctl.flush()
        store = SqliteStore(tmp_path / "t.db")
        try:
            stored = store.get(h.id)
        finally:
            store.close()
        assert stored is not None and stored.status is S.BLOCKED
        assert stored.retry_at == clock.now() + timedelta(minutes=3)
        row = build_row(ctl.get(h.id), ctl.can_all(h.id))
        assert starts_text(row, now_ms=clock.now().timestamp() * 1000) == (
            "starts at 00:03 UTC (in 3m)"
        )
        assert "starts at 00:03 UTC (in 3m)" in render_plain([row], title=None, at=clock.now())
    finally:
        ctl.close()


CHILD = textwrap.dedent(
    """
    import sys
    import chongming_nb as cn
    from chongming_nb.control.ownership import this_process
    # a kernel's controller names its kernel in its owner id; a script's names none
    kernel = sys.argv[2] or None
    ctl = cn.Controller(store=sys.argv[1], owner=str(this_process(kernel)))
    h = ctl.submit(print, "tomorrow", name="morning-report", delay=3600)
    ctl.flush()
    print(h.id, flush=True)
    """
)


@pytest.mark.parametrize(
    ("kernel_of_owner", "owner_said"),
    [("", "a controller that is gone"), ("4f1c-kernel", "a kernel that is gone")],
)
def test_a_gone_owners_scheduled_task_is_reported_not_run(
    tmp_path: Path, kernel_of_owner: str, owner_said: str
) -> None:
    db = tmp_path / "t.db"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), kernel_of_owner],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    tid = out.stdout.strip().splitlines()[-1]
    kernel._reset_for_tests()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ctl = kernel.get_controller(store=str(db))
        said = [str(w.message) for w in caught if "scheduled task" in str(w.message)]
        assert len(said) == 1, [str(w.message) for w in caught]
        assert "morning-report" in said[0] and "was scheduled for" in said[0]
        assert f"1 scheduled task(s) of {owner_said} were not run" in said[0]
        assert "Resubmit them" in said[0]
        snap = ctl.store.get(tid)
        assert snap is not None and snap.status is S.CANCELLED  # never run
        assert snap.failure is not None and snap.failure.kind is FailureKind.CANCELLED
        assert "resubmit?" in snap.failure.message
    finally:
        kernel._reset_for_tests()

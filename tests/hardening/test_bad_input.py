"""Every value is checked at the door: a bad one is a ConfigurationError naming the
argument and the value, and nothing is created (no task in memory, none in the store,
no orphan in ``starting``); a good one round-trips exactly through the stores.

The probe's cases first (each failed before the validation room), then a Hypothesis
sweep over every submit option, through memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chongming_nb import (
    ConcurrencyPolicy,
    ConfigurationError,
    Controller,
    Exponential,
    Pipeline,
    RetryPolicy,
    SqliteStore,
    TaskContext,
    Timeout,
    task,
)

BAD_SUBMIT_OPTIONS = [
    ("timeout", 1e300),
    ("timeout", math.nan),
    ("timeout", 10**400),
    ("priority", 10**30),
    ("priority", -(10**30)),
    ("retry", 10**19),
    ("name", "bad\udcff"),
    ("tags", {"ok", "bad\udcff"}),
    ("idempotency_key", "key\ud800"),
    ("bucket_key", "\udfff"),
]


def noop(ctx: TaskContext) -> int:
    return 1


@pytest.mark.parametrize(("option", "value"), BAD_SUBMIT_OPTIONS)
def test_a_bad_submit_option_is_refused_and_nothing_is_created(
    make_ctl: Callable[..., Controller], tmp_path: Path, option: str, value: Any
) -> None:
    store = SqliteStore(tmp_path / "s.db")
    ctl = make_ctl(store=store)
    with pytest.raises(ConfigurationError) as info:
        ctl.submit(noop, **{option: value})
    assert option in str(info.value) or option.rstrip("s") in str(info.value)
    assert ctl.list_tasks() == []
    ctl.flush()
    assert store.query() == []
    assert ctl.persist_failures == 0
    # and the controller is fine: the next task runs and is stored
    h = ctl.submit(noop)
    assert h.result(timeout=10) == 1
    ctl.flush()
    assert [s.task_id for s in store.query()] == [h.id]


@pytest.mark.parametrize(
    ("option", "value"),
    [(o, v) for o, v in BAD_SUBMIT_OPTIONS if o not in ("idempotency_key", "bucket_key")],
)
def test_task_decorator_and_pipeline_add_refuse_the_same_values(option: str, value: Any) -> None:
    with pytest.raises(ConfigurationError):
        task(**{option: value})
    pipe = Pipeline("p")
    with pytest.raises(ConfigurationError):
        pipe.add(noop, **{option: value})
    assert pipe.nodes == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: Timeout(idle=1e300),
        lambda: Timeout(start=math.inf),
        lambda: RetryPolicy(max_attempts=2**63),
        lambda: RetryPolicy(backoff=Exponential(max=1e300)),
        lambda: ConcurrencyPolicy(max_parallel=10**19),
        lambda: ConcurrencyPolicy(default_priority=2**63),
        lambda: ConcurrencyPolicy(per_bucket=2**64),
        lambda: ConcurrencyPolicy(limits={"db": 10**20}),
        lambda: Pipeline("bad\udcff"),
        lambda: Controller(stop_grace=math.nan),
        lambda: Controller(pause_grace=-1),
    ],
)
def test_policies_and_constructors_refuse_what_cannot_be_stored_or_scheduled(
    make: Callable[[], Any],
) -> None:
    with pytest.raises(ConfigurationError):
        make()


@pytest.mark.parametrize("setting", ["stop_grace", "pause_grace"])
@pytest.mark.parametrize("value", [math.nan, -1, None, "10", math.inf])
def test_a_grace_set_later_is_checked_as_the_constructor_checks_it(
    setting: str, value: object
) -> None:
    ctl = Controller(stop_grace=1.5, pause_grace=2.5)
    try:
        with pytest.raises(ConfigurationError, match=setting):
            setattr(ctl, setting, value)
        assert (ctl.stop_grace, ctl.pause_grace) == (1.5, 2.5)  # nothing changed
        setattr(ctl, setting, 4)
        assert getattr(ctl, setting) == 4.0
    finally:
        ctl.close()


@pytest.mark.parametrize("timeout", [math.nan, -3, -1, math.inf, 1e300, "5", True])
def test_verb_timeouts_are_checked_before_anything_changes(
    make_ctl: Callable[..., Controller], timeout: Any
) -> None:
    ctl = make_ctl()
    release = threading.Event()

    def held(ctx: TaskContext) -> None:
        while not release.wait(0.01):
            ctx.checkpoint()

    h = ctl.submit(held)
    try:
        version = h.snapshot.status_version
        for verb in (h.pause, h.stop):
            with pytest.raises(ConfigurationError, match="timeout"):
                verb(timeout=timeout)
        with pytest.raises(ConfigurationError, match="timeout"):
            h.wait(timeout)
        assert h.snapshot.status_version == version  # nothing was applied
        ok, why = ctl.apply(h.id, "pause", args={"timeout": timeout})
        assert not ok and why is not None and "timeout" in why
        assert h.snapshot.status_version == version
    finally:
        release.set()
    h.wait(10)


def test_verb_texts_must_encode(make_ctl: Callable[..., Controller]) -> None:
    ctl = make_ctl()
    gate = threading.Event()
    h = ctl.submit(lambda ctx: gate.wait(10), after=[])
    blocked = ctl.submit(noop, after=[h])
    with pytest.raises(ConfigurationError, match="reason"):
        blocked.skip("no\udcff")
    with pytest.raises(ConfigurationError, match="actor"):
        ctl.stop(blocked.id, actor="\ud800")
    ok, why = ctl.apply(blocked.id, "skip", args={"reason": "x\udcff"})
    assert not ok and why is not None and "reason" in why
    assert blocked.snapshot.status.value == "blocked"
    gate.set()
    assert blocked.result(timeout=10) == 1


# ----------------------------------------------------------- the Hypothesis sweep

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.just("a\x00b"),  # PostgreSQL text cannot hold NUL
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    st.frozensets(st.text(max_size=5), max_size=3),
    st.lists(st.integers(), max_size=2),
)
OPTIONS = ("name", "priority", "retry", "timeout", "tags", "idempotency_key", "bucket_key")
FIELDS = ("name", "priority", "max_attempts", "tags", "idempotency_key", "bucket_key")


def test_any_submit_option_is_refused_cleanly_or_round_trips_exactly(store: Any) -> None:
    ctl = Controller(store=store, concurrency=ConcurrencyPolicy(max_parallel=1))

    @settings(
        max_examples=120,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(option=st.sampled_from(OPTIONS), value=VALUES, key=st.uuids())
    def check(option: str, value: Any, key: uuid.UUID) -> None:
        if option == "idempotency_key" and isinstance(value, str):
            value = f"{value}-{key}"  # a fresh key: a reused one is another test's subject
        before = len(ctl.list_tasks())
        try:
            h = ctl.submit(noop, **{option: value})
        except ConfigurationError as exc:
            assert str(exc)
            assert len(ctl.list_tasks()) == before
            assert ctl.flush()
            assert len(store.query()) == before
            return
        assert h.result(timeout=30) == 1
        assert ctl.flush()
        mine, stored = ctl.get(h.id), store.get(h.id)
        assert stored is not None, f"{option}={value!r} never reached the store"
        assert {f: getattr(stored, f) for f in FIELDS} == {f: getattr(mine, f) for f in FIELDS}
        assert stored.status == mine.status

    try:
        check()
        assert ctl.persist_failures == 0
    finally:
        ctl.close()


@pytest.mark.parametrize("option", ["name", "idempotency_key", "bucket_key", "tags"])
def test_a_nul_character_in_a_text_option_is_refused_on_every_store(
    store: Any, option: str
) -> None:
    """PostgreSQL text cannot hold NUL: accepted, the task's write failed in the store
    (found by the property test above on PostgreSQL). Refused up front, on every store."""
    ctl = Controller(store=store)
    value: Any = ["ok", "a\x00b"] if option == "tags" else "a\x00b"
    try:
        with pytest.raises(ConfigurationError, match=r"NUL character .*position 1"):
            ctl.submit(noop, **{option: value})
        assert ctl.list_tasks() == []
        assert ctl.flush()
        assert store.query() == []
        assert ctl.persist_failures == 0
    finally:
        ctl.close()


def _prints_nul() -> str:
    print("before\x00after", flush=True)
    return "done"


def test_a_task_printing_a_nul_character_keeps_its_log_on_every_store(store: Any) -> None:
    """Task output is never refused: a NUL becomes the escape ``\\x00`` (as a lone
    surrogate does), so the line reaches the store instead of failing its write."""
    ctl = Controller(store=store)
    try:
        h = ctl.submit(_prints_nul, name="nul", executor="inline")
        assert h.result(timeout=30) == "done"
        assert ctl.flush()
        lines = [r.line for r in store.logs(h.id)]
        assert "before\\x00after" in lines, lines
        assert ctl.persist_failures == 0
    finally:
        ctl.close()

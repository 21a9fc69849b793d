"""Policies: backoff bounds, retry decisions, validation, aggregation, stable buckets."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chongming_nb import (
    AggregationPolicy,
    BucketPolicy,
    ConcurrencyPolicy,
    ConfigurationError,
    Exponential,
    FatalError,
    RetryableError,
    RetryPolicy,
    TaskCancelled,
    Timeout,
)
from chongming_nb.core.policies import AggregationKind


class FixedRng:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


backoffs = st.builds(
    Exponential,
    base=st.floats(0, 100, allow_nan=False),
    factor=st.floats(1, 10, allow_nan=False),
    max=st.floats(0, 10_000, allow_nan=False),
)


# ------------------------------------------------------------------ Exponential


def test_ceiling_grows_by_factor_until_the_cap() -> None:
    e = Exponential(base=1, factor=2, max=10, jitter="none")
    assert [e.ceiling(a) for a in range(1, 7)] == [1, 2, 4, 8, 10, 10]


@pytest.mark.parametrize("attempt", [1025, 1026, 5000, 10**9])
def test_ceiling_is_capped_for_huge_attempts_without_overflow(attempt: int) -> None:
    assert Exponential(base=1, factor=2, max=300).ceiling(attempt) == 300.0
    assert Exponential(base=0.5, factor=10, max=60).ceiling(attempt) == 60.0


def test_zero_base_is_always_zero() -> None:
    assert Exponential(base=0, factor=3).ceiling(10**6) == 0.0


@given(e=backoffs, attempt=st.integers(1, 3000), u=st.floats(0, 1, exclude_max=True))
@settings(max_examples=300)
def test_delay_bounds_for_every_jitter(e: Exponential, attempt: int, u: float) -> None:
    d = e.ceiling(attempt)
    assert 0 <= d <= e.max
    rng = FixedRng(u)
    full = Exponential(e.base, e.factor, e.max, "full").delay(attempt, rng)
    equal = Exponential(e.base, e.factor, e.max, "equal").delay(attempt, rng)
    none = Exponential(e.base, e.factor, e.max, "none").delay(attempt, rng)
    assert 0 <= full <= d
    assert d / 2 <= equal <= d
    assert none == d


@given(e=backoffs, attempt=st.integers(1, 60))
@settings(max_examples=200)
def test_ceiling_is_monotonic(e: Exponential, attempt: int) -> None:
    assert e.ceiling(attempt) <= e.ceiling(attempt + 1)


def test_full_jitter_spreads_over_the_whole_range() -> None:
    e = Exponential(base=1, factor=2, max=300, jitter="full")
    rng = random.Random(7)
    delays = [e.delay(4, rng) for _ in range(2000)]
    assert min(delays) < 0.5 and max(delays) > 7.5  # [0, 8]
    assert all(0 <= d <= 8 for d in delays)


def test_default_jitter_is_full() -> None:
    assert Exponential().jitter == "full"
    assert RetryPolicy().backoff.jitter == "full"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"base": -1}, "base"),
        ({"factor": 0.5}, "factor"),
        ({"max": -3}, "max"),
        ({"base": float("nan")}, "base"),
        ({"max": float("inf")}, "max"),
        ({"factor": float("inf")}, "factor"),
        ({"base": "1"}, "base"),
        ({"base": True}, "base"),
        ({"jitter": "half"}, "jitter"),
    ],
)
def test_bad_backoff_values(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        Exponential(**kwargs)


def test_ceiling_rejects_attempt_zero() -> None:
    with pytest.raises(ConfigurationError, match="attempt"):
        Exponential().ceiling(0)


# ------------------------------------------------------------------ RetryPolicy


class Transient(Exception):
    pass


class Bad(ValueError):
    pass


def test_default_policy_retries_exceptions_but_not_cancellation() -> None:
    p = RetryPolicy(max_attempts=3)
    assert p.is_retryable(RuntimeError("x"))
    assert not p.is_retryable(TaskCancelled())
    assert not p.is_retryable(KeyboardInterrupt())


def test_retry_on_and_give_up_on() -> None:
    p = RetryPolicy(max_attempts=3, retry_on=(Transient, OSError), give_up_on=(FileNotFoundError,))
    assert p.is_retryable(Transient())
    assert p.is_retryable(ConnectionError())
    assert not p.is_retryable(FileNotFoundError())  # give_up_on wins over retry_on
    assert not p.is_retryable(ValueError())  # not listed


def test_retryable_and_fatal_errors_override_the_lists() -> None:
    class MyRetryable(RetryableError, Bad):
        pass

    class MyFatal(FatalError, Transient):
        pass

    p = RetryPolicy(max_attempts=3, retry_on=(Transient,), give_up_on=(Bad,))
    assert p.is_retryable(RetryableError("again"))
    assert p.is_retryable(MyRetryable())  # although it is a Bad
    assert not p.is_retryable(FatalError("stop"))
    assert not p.is_retryable(MyFatal())  # although it is a Transient


def test_retry_on_accepts_a_single_class() -> None:
    p = RetryPolicy(retry_on=Transient, give_up_on=[Bad])  # type: ignore[arg-type]
    assert p.retry_on == (Transient,)
    assert p.give_up_on == (Bad,)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"retry_on": ("ValueError",)}, "retry_on"),
        ({"retry_on": 3}, "retry_on"),
        ({"give_up_on": (int,)}, "give_up_on"),
        ({"backoff": "exponential"}, "backoff"),
    ],
)
def test_bad_retry_policy(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        RetryPolicy(**kwargs)


def test_retry_delay_uses_the_backoff() -> None:
    p = RetryPolicy(max_attempts=5, backoff=Exponential(base=2, factor=3, jitter="none"))
    assert p.delay(3, FixedRng(0.0)) == 18.0


# ------------------------------------------------------------------ Timeout, concurrency


def test_timeout_values() -> None:
    t = Timeout(start=30, per_attempt=600.5, idle=60)
    assert (t.start, t.per_attempt, t.idle) == (30, 600.5, 60)
    assert Timeout() == Timeout(None, None, None)


@pytest.mark.parametrize("field", ["start", "per_attempt", "idle"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "10", True])
def test_bad_timeout(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"Timeout.{field}"):
        Timeout(**{field: value})  # type: ignore[arg-type]


def test_concurrency_policy() -> None:
    c = ConcurrencyPolicy(max_parallel=4, limits={"db": 2, "gpu": 1}, default_priority=5)
    assert dict(c.limits) == {"db": 2, "gpu": 1}
    with pytest.raises(TypeError):
        c.limits["db"] = 9  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"max_parallel": 0}, "max_parallel"),
        ({"max_parallel": "4"}, "max_parallel"),
        ({"limits": {"db": 0}}, "'db'"),
        ({"limits": {"": 1}}, "limits"),
        ({"limits": [("db", 1)]}, "limits"),
        ({"default_priority": 1.5}, "default_priority"),
        ({"per_bucket": 0}, "per_bucket"),
        ({"per_bucket": "2"}, "per_bucket"),
    ],
)
def test_bad_concurrency_policy(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        ConcurrencyPolicy(**kwargs)


# ------------------------------------------------------------------ aggregation


def test_aggregation_policies() -> None:
    assert AggregationPolicy.FAIL_FAST.kind is AggregationKind.FAIL_FAST
    assert AggregationPolicy.ALL_SETTLED.kind is AggregationKind.ALL_SETTLED
    q = AggregationPolicy.quorum(2)
    assert (q.kind, q.n) == (AggregationKind.QUORUM, 2)
    assert q == AggregationPolicy.quorum(2) != AggregationPolicy.quorum(3)
    assert repr(q) == "AggregationPolicy.quorum(2)"
    assert repr(AggregationPolicy.FAIL_FAST) == "AggregationPolicy.FAIL_FAST"
    assert AggregationPolicy("all_settled") == AggregationPolicy.ALL_SETTLED  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, -1, None, 1.5, True])
def test_quorum_needs_a_positive_int(n: Any) -> None:
    with pytest.raises(ConfigurationError, match="quorum"):
        AggregationPolicy(AggregationKind.QUORUM, n)


def test_aggregation_rejects_unknown_kinds_and_stray_n() -> None:
    with pytest.raises(ConfigurationError, match="'majority'"):
        AggregationPolicy("majority")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="only meaningful for quorum"):
        AggregationPolicy(AggregationKind.FAIL_FAST, 2)
    # a string kind is normalised, so quorum without n cannot slip through
    with pytest.raises(ConfigurationError, match="quorum"):
        AggregationPolicy("quorum")  # type: ignore[arg-type]


# ------------------------------------------------------------------ buckets

KEYS = [f"flights-{i:02d}" for i in range(20)]

_BUCKET_SCRIPT = """
import json, sys
from chongming_nb import BucketPolicy
keys = json.loads(sys.argv[1])
policy = BucketPolicy(64)
print(json.dumps({
    "policy": [policy.bucket_for(k) for k in keys],
    "builtin": [hash(k) % 64 for k in keys],
}))
"""


def _buckets_in_subprocess(seed: str) -> dict[str, list[int]]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", _BUCKET_SCRIPT, json.dumps(KEYS)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result: dict[str, list[int]] = json.loads(out.stdout)
    return result


def test_buckets_are_stable_across_processes_unlike_hash() -> None:
    a = _buckets_in_subprocess("0")
    b = _buckets_in_subprocess("1")
    assert a["policy"] == b["policy"]
    assert a["policy"] == [BucketPolicy(64).bucket_for(k) for k in KEYS]
    # the control: builtin hash() is salted per process, so the same keys move
    assert a["builtin"] != b["builtin"]


def test_bucket_values_are_pinned() -> None:
    # buckets are persisted in stores; changing the function would move every task
    p = BucketPolicy(64)
    # (blake2b, 8-byte digest, big-endian, modulo 64 -- computed once by hand)
    assert [p.bucket_for(k) for k in ("flights", "weather", "")] == [45, 24, 52]


@given(key=st.text(), n=st.integers(1, 1000))
def test_bucket_in_range_and_value_semantics(key: str, n: int) -> None:
    assert 0 <= BucketPolicy(n).bucket_for(key) < n
    assert BucketPolicy(n) == BucketPolicy(n)
    assert hash(BucketPolicy(n)) == hash(BucketPolicy(n))


@pytest.mark.parametrize("n", [0, -2, 1.0, True, "8"])
def test_bad_bucket_count(n: Any) -> None:
    with pytest.raises(ConfigurationError, match="num_buckets"):
        BucketPolicy(n)


def test_bucket_keys_must_be_strings() -> None:
    with pytest.raises(ConfigurationError, match="int"):
        BucketPolicy(8).bucket_for(12)  # type: ignore[arg-type]

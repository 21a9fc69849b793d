"""Policies as plain values with pure functions (backoff, retry decisions, buckets)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import ClassVar, Literal, Protocol, TypeGuard

from chongming_nb.core.errors import ConfigurationError, FatalError, RetryableError
from chongming_nb.core.validation import INT64_MAX, MAX_SECONDS, check_int64

Jitter = Literal["full", "equal", "none"]


def _is_number(v: object) -> bool:
    """A real int or float (``bool`` is not a number here) that is not NaN."""
    return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)


def _is_count(v: object) -> TypeGuard[int]:
    """An ``int`` that is not a ``bool`` (and that a store's 64-bit column can hold:
    a larger one fails here, the range check below names the limit)."""
    return isinstance(v, int) and not isinstance(v, bool) and v <= INT64_MAX


def _check_count(what: str, v: object) -> None:
    """``v`` counts something: an int from 1 to what a 64-bit column holds."""
    if not _is_count(v) or v < 1:
        raise ConfigurationError(f"{what} must be an int from 1 to 2**63 - 1, got {v!r}")


class Rng(Protocol):
    """The part of ``random.Random`` that backoff needs."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Exponential:
    """Exponential backoff: ``min(max, base * factor ** (attempt - 1))`` seconds, jittered.

    ``full`` draws from [0, d]; ``equal`` from [d/2, d]; ``none`` is exactly d.
    """

    base: float = 1.0
    factor: float = 2.0
    max: float = 300.0
    jitter: Jitter = "full"

    def __post_init__(self) -> None:
        for name in ("base", "factor", "max"):
            if not _is_number(getattr(self, name)):
                raise ConfigurationError(
                    f"Exponential.{name} must be a number, got {getattr(self, name)!r}"
                )
        if not (
            0 <= self.base <= MAX_SECONDS
            and 1 <= self.factor < math.inf
            and 0 <= self.max <= MAX_SECONDS
        ):
            raise ConfigurationError(
                f"Exponential needs base and max in 0 .. {MAX_SECONDS:.0e} seconds and a "
                "finite factor >= 1 (got "
                f"base={self.base!r}, factor={self.factor!r}, max={self.max!r})"
            )
        if self.jitter not in ("full", "equal", "none"):
            raise ConfigurationError(f"unknown jitter {self.jitter!r}: use full, equal or none")

    def ceiling(self, attempt: int) -> float:
        """The un-jittered delay after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise ConfigurationError(f"attempt must be >= 1, got {attempt}")
        exponent = attempt - 1
        if self.base == 0:
            return 0.0
        try:  # in floats: an int factor would build a huge int for absurd attempts
            raw = float(self.base) * float(self.factor) ** exponent
        except OverflowError:  # absurd attempt numbers: the cap applies
            return float(self.max)
        return float(min(self.max, raw))

    def delay(self, attempt: int, rng: Rng) -> float:
        d = self.ceiling(attempt)
        if self.jitter == "full":
            return rng.random() * d
        if self.jitter == "equal":
            return d / 2 + rng.random() * (d / 2)
        return d


def _exception_types(name: str, value: object) -> tuple[type[BaseException], ...]:
    """Accept one exception class or an iterable of them; anything else is a clear error."""
    items: tuple[object, ...]
    if isinstance(value, type):
        items = (value,)
    elif isinstance(value, tuple | list | frozenset | set):
        items = tuple(value)
    else:
        raise ConfigurationError(
            f"RetryPolicy.{name} must be an exception class or a tuple of them, got {value!r}"
        )
    out: list[type[BaseException]] = []
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(f"RetryPolicy.{name} holds {item!r}, not an exception class")
        out.append(item)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a task gets and which failures are worth another one.

    ``RetryableError`` is always retried and ``FatalError`` never, whatever
    ``retry_on`` / ``give_up_on`` say.
    """

    max_attempts: int = 1
    backoff: Exponential = field(default_factory=Exponential)
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    give_up_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if not _is_count(self.max_attempts) or self.max_attempts < 1:
            raise ConfigurationError(
                f"max_attempts must be an int from 1 to 2**63 - 1, got {self.max_attempts!r}"
            )
        if not isinstance(self.backoff, Exponential):
            raise ConfigurationError(
                f"backoff must be an Exponential(...), got {type(self.backoff).__name__}"
            )
        for name in ("retry_on", "give_up_on"):
            object.__setattr__(self, name, _exception_types(name, getattr(self, name)))

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, FatalError):
            return False
        if isinstance(exc, RetryableError):
            return True
        if self.give_up_on and isinstance(exc, self.give_up_on):
            return False
        return isinstance(exc, self.retry_on)

    def delay(self, attempt: int, rng: Rng) -> float:
        return self.backoff.delay(attempt, rng)


@dataclass(frozen=True, slots=True)
class Timeout:
    """Three independent timeouts, in seconds (None = no limit).

    ``start``: STARTING may last this long; ``per_attempt``: one attempt, from its start;
    ``idle``: time since the last heartbeat or checkpoint, only once started.
    """

    start: float | None = None
    per_attempt: float | None = None
    idle: float | None = None

    def __post_init__(self) -> None:
        for name in ("start", "per_attempt", "idle"):
            v = getattr(self, name)
            if v is not None and (not _is_number(v) or not 0 < v <= MAX_SECONDS):
                raise ConfigurationError(
                    f"Timeout.{name} must be a positive finite number of seconds (at most "
                    f"{MAX_SECONDS:.0e}) or None, got {v!r}"
                )


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long a controller's store keeps finished tasks (opt-in: ``Controller(...,
    retention=RetentionPolicy(days=30))``). When the controller starts, finished tasks
    (``status``: only these; default every finished status) that ended more than
    ``days`` ago are deleted with all their history, as ``ctl.prune`` does."""

    days: float = 30.0
    status: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not _is_number(self.days) or not 0 < self.days <= 36500:
            raise ConfigurationError(
                f"RetentionPolicy.days must be a number of days in (0, 36500], got {self.days!r}"
            )
        if self.status is not None:
            object.__setattr__(self, "status", frozenset(str(s) for s in self.status))


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicy:
    """Scheduler limits: a global cap, named tag semaphores, a per-bucket cap."""

    max_parallel: int = 4
    limits: Mapping[str, int] = field(default_factory=dict)
    default_priority: int = 0
    per_bucket: int | None = None

    def __post_init__(self) -> None:
        if not _is_count(self.max_parallel) or self.max_parallel < 1:
            raise ConfigurationError(
                f"max_parallel must be an int from 1 to 2**63 - 1, got {self.max_parallel!r}"
            )
        if not isinstance(self.limits, Mapping):
            raise ConfigurationError(f"limits must be a mapping tag -> int, got {self.limits!r}")
        for tag, n in self.limits.items():
            if not isinstance(tag, str) or not tag:
                raise ConfigurationError(f"limits keys must be non-empty tag names, got {tag!r}")
            if not _is_count(n) or n < 1:
                raise ConfigurationError(
                    f"limit for tag {tag!r} must be an int from 1 to 2**63 - 1, got {n!r}"
                )
        check_int64("default_priority", self.default_priority)
        if self.per_bucket is not None and (not _is_count(self.per_bucket) or self.per_bucket < 1):
            raise ConfigurationError(
                f"per_bucket must be an int from 1 to 2**63 - 1, got {self.per_bucket!r}"
            )
        object.__setattr__(self, "limits", MappingProxyType(dict(self.limits)))


class AggregationKind(StrEnum):
    FAIL_FAST = "fail_fast"
    ALL_SETTLED = "all_settled"
    QUORUM = "quorum"


@dataclass(frozen=True, slots=True)
class AggregationPolicy:
    """How a pipeline run turns its nodes' outcomes into one status."""

    kind: AggregationKind
    n: int | None = None

    FAIL_FAST: ClassVar[AggregationPolicy]
    ALL_SETTLED: ClassVar[AggregationPolicy]

    def __post_init__(self) -> None:
        try:
            kind = AggregationKind(self.kind)
        except ValueError:
            known = ", ".join(k.value for k in AggregationKind)
            raise ConfigurationError(f"unknown aggregation {self.kind!r}; known: {known}") from None
        object.__setattr__(self, "kind", kind)
        if kind is AggregationKind.QUORUM:
            if not _is_count(self.n) or self.n < 1:
                raise ConfigurationError(
                    f"quorum needs an int n from 1 to 2**63 - 1, got {self.n!r}"
                )
        elif self.n is not None:
            raise ConfigurationError(f"n is only meaningful for quorum, not {kind.value}")

    @staticmethod
    def quorum(n: int) -> AggregationPolicy:
        return AggregationPolicy(AggregationKind.QUORUM, n)

    def __repr__(self) -> str:
        if self.kind is AggregationKind.QUORUM:
            return f"AggregationPolicy.quorum({self.n})"
        return f"AggregationPolicy.{self.kind.name}"


AggregationPolicy.FAIL_FAST = AggregationPolicy(AggregationKind.FAIL_FAST)
AggregationPolicy.ALL_SETTLED = AggregationPolicy(AggregationKind.ALL_SETTLED)


class JoinMode(StrEnum):
    """When a node with dependencies may run."""

    ALL_SUCCEEDED = "all_succeeded"
    ALL_DONE = "all_done"
    ANY_SUCCEEDED = "any_succeeded"


@dataclass(frozen=True, slots=True)
class BucketPolicy:
    """Stable bucketing by blake2b: the same key lands in the same bucket in every process.

    Never uses ``hash()``, which is salted per process (PYTHONHASHSEED).
    """

    num_buckets: int

    def __post_init__(self) -> None:
        if not _is_count(self.num_buckets) or self.num_buckets < 1:
            raise ConfigurationError(
                f"num_buckets must be an int from 1 to 2**63 - 1, got {self.num_buckets!r}"
            )

    def bucket_for(self, key: str) -> int:
        if not isinstance(key, str):
            raise ConfigurationError(f"bucket keys are strings, got {type(key).__name__}")
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.num_buckets


@dataclass(frozen=True, slots=True)
class HistoryLimits:
    """How much history is kept, per task and of finished tasks in all
    (``Controller(history=...)``); each is said out loud where it applies.

    ``store_log_bytes``: log text kept per task in the store (each line counts twice
    its length + 100 for the row); the oldest lines are dropped first and one "… N
    lines dropped" line stands for them. None: no limit.
    ``memory_log_lines`` / ``memory_log_bytes``: the kernel keeps at most this many of a
    running task's newest lines, and this much of their text, for ``h.logs()``. When
    the task ends and there is a store, the kernel keeps only its last 20 lines and
    ``h.logs()`` reads the store; without a store the tail stays.
    ``text_chars``: a failure's message and an attempt's traceback are cut to this many
    characters, with a marker giving the full size (one traceback per attempt).
    ``memory_finished_tasks``: the controller keeps this many finished tasks in memory;
    older ones (oldest finished first) leave it, their status kept in one byte each.
    With a store, reads of them go to the store; their results are not kept. None:
    no limit.
    """

    store_log_bytes: int | None = 10_000_000
    memory_log_lines: int = 2_000
    memory_log_bytes: int = 1_000_000
    text_chars: int = 65_536
    memory_finished_tasks: int | None = 10_000

    def __post_init__(self) -> None:
        if self.store_log_bytes is not None:
            _check_count("store_log_bytes", self.store_log_bytes)
        _check_count("memory_log_lines", self.memory_log_lines)
        _check_count("memory_log_bytes", self.memory_log_bytes)
        _check_count("text_chars", self.text_chars)
        if self.memory_finished_tasks is not None:
            _check_count("memory_finished_tasks", self.memory_finished_tasks)
        if self.text_chars < 256:
            raise ConfigurationError(f"text_chars must be >= 256, got {self.text_chars!r}")


def clip_text(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters, with a marker giving its full size."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n… [cut: {len(text)} characters in all, {limit} kept]"

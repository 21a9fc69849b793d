"""Policies as plain values with pure functions (backoff, retry decisions, buckets)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import ClassVar, Literal, Protocol

from chongming_nb.core.errors import ConfigurationError, FatalError, RetryableError

Jitter = Literal["full", "equal", "none"]


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
        if self.base < 0 or self.factor < 1 or self.max < 0:
            raise ConfigurationError(
                f"Exponential needs base >= 0, factor >= 1, max >= 0 (got {self.base}, "
                f"{self.factor}, {self.max})"
            )
        if self.jitter not in ("full", "equal", "none"):
            raise ConfigurationError(f"unknown jitter {self.jitter!r}: use full, equal or none")

    def ceiling(self, attempt: int) -> float:
        """The un-jittered delay after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise ConfigurationError(f"attempt must be >= 1, got {attempt}")
        exponent = attempt - 1
        # avoid float overflow for absurd attempt numbers
        if self.factor > 1 and exponent > 1024:
            return self.max
        return float(min(self.max, self.base * self.factor**exponent))

    def delay(self, attempt: int, rng: Rng) -> float:
        d = self.ceiling(attempt)
        if self.jitter == "full":
            return rng.random() * d
        if self.jitter == "equal":
            return d / 2 + rng.random() * (d / 2)
        return d


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
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        object.__setattr__(self, "retry_on", tuple(self.retry_on))
        object.__setattr__(self, "give_up_on", tuple(self.give_up_on))

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
            if v is not None and (not isinstance(v, int | float) or v <= 0):
                raise ConfigurationError(f"Timeout.{name} must be a positive number, got {v!r}")


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicy:
    """Scheduler limits: a global cap, named tag semaphores, a per-bucket cap."""

    max_parallel: int = 4
    limits: Mapping[str, int] = field(default_factory=dict)
    default_priority: int = 0
    per_bucket: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_parallel, int) or self.max_parallel < 1:
            raise ConfigurationError(f"max_parallel must be an int >= 1, got {self.max_parallel!r}")
        for tag, n in self.limits.items():
            if not isinstance(n, int) or n < 1:
                raise ConfigurationError(f"limit for tag {tag!r} must be an int >= 1, got {n!r}")
        if self.per_bucket is not None and self.per_bucket < 1:
            raise ConfigurationError(f"per_bucket must be >= 1, got {self.per_bucket!r}")
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
        if self.kind is AggregationKind.QUORUM and (self.n is None or self.n < 1):
            raise ConfigurationError(f"quorum needs n >= 1, got {self.n!r}")

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
        if not isinstance(self.num_buckets, int) or self.num_buckets < 1:
            raise ConfigurationError(f"num_buckets must be an int >= 1, got {self.num_buckets!r}")

    def bucket_for(self, key: str) -> int:
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.num_buckets

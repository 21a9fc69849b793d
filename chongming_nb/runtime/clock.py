"""The real clock (the core only knows the Clock protocol)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class SystemClock:
    """Wall time for records, ``time.monotonic`` for durations and deadlines."""

    __slots__ = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()

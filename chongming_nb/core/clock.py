"""The clock protocol. The core never reads time itself; callers inject a Clock."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    """Something that tells the time.

    ``now()`` returns an aware UTC datetime; ``monotonic()`` returns seconds on a
    clock that never goes backwards (used for durations and timeouts).
    """

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

"""The real clock (the core only knows the Clock protocol)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import UTC, datetime


class SystemClock:
    """Wall time for records, ``time.monotonic`` for durations and deadlines.

    Both are C callables stored as static methods: a task reads the clock several times
    on its way through the controller, and a Python wrapper frame per reading showed.
    """

    __slots__ = ()

    #: ``datetime.now(UTC)``: an aware UTC datetime
    now: Callable[[], datetime] = staticmethod(functools.partial(datetime.now, UTC))
    #: ``time.monotonic()``
    monotonic: Callable[[], float] = staticmethod(time.monotonic)


SYSTEM_CLOCK = SystemClock()

"""Pure timeout judgements. Times are monotonic seconds; None means "no limit"."""

from __future__ import annotations

from chongming_nb.core.models import FailureKind
from chongming_nb.core.policies import Timeout


def start_expired(timeout: Timeout, starting_since: float, now: float) -> bool:
    """STARTING lasted longer than ``timeout.start``."""
    return timeout.start is not None and now - starting_since > timeout.start


def attempt_expired(timeout: Timeout, started: float | None, now: float) -> bool:
    """The attempt has run longer than ``timeout.per_attempt``."""
    return (
        timeout.per_attempt is not None
        and started is not None
        and now - started > timeout.per_attempt
    )


def idle_expired(
    timeout: Timeout, started: float | None, last_beat: float | None, now: float
) -> bool:
    """No heartbeat for ``timeout.idle`` seconds. Only once started: a task that never
    started cannot be stuck."""
    if timeout.idle is None or started is None:
        return False
    since = last_beat if last_beat is not None else started
    return now - since > timeout.idle


def judge(
    timeout: Timeout,
    *,
    starting_since: float | None,
    started: float | None,
    last_beat: float | None,
    now: float,
) -> FailureKind | None:
    """Which timeout (if any) has fired, in order start, attempt, idle."""
    if (
        starting_since is not None
        and started is None
        and start_expired(timeout, starting_since, now)
    ):
        return FailureKind.TIMEOUT_START
    if attempt_expired(timeout, started, now):
        return FailureKind.TIMEOUT_ATTEMPT
    if idle_expired(timeout, started, last_beat, now):
        return FailureKind.TIMEOUT_IDLE
    return None


def next_deadline(
    timeout: Timeout,
    *,
    starting_since: float | None,
    started: float | None,
    last_beat: float | None,
) -> float | None:
    """The earliest monotonic time at which ``judge`` could next change its answer."""
    cands: list[float] = []
    if timeout.start is not None and starting_since is not None and started is None:
        cands.append(starting_since + timeout.start)
    if timeout.per_attempt is not None and started is not None:
        cands.append(started + timeout.per_attempt)
    if timeout.idle is not None and started is not None:
        cands.append((last_beat if last_beat is not None else started) + timeout.idle)
    return min(cands) if cands else None

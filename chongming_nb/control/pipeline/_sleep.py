"""Durable sleep steps (``Pipeline.sleep``): a node that waits until its wake time.

The wake time is fixed when the step first starts (``seconds`` after that, or ``until``)
and written down at once, in the run's manifest and RunRecord, before the step waits. A
run resumed from it (``submit(ctl, resume_from=run_id)``, also after the kernel died)
reads it back and waits only for what is left: nothing when the time has passed. The step
waits with ``ctx.sleep``, so it holds no concurrency slot meanwhile, and a stop or a
pause of the run reaches it at once.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from chongming_nb.control.pipeline._record import append_manifest, save_record
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.validation import check_seconds

if TYPE_CHECKING:
    from chongming_nb.control.pipeline._state import RunState
    from chongming_nb.runtime.context import TaskContext

__all__ = ["SleepBody", "SleepStep", "sleep_step"]

_SIG_CTX = inspect.Signature([inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)])


@dataclass(frozen=True, slots=True, weakref_slot=True)
class SleepStep:
    """What ``Pipeline.sleep`` stores as the node's function: how long, or until when.
    A run replaces it by a ``SleepBody`` bound to the run."""

    seconds: float | None
    until: datetime | None

    __signature__ = _SIG_CTX

    def __call__(self, ctx: TaskContext) -> str:  # pragma: no cover - a run calls SleepBody
        raise RuntimeError("a sleep step runs as part of a pipeline run")


def sleep_step(seconds: Any, until: Any) -> SleepStep:
    """Validate ``Pipeline.sleep``'s timing: exactly one of ``seconds`` (>= 0) and
    ``until`` (a timezone-aware datetime)."""
    if (seconds is None) == (until is None):
        raise ConfigurationError("sleep() needs exactly one of seconds= or until=")
    if seconds is not None:
        return SleepStep(check_seconds("sleep seconds", seconds), None)
    if not isinstance(until, datetime) or until.tzinfo is None:
        raise ConfigurationError(
            f"sleep until= must be a timezone-aware datetime, got {until!r} "
            "(e.g. datetime(2026, 1, 2, 6, 0, tzinfo=timezone.utc))"
        )
    return SleepStep(None, until)


class SleepBody:
    """The task of a sleep step in one run: fix (or read back) the wake time, record it,
    then ``ctx.sleep`` until it. Returns the wake time (ISO 8601), the node's output."""

    __slots__ = ("node", "run", "step")
    __signature__ = _SIG_CTX

    def __init__(self, run: RunState, node: str, step: SleepStep) -> None:
        self.run = run
        self.node = node
        self.step = step

    def __call__(self, ctx: TaskContext) -> str:
        run = self.run
        with run._lock:
            wake = run._wakes.get(self.node)
            if wake is None:
                step = self.step
                wake = step.until or run._now() + timedelta(seconds=step.seconds or 0.0)
                run._wakes[self.node] = wake
                # written before the wait: a crash from here on resumes to this time
                append_manifest(
                    run, {"event": "sleep", "node": self.node, "wake_at": wake.isoformat()}
                )
                save_record(run, force=True)
        left = (wake - run._now()).total_seconds()
        if left > 0:
            ctx.sleep(left)
        return wake.isoformat()

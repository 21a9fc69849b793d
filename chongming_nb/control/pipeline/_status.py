"""A run's aggregated status, and the task statuses the run reacts to."""

from __future__ import annotations

from enum import StrEnum

from chongming_nb.core.states import STATUS

__all__ = ["FAILURES", "RUN_TERMINAL", "PipelineRunStatus"]

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)


class PipelineRunStatus(StrEnum):
    """A run's aggregated status (see ``PipelineRun.status``). ``LOST`` is only ever
    read from the store: the run's owner (its kernel) went away before the run ended
    and recovery settled its record (``control/recovery.py`` ``settle_runs``)."""

    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"


RUN_TERMINAL = frozenset(
    {
        PipelineRunStatus.SUCCEEDED,
        PipelineRunStatus.FAILED,
        PipelineRunStatus.STOPPED,
        PipelineRunStatus.LOST,
    }
)
#: Task statuses that hold a fail-fast run at once.
FAILURES = frozenset({S.FAILED, S.LOST})

"""Heartbeats without a per-checkpoint clock read.

A checkpoint only increments ``token.beats``. The supervisor samples the counter; a
change since the last sample is a heartbeat at the sampling time. Idle detection is
therefore accurate to the sampling interval, and checkpoints stay one increment and one
attribute check.
"""

from __future__ import annotations

from chongming_nb.runtime.cancellation import CancellationToken


class Heartbeat:
    __slots__ = ("last_beat", "last_count", "token")

    def __init__(self, token: CancellationToken, now: float) -> None:
        self.token = token
        self.last_count = token.beats
        self.last_beat = now

    def sample(self, now: float) -> bool:
        """True if the task showed a sign of life since the previous sample."""
        count = self.token.beats
        if count != self.last_count or self.token.paused:
            self.last_count = count
            self.last_beat = now
            return True
        return False

    def beat(self, now: float) -> None:
        self.last_beat = now

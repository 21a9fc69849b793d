"""Heartbeats without a per-checkpoint clock read or counter increment.

A sampler (the controller's dispatcher; the process child's mirror thread; the dask
worker agent) reads ``token.beats`` and then arms a liveness probe on the token
(``token.arm_probe()``). The next checkpoint takes its slow path once, answers the probe
by incrementing ``beats``, and goes back to the one-attribute-check fast path. Progress
reports increment ``beats`` too. A change of the counter since the previous sample is
a heartbeat at the sampling time, so idle detection is accurate to the sampling
interval, and a checkpoint costs one lock round trip per interval, not one increment
per call.

A paused task and a task in ``ctx.sleep`` (``token.paused`` / ``token.sleeping``) count
as alive at every sample: neither is stuck, and neither reaches a checkpoint meanwhile.

Invariant: after every sample (and from the creation of a ``Heartbeat``) a probe is
armed, so a task that checkpoints at least once between two samples shows a changed
counter at the second one.
"""

from __future__ import annotations

from chongming_nb.runtime.cancellation import CancellationToken


class Heartbeat:
    __slots__ = ("last_beat", "last_count", "token")

    def __init__(self, token: CancellationToken, now: float) -> None:
        self.token = token
        self.last_count = token.beats
        self.last_beat = now
        if not token.probe_pending:  # (a thread executor's token is born armed)
            token.arm_probe()

    def sample(self, now: float) -> bool:
        """True if the task showed a sign of life since the previous sample."""
        token = self.token
        count = token.beats
        token.arm_probe()  # after the read: an answer from now on shows at the next sample
        if count != self.last_count or token.paused or token.sleeping:
            self.last_count = count
            self.last_beat = now
            return True
        return False

    def beat(self, now: float) -> None:
        self.last_beat = now

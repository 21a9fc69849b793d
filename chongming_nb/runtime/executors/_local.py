"""What the handles of attempts that run in this process share (inline, thread, and the
controller's loop attempts): their controls are the flags of one CancellationToken."""

from __future__ import annotations

from chongming_nb.runtime.cancellation import CancellationToken

__all__ = ["TokenHandle"]


class TokenHandle:
    """Stop, pause and resume set the token's flags; the attempt reads them at its next
    checkpoint. No process of its own, so no pid. Subclasses say whether it is
    ``running`` and what a stop timeout means."""

    __slots__ = ("token",)

    def __init__(self, token: CancellationToken) -> None:
        self.token = token

    @property
    def pid(self) -> int | None:
        return None

    @property
    def supports_pause(self) -> bool:
        return True

    def request_stop(self, reason: str | None = None) -> None:
        self.token.request_stop(reason)

    def request_pause(self) -> None:
        self.token.request_pause()

    def resume(self) -> None:
        self.token.resume()

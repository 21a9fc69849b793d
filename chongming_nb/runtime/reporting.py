"""How an execution reports back: the ``Reporter`` an executor calls for one attempt,
and the ``Outcome`` it ends with (``executors.base`` re-exports both; they live here so
that ``context`` can name the reporter without importing the executors, which import
it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol


class Reporter(Protocol):
    """The controller's ear for one attempt. Every method may be called from any thread."""

    def started(self, pid: int | None = None) -> str | None:
        """The attempt began. A reason back means the controller no longer wants it
        run (its task was settled while it was being launched): the attempt stops at
        its first checkpoint, before the task's code."""
        ...

    def progress(
        self, done: float | None, total: float | None, unit: str | None, message: str | None
    ) -> None: ...

    def emit(self, kind: str, payload: Any) -> None: ...

    def log(self, stream: str, line: str, level: str | None) -> None: ...

    def pause_reached(self) -> bool: ...

    def resumed(self) -> None: ...

    def heartbeat(self) -> None: ...

    def upstream(self, key: Any) -> Any: ...

    def finished(self, outcome: Outcome) -> None: ...


OutcomeKind = Literal["succeeded", "failed", "cancelled", "crashed"]


@dataclass(slots=True)
class Outcome:
    """How an attempt ended, as seen by the executor."""

    kind: OutcomeKind
    value: Any = None
    exception: BaseException | None = None
    traceback: str | None = None
    message: str | None = None
    exit_code: int | None = None
    exception_type: str | None = None

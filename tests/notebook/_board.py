"""Helpers shared by the board widget tests: the recording comm of a table and the
patches it sent."""

from __future__ import annotations

from typing import Any

from chongming_nb.notebook.widget import TaskTable
from chongming_nb.testing.widgets import RecordingComm


def rec(table: TaskTable) -> RecordingComm:
    c = table.comm
    assert isinstance(c, RecordingComm)
    return c


def patches(table: TaskTable) -> list[dict[str, Any]]:
    return [m for m in rec(table).custom_messages() if m["type"] == "patch"]

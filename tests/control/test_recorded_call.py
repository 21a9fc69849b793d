"""The TaskCall record a submit with a store keeps (so ``reconcile(requeue)`` can run the
task again by name): plain JSON arguments only, scalars without a trial encoding."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from chongming_nb.control.intake import recorded_call as _recorded_call
from chongming_nb.control.messages import KeepRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        ((1, 2.5, "x", None, True), {"k": "v", "n": 3}),
        (([1, 2], {"a": [None]}), {"rows": [{"x": 1}]}),
    ],
)
def test_json_arguments_are_recorded_as_given(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    item = _recorded_call("t1", NOW, args, kwargs)
    assert isinstance(item, KeepRecord)
    rec = item.record
    assert rec.type == "TaskCall" and rec.task_id == "t1" and rec.at == NOW
    assert rec.payload.get("args", []) == list(args) and rec.payload.get("kwargs", {}) == kwargs
    assert all(rec.payload.values())  # an empty part is left out: no arguments record {}
    json.dumps(rec.payload)  # what the store will write


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((object(),), {}),
        ((Path("/tmp"),), {}),
        ((), {"when": NOW}),
        (([1, {2}],), {}),  # a set inside a list: only the trial encoding finds it
    ],
)
def test_arguments_that_are_not_json_record_nothing(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert _recorded_call("t1", NOW, args, kwargs) is None

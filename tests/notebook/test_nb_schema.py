"""The message schema: one Python source, strict validation; the widget's bundle is built
from the contract generated from it (tests/notebook/test_nb_front_end.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chongming_nb.core.state_machine import CONTROL_VERBS
from chongming_nb.core.states import TaskStatus
from chongming_nb.notebook import schema as S

EXT = Path(__file__).resolve().parents[2] / "labextension"


def test_statuses_and_verbs_come_from_the_core() -> None:
    assert set(S.STATUSES) == {s.value for s in TaskStatus}
    assert len(S.STATUSES) == 15
    assert S.VERBS == CONTROL_VERBS
    assert set(S.STATUS_TONES) == set(S.STATUSES)
    assert set(S.BULK_VERBS) <= set(S.VERBS)


def test_schema_for_js_is_plain_json_and_complete() -> None:
    import json

    js = S.schema_for_js()
    assert json.loads(json.dumps(js)) == js
    assert js["statuses"] == list(S.STATUSES)
    assert js["verbs"] == list(CONTROL_VERBS)
    assert set(js["terminal"]) == {"succeeded", "failed", "stopped", "cancelled", "skipped", "lost"}


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        (
            {"type": "action", "action": "pause", "task_id": "t1", "request_id": 1},
            S.ActionRequest("pause", "t1", 1),
        ),
        ({"type": "bulk", "action": "stop", "request_id": 0}, S.BulkRequest("stop", 0)),
        ({"type": "detail", "task_id": "t1", "request_id": 7}, S.DetailRequest("t1", 7)),
        ({"type": "sync", "request_id": 3}, S.SyncRequest(3)),
        ({"type": "view", "request_id": 4}, S.ViewDrawn(4)),
    ],
)
def test_valid_messages_parse(msg: dict[str, Any], expected: object) -> None:
    assert S.parse_client_message(msg) == expected


@pytest.mark.parametrize(
    ("msg", "needle"),
    [
        (None, "must be an object"),
        ([], "must be an object"),
        ({}, "unknown message type"),
        ({"type": "exec", "request_id": 1}, "unknown message type"),
        ({"type": "action", "action": "eval", "task_id": "t", "request_id": 1}, "unknown action"),
        ({"type": "action", "action": "reset", "task_id": "t", "request_id": 1}, "unknown action"),
        ({"type": "action", "action": "pause", "task_id": 5, "request_id": 1}, "task_id"),
        ({"type": "action", "action": "pause", "task_id": "", "request_id": 1}, "task_id"),
        ({"type": "action", "action": "pause", "task_id": "t", "request_id": "1"}, "request_id"),
        ({"type": "action", "action": "pause", "task_id": "t", "request_id": True}, "request_id"),
        ({"type": "action", "action": "pause", "task_id": "t", "request_id": -1}, "out of range"),
        ({"type": "action", "action": "pause", "task_id": "t"}, "request_id"),
        (
            {"type": "action", "action": "pause", "task_id": "t", "request_id": 1, "code": "x"},
            "unexpected keys",
        ),
        ({"type": "bulk", "action": "retry", "request_id": 1}, "unknown bulk action"),
        ({"type": "detail", "request_id": 1}, "task_id"),
        ({"type": "action", "action": "pause", "task_id": "t" * 600, "request_id": 1}, "task_id"),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(msg: object, needle: str) -> None:
    with pytest.raises(S.SchemaError, match=needle):
        S.parse_client_message(msg)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
near_messages = st.fixed_dictionaries(
    {
        "type": st.sampled_from([*S.CLIENT_TYPES, "ack", "", "ACTION"]) | json_values,
    },
    optional={
        "action": st.sampled_from([*S.VERBS, "start", "reset", "Pause"]) | json_values,
        "task_id": st.text(max_size=8) | json_values,
        "request_id": st.integers(min_value=-5, max_value=2**60) | json_values,
        "extra": json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, near_messages))
def test_fuzzed_messages_raise_only_schema_error(msg: object) -> None:
    try:
        parsed = S.parse_client_message(msg)
    except S.SchemaError:
        return
    assert isinstance(parsed, S.ClientMessage)  # (the union of every message type)


def test_css_knows_tones_not_statuses() -> None:
    # the widget's css is bundled from these two (labextension/build-widget.mjs)
    css = "".join((EXT / "style" / f).read_text() for f in ("widget.css", "row.css"))
    for status in S.STATUSES:
        assert f"tone-{status}" not in css
        assert f'"{status}"' not in css
    for tone in set(S.STATUS_TONES.values()):
        assert f".cm-tone-{tone}" in css


def test_the_front_end_never_uses_inner_html() -> None:
    # what the widget's bundle is built from (labextension/build-widget.mjs)
    sources = ("widget.ts", "row.ts", "format.ts", "contract.ts")
    js = "".join((EXT / "src" / f).read_text() for f in sources)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in js


def test_resume_all_is_a_bulk_message() -> None:
    assert S.parse_client_message({"type": "bulk", "action": "resume", "request_id": 2}) == (
        S.BulkRequest("resume", 2)
    )
    with pytest.raises(S.SchemaError, match="unknown bulk action 'retry'"):
        S.parse_client_message({"type": "bulk", "action": "retry", "request_id": 2})

"""core._fast: frozen slotted dataclasses built through a layout twin are ordinary,
frozen instances of their class, with the dataclass's own signature; a column reader
reads what the attributes hold."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chongming_nb.core import events as ev
from chongming_nb.core._fast import _twin, column_reader, evolver, fast_init, maker
from chongming_nb.core.models import (
    AttemptRecord,
    Command,
    Failure,
    FailureKind,
    Progress,
    TaskSnapshot,
    Transition,
)
from chongming_nb.core.states import TaskStatus


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "x"
    c: list[int] = field(default_factory=list)
    d: int = field(default=3, kw_only=True)


@fast_init
@dataclass(frozen=True, slots=True)
class Fast:
    a: int
    b: str = "x"
    c: list[int] = field(default_factory=list)
    d: int = field(default=3, kw_only=True)


def test_signature_matches_the_generated_dataclass_init() -> None:
    assert str(inspect.signature(Fast)) == str(inspect.signature(Plain))


@given(st.integers(), st.text(), st.lists(st.integers()), st.integers())
def test_values_and_behaviour_match_a_plain_dataclass(a: int, b: str, c: list[int], d: int) -> None:
    fast, plain = Fast(a, b, c, d=d), Plain(a, b, c, d=d)
    assert type(fast) is Fast
    assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
    assert repr(fast).removeprefix("Fast") == repr(plain).removeprefix("Plain")
    assert fast == Fast(a, b, c, d=d)
    assert pickle.loads(pickle.dumps(fast)) == fast


def test_instances_are_frozen_once_built() -> None:
    f = Fast(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del f.b  # type: ignore[misc]


def test_default_factory_gives_each_instance_its_own_value() -> None:
    x, y = Fast(1), Fast(2)
    assert x.c == [] and x.c is not y.c
    assert Command("c", "t", "v").args is not Command("c", "t", "v").args


def test_missing_and_unknown_arguments_raise_like_a_dataclass() -> None:
    with pytest.raises(TypeError, match="a"):
        Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="zzz"):
        Fast(1, zzz=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, "b", [], 4)  # type: ignore[misc]  # d is keyword-only


def test_an_undecorated_subclass_uses_the_original_init() -> None:
    class Sub(Fast):
        __slots__ = ("extra",)

    s = Sub(5)
    assert type(s) is Sub and s.a == 5 and s.d == 3


def test_a_class_without_slots_is_refused() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError, match="slots=True"):
        fast_init(NoSlots)


NOW = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        TaskSnapshot("t1", "n", tags=frozenset({"a"}), created_at=NOW, deps=("x",)),
        Transition("t1", TaskStatus.QUEUED, TaskStatus.STARTING, "tr", "me", None, NOW, 3),
        AttemptRecord("t1", 1, NOW),
        Failure(FailureKind.EXCEPTION, "m"),
        Progress(1, 2, "items"),
        Command("c1", "t1", "stop", {"reason": "x"}),
        ev.TaskStatusChanged(
            event_id="e",
            at=NOW,
            task_id="t1",
            from_status=TaskStatus.QUEUED,
            to_status=TaskStatus.STARTING,
            trigger="t",
            actor="a",
            reason=None,
            version=1,
        ),
        ev.PipelineRunStatusChanged(
            event_id="e", at=NOW, run_id="r", from_status=None, to_status="x"
        ),
    ],
    ids=lambda v: type(v).__name__,
)
def test_the_models_and_events_round_trip(value: Any) -> None:
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    rebuilt = type(value)(**fields)
    assert rebuilt == value and type(rebuilt) is type(value)
    assert pickle.loads(pickle.dumps(value)) == value
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, dataclasses.fields(value)[0].name, "other")


def test_evolve_matches_dataclasses_replace_and_names_unknown_fields() -> None:
    s = TaskSnapshot("t1", "n", created_at=NOW)
    changes: dict[str, Any] = {"status": TaskStatus.QUEUED, "status_version": 1, "queued_at": NOW}
    assert s.evolve(**changes) == dataclasses.replace(s, **changes)
    assert s.status is TaskStatus.PENDING  # the original is untouched
    with pytest.raises(TypeError, match=r"no field.*bogus"):
        s.evolve(bogus=1)
    evolve = evolver(Fast)
    f = evolve(Fast(1), {"b": "y"})
    assert type(f) is Fast and (f.a, f.b) == (1, "y")


@given(
    st.integers(),
    st.text(max_size=5),
    st.dictionaries(st.sampled_from(["a", "b", "d"]), st.integers(), max_size=3),
)
def test_leading_fields_are_set_first_and_changes_win(
    a: int, b: str, extra: dict[str, int]
) -> None:
    evolve = evolver(Fast, leading=("b", "a"))
    base = Fast(0, "z", [1], d=4)
    got = evolve(base, extra, b, a)
    want = dataclasses.replace(base, **{"a": a, "b": b, **extra})
    assert got == want and type(got) is Fast
    assert evolve(base, None, b, a) == dataclasses.replace(base, a=a, b=b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.a = 1  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"no field.*nope"):
        evolve(base, {"nope": 1}, b, a)


def test_leading_fields_must_be_distinct_fields() -> None:
    with pytest.raises(TypeError, match="leading"):
        evolver(Fast, leading=("a", "zz"))
    with pytest.raises(TypeError, match="leading"):
        evolver(Fast, leading=("a", "a"))


def test_submitted_snapshot_equals_the_keyword_construction() -> None:
    from datetime import UTC, datetime

    from chongming_nb.core.models import SUBMIT_FIELDS, TaskSnapshot, submitted_snapshot

    values = (
        "t1", "load", "run-1", ("etl",), 3, datetime(2026, 1, 1, tzinfo=UTC), "thread",
        5, ("t0",), "key-1", 2, "bucket-a", "host:1:k", datetime(2026, 1, 1, 0, 1, tzinfo=UTC),
    )  # fmt: skip
    snap = submitted_snapshot(*values)
    assert type(snap) is TaskSnapshot
    assert snap == TaskSnapshot(**dict(zip(SUBMIT_FIELDS, values, strict=True)))
    with pytest.raises(TypeError, match="takes 14 values"):
        submitted_snapshot(*values[:-1])


make_fast = maker(Fast)


@given(st.integers(), st.text(), st.lists(st.integers()), st.integers())
def test_a_maker_builds_what_the_class_builds(a: int, b: str, c: list[int], d: int) -> None:
    made = make_fast(a, b, c, d=d)
    assert type(made) is Fast
    assert made == Fast(a, b, c, d=d) and repr(made) == repr(Fast(a, b, c, d=d))
    assert make_fast(a) == Fast(a)  # the same defaults
    assert make_fast(a).c is not make_fast(a).c  # a fresh default per instance
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 1  # type: ignore[misc]
    made_by, built_by = inspect.signature(make_fast), inspect.signature(Fast)
    assert made_by.parameters == built_by.parameters and made_by.return_annotation is Fast


def test_a_maker_raises_like_the_class_for_bad_arguments() -> None:
    with pytest.raises(TypeError, match="a"):
        make_fast()
    with pytest.raises(TypeError, match="zzz"):
        make_fast(1, zzz=2)


def test_a_maker_refuses_a_class_with_a_post_init() -> None:
    @fast_init
    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("a < 0")

    with pytest.raises(TypeError, match="__post_init__"):
        maker(Checked)


def test_the_twin_is_a_subclass_that_adds_no_slots() -> None:
    """What keeps a switch cheap: CPython checks a subclass that adds nothing in constant
    time (a sibling with the same slots is compared slot by slot)."""
    twin = _twin(TaskSnapshot)
    assert twin.__bases__ == (TaskSnapshot,) and twin.__slots__ == ()
    assert twin.__basicsize__ == TaskSnapshot.__basicsize__
    assert _twin(TaskSnapshot) is twin  # one per class


@given(st.lists(st.tuples(st.integers(), st.text(), st.lists(st.integers())), max_size=20))
def test_a_column_reader_reads_each_field_of_each_record(
    rows: list[tuple[int, str, list[int]]],
) -> None:
    records = [Plain(a, b, c) for a, b, c in rows]
    read = column_reader(Plain, ["c", "a"])
    cols = read(records)
    assert list(cols) == ["c", "a"]  # in the order asked
    assert cols["a"] == [r.a for r in records]
    assert all(x is r.c for x, r in zip(cols["c"], records, strict=True))  # not copies


@pytest.mark.parametrize("names", [["a", "nope"], ["a", "a"], ["a; import os"], ["__class__"]])
def test_a_column_reader_takes_only_distinct_fields_of_its_class(names: list[str]) -> None:
    with pytest.raises(TypeError, match="Plain: not distinct fields"):
        column_reader(Plain, names)

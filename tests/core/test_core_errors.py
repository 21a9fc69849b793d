"""The exception tree: one root, TaskCancelled deliberately outside ``Exception``."""

from __future__ import annotations

import inspect

import pytest

import chongming_nb.core.errors as errors
from chongming_nb import (
    AttemptsExhausted,
    CircularDependency,
    ConcurrencyConflict,
    ConfigurationError,
    DependencyFailed,
    InvalidTransition,
    StoreError,
    TaskCancelled,
    TaskError,
    TaskExecutionError,
    TaskNotFound,
    TaskStatus,
    TaskTimeout,
    UnknownDependency,
)

ERROR_CLASSES = [
    obj
    for _, obj in inspect.getmembers(errors, inspect.isclass)
    if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
]


def test_the_module_defines_the_expected_classes() -> None:
    names = {c.__name__ for c in ERROR_CLASSES}
    assert {
        "TaskError",
        "InvalidTransition",
        "AttemptsExhausted",
        "DependencyFailed",
        "CircularDependency",
        "TaskTimeout",
        "TaskExecutionError",
        "ConcurrencyConflict",
        "StoreError",
        "ConfigurationError",
        "RetryableError",
        "FatalError",
        "TaskCancelled",
    } <= names


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_derives_from_task_error_except_task_cancelled(cls: type) -> None:
    if issubclass(cls, TaskCancelled):  # TaskCancelled and its Stopped
        assert issubclass(cls, BaseException)
        assert not issubclass(cls, Exception)
        assert not issubclass(cls, TaskError)
    else:
        assert issubclass(cls, TaskError)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_is_drawn_in_the_module_docstring(cls: type) -> None:
    assert errors.__doc__ is not None
    assert cls.__name__ in errors.__doc__


def test_except_exception_does_not_swallow_task_cancelled() -> None:
    def user_code() -> str:
        try:
            raise TaskCancelled()
        except Exception:  # the log-and-continue habit this design protects against
            return "swallowed"

    with pytest.raises(TaskCancelled):
        user_code()


def test_stopped_renders_as_one_line_instead_of_a_traceback() -> None:
    stop = errors.Stopped("convert", 1234, 10_000, 192.4, task_id="t1")
    assert isinstance(stop, TaskCancelled) and not isinstance(stop, Exception)
    assert stop._render_traceback_() == [
        "convert: stopped by you at 1,234 / 10,000 (12%) after 3m12s"
    ]
    assert str(errors.Stopped("x", 3, None, 2.5, by="interrupt")) == (
        "x: stopped by interrupt at 3 after 2.5s"
    )
    assert str(errors.Stopped("x", 1.5, 4, 7322.0)) == (
        "x: stopped by you at 1.50 / 4 (38%) after 2h02m02s"
    )


def test_configuration_subtree() -> None:
    assert issubclass(UnknownDependency, ConfigurationError)
    assert issubclass(CircularDependency, ConfigurationError)


def test_error_payloads() -> None:
    it = InvalidTransition(TaskStatus.RUNNING, "resume", ["paused"], task_id="t")
    assert (it.current, it.requested, it.allowed, it.task_id) == (
        TaskStatus.RUNNING,
        "resume",
        ("paused",),
        "t",
    )
    ae = AttemptsExhausted(3, 3)
    assert (ae.attempt, ae.max_attempts) == (3, 3)
    df = DependencyFailed(["a", "b"])
    assert df.upstream_ids == ("a", "b") and "a, b" in str(df)
    cd = CircularDependency(["a", "b", "a"])
    assert cd.cycle == ("a", "b", "a") and str(cd) == "dependency cycle: a -> b -> a"
    tt = TaskTimeout("idle", 60)
    assert tt.scope == "idle" and str(tt) == "idle timeout after 60s"
    cc = ConcurrencyConflict("t", 4, 5)
    assert (cc.expected, cc.actual) == (4, 5) and "expected status_version 4" in str(cc)
    assert isinstance(StoreError("x"), TaskError)


def test_task_not_found_is_also_a_key_error_with_a_readable_message() -> None:
    err = TaskNotFound("abc")
    assert isinstance(err, KeyError) and isinstance(err, TaskError)
    assert str(err) == "no task with id 'abc'"
    with pytest.raises(KeyError):
        raise err


def test_task_execution_error_keeps_the_cause() -> None:
    with pytest.raises(TaskExecutionError) as ei:
        try:
            {}["missing"]
        except KeyError as exc:
            raise TaskExecutionError("extract failed") from exc
    assert isinstance(ei.value.__cause__, KeyError)

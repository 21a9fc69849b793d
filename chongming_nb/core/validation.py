"""The validation room: every value a public entry point accepts is checked here, before
anything is created.

It lives in ``core`` (pure: no I/O) so that the policies can use it too. The entry
points (``submit``, ``@task``, ``Pipeline.add``, the verbs, the policies) call
small functions of this module; each raises :class:`ConfigurationError` naming the
argument and the value, and changes nothing. The rules are the stores' and the
scheduler's limits, said once:

* integers the stores can hold: 64-bit signed (:data:`INT64_MIN` .. :data:`INT64_MAX`);
* durations: finite, ``>= 0`` (timeouts of a task: ``> 0``), at most
  :data:`MAX_SECONDS` (a deadline must be a date the clock can represent), or None;
* names and other text the stores keep: strings that encode as UTF-8 (no lone
  surrogates, which no store can write).

It also holds the idempotency-key rule (the same key with another function or other
arguments is an error that shows the first call).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

from chongming_nb.core.errors import ConfigurationError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_SECONDS",
    "check_int64",
    "check_reason",
    "check_same_call",
    "check_seconds",
    "check_text",
    "describe_call",
    "storable_text",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: The longest duration accepted, in seconds (about 31.7 years): a deadline computed
#: from it stays a date (``datetime`` ends at year 9999) and a timer a float.
MAX_SECONDS = 1e9


def check_int64(arg: str, value: Any) -> int:
    """An ``int`` (not a bool) that fits a signed 64-bit column."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{arg} must be an int, got {_show(value)}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ConfigurationError(
            f"{arg} must fit in 64 bits ({INT64_MIN} .. {INT64_MAX}), got {_show(value)}"
        )
    return value


def check_seconds(arg: str, value: Any, *, positive: bool = False) -> float | None:
    """None, or a finite number of seconds ``>= 0`` (``> 0`` when ``positive``) and at
    most :data:`MAX_SECONDS`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{arg} must be a number of seconds or None, got {_show(value)}")
    try:
        seconds = float(value)
    except OverflowError:  # an int too big for a float
        seconds = math.inf
    low_ok = seconds > 0 if positive else seconds >= 0
    if not (low_ok and seconds <= MAX_SECONDS):  # NaN fails every comparison
        bound = "> 0" if positive else ">= 0"
        raise ConfigurationError(
            f"{arg} must be a finite number of seconds {bound} and at most {MAX_SECONDS:.0e}, "
            f"got {_show(value)}"
        )
    return seconds


def check_text(arg: str, value: Any, *, empty: bool = False) -> str:
    """A string the stores can write: it encodes as UTF-8, holds no NUL character
    (PostgreSQL text cannot) and, unless ``empty``, is not blank."""
    if not isinstance(value, str):
        raise ConfigurationError(f"{arg} must be a string, got {_show(value)}")
    if not empty and not value.strip():
        raise ConfigurationError(f"{arg} must be a non-empty string, got {_show(value)}")
    nul = value.find("\x00")
    if nul >= 0:
        raise ConfigurationError(
            f"{arg} must not contain a NUL character (\\x00), got {_show(value)} "
            f"(at position {nul})"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(
            f"{arg} must be text that encodes as UTF-8, got {_show(value)} "
            f"({exc.reason} at position {exc.start})"
        ) from None
    return value


def storable_text(text: str) -> str:
    """``text`` as the stores can write it. Text that comes out of a task (a printed
    line, a log message, an exception message, a progress unit) is not refused: its
    lone surrogates, which UTF-8 cannot hold, become backslash escapes (``'\\udcff'``),
    and so do NUL characters (``'\\x00'``), which PostgreSQL text cannot hold, so the
    line is saved instead of failing the store's write. Other text is returned as it
    is (the same object)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def check_reason(value: Any) -> str | None:
    """None, or a reason text the stores can write (empty allowed)."""
    return None if value is None else check_text("reason", value, empty=True)


# ------------------------------------------------------------ idempotency keys

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlevel = 3


def _show(value: Any) -> str:
    """A short repr that never raises (what error messages quote)."""
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<{type(value).__name__} object (repr failed)>"


def _function_key(fn: Any) -> tuple[str, str] | None:
    module = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None)
    if isinstance(module, str) and isinstance(qual, str):
        return module, qual
    return None


def _same_function(a: Any, b: Any) -> bool:
    """The same object, or a function of the same module and qualified name (a notebook
    cell run again defines a new function object for the same task)."""
    if a is b:
        return True
    key = _function_key(a)
    return key is not None and key == _function_key(b)


def _same_value(a: Any, b: Any) -> bool:
    """Equal, as far as ``==`` can tell; a comparison that raises or has no truth value
    (arrays, frames) cannot tell, and then the key decides."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:
        return True


def describe_call(fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], inject: bool) -> str:
    """``name(ctx, 'a', limit=3)``: a call as a message shows it (never raises)."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    parts = ["ctx"] if inject else []
    parts += [_show(a) for a in args]
    parts += [f"{k}={_show(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def check_same_call(
    key: str,
    first_id: str,
    first: tuple[Callable[..., Any] | None, tuple[Any, ...], Mapping[str, Any], bool],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> None:
    """A submit that reuses ``key`` must make the same call as the task that has it."""
    first_fn, first_args, first_kwargs, inject = first
    if first_fn is None:  # a task adopted from the store: its code is not known here
        return
    if not _same_function(first_fn, fn):
        what = "function"
    elif (
        len(first_args) != len(args)
        or set(first_kwargs) != set(kwargs)
        or not all(_same_value(a, b) for a, b in zip(first_args, args, strict=True))
        or not all(_same_value(first_kwargs[k], kwargs[k]) for k in kwargs)
    ):
        what = "arguments"
    else:
        return
    raise ConfigurationError(
        f"idempotency_key {key!r} was first used by task {first_id}, "
        f"{describe_call(first_fn, first_args, first_kwargs, inject)}; this call has "
        f"different {what}: {describe_call(fn, args, kwargs, inject)}. The key returns "
        "the first task only for the same call: use another key for another call"
    )

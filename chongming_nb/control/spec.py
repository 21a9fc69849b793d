"""``@task`` and the task registry.

``@task`` only attaches a TaskSpec to the function and returns the same function: no
global registry, no wrapper (so the function stays picklable by reference for the
process and dask executors, and stays callable in tests).
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, TypeVar, Unpack, overload

from chongming_nb.core._fast import evolver
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.policies import RetryPolicy, Timeout
from chongming_nb.core.validation import check_int64, check_seconds, check_text
from chongming_nb.runtime.executors import Executor

F = TypeVar("F", bound=Callable[..., Any])

SPEC_ATTR = "__chongming_task__"


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: Timeout = field(default_factory=Timeout)
    tags: frozenset[str] = frozenset()
    priority: int | None = None
    executor: str | Executor | None = None
    compensate: Callable[..., Any] | None = None
    #: a delayed start: seconds after submit, or a fixed time (at most one of the two)
    delay: float | None = None
    not_before: datetime | None = None

    def merged(self, **overrides: Any) -> TaskSpec:
        changes = {k: v for k, v in overrides.items() if v is not None}
        return _evolve_spec(self, changes) if changes else self

    def evolve(self, **changes: Any) -> TaskSpec:
        """A copy with ``changes`` (like ``dataclasses.replace``, without its per-call
        field inspection: pipelines make one per node)."""
        return _evolve_spec(self, changes)


_evolve_spec = evolver(TaskSpec)


def _validate(
    name: str | None,
    retry: RetryPolicy | int | None,
    timeout: Timeout | float | None = None,
    tags: Iterable[str] | None = None,
    priority: int | None = None,
    compensate: Callable[..., Any] | None = None,
    delay: float | None = None,
    not_before: datetime | None = None,
) -> dict[str, Any]:
    """The task options of ``submit``, ``@task`` and ``Pipeline.add`` (see
    ``core/validation.py`` for the rules): what changes, or a ConfigurationError."""
    out: dict[str, Any] = {}
    if name is not None:
        out["name"] = check_text("task name", name)
    if retry is not None:
        if isinstance(retry, bool) or not isinstance(retry, RetryPolicy | int):
            raise ConfigurationError(f"retry must be a RetryPolicy or an int, got {retry!r}")
        if isinstance(retry, int) and check_int64("retry", retry) < 1:
            raise ConfigurationError(f"retry (max attempts) must be >= 1, got {retry!r}")
        out["retry"] = RetryPolicy(max_attempts=retry) if isinstance(retry, int) else retry
    if timeout is not None:
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            timeout = Timeout(per_attempt=check_seconds("timeout", timeout, positive=True))
        if not isinstance(timeout, Timeout):
            raise ConfigurationError(f"timeout must be a Timeout or seconds, got {timeout!r}")
        out["timeout"] = timeout
    if tags is not None:
        if isinstance(tags, str):
            tags = {tags}
        try:
            tag_set = frozenset(tags)
        except TypeError:
            raise ConfigurationError(f"tags must be strings, got {tags!r}") from None
        if not all(isinstance(t, str) and t for t in tag_set):
            raise ConfigurationError(
                f"tags must be non-empty strings, got {sorted(map(repr, tag_set))}"
            )
        for t in tag_set:
            check_text("tag", t)
        out["tags"] = tag_set
    if priority is not None:
        out["priority"] = check_int64("priority", priority)
    if compensate is not None:
        if not callable(compensate):
            raise ConfigurationError(f"compensate must be callable, got {compensate!r}")
        out["compensate"] = compensate
    out.update(check_start(delay, not_before))
    return out


def check_start(delay: Any, not_before: Any) -> dict[str, Any]:
    """``delay=`` (seconds) or ``not_before=`` (a timezone-aware datetime), at most one."""
    if delay is not None and not_before is not None:
        raise ConfigurationError("give delay= or not_before=, not both")
    if delay is not None:
        return {"delay": check_seconds("delay", delay)}
    if not_before is not None:
        if not isinstance(not_before, datetime) or not_before.tzinfo is None:
            raise ConfigurationError(
                f"not_before must be a timezone-aware datetime, got {not_before!r} "
                "(e.g. datetime(2026, 1, 2, 6, 0, tzinfo=timezone.utc))"
            )
        return {"not_before": not_before}
    return {}


class TaskOptions(TypedDict, total=False):
    """The keywords of ``@task(...)`` (for type checkers; ``task`` itself names them)."""

    name: str | None
    retry: RetryPolicy | int | None
    timeout: Timeout | float | None
    tags: Iterable[str] | None
    priority: int | None
    executor: str | Executor | None
    compensate: Callable[..., Any] | None
    delay: float | None
    not_before: datetime | None


@overload
def task(fn: F, /) -> F: ...


@overload
def task(fn: None = None, /, **options: Unpack[TaskOptions]) -> Callable[[F], F]: ...


def task(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | int | None = None,
    timeout: Timeout | float | None = None,
    tags: Iterable[str] | None = None,
    priority: int | None = None,
    executor: str | Executor | None = None,
    compensate: Callable[..., Any] | None = None,
    delay: float | None = None,
    not_before: datetime | None = None,
) -> F | Callable[[F], F]:
    """Declare a task: ``@task`` or ``@task(retry=..., timeout=..., tags=...)``.
    ``delay=`` (seconds) or ``not_before=`` (a datetime) delays every submit of it."""
    opts = _validate(name, retry, timeout, tags, priority, compensate, delay, not_before)
    if executor is not None:
        opts["executor"] = executor

    def decorate(f: F) -> F:
        if not callable(f):
            raise ConfigurationError(f"@task decorates a callable, got {f!r}")
        spec = TaskSpec(name=opts.pop("name", None) or _default_name(f), **opts)
        setattr(f, SPEC_ATTR, spec)
        return f

    return decorate(fn) if fn is not None else decorate


def _default_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def spec_of(fn: Callable[..., Any]) -> TaskSpec:
    spec = getattr(fn, SPEC_ATTR, None)
    if isinstance(spec, TaskSpec):
        return spec
    cached = _cached(fn, "spec")
    if isinstance(cached, TaskSpec):
        return cached
    spec = TaskSpec(name=_default_name(fn))
    _remember(fn, "spec", spec)
    return spec


# Per-function facts that submit() needs every time (signature, default spec): computing
# them dominates a cheap task's submit. Keyed by identity (``id(fn)``) with a weak
# reference beside the facts, so a function (or a lambda made per call) is not kept
# alive, and a lookup is one dict read plus one reference call (a WeakKeyDictionary
# builds a new weak reference on every lookup). Callables that take no weak reference
# are simply not cached.
_FACTS: dict[int, tuple[weakref.ref[Any], dict[str, Any]]] = {}
_FACTS_LOCK = threading.Lock()


def _facts_of(fn: Any) -> dict[str, Any] | None:
    entry = _FACTS.get(id(fn))
    if entry is not None and entry[0]() is fn:  # not a dead function's reused id
        return entry[1]
    return None


def _forget(key: int, ref: weakref.ref[Any]) -> None:
    # the weak reference's callback (fn died): runs inside any thread's collection, so
    # it takes no lock; a racing new entry under the same id is at worst dropped
    entry = _FACTS.get(key)
    if entry is not None and entry[0] is ref:
        _FACTS.pop(key, None)


def _cached(fn: Any, key: str) -> Any:
    facts = _facts_of(fn)
    return None if facts is None else facts.get(key)


def _remember(fn: Any, key: str, value: Any) -> None:
    facts = _facts_of(fn)
    if facts is not None:
        facts[key] = value  # one dict store (atomic): no lock once fn has its entry
        return
    with _FACTS_LOCK:
        facts = _facts_of(fn)
        if facts is None:
            try:
                ref = weakref.ref(fn, functools.partial(_forget, id(fn)))
            except TypeError:  # not weak-referenceable
                return
            facts = {}
            _FACTS[id(fn)] = (ref, facts)
        facts[key] = value


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    sig = _cached(fn, "sig")
    if sig is None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = False
        _remember(fn, "sig", sig)
    return sig or None


_CTX_NAMES = ("ctx", "context")


def wants_context(fn: Callable[..., Any]) -> bool:
    """Does ``fn`` take the TaskContext as its first argument?

    Yes when its first positional parameter is called ``ctx``/``context`` or is annotated
    TaskContext. Other callables (``time.sleep``, ``pd.read_csv``) are called as they are;
    they cannot checkpoint, so a stop can only abandon them.
    """
    known = _cached(fn, "ctx")
    if known is not None:
        return bool(known)
    answer = _wants_context(fn)
    _remember(fn, "ctx", answer)
    return answer


def _wants_context(fn: Callable[..., Any]) -> bool:
    sig = _signature(fn)
    if sig is None:
        return False
    params = [
        p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not params:
        return False
    first = params[0]
    ann = first.annotation
    ann_name = ann if isinstance(ann, str) else getattr(ann, "__name__", "")
    return first.name in _CTX_NAMES or str(ann_name).endswith("TaskContext")


def check_arguments(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], inject: bool
) -> None:
    """Bind the call now, so a wrong call fails at submit time and not in a thread."""
    sig = _signature(fn)
    if sig is None:
        return
    if not kwargs and len(args) + inject == _plain_arity(fn, sig):
        return  # only plain positional parameters, all given: what bind() would accept
    try:
        if inject:
            sig.bind(None, *args, **kwargs)
        else:
            sig.bind(*args, **kwargs)
    except TypeError as exc:
        name = _default_name(fn)
        raise ConfigurationError(
            f"{name}{sig}: cannot be called with these arguments: {exc}"
        ) from None


def _plain_arity(fn: Callable[..., Any], sig: inspect.Signature) -> int:
    """The parameter count when every parameter is positional-or-keyword without a
    default (so a call binds iff it passes exactly that many positional arguments);
    -1 for any other signature."""
    arity = _cached(fn, "arity")
    if arity is None:
        params = sig.parameters.values()
        plain = all(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
            for p in params
        )
        arity = len(params) if plain else -1
        _remember(fn, "arity", arity)
    return int(arity)


def submit_facts(fn: Callable[..., Any]) -> tuple[TaskSpec, bool, int | None]:
    """``(spec_of(fn), wants_context(fn), arity)`` with one cache lookup (submit's hot
    path). ``arity``: the plain positional parameter count ``check_arguments`` has
    cached (-1: not plain; None: not known yet), so a call that passes exactly that many
    positional arguments needs no binding check."""
    spec = getattr(fn, SPEC_ATTR, None)
    facts = _facts_of(fn)
    if facts is not None:
        if not isinstance(spec, TaskSpec):
            spec = facts.get("spec")
        inject = facts.get("ctx")
        if isinstance(spec, TaskSpec) and inject is not None:
            return spec, bool(inject), facts.get("arity")
    return spec_of(fn), wants_context(fn), None


class TaskRegistry:
    """Task definitions by name. Only registered names can be started from outside the
    kernel (e.g. requeued by ``reconcile``); the control plane never receives code."""

    def __init__(self) -> None:
        self._by_name: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def register(self, fn: Callable[..., Any], name: str | None = None) -> str:
        key = name or spec_of(fn).name
        if self._by_name.get(key) is fn:
            return key  # already there (a dict read is atomic): no lock per submit
        with self._lock:
            self._by_name[key] = fn
        return key

    def get(self, name: str) -> Callable[..., Any]:
        with self._lock:
            try:
                return self._by_name[name]
            except KeyError:
                raise ConfigurationError(f"no task registered under the name {name!r}") from None

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._by_name

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._by_name)

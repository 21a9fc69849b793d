"""Pipelines: a static DAG of named nodes (``Pipeline``, ``Node``) and its runs
(``PipelineRun``) on a Controller.

A run is ordinary controller tasks tagged with the run id. The controller does the
per-task work: dependencies wait BLOCKED (holding no slot), each node's ``JoinMode`` is
checked when an upstream settles, ``when=`` is evaluated at release, upstream results
are injected before release. This module adds what belongs to the run as a whole:

* validation before any task exists (unknown dependency, cycle, unknown mode, bad
  ``when``/``join``/arguments) — an error creates nothing;
* the run-level ``AggregationPolicy``: FAIL_FAST holds the run the moment a task
  fails (under the controller lock, so nothing of the run starts afterwards) and
  cancels whatever has not started; ALL_SETTLED lets every branch settle; ``quorum(n)``
  succeeds when at least n nodes succeeded. CANCELLED is a result, never a trigger;
* fan-out (``map``), created once the items are known, with ``max_parallel`` as a
  controller tag limit;
* run-level pause / resume / stop, cascading to every non-terminal task;
* compensation (rollback) of succeeded nodes in reverse order of success;
* node outputs persisted per node (pluggable serializer, pickle by default) so that
  ``submit(ctl, resume_from=run_id)`` re-runs only what did not succeed — also from a
  new controller on the same store after a kernel crash;
* ``PipelineRunStatusChanged`` events, a RunRecord in the store, ``summary()`` and
  ``to_frame()``.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import pickle
import re
import secrets
import tempfile
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from chongming_nb.control.spec import _validate, check_arguments, spec_of, wants_context
from chongming_nb.core.errors import (
    CircularDependency,
    ConfigurationError,
    InvalidTransition,
    TaskNotFound,
)
from chongming_nb.core.events import (
    CompensationRan,
    PipelineRunStatusChanged,
    TaskWarning,
)
from chongming_nb.core.graph import Graph
from chongming_nb.core.models import FailureKind, TaskSnapshot
from chongming_nb.core.policies import AggregationKind, AggregationPolicy, JoinMode, RetryPolicy
from chongming_nb.core.states import TERMINAL, UNOCCUPIED, TaskStatus

log = logging.getLogger("chongming_nb.pipeline")

S = TaskStatus

__all__ = [
    "Node",
    "PickleSerializer",
    "Pipeline",
    "PipelineRun",
    "PipelineRunStatus",
    "Serializer",
]

#: RunRecord saves while a run is busy happen at most this often (and always at the end).
RECORD_INTERVAL = 0.5


# ----------------------------------------------------------------- serializers


@runtime_checkable
class Serializer(Protocol):
    """How a node's output is written to and read back from one file."""

    suffix: str

    def dump(self, value: Any, path: Path) -> None: ...

    def load(self, path: Path) -> Any: ...


class PickleSerializer:
    """The default: ``pickle`` at the highest protocol."""

    suffix = ".pkl"

    def dump(self, value: Any, path: Path) -> None:
        with open(path, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)

    def load(self, path: Path) -> Any:
        with open(path, "rb") as f:
            return pickle.load(f)

    def __repr__(self) -> str:
        return "PickleSerializer()"


def _check_serializer(ser: Any) -> Serializer:
    if not (
        isinstance(getattr(ser, "suffix", None), str)
        and callable(getattr(ser, "dump", None))
        and callable(getattr(ser, "load", None))
    ):
        raise ConfigurationError(
            f"serializer must have .suffix (str), .dump(value, path) and .load(path); got {ser!r}"
        )
    return ser  # type: ignore[no-any-return]


# ----------------------------------------------------------------- statuses


class PipelineRunStatus(StrEnum):
    """A run's aggregated status (see ``PipelineRun.status``)."""

    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


RUN_TERMINAL = frozenset(
    {PipelineRunStatus.SUCCEEDED, PipelineRunStatus.FAILED, PipelineRunStatus.STOPPED}
)
#: Task statuses that hold a fail-fast run at once.
FAILURES = frozenset({S.FAILED, S.LOST})


# ----------------------------------------------------------------- definition


class Node:
    """One step of a Pipeline (what ``add`` / ``map`` return). Use it in ``deps=``, as
    a key of the ``up`` mapping ``when=`` gets, and in ``ctx.upstream(node)``."""

    __slots__ = (
        "__weakref__",
        "args",
        "compensate",
        "deps",
        "fn",
        "items",
        "join",
        "kwargs",
        "max_parallel",
        "name",
        "pipeline",
        "serializer",
        "spec",
        "when",
    )

    def __init__(
        self,
        pipeline: Pipeline,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        deps: tuple[str, ...],
        when: Callable[[Mapping[Any, Any]], Any] | None,
        join: JoinMode,
        spec: Any,
        compensate: Callable[..., Any] | None,
        serializer: Serializer | None,
        items: Any = None,
        max_parallel: int | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.name = name
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.deps = deps
        self.when = when
        self.join = join
        self.spec = spec
        self.compensate = compensate
        self.serializer = serializer
        self.items = items
        self.max_parallel = max_parallel

    @property
    def is_map(self) -> bool:
        return self.items is not None

    def __repr__(self) -> str:
        kind = "map " if self.is_map else ""
        deps = f" deps={list(self.deps)}" if self.deps else ""
        return f"<Node {kind}{self.name!r} of {self.pipeline.name!r}{deps}>"


_NOT_A_MAP = object()


def _join(join: Any) -> JoinMode:
    try:
        return JoinMode(join)
    except ValueError:
        known = ", ".join(j.value for j in JoinMode)
        raise ConfigurationError(f"unknown join {join!r}; use one of: {known}") from None


class Pipeline:
    """A named DAG of steps, defined once and submitted any number of times.

    ``on_failure``: the run-level AggregationPolicy (FAIL_FAST, ALL_SETTLED, quorum(n)).
    ``modes``: named, ordered subsets of nodes, e.g. ``{"core": ["extract", "load"]}``.
    ``serializer``: how node outputs are persisted for ``resume_from`` (pickle);
    ``persist_outputs=False`` keeps outputs in memory only (no resume).
    """

    def __init__(
        self,
        name: str,
        on_failure: AggregationPolicy = AggregationPolicy.FAIL_FAST,
        modes: Mapping[str, Sequence[str | Node]] | None = None,
        *,
        serializer: Serializer | None = None,
        persist_outputs: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"a pipeline needs a non-empty name, got {name!r}")
        if not isinstance(on_failure, AggregationPolicy):
            raise ConfigurationError(
                f"on_failure must be an AggregationPolicy (FAIL_FAST, ALL_SETTLED, "
                f"quorum(n)), got {on_failure!r}"
            )
        self.name = name
        self.on_failure = on_failure
        self.serializer: Serializer = _check_serializer(serializer or PickleSerializer())
        self.persist_outputs = bool(persist_outputs)
        self._nodes: dict[str, Node] = {}
        self.modes: dict[str, tuple[str, ...]] = {}
        if modes is not None:
            if not isinstance(modes, Mapping):
                raise ConfigurationError(f"modes must be a mapping name -> [nodes], got {modes!r}")
            for mode, members in modes.items():
                if not isinstance(mode, str) or not mode:
                    raise ConfigurationError(f"mode names are non-empty strings, got {mode!r}")
                if isinstance(members, str) or not isinstance(members, Iterable):
                    raise ConfigurationError(f"mode {mode!r} must list node names, got {members!r}")
                names = tuple(self._dep_name(m, f"mode {mode!r}") for m in members)
                dup = sorted({n for n in names if names.count(n) > 1})
                if dup:
                    raise ConfigurationError(f"mode {mode!r} lists {dup} more than once")
                self.modes[mode] = names

    # ------------------------------------------------------------- building

    def _dep_name(self, d: Any, where: str) -> str:
        if isinstance(d, Node):
            if d.pipeline is not self:
                raise ConfigurationError(
                    f"{where}: {d!r} belongs to pipeline {d.pipeline.name!r}, not {self.name!r}"
                )
            return d.name
        if isinstance(d, str) and d:
            return d
        raise ConfigurationError(
            f"{where}: dependencies are Nodes of this pipeline or node names, got {d!r}"
        )

    def _new_name(self, name: str | None, fn: Callable[..., Any]) -> str:
        if name is not None:
            if not isinstance(name, str) or not name.strip():
                raise ConfigurationError(f"node name must be a non-empty string, got {name!r}")
            if name in self._nodes:
                raise ConfigurationError(f"pipeline {self.name!r} already has a node {name!r}")
            return name
        base = spec_of(fn).name
        cand, i = base, 2
        while cand in self._nodes:
            cand, i = f"{base}-{i}", i + 1
        return cand

    def add(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        deps: Iterable[Node | str] = (),
        when: Callable[[Mapping[Any, Any]], Any] | None = None,
        retry: RetryPolicy | int | None = None,
        join: JoinMode | str = JoinMode.ALL_SUCCEEDED,
        name: str | None = None,
        *,
        compensate: Callable[..., Any] | None = None,
        timeout: Any = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        executor: Any = None,
        serializer: Serializer | None = None,
    ) -> Node:
        """Add a step: ``fn(ctx?, *args, **kwargs)`` once ``deps`` allow (``join``) and
        ``when(up)`` is true (``up[node]`` is an upstream result). ``compensate`` (or
        ``@task(compensate=...)``) undoes it on rollback and gets its output."""
        return self._add(
            fn, args, kwargs, deps, when, retry, join, name, compensate, timeout, tags,
            priority, executor, serializer, _NOT_A_MAP, None,
        )  # fmt: skip

    def map(
        self,
        fn: Callable[..., Any],
        items: Any,
        deps: Iterable[Node | str] = (),
        max_parallel: int | None = None,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        when: Callable[[Mapping[Any, Any]], Any] | None = None,
        retry: RetryPolicy | int | None = None,
        join: JoinMode | str = JoinMode.ALL_SUCCEEDED,
        name: str | None = None,
        compensate: Callable[..., Any] | None = None,
        timeout: Any = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        executor: Any = None,
        serializer: Serializer | None = None,
    ) -> Node:
        """Fan out: one task ``fn(ctx?, item, *args, **kwargs)`` per item, at most
        ``max_parallel`` at a time; the node's result is the list of their results.

        ``items``: a list (or any finite iterable), a Node whose result is the list, or a
        callable ``items(up)`` of the upstream results. The tasks are created once the
        items are known, i.e. when the dependencies allow."""
        if items is None or items is _NOT_A_MAP:
            raise ConfigurationError("map() needs items: a list, a Node or a callable(up)")
        if isinstance(items, Node):
            dep_list = list(deps)
            if not any(self._dep_name(d, "deps") == items.name for d in dep_list):
                dep_list.append(items)
            deps = dep_list
        elif callable(items):
            pass
        elif isinstance(items, str | bytes) or not isinstance(items, Iterable):
            raise ConfigurationError(
                f"map() items must be a list, a Node or a callable(up), got {items!r}"
            )
        else:
            items = list(items)
        if max_parallel is not None and (
            isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1
        ):
            raise ConfigurationError(f"max_parallel must be an int >= 1, got {max_parallel!r}")
        return self._add(
            fn, args, kwargs, deps, when, retry, join, name, compensate, timeout, tags,
            priority, executor, serializer, items, max_parallel,
        )  # fmt: skip

    def _add(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        deps: Iterable[Node | str],
        when: Any,
        retry: Any,
        join: Any,
        name: str | None,
        compensate: Any,
        timeout: Any,
        tags: Any,
        priority: Any,
        executor: Any,
        serializer: Any,
        items: Any,
        max_parallel: int | None,
    ) -> Node:
        if not callable(fn):
            raise ConfigurationError(f"a node needs a callable, got {fn!r}")
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise ConfigurationError(f"args must be a tuple or list, got {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigurationError(f"kwargs must be a mapping, got {kwargs!r}")
        if when is not None and not callable(when):
            raise ConfigurationError(f"when= must be a callable(up) -> bool, got {when!r}")
        join_mode = _join(join)
        node_name = self._new_name(name, fn)
        if isinstance(deps, Node | str) or not isinstance(deps, Iterable):
            deps = [deps]
        dep_names = tuple(dict.fromkeys(self._dep_name(d, f"node {node_name!r}") for d in deps))
        if node_name in dep_names:
            raise CircularDependency([node_name, node_name])
        if when is not None and not dep_names:
            raise ConfigurationError(
                f"node {node_name!r}: when= decides on upstream results, so it needs deps"
            )
        over = _validate(None, retry, timeout, tags, priority, compensate)
        spec = spec_of(fn).merged(**over, executor=executor)
        ser = _check_serializer(serializer) if serializer is not None else None
        node = Node(
            self,
            node_name,
            fn,
            tuple(args),
            dict(kwargs or {}),
            dep_names,
            when,
            join_mode,
            spec,
            spec.compensate,
            ser,
            None if items is _NOT_A_MAP else items,
            max_parallel,
        )
        # bind the call now: a wrong call fails here, not in a thread
        lead: tuple[Any, ...] = (None,) if node.is_map else ()
        check_arguments(fn, lead + node.args, node.kwargs, wants_context(fn))
        self._nodes[node_name] = node
        return node

    # ---------------------------------------------------------------- views

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def __getitem__(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(f"pipeline {self.name!r} has no node {name!r}") from None

    def __len__(self) -> int:
        return len(self._nodes)

    def graph(self) -> Graph:
        """The validated DAG (raises UnknownDependency / CircularDependency)."""
        return Graph({n.name: n.deps for n in self._nodes.values()})

    def plan(self, mode: str | None = None) -> list[Node]:
        """The nodes a run in ``mode`` executes, in order. Validates everything a
        submit would (and creates nothing)."""
        graph = self.graph()
        if mode is None:
            order = list(graph.topological_order())
        else:
            if not isinstance(mode, str):
                raise ConfigurationError(f"mode must be a string, got {mode!r}")
            if mode not in self.modes:
                known = ", ".join(repr(m) for m in self.modes) or "none defined"
                raise ConfigurationError(
                    f"unknown mode {mode!r} for pipeline {self.name!r}; known modes: {known}"
                )
            order = list(self.modes[mode])
            missing = [n for n in order if n not in self._nodes]
            if missing:
                raise ConfigurationError(
                    f"mode {mode!r} names unknown node(s): {', '.join(map(repr, missing))}"
                )
            pos = {n: i for i, n in enumerate(order)}
            for n in order:
                for d in self._nodes[n].deps:
                    if d not in pos:
                        raise ConfigurationError(
                            f"mode {mode!r} selects {n!r} but not its dependency {d!r}"
                        )
                    if pos[d] > pos[n]:
                        raise ConfigurationError(
                            f"mode {mode!r} lists {n!r} before its dependency {d!r}; "
                            "a mode's order is its execution order"
                        )
        nodes = [self._nodes[n] for n in order]
        pol = self.on_failure
        if pol.kind is AggregationKind.QUORUM and pol.n is not None and pol.n > len(nodes):
            raise ConfigurationError(
                f"{pol!r} can never be reached: the run has {len(nodes)} node(s)"
            )
        return nodes

    # --------------------------------------------------------------- submit

    def submit(
        self,
        ctl: Any,
        mode: str | None = None,
        rollback: bool = False,
        resume_from: str | PipelineRun | None = None,
    ) -> PipelineRun:
        """Start a run on ``ctl``; returns its PipelineRun at once.

        ``rollback=True``: if the run fails, the ``compensate`` callables of its succeeded
        nodes run in reverse order of success. ``resume_from``: a previous run (or its
        id): nodes that succeeded there are not run again; their persisted outputs feed
        the rest. Everything is validated first; an error creates no task.
        """
        from chongming_nb.control.controller import Controller

        if not isinstance(ctl, Controller):
            raise ConfigurationError(f"submit() needs a Controller, got {ctl!r}")
        nodes = self.plan(mode)
        previous: _Previous | None = None
        if resume_from is not None:
            rid = resume_from.id if isinstance(resume_from, PipelineRun) else resume_from
            if not isinstance(rid, str):
                raise ConfigurationError(f"resume_from must be a run id, got {resume_from!r}")
            previous = _load_previous(ctl, rid)
        run = PipelineRun(self, ctl, nodes, mode, bool(rollback), previous)
        run._start()
        return run

    def __repr__(self) -> str:
        modes = f" modes={list(self.modes)}" if self.modes else ""
        return f"<Pipeline {self.name!r} nodes={len(self._nodes)} {self.on_failure!r}{modes}>"


# ------------------------------------------------------------- task bodies

_P = inspect.Parameter
#: Signatures of the task bodies below, given up front: the controller inspects every
#: submitted callable, and deriving a signature per instance is the hot spot of a big run.
_SIG_CTX_ANY = inspect.Signature(
    [
        _P("ctx", _P.POSITIONAL_OR_KEYWORD),
        _P("args", _P.VAR_POSITIONAL),
        _P("kwargs", _P.VAR_KEYWORD),
    ]
)
_SIG_CTX = inspect.Signature([_P("ctx", _P.POSITIONAL_OR_KEYWORD)])
_SIG_NONE = inspect.Signature([])


class _NodeCall:
    """The body of a node's task: the user's function, then its output persisted (before
    the task reports success, so "succeeded" implies "saved" for resume)."""

    __slots__ = ("__chongming_task__", "fn", "inject", "save_to", "serializer")
    __signature__ = _SIG_CTX_ANY

    def __init__(
        self,
        fn: Callable[..., Any],
        inject: bool,
        save_to: Path | None = None,
        serializer: Serializer | None = None,
        spec: Any = None,
    ) -> None:
        self.fn = fn
        self.inject = inject
        self.save_to = save_to
        self.serializer = serializer
        # the node's TaskSpec, so the controller does not build a default one per task
        self.__chongming_task__ = spec if spec is not None else spec_of(fn)

    def __call__(self, ctx: Any, *args: Any, **kwargs: Any) -> Any:
        value = self.fn(ctx, *args, **kwargs) if self.inject else self.fn(*args, **kwargs)
        if inspect.iscoroutine(value):
            import asyncio

            value = asyncio.run(value)
        if self.save_to is not None and self.serializer is not None:
            _save_output(ctx, value, self.save_to, self.serializer)
        return value


def _save_output(ctx: Any, value: Any, path: Path, ser: Serializer) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        ser.dump(value, tmp)
        os.replace(tmp, path)  # atomic: a crash never leaves a half-written output
    except Exception as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        msg = (
            f"output of {ctx.name!r} not saved ({type(exc).__name__}: {exc}); "
            "a resumed run will run this node again"
        )
        ctx.log.warning(msg)
        ctx.emit("output_not_saved", {"message": msg})


class _Expand:
    """A map node's first task: resolve the items (static, a node's result, or
    ``items(up)``) into a list."""

    __slots__ = ("items", "node")
    __signature__ = _SIG_CTX

    def __init__(self, items: Any, node: str) -> None:
        self.items = items
        self.node = node

    def __call__(self, ctx: Any) -> list[Any]:
        items = self.items
        if isinstance(items, Node):
            value = ctx.upstream(items.name)
        elif callable(items):
            value = items(_CtxUpstream(ctx))
        else:
            value = items
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise ConfigurationError(
                f"map {self.node!r}: items must be a list (or iterable), got {type(value).__name__}"
            )
        return list(value)


class _RunWhen:
    """``when=`` of a node: ``up`` holds its direct dependencies' results (the
    controller's view) and, on top, those of any succeeded node further upstream."""

    __slots__ = ("ancestors", "fn", "run")

    def __init__(self, run: PipelineRun, fn: Callable[..., Any], ancestors: set[str]) -> None:
        self.run = run
        self.fn = fn
        self.ancestors = ancestors

    def __call__(self, up: Mapping[Any, Any]) -> Any:
        return self.fn(_RunUp(self, up))


class _RunUp(Mapping[Any, Any]):
    def __init__(self, when: _RunWhen, up: Mapping[Any, Any]) -> None:
        self._when = when
        self._up = up

    def __getitem__(self, key: Any) -> Any:
        try:
            return self._up[key]
        except KeyError:
            name = key.name if isinstance(key, Node) else key
            if not isinstance(name, str) or name not in self._when.ancestors:
                raise
            # called under the controller's lock (at release): no run lock here
            nr = self._when.run._nodes.get(name)
            tid = nr.task_id if nr is not None else None
            ctl = self._when.run.ctl
            if tid is None or ctl.get(tid).status is not S.SUCCEEDED:
                raise
            return ctl.result(tid)

    def __iter__(self) -> Any:
        return iter(self._up)

    def __len__(self) -> int:
        return len(self._up)


class _CtxUpstream(Mapping[Any, Any]):
    """``up`` for ``items(up)``: upstream results by node, name, handle or task id."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def __getitem__(self, key: Any) -> Any:
        return self._ctx.upstream(key)

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


class _Gather:
    """A map node's last task: the children's results, in item order."""

    __slots__ = ("ids",)
    __signature__ = _SIG_CTX

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = tuple(ids)

    def __call__(self, ctx: Any) -> list[Any]:
        return [ctx.upstream(i) for i in self.ids]


class _Restored:
    """A node restored from an earlier run: returns the stored output."""

    __slots__ = ("value",)
    __signature__ = _SIG_NONE

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value


# ------------------------------------------------------------------ resume


@dataclass
class _Previous:
    run_id: str
    outputs: dict[str, Path]  # node -> stored output (succeeded there)
    compensated: set[str]


def _artifacts_root(ctl: Any) -> Path:
    root = getattr(ctl, "artifacts_root", None)
    if root is None:
        return Path(tempfile.gettempdir()) / "chongming-artifacts"
    return Path(root)


def _file_name(node: str, suffix: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", node)[:60]
    digest = hashlib.blake2b(node.encode("utf-8"), digest_size=4).hexdigest()
    return f"{safe}-{digest}{suffix}"


_RUNS: weakref.WeakValueDictionary[str, PipelineRun] = weakref.WeakValueDictionary()


def _load_previous(ctl: Any, run_id: str) -> _Previous:
    """What an earlier run left: from this process, the store's RunRecord, or the
    manifest next to its outputs (all three are merged when present)."""
    outputs: dict[str, Path] = {}
    compensated: set[str] = set()
    found = False
    outputs_dir: Path | None = None
    mem = _RUNS.get(run_id)
    if mem is not None:
        found = True
        with mem._lock:
            spec = mem._spec()
        outputs_dir = Path(spec["outputs_dir"]) if spec.get("outputs_dir") else None
        _merge_spec(spec, outputs, compensated)
    store = getattr(ctl, "store", None)
    if store is not None:
        try:
            rec = store.get_run(run_id)
        except Exception as exc:
            log.warning("could not read run %s from the store: %s", run_id, exc)
            rec = None
        if rec is not None:
            found = True
            spec = dict(rec.spec)
            if spec.get("outputs_dir"):
                outputs_dir = Path(spec["outputs_dir"])
            _merge_spec(spec, outputs, compensated)
    if outputs_dir is None:
        cand = _artifacts_root(ctl) / "pipelines" / run_id
        if (cand / "manifest.jsonl").exists():
            outputs_dir = cand
    if outputs_dir is not None:
        manifest = outputs_dir / "manifest.jsonl"
        if manifest.exists():
            found = True
            for line in manifest.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    rec_line = json.loads(line)
                    if rec_line.get("event") == "succeeded":
                        outputs[rec_line["node"]] = Path(rec_line["output"])
                    elif rec_line.get("event") == "compensated":
                        compensated.add(rec_line["node"])
    if not found:
        raise ConfigurationError(
            f"resume_from: unknown run {run_id!r} (not in this process, the store, or "
            f"{_artifacts_root(ctl) / 'pipelines'})"
        )
    for n in compensated:
        outputs.pop(n, None)  # rolled back: its effects are gone, run it again
    return _Previous(run_id, outputs, compensated)


def _merge_spec(spec: Mapping[str, Any], outputs: dict[str, Path], comp: set[str]) -> None:
    for n in spec.get("nodes", ()):
        if n.get("status") == S.SUCCEEDED.value and n.get("output"):
            outputs[n["name"]] = Path(n["output"])
    comp.update(spec.get("compensated", ()))


# -------------------------------------------------------------------- runs


@dataclass(slots=True)
class _TaskInfo:
    node: str
    role: str  # node | expander | child | collector
    deps: tuple[str, ...]
    index: int | None = None


@dataclass(slots=True)
class _NodeRun:
    node: Node
    task_id: str | None = None  # the node's task (a map: its collector)
    expander: str | None = None
    children: list[str] = field(default_factory=list)
    restored: bool = False
    output: Path | None = None
    saved: bool = False


class PipelineRun:
    """One run of a Pipeline on a Controller (what ``Pipeline.submit`` returns)."""

    def __init__(
        self,
        pipeline: Pipeline,
        ctl: Any,
        nodes: list[Node],
        mode: str | None,
        rollback: bool,
        previous: _Previous | None,
    ) -> None:
        self.pipeline = pipeline
        self.name = pipeline.name
        self.ctl = ctl
        self.mode = mode
        self.rollback_on_failure = rollback
        self.policy = pipeline.on_failure
        self.resumed_from = previous.run_id if previous else None
        self._previous = previous
        self.id = f"run-{secrets.token_hex(5)}"
        self._lock = threading.RLock()
        self._now = ctl._clock.now
        self._nodes: dict[str, _NodeRun] = {n.name: _NodeRun(n) for n in nodes}
        self._tasks: dict[str, _TaskInfo] = {}
        self._dependants: dict[str, list[str]] = {}
        self._status: dict[str, tuple[int, TaskStatus]] = {}
        self._counts: Counter[TaskStatus] = Counter()
        self._open = 0
        self._waiting: list[str] = [n.name for n in nodes]
        self._submitting = True
        self._halted = False
        self._paused = False
        self._stop_requested = False
        self._stop_args: tuple[bool, float | None] = (True, None)
        self._first_failure: str | None = None
        self._success_order: dict[str, None] = {}
        self._compensated: set[str] = set()
        self._compensations: list[dict[str, Any]] = []
        self._compensating = False
        self._run_status = PipelineRunStatus.RUNNING
        self._published: PipelineRunStatus | None = None
        self._done = threading.Event()
        self._record_at = 0.0
        self._unsub: Callable[[], None] | None = None
        self._limit_tags: list[str] = []
        self.created_at = self._now()
        self.outputs_dir: Path | None = (
            _artifacts_root(ctl) / "pipelines" / self.id if pipeline.persist_outputs else None
        )

    # ------------------------------------------------------------ starting

    def _start(self) -> None:
        ctl = self.ctl
        restored: dict[str, Any] = {}
        warnings: dict[str, str] = {}
        if self._previous is not None:
            for name, nr in self._nodes.items():
                path = self._previous.outputs.get(name)
                if path is None:
                    continue
                try:
                    restored[name] = self._serializer(nr.node).load(path)
                    nr.restored = True
                    nr.output = path
                except Exception as exc:
                    warnings[name] = (
                        f"could not restore the output of node {name!r} from run "
                        f"{self._previous.run_id} ({type(exc).__name__}: {exc}); running it again"
                    )
                    log.warning("%s", warnings[name])
        _RUNS[self.id] = self
        self._unsub = ctl._observe_run(self.id, self._on_status)
        ctl.hold_run(self.id)
        if self.policy.kind is AggregationKind.FAIL_FAST:
            ctl.hold_run_on(self.id, FAILURES)
        try:
            with self._lock:
                self._materialize(restored)
                for name, msg in warnings.items():
                    tid = self._nodes[name].task_id or self._nodes[name].expander
                    ctl.record_event(
                        TaskWarning(
                            event_id=ctl.new_event_id(), at=self._now(), task_id=tid, message=msg
                        )
                    )
                self._submitting = False
                for tid in list(self._tasks):
                    snap = ctl.get(tid)
                    self._observe(tid, snap.status_version, snap.status)
                self._append_manifest({"event": "run", "run_id": self.id, "name": self.name})
                self._refresh()
                self._save_record(force=True)
        except BaseException:
            # nothing was validated wrong (that happened before): e.g. a closed controller
            self._abort()
            raise
        ctl.hold_run(self.id, held=self._paused or self._stop_requested or self._halted)

    def _abort(self) -> None:
        self._stop_requested = True
        for tid in reversed(list(self._tasks)):
            with contextlib.suppress(Exception):
                self.ctl.stop(tid, graceful=False)
        self._cleanup()

    def _serializer(self, node: Node) -> Serializer:
        return node.serializer or self.pipeline.serializer

    def _rep(self, name: str) -> str | None:
        """The task standing for node ``name`` for its dependants (None: not yet)."""
        nr = self._nodes[name]
        if nr.task_id is not None:
            return nr.task_id
        if nr.expander is not None:
            st = self._status.get(nr.expander)
            if st is not None and st[1] in TERMINAL and st[1] is not S.SUCCEEDED:
                return nr.expander  # the map never expanded: dependants see why
        return None

    def _materialize(self, restored: Mapping[str, Any] | None = None) -> None:
        """Create the tasks of every waiting node whose dependencies exist (in order)."""
        still: list[str] = []
        for name in self._waiting:
            nr = self._nodes[name]
            node = nr.node
            reps = [self._rep(d) for d in node.deps]
            if any(r is None for r in reps):
                still.append(name)
                continue
            after = [r for r in reps if r is not None]
            names = dict(zip(node.deps, after, strict=True))
            if restored is not None and name in restored:
                tid = self._create(
                    _Restored(restored[name]), (), {}, node, after, name, "node", names,
                    when=None,
                )  # fmt: skip
                nr.task_id = tid
            elif node.is_map:
                tid = self._create(
                    _NodeCall(_Expand(node.items, name), True), (), {}, node, after,
                    f"{name}.items", "expander", names, when=self._when(node),
                    retry=RetryPolicy(),
                )  # fmt: skip
                nr.expander = tid  # the collector comes once the items are known
            else:
                save_to = self._output_path(node)
                call = _NodeCall(node.fn, wants_context(node.fn), save_to, self._serializer(node))
                nr.output = save_to
                tid = self._create(
                    call,
                    node.args,
                    node.kwargs,
                    node,
                    after,
                    name,
                    "node",
                    names,
                    when=self._when(node),
                )
                nr.task_id = tid
        self._waiting = still

    def _when(self, node: Node) -> Callable[[Mapping[Any, Any]], Any] | None:
        if node.when is None:
            return None
        return _RunWhen(self, node.when, self._ancestors(node.name))

    def _ancestors(self, name: str) -> set[str]:
        """Every node upstream of ``name`` (transitively) in this run."""
        seen: set[str] = set()
        stack = list(self._nodes[name].node.deps)
        while stack:
            d = stack.pop()
            if d not in seen and d in self._nodes:
                seen.add(d)
                stack.extend(self._nodes[d].node.deps)
        return seen

    def _output_path(self, node: Node) -> Path | None:
        if self.outputs_dir is None:
            return None
        return self.outputs_dir / _file_name(node.name, self._serializer(node).suffix)

    def _create(
        self,
        call: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        node: Node,
        after: list[str],
        task_name: str,
        role: str,
        names: Mapping[str, str],
        *,
        when: Any = None,
        join: JoinMode | None = None,
        retry: RetryPolicy | None = None,
        tags: frozenset[str] | None = None,
        index: int | None = None,
    ) -> str:
        spec = node.spec
        if isinstance(call, _NodeCall):
            call.__chongming_task__ = spec
        # validated when the node was added (spec values, and its arguments bound against
        # the function): the task's final spec is built here once, without re-checking
        final = spec.evolve(
            name=task_name,
            tags=tags if tags is not None else spec.tags,
            retry=retry or spec.retry,
        )
        h = self.ctl._submit(
            call,
            args,
            kwargs,
            after=after,
            pipeline_run_id=self.id,
            join=join or node.join,
            when=when,
            node=task_name,
            upstream_names=names,
            prepared=(final, isinstance(call, _NodeCall)),  # _Restored takes no ctx
        )
        tid: str = h.id
        self._tasks[tid] = _TaskInfo(node.name, role, tuple(after), index)
        for d in after:
            self._dependants.setdefault(d, []).append(tid)
        self._open += 1
        return tid

    def _expand(self, name: str, expander: str) -> None:
        """The items are known: create one task per item, then the collector."""
        nr = self._nodes[name]
        node = nr.node
        items = self.ctl.result(expander)
        tags = node.spec.tags
        if node.max_parallel is not None:
            tag = f"chongming.map:{self.id}:{name}"
            self.ctl.set_run_limit(tag, node.max_parallel)
            self._limit_tags.append(tag)
            tags = tags | {tag}
        inject = wants_context(node.fn)
        children: list[str] = []
        for i, item in enumerate(items):
            tid = self._create(
                _NodeCall(node.fn, inject), (item, *node.args), node.kwargs, node, [expander],
                f"{name}[{i}]", "child", {}, join=JoinMode.ALL_SUCCEEDED, tags=tags, index=i,
            )  # fmt: skip
            children.append(tid)
        nr.children = children
        save_to = self._output_path(node)
        nr.output = save_to
        nr.task_id = self._create(
            _NodeCall(_Gather(children), True, save_to, self._serializer(node)), (), {}, node,
            children or [expander], name, "collector", {}, join=JoinMode.ALL_SUCCEEDED,
            retry=RetryPolicy(), tags=frozenset(),
        )  # fmt: skip

    # ------------------------------------------------------------ observing

    def _on_status(self, tid: str, version: int, status: TaskStatus) -> None:
        """The controller's recorder thread: one status change of one of our tasks."""
        if self._submitting or tid not in self._tasks:
            # the submit holds the run lock while it creates the tasks; it reads their
            # snapshots once done, which covers this change: do not stall the bus
            return
        try:
            with self._lock:
                self._observe(tid, version, status)
        except Exception:
            log.exception("pipeline run %s: handling a status change of %s failed", self.id, tid)

    def _observe(self, tid: str, version: int, status: TaskStatus) -> None:
        """Fold one (task, version, status) into the run and react to it."""
        if self._submitting:
            return  # synced from snapshots once every task of the submit exists
        prev = self._status.get(tid)
        if prev is not None and prev[0] >= version:
            return
        self._status[tid] = (version, status)
        old = prev[1] if prev is not None else None
        if old is not None:
            self._counts[old] -= 1
        self._counts[status] += 1
        was_open = old is None or old not in TERMINAL
        if was_open and status in TERMINAL:
            self._open -= 1
        elif not was_open and status not in TERMINAL:
            self._open += 1  # revived by hand (retry) while the run is busy
        info = self._tasks[tid]
        ctl = self.ctl
        if status is S.SUCCEEDED:
            self._success_order.pop(tid, None)
            self._success_order[tid] = None
            if info.role == "expander":
                self._expand(info.node, tid)
                self._materialize()
            elif info.role in ("node", "collector"):
                self._node_succeeded(info.node)
                self._materialize()
        elif status in TERMINAL and info.role == "expander":
            self._materialize()  # dependants are created against the expander: they see why
        if status in FAILURES:
            if self._first_failure is None:
                self._first_failure = tid
            if self.policy.kind is AggregationKind.FAIL_FAST and not self._halted:
                self._halted = True
                self._fail_fast(tid)
        if status in UNOCCUPIED and status is not S.PENDING:
            if self._halted:
                self._cancel(tid, self._first_failure)
            elif self._stop_requested:
                graceful, grace = self._stop_args
                with contextlib.suppress(InvalidTransition, TaskNotFound):
                    ctl.stop(tid, graceful, grace, reason=f"pipeline run {self.id} stopped")
            elif self._paused and status is S.QUEUED:
                with contextlib.suppress(InvalidTransition, TaskNotFound):
                    ctl.pause(tid)
        self._refresh()

    def _downstream(self, tid: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self._dependants.get(tid, ()))
        while stack:
            t = stack.pop()
            if t not in seen:
                seen.add(t)
                stack.extend(self._dependants.get(t, ()))
        return seen

    def _fail_fast(self, failed: str) -> None:
        """FAIL_FAST: the controller already holds the run; cancel what has not started,
        downstream of the failure first (dependency_failed), the rest as cancelled."""
        below = self._downstream(failed)
        for tid in reversed(list(self._tasks)):
            st = self._status.get(tid)
            if st is not None and st[1] in UNOCCUPIED:
                self._cancel(tid, failed, below)

    def _cancel(self, tid: str, failed: str | None, below: set[str] | None = None) -> None:
        fname = self._label(failed) if failed else "a node"
        if below is None and failed is not None:
            below = self._downstream(failed)
        down = below is not None and tid in below
        kind = FailureKind.DEPENDENCY_FAILED if down else FailureKind.CANCELLED
        reason = (
            f"fail_fast: upstream {fname!r} failed"
            if down
            else f"fail_fast: pipeline run stopped after {fname!r} failed"
        )
        with contextlib.suppress(InvalidTransition, TaskNotFound):
            # the run is held, so an unoccupied task cannot start meanwhile; a running
            # one is left to finish (fail-fast stops dispatching, it does not kill)
            if self.ctl.get(tid).status in UNOCCUPIED:
                self.ctl.cancel(tid, reason, kind=kind)

    def _node_succeeded(self, name: str) -> None:
        nr = self._nodes[name]
        if nr.output is not None and not nr.saved:
            if nr.restored:
                nr.saved = True
            else:
                nr.saved = nr.output.exists()
        if nr.saved and nr.output is not None:
            self._append_manifest({"event": "succeeded", "node": name, "output": str(nr.output)})
        self._save_record()

    # ------------------------------------------------------------ aggregate

    def _node_status(self, name: str) -> TaskStatus | None:
        nr = self._nodes[name]
        tid = nr.task_id or nr.expander
        if tid is None:
            return None
        st = self._status.get(tid)
        return st[1] if st else None

    def _compute(self) -> PipelineRunStatus:
        R = PipelineRunStatus
        if self._submitting or self._open > 0 or self._waiting:
            if self._stop_requested:
                return R.STOPPING
            if self._paused:
                return R.PAUSED
            return R.RUNNING
        if self._stop_requested:
            return R.STOPPED
        if self.policy.kind is AggregationKind.QUORUM:
            ok = sum(1 for n in self._nodes if self._node_status(n) is S.SUCCEEDED)
            return R.SUCCEEDED if ok >= (self.policy.n or 0) else R.FAILED
        good = self._counts[S.SUCCEEDED] + self._counts[S.SKIPPED]
        return R.SUCCEEDED if good == len(self._tasks) else R.FAILED

    def _refresh(self) -> None:
        new = self._compute()
        if new == self._published:
            return
        before = self._published
        self._published = new
        self._run_status = new
        self.ctl.record_event(
            PipelineRunStatusChanged(
                event_id=self.ctl.new_event_id(),
                at=self._now(),
                run_id=self.id,
                from_status=before.value if before else None,
                to_status=new.value,
                counts=self._count_values(),
            )
        )
        if new in RUN_TERMINAL:
            self._finish(new)
        else:
            self._save_record(force=True)

    def _count_values(self) -> dict[str, int]:
        return {s.value: n for s, n in self._counts.items() if n}

    def _finish(self, status: PipelineRunStatus) -> None:
        self._cleanup()
        self._save_record(force=True)
        if status is PipelineRunStatus.FAILED and self.rollback_on_failure:
            self._start_compensation()
        else:
            self._done.set()

    def _cleanup(self) -> None:
        # a finished run stops listening: retrying one of its tasks by hand is that
        # task's business; to run the pipeline again, submit(resume_from=run.id)
        if self._unsub is not None:
            self._unsub()
            self._unsub = None
        self.ctl.forget_run(self.id)
        for tag in self._limit_tags:
            self.ctl.set_run_limit(tag, None)
        self._limit_tags = []

    # ---------------------------------------------------------- compensation

    def rollback(self, wait: bool = True, timeout: float | None = None) -> list[dict[str, Any]]:
        """Run the compensations of the succeeded nodes now (reverse order of success,
        each at most once), e.g. after ``stop()`` or an ALL_SETTLED failure. Refused
        while the run is still busy."""
        with self._lock:
            if self._run_status not in RUN_TERMINAL:
                raise ConfigurationError(
                    f"run {self.id} is {self._run_status.value}: stop it or wait before rollback"
                )
            self._done.clear()
            self._start_compensation()
        if wait:
            self.wait(timeout)
        return self.compensations

    def _start_compensation(self) -> None:
        if self._compensating:
            return
        self._compensating = True
        order = [t for t in reversed(list(self._success_order)) if t not in self._compensated]
        threading.Thread(
            target=self._compensate,
            args=(order,),
            name=f"chongming-rollback-{self.id}",
            daemon=True,
        ).start()

    def _compensate(self, order: list[str]) -> None:
        try:
            for tid in order:
                with self._lock:
                    info = self._tasks[tid]
                    nr = self._nodes[info.node]
                    comp = nr.node.compensate
                    if (
                        comp is None
                        or info.role not in ("node", "child")
                        or tid in self._compensated
                        or self._status.get(tid, (0, None))[1] is not S.SUCCEEDED
                    ):
                        continue
                    self._compensated.add(tid)
                value = self.ctl.result(tid)
                label = info.node if info.index is None else f"{info.node}[{info.index}]"
                try:
                    _call_compensation(comp, value)
                    ok, error = True, None
                except Exception as exc:
                    ok, error = False, f"{type(exc).__name__}: {exc}"
                    log.warning("compensation of %s in run %s raised %s", label, self.id, error)
                self.ctl.record_event(
                    CompensationRan(
                        event_id=self.ctl.new_event_id(),
                        at=self._now(),
                        task_id=tid,
                        ok=ok,
                        error=error,
                    )
                )
                with self._lock:
                    self._compensations.append(
                        {"node": label, "task_id": tid, "ok": ok, "error": error}
                    )
                    if ok and info.role == "node":
                        self._append_manifest({"event": "compensated", "node": info.node})
        finally:
            with self._lock:
                self._compensating = False
                self._save_record(force=True)
                self._done.set()

    @property
    def compensations(self) -> list[dict[str, Any]]:
        """What rollback did, in order: node, task_id, ok, error."""
        with self._lock:
            return [dict(c) for c in self._compensations]

    # ------------------------------------------------------------- records

    def _spec(self) -> dict[str, Any]:
        nodes = []
        for name, nr in self._nodes.items():
            st = self._node_status(name)
            nodes.append(
                {
                    "name": name,
                    "deps": list(nr.node.deps),
                    "map": nr.node.is_map,
                    "task_id": nr.task_id or nr.expander,
                    "status": st.value if st else None,
                    "output": str(nr.output) if nr.saved and nr.output else None,
                    "restored": nr.restored,
                }
            )
        comp_nodes = sorted(
            {self._tasks[t].node for t in self._compensated if self._tasks[t].role == "node"}
        )
        return {
            "pipeline": self.name,
            "mode": self.mode,
            "on_failure": repr(self.policy),
            "rollback": self.rollback_on_failure,
            "resumed_from": self.resumed_from,
            "outputs_dir": str(self.outputs_dir) if self.outputs_dir else None,
            "serializer": type(self.pipeline.serializer).__qualname__,
            "nodes": nodes,
            "succeeded": [
                self._tasks[t].node
                for t in self._success_order
                if self._tasks[t].role in ("node", "collector")
            ],
            "compensated": comp_nodes,
            "counts": self._count_values(),
        }

    def _save_record(self, force: bool = False) -> None:
        store = getattr(self.ctl, "store", None)
        if store is None:
            return
        now = time.monotonic()
        if not force and now - self._record_at < RECORD_INTERVAL:
            return
        self._record_at = now
        from chongming_nb.stores.protocol import RunRecord

        try:
            store.save_run(
                RunRecord(
                    run_id=self.id,
                    name=self.name,
                    status=self._run_status.value,
                    created_at=self.created_at,
                    updated_at=self._now(),
                    spec=self._spec(),
                )
            )
        except Exception:
            log.exception("pipeline run %s: saving the RunRecord failed", self.id)

    def _append_manifest(self, entry: Mapping[str, Any]) -> None:
        if self.outputs_dir is None:
            return
        try:
            self.outputs_dir.mkdir(parents=True, exist_ok=True)
            with open(self.outputs_dir / "manifest.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(dict(entry)) + "\n")
        except OSError as exc:
            log.warning("pipeline run %s: manifest not written: %s", self.id, exc)

    # ---------------------------------------------------------------- public

    @property
    def status(self) -> PipelineRunStatus:
        return self._run_status

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> PipelineRunStatus:
        """Block until the run is over (compensations included); TimeoutError after
        ``timeout`` seconds. No side effects."""
        if not self._done.wait(timeout):
            raise TimeoutError(
                f"pipeline run {self.id} ({self.name}) still {self._run_status.value} "
                f"after {timeout}s: {self._count_values()}"
            )
        return self._run_status

    def task_ids(self) -> list[str]:
        """Every task of the run, in creation order."""
        with self._lock:
            return list(self._tasks)

    def handle(self, node: Node | str) -> Any:
        """The TaskHandle standing for a node (a map: its collector)."""
        name = node.name if isinstance(node, Node) else node
        with self._lock:
            if name not in self._nodes:
                raise KeyError(f"run {self.id} has no node {name!r}")
            nr = self._nodes[name]
            tid = nr.task_id or nr.expander
        if tid is None:
            raise KeyError(f"node {name!r} has no task yet (its items are not known)")
        return self.ctl.handle(tid)

    def result(self, node: Node | str, timeout: float | None = None) -> Any:
        return self.handle(node).result(timeout)

    def pause(self) -> None:
        """Stop dispatching the run's tasks and pause every one that can be paused
        (queued ones at once, running ones at their next checkpoint)."""
        with self._lock:
            if self._run_status in RUN_TERMINAL or self._stop_requested:
                return
            self._paused = True
            self.ctl.hold_run(self.id)
            for tid in list(self._tasks):
                if self.ctl.can(tid, "pause")[0]:
                    with contextlib.suppress(InvalidTransition, TaskNotFound):
                        self.ctl.pause(tid)
            self._refresh()

    def resume(self) -> None:
        """Undo ``pause()``: resume every paused task and dispatch again."""
        with self._lock:
            if not self._paused:
                return
            self._paused = False
            for tid in list(self._tasks):
                st = self.ctl.get(tid).status
                if st in (S.PAUSED, S.PAUSING):
                    with contextlib.suppress(InvalidTransition, TaskNotFound):
                        self.ctl.resume(tid)
            if not self._halted:
                self.ctl.hold_run(self.id, held=False)
            self._refresh()

    def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stop every non-terminal task of the run (downstream first, so each ends
        STOPPED) and dispatch nothing more."""
        with self._lock:
            if self._run_status in RUN_TERMINAL:
                return
            self._stop_requested = True
            self._stop_args = (graceful, timeout)
            self.ctl.hold_run(self.id)
            for tid in reversed(list(self._tasks)):
                if self.ctl.get(tid).status not in TERMINAL:
                    with contextlib.suppress(InvalidTransition, TaskNotFound):
                        self.ctl.stop(
                            tid, graceful, timeout, reason=f"pipeline run {self.id} stopped"
                        )
            self._refresh()

    def stats(self) -> dict[str, int]:
        """Tasks of the run per status (only statuses present)."""
        with self._lock:
            return self._count_values()

    def summary(self) -> dict[str, Any]:
        """Counts per status, the first failure and the chain it caused."""
        with self._lock:
            first = self._first_failure
            chain: list[dict[str, Any]] = []
            failure: dict[str, Any] | None = None
            if first is not None:
                down = self._downstream(first)
                ids = [first] + [t for t in self._tasks if t in down]
                snaps = {s.task_id: s for s in self.ctl.list_tasks(ids=ids)}
                for t in ids:
                    s = snaps[t]
                    if t != first and s.status is S.SUCCEEDED:
                        continue
                    chain.append(_failure_row(self._label(t), s))
                failure = chain[0]
            return {
                "run_id": self.id,
                "pipeline": self.name,
                "mode": self.mode,
                "status": self._run_status.value,
                "on_failure": repr(self.policy),
                "nodes": len(self._nodes),
                "tasks": len(self._tasks),
                "counts": self._count_values(),
                "first_failure": failure,
                "failure_chain": chain,
                "restored": [n for n, nr in self._nodes.items() if nr.restored],
                "resumed_from": self.resumed_from,
                "compensations": [dict(c) for c in self._compensations],
            }

    def _label(self, tid: str) -> str:
        info = self._tasks[tid]
        if info.role == "child":
            return f"{info.node}[{info.index}]"
        if info.role == "expander":
            return f"{info.node}.items"
        return info.node

    def to_frame(self) -> Any:
        """One row per task of the run (map children and item tasks included) plus one
        per node not created yet: node, task_id, role, status, attempts, started, ended,
        duration, restored."""
        import pandas as pd

        from chongming_nb.frames import STATUS_DTYPE

        with self._lock:
            infos = list(self._tasks.items())
            pending = [n for n, nr in self._nodes.items() if nr.task_id is None and not nr.expander]
            restored = {n for n, nr in self._nodes.items() if nr.restored}
        snaps: dict[str, TaskSnapshot] = {
            s.task_id: s for s in self.ctl.list_tasks(ids=[t for t, _ in infos])
        }
        rows: dict[str, list[Any]] = {
            k: []
            for k in (
                "node",
                "task_id",
                "role",
                "status",
                "attempts",
                "started",
                "ended",
                "restored",
            )
        }
        for tid, info in infos:
            s = snaps[tid]
            atts = self.ctl.attempts(tid)
            rows["node"].append(self._label(tid))
            rows["task_id"].append(tid)
            rows["role"].append(info.role)
            rows["status"].append(s.status.value)
            rows["attempts"].append(len(atts))
            rows["started"].append(atts[0].started_at if atts else None)
            rows["ended"].append(s.ended_at)
            rows["restored"].append(info.role == "node" and info.node in restored)
        for n in pending:
            rows["node"].append(n)
            rows["task_id"].append(None)
            rows["role"].append("node")
            rows["status"].append(None)
            rows["attempts"].append(0)
            rows["started"].append(None)
            rows["ended"].append(None)
            rows["restored"].append(False)
        started = pd.to_datetime(pd.Series(rows["started"], dtype="object"), utc=True)
        ended = pd.to_datetime(pd.Series(rows["ended"], dtype="object"), utc=True)
        return pd.DataFrame(
            {
                "node": pd.Series(rows["node"], dtype="string"),
                "task_id": pd.Series(rows["task_id"], dtype="string"),
                "role": pd.Series(rows["role"], dtype="string"),
                "status": pd.Categorical(rows["status"], dtype=STATUS_DTYPE),
                "attempts": pd.Series(rows["attempts"], dtype="int64"),
                "started": started,
                "ended": ended,
                "duration": ended - started,
                "restored": pd.Series(rows["restored"], dtype="bool"),
            }
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        from chongming_nb.control import display

        return display.bundle(self, self.ctl, pipeline_run_id=self.id, kind="run", title=self.name)

    def __repr__(self) -> str:
        counts = " ".join(f"{k}={v}" for k, v in sorted(self._count_values().items()))
        return f"<PipelineRun {self.name!r} id={self.id} {self._run_status.value} {counts}>"


def _failure_row(label: str, s: TaskSnapshot) -> dict[str, Any]:
    f = s.failure
    return {
        "node": label,
        "task_id": s.task_id,
        "status": s.status.value,
        "kind": f.kind.value if f else None,
        "message": f.message if f else None,
        "exception_type": f.exception_type if f else None,
    }


def _call_compensation(comp: Callable[..., Any], value: Any) -> None:
    """``comp(output)``, or ``comp()`` when it takes no argument."""
    try:
        sig = inspect.signature(comp)
    except (TypeError, ValueError):
        comp(value)
        return
    takes = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        for p in sig.parameters.values()
    )
    if takes:
        comp(value)
    else:
        comp()

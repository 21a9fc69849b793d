"""``Pipeline``: a named DAG of steps, validated as it is built and when it is submitted
(an error creates nothing)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from chongming_nb.control.pipeline._node import MapItems, Node, join_mode
from chongming_nb.control.pipeline._resume import Previous, load_previous
from chongming_nb.control.pipeline._run import PipelineRun
from chongming_nb.control.pipeline._serializer import PickleSerializer, Serializer, check_serializer
from chongming_nb.control.pipeline._sleep import sleep_step
from chongming_nb.control.spec import _validate, check_arguments, spec_of, wants_context
from chongming_nb.core.errors import CircularDependency, ConfigurationError
from chongming_nb.core.graph import Graph
from chongming_nb.core.policies import (
    AggregationKind,
    AggregationPolicy,
    JoinMode,
    RetryPolicy,
    Timeout,
)
from chongming_nb.core.validation import check_int64, check_text
from chongming_nb.pictures import GraphPicture, layout, nodes_of
from chongming_nb.runtime.executors import Executor

if TYPE_CHECKING:
    from chongming_nb.control.controller import Controller

__all__ = ["Pipeline"]


@dataclass(frozen=True, slots=True)
class StepOptions:
    """The options of one ``add`` / ``map`` / ``sleep`` step, handed to ``_add`` as one
    value (None: the function's ``@task`` spec, or the default, decides)."""

    when: Callable[[Mapping[Any, Any]], Any] | None = None
    retry: RetryPolicy | int | None = None
    join: JoinMode | str = JoinMode.ALL_SUCCEEDED
    name: str | None = None
    compensate: Callable[..., Any] | None = None
    timeout: Timeout | float | None = None
    tags: Iterable[str] | None = None
    priority: int | None = None
    executor: str | Executor | None = None
    serializer: Serializer | None = None
    delay: float | None = None
    not_before: datetime | None = None


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
        check_text("pipeline name", name)
        if not isinstance(on_failure, AggregationPolicy):
            raise ConfigurationError(
                f"on_failure must be an AggregationPolicy (FAIL_FAST, ALL_SETTLED, "
                f"quorum(n)), got {on_failure!r}"
            )
        self.name = name
        self.on_failure = on_failure
        self.serializer: Serializer = check_serializer(serializer or PickleSerializer())
        self.persist_outputs = bool(persist_outputs)
        self._nodes: dict[str, Node] = {}
        self.modes: dict[str, tuple[str, ...]] = {}
        if modes is not None:
            if not isinstance(modes, Mapping):
                raise ConfigurationError(f"modes must be a mapping name -> [nodes], got {modes!r}")
            for mode, members in modes.items():
                if not isinstance(mode, str) or not mode:
                    raise ConfigurationError(f"mode names are non-empty strings, got {mode!r}")
                check_text("mode name", mode)
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
            check_text("node name", name)
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
        timeout: Timeout | float | None = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        executor: str | Executor | None = None,
        serializer: Serializer | None = None,
        delay: float | None = None,
        not_before: datetime | None = None,
    ) -> Node:
        """Add a step: ``fn(ctx?, *args, **kwargs)`` once ``deps`` allow (``join``) and
        ``when(up)`` is true (``up[node]`` is an upstream result). ``compensate`` (or
        ``@task(compensate=...)``) undoes it on rollback and gets its output.
        ``delay=`` / ``not_before=``: the step's task starts no earlier than that many
        seconds after the run creates it, or that time; the start time is stored with
        the run, so ``resume_from`` waits only for what is left (see also ``sleep``)."""
        return self._add(
            fn,
            args,
            kwargs,
            deps,
            StepOptions(
                when=when,
                retry=retry,
                join=join,
                name=name,
                compensate=compensate,
                timeout=timeout,
                tags=tags,
                priority=priority,
                executor=executor,
                serializer=serializer,
                delay=delay,
                not_before=not_before,
            ),
        )

    def map(
        self,
        fn: Callable[..., Any],
        items: MapItems,
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
        timeout: Timeout | float | None = None,
        tags: Iterable[str] | None = None,
        priority: int | None = None,
        executor: str | Executor | None = None,
        serializer: Serializer | None = None,
        delay: float | None = None,
        not_before: datetime | None = None,
    ) -> Node:
        """Fan out: one task ``fn(ctx?, item, *args, **kwargs)`` per item, at most
        ``max_parallel`` at a time; the node's result is the list of their results.

        ``items``: a list (or any finite iterable), a Node whose result is the list, or a
        callable ``items(up)`` of the upstream results. The tasks are created once the
        items are known, i.e. when the dependencies allow."""
        if items is None:
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
        if max_parallel is not None and check_int64("max_parallel", max_parallel) < 1:
            raise ConfigurationError(f"max_parallel must be an int >= 1, got {max_parallel!r}")
        return self._add(
            fn,
            args,
            kwargs,
            deps,
            StepOptions(
                when=when,
                retry=retry,
                join=join,
                name=name,
                compensate=compensate,
                timeout=timeout,
                tags=tags,
                priority=priority,
                executor=executor,
                serializer=serializer,
                delay=delay,
                not_before=not_before,
            ),
            items,
            max_parallel,
        )

    def sleep(
        self,
        name: str,
        seconds: float | None = None,
        *,
        until: datetime | None = None,
        deps: Iterable[Node | str] = (),
    ) -> Node:
        """A step that waits: ``seconds`` after it starts, or ``until`` a timezone-aware
        datetime. Its wake time is stored when it starts, so a run resumed from this one
        (``submit(ctl, resume_from=run_id)``, also after a crash) waits only for the time
        left, and a sleep that finished is not waited again. While it waits it holds no
        concurrency slot; stop and pause reach it at once. Its output is the wake time
        (ISO 8601)."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"sleep() needs a node name, got {name!r}")
        step = sleep_step(seconds, until)
        # in the kernel, on a thread: it records the wake time in the run
        return self._add(step, (), None, deps, StepOptions(name=name, executor="thread"))

    def _add(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        deps: Iterable[Node | str],
        options: StepOptions,
        items: MapItems | None = None,
        max_parallel: int | None = None,
    ) -> Node:
        """The step's task options are checked as ``@task`` checks them."""
        o = options
        when = o.when
        if not callable(fn):
            raise ConfigurationError(f"a node needs a callable, got {fn!r}")
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise ConfigurationError(f"args must be a tuple or list, got {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigurationError(f"kwargs must be a mapping, got {kwargs!r}")
        if when is not None and not callable(when):
            raise ConfigurationError(f"when= must be a callable(up) -> bool, got {when!r}")
        join = join_mode(o.join)
        node_name = self._new_name(o.name, fn)
        if isinstance(deps, Node | str) or not isinstance(deps, Iterable):
            deps = [deps]
        dep_names = tuple(dict.fromkeys(self._dep_name(d, f"node {node_name!r}") for d in deps))
        if node_name in dep_names:
            raise CircularDependency([node_name, node_name])
        if when is not None and not dep_names:
            raise ConfigurationError(
                f"node {node_name!r}: when= decides on upstream results, so it needs deps"
            )
        over = _validate(
            None, o.retry, o.timeout, o.tags, o.priority, o.compensate, o.delay, o.not_before
        )
        spec = spec_of(fn).merged(**over, executor=o.executor)
        ser = check_serializer(o.serializer) if o.serializer is not None else None
        node = Node(
            self,
            node_name,
            fn,
            tuple(args),
            dict(kwargs or {}),
            dep_names,
            when,
            join,
            spec,
            spec.compensate,
            ser,
            items,
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

    def dag(self) -> Graph:
        """The validated DAG (raises UnknownDependency / CircularDependency)."""
        return Graph({n.name: n.deps for n in self._nodes.values()})

    def graph(self) -> GraphPicture:
        """The pipeline as a picture before any run: its nodes in dependency layers, join
        modes, ``when`` conditions, compensations and map fan-outs marked. Displays as an
        SVG; ``.to_svg(path)`` writes it. (A run's ``graph()`` adds statuses.)"""
        self.dag()  # validated first: an unknown or circular dependency is an error here
        return layout(nodes_of(self._nodes.values()), title=f"pipeline {self.name}")

    def plan(self, mode: str | None = None) -> list[Node]:
        """The nodes a run in ``mode`` executes, in order. Validates everything a
        submit would (and creates nothing)."""
        graph = self.dag()
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
        ctl: Controller,
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
        previous: Previous | None = None
        if resume_from is not None:
            rid = resume_from.id if isinstance(resume_from, PipelineRun) else resume_from
            if not isinstance(rid, str):
                raise ConfigurationError(f"resume_from must be a run id, got {resume_from!r}")
            previous = load_previous(ctl, rid)
        run = PipelineRun(self, ctl, nodes, mode, bool(rollback), previous)
        run._start()
        return run

    def __repr__(self) -> str:
        modes = f" modes={list(self.modes)}" if self.modes else ""
        return f"<Pipeline {self.name!r} nodes={len(self._nodes)} {self.on_failure!r}{modes}>"

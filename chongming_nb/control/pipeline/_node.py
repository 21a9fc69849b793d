"""``Node``: one step of a Pipeline, as ``Pipeline.add`` / ``Pipeline.map`` return it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from chongming_nb.control.pipeline._serializer import Serializer
from chongming_nb.control.spec import TaskSpec
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.policies import AggregationPolicy, JoinMode

__all__ = ["MapItems", "Node", "PipelineShape", "join_mode"]


class PipelineShape(Protocol):
    """What a node and a run read of their Pipeline (``_pipeline.Pipeline``; a
    Protocol, so that this module does not import the one that imports it)."""

    @property
    def name(self) -> str: ...
    @property
    def on_failure(self) -> AggregationPolicy: ...
    @property
    def serializer(self) -> Serializer: ...
    @property
    def persist_outputs(self) -> bool: ...


@dataclass(slots=True, weakref_slot=True, eq=False, repr=False)
class Node:
    """One step of a Pipeline (what ``add`` / ``map`` return). Use it in ``deps=``, as
    a key of the ``up`` mapping ``when=`` gets, and in ``ctx.upstream(node)``. Nodes
    compare and hash by identity."""

    pipeline: PipelineShape
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    deps: tuple[str, ...]  # node names
    when: Callable[[Mapping[Any, Any]], Any] | None
    join: JoinMode
    spec: TaskSpec
    compensate: Callable[..., Any] | None
    serializer: Serializer | None
    items: MapItems | None = None  # a map's items; None: not a map
    max_parallel: int | None = None

    @property
    def is_map(self) -> bool:
        return self.items is not None

    def __repr__(self) -> str:
        kind = "map " if self.is_map else ""
        deps = f" deps={list(self.deps)}" if self.deps else ""
        return f"<Node {kind}{self.name!r} of {self.pipeline.name!r}{deps}>"


#: A map's items (``Pipeline.map``): a list (any finite iterable), a Node whose result is
#: the list, or a callable ``items(up)`` of the upstream results.
MapItems = Iterable[Any] | Node | Callable[[Mapping[Any, Any]], Iterable[Any]]


def join_mode(join: JoinMode | str) -> JoinMode:
    try:
        return JoinMode(join)
    except ValueError:
        known = ", ".join(j.value for j in JoinMode)
        raise ConfigurationError(f"unknown join {join!r}; use one of: {known}") from None

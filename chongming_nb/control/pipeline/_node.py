"""``Node``: one step of a Pipeline, as ``Pipeline.add`` / ``Pipeline.map`` return it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from chongming_nb.control.pipeline._serializer import Serializer
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.policies import JoinMode

if TYPE_CHECKING:
    from chongming_nb.control.pipeline._pipeline import Pipeline

__all__ = ["NOT_A_MAP", "Node", "join_mode"]


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


NOT_A_MAP = object()


def join_mode(join: Any) -> JoinMode:
    try:
        return JoinMode(join)
    except ValueError:
        known = ", ".join(j.value for j in JoinMode)
        raise ConfigurationError(f"unknown join {join!r}; use one of: {known}") from None

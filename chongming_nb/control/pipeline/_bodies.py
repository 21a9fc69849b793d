"""The callables a run submits as tasks: a node's own call (output persisted before the
task reports success), a map's expander and collector, a restored node, and the ``up``
mappings that ``when=`` and ``items(up)`` see."""

from __future__ import annotations

import contextlib
import inspect
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chongming_nb.control.pipeline._node import Node
from chongming_nb.control.pipeline._serializer import Serializer
from chongming_nb.control.spec import spec_of
from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.states import STATUS

if TYPE_CHECKING:
    from chongming_nb.control.pipeline._state import RunState
    from chongming_nb.runtime.context import TaskContext

__all__ = ["CtxUpstream", "Expand", "Gather", "NodeCall", "Restored", "RunWhen"]

S = STATUS  # TaskStatus's members, read fast (core/states.py: Members)

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


class NodeCall:
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

    def __call__(self, ctx: TaskContext, *args: Any, **kwargs: Any) -> Any:
        value = self.fn(ctx, *args, **kwargs) if self.inject else self.fn(*args, **kwargs)
        if inspect.iscoroutine(value):
            import asyncio

            value = asyncio.run(value)
        if self.save_to is not None and self.serializer is not None:
            _save_output(ctx, value, self.save_to, self.serializer)
        return value


def _save_output(ctx: TaskContext, value: Any, path: Path, ser: Serializer) -> None:
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


class Expand:
    """A map node's first task: resolve the items (static, a node's result, or
    ``items(up)``) into a list."""

    __slots__ = ("items", "node")
    __signature__ = _SIG_CTX

    def __init__(self, items: Any, node: str) -> None:
        self.items = items
        self.node = node

    def __call__(self, ctx: TaskContext) -> list[Any]:
        items = self.items
        if isinstance(items, Node):
            value = ctx.upstream(items.name)
        elif callable(items):
            value = items(CtxUpstream(ctx))
        else:
            value = items
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise ConfigurationError(
                f"map {self.node!r}: items must be a list (or iterable), got {type(value).__name__}"
            )
        return list(value)


class RunWhen:
    """``when=`` of a node: ``up`` holds its direct dependencies' results (the
    controller's view) and, on top, those of any succeeded node further upstream."""

    __slots__ = ("ancestors", "fn", "run")

    def __init__(self, run: RunState, fn: Callable[..., Any], ancestors: set[str]) -> None:
        self.run = run
        self.fn = fn
        self.ancestors = ancestors

    def __call__(self, up: Mapping[Any, Any]) -> Any:
        return self.fn(_RunUp(self, up))


class _RunUp(Mapping[Any, Any]):
    def __init__(self, when: RunWhen, up: Mapping[Any, Any]) -> None:
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


class CtxUpstream(Mapping[Any, Any]):
    """``up`` for ``items(up)``: upstream results by node, name, handle or task id."""

    def __init__(self, ctx: TaskContext) -> None:
        self._ctx = ctx

    def __getitem__(self, key: Any) -> Any:
        return self._ctx.upstream(key)

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


class Gather:
    """A map node's last task: the children's results, in item order."""

    __slots__ = ("ids",)
    __signature__ = _SIG_CTX

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = tuple(ids)

    def __call__(self, ctx: TaskContext) -> list[Any]:
        return [ctx.upstream(i) for i in self.ids]


class Restored:
    """A node restored from an earlier run: returns the stored output."""

    __slots__ = ("value",)
    __signature__ = _SIG_NONE

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> Any:
        return self.value

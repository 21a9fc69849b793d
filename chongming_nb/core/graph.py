"""A DAG of named nodes: validation (unknown dependencies, cycles with their path) and
topological readiness."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from chongming_nb.core.errors import CircularDependency, UnknownDependency


class Graph:
    """An immutable DAG. Build it from ``{node: [dependencies]}``; insertion order is kept.

    Raises UnknownDependency naming the node and what it is missing, or
    CircularDependency with the cycle path (``a -> b -> c -> a``).
    """

    __slots__ = ("_dependants", "_deps", "_order")

    def __init__(self, deps: Mapping[str, Iterable[str]]) -> None:
        self._deps: dict[str, tuple[str, ...]] = {
            n: tuple(dict.fromkeys(d)) for n, d in deps.items()
        }
        for node, ds in self._deps.items():
            missing = [d for d in ds if d not in self._deps]
            if missing:
                raise UnknownDependency(node, missing)
        self._dependants: dict[str, list[str]] = {n: [] for n in self._deps}
        for node, ds in self._deps.items():
            for d in ds:
                self._dependants[d].append(node)
        self._order = self._toposort()

    def _toposort(self) -> tuple[str, ...]:
        # iterative DFS with colours; on a back edge, report the cycle path
        white, grey, black = 0, 1, 2
        colour = dict.fromkeys(self._deps, white)
        rank = {n: i for i, n in enumerate(self._deps)}
        order: list[str] = []
        for root in self._deps:
            if colour[root] != white:
                continue
            stack: list[tuple[str, int]] = [(root, 0)]
            path: list[str] = [root]
            colour[root] = grey
            while stack:
                node, i = stack[-1]
                ds = self._deps[node]
                if i < len(ds):
                    stack[-1] = (node, i + 1)
                    nxt = ds[i]
                    if colour[nxt] == grey:
                        start = path.index(nxt)
                        # dependencies point upstream; report in execution order
                        cyc = list(reversed(path[start:]))
                        # start at the node defined first, so the report is stable
                        first = min(range(len(cyc)), key=lambda i: rank[cyc[i]])
                        cyc = cyc[first:] + cyc[:first]
                        raise CircularDependency([*cyc, cyc[0]])
                    if colour[nxt] == white:
                        colour[nxt] = grey
                        stack.append((nxt, 0))
                        path.append(nxt)
                else:
                    colour[node] = black
                    order.append(node)
                    stack.pop()
                    path.pop()
        return tuple(order)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self._deps)

    def deps(self, node: str) -> tuple[str, ...]:
        return self._deps[node]

    def dependants(self, node: str) -> tuple[str, ...]:
        return tuple(self._dependants[node])

    @property
    def edges(self) -> list[tuple[str, str]]:
        """(upstream, downstream) pairs."""
        return [(d, n) for n, ds in self._deps.items() for d in ds]

    def topological_order(self) -> tuple[str, ...]:
        return self._order

    def layers(self) -> list[list[str]]:
        """Nodes grouped so that every node's dependencies are in earlier layers."""
        level: dict[str, int] = {}
        for n in self._order:
            level[n] = 1 + max((level[d] for d in self._deps[n]), default=-1)
        out: list[list[str]] = [[] for _ in range(1 + max(level.values(), default=-1))]
        for n in self._deps:
            out[level[n]].append(n)
        return out

    def ready(self, done: Collection[str], started: Collection[str] = ()) -> list[str]:
        """Nodes not yet done or started whose dependencies are all in ``done``."""
        return [
            n
            for n, ds in self._deps.items()
            if n not in done and n not in started and all(d in done for d in ds)
        ]

    def downstream(self, node: str) -> list[str]:
        """Every node that transitively depends on ``node`` (not including it)."""
        seen: dict[str, None] = {}
        stack = list(self._dependants[node])
        while stack:
            n = stack.pop()
            if n not in seen:
                seen[n] = None
                stack.extend(self._dependants[n])
        return list(seen)

    def subgraph(self, keep: Iterable[str]) -> Graph:
        keep_set = set(keep)
        return Graph(
            {n: [d for d in ds if d in keep_set] for n, ds in self._deps.items() if n in keep_set}
        )

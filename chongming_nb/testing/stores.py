"""``ForwardingStore``: a store that passes every call on to another one, for tests of
what a controller does when its store misbehaves.

It counts the calls by method name (``calls``; ``close`` is not counted), raises
``StoreError`` (what a store raises when its database cannot be reached) from the
methods named by ``fail(...)`` until ``heal()``, and, with ``batch=False``, hides the
inner store's ``record_batch``: it then looks like a store that implements only the
``TaskStore`` protocol (a user's own store), whatever it wraps.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chongming_nb.core.errors import StoreError
from chongming_nb.stores.protocol import TaskStore

__all__ = ["ForwardingStore"]

#: What the SQL stores have beyond the ``TaskStore`` protocol: one transaction per batch.
BATCH_METHOD = "record_batch"


class ForwardingStore:
    """Forwards every call to ``inner``; counts them, fails on demand (module docstring)."""

    def __init__(self, inner: TaskStore, *, batch: bool = True) -> None:
        self.inner = inner
        self.batch = batch
        self.calls: Counter[str] = Counter()
        self.failing: set[str] = set()
        #: how many calls were refused so far
        self.refused = 0

    def fail(self, *names: str) -> None:
        """From now on the methods ``names`` raise ``StoreError`` (until ``heal``)."""
        unknown = [n for n in names if not callable(getattr(self.inner, n, None))]
        if unknown:
            raise ValueError(f"the inner store has no method(s) {', '.join(unknown)}")
        self.failing |= set(names)

    def heal(self) -> None:
        """Every method answers again."""
        self.failing.clear()

    def close(self) -> None:
        """Close the inner store (not counted, never failed)."""
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        if name == BATCH_METHOD and not self.batch:
            raise AttributeError(name)
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name in self.failing:
                self.refused += 1
                raise StoreError(f"{name}: could not connect to the store (test)")
            return attr(*args, **kwargs)

        return call

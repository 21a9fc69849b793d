"""How a node's output is persisted for ``resume_from``: the ``Serializer`` protocol and
its default, ``PickleSerializer``."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from chongming_nb.core.errors import ConfigurationError

__all__ = ["PickleSerializer", "Serializer", "check_serializer"]


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


def check_serializer(ser: Any) -> Serializer:
    if not (
        isinstance(getattr(ser, "suffix", None), str)
        and callable(getattr(ser, "dump", None))
        and callable(getattr(ser, "load", None))
    ):
        raise ConfigurationError(
            f"serializer must have .suffix (str), .dump(value, path) and .load(path); got {ser!r}"
        )
    return ser  # type: ignore[no-any-return]

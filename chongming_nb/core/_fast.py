"""Fast construction of frozen, slotted dataclasses, and fast reading of their fields
column by column (``column_reader``).

A frozen dataclass's generated ``__init__`` writes each field with
``object.__setattr__`` (its own ``__setattr__`` refuses writes): about 0.15 µs per field,
so 7 µs for a 32-field TaskSnapshot. Every task transition builds a snapshot, a
Transition and an event, which made construction a large share of a task's cost.

The way around it: a *layout twin*, an empty-slots subclass of the real class with the
plain ``object`` attribute protocol. A new instance is written as a twin (plain slot
stores, ~10 ns each) and then switched to the real class with one ``__class__``
assignment, which CPython allows between classes of identical layout. A subclass that
adds no slots is checked in constant time; a sibling class with the same ``__slots__``
(this module's first twin) is compared slot name by slot name, ~0.4 µs a switch for a
TaskSnapshot. ``maker`` builds an instance without the class call (``type.__call__``
and a Python ``__init__`` called from C), for the few constructions made per task.

Invariants:

* the result is an ordinary instance of the real class (same repr, eq, hash, pickling,
  ``dataclasses.fields``), and it is frozen from the moment it is returned;
* the generated ``__init__`` has the dataclass's own signature (names, order, defaults,
  keyword-only markers and annotations), so callers and ``inspect.signature`` see no
  difference;
* an instance of an undecorated subclass is built by the dataclass's original
  ``__init__`` (its layout may differ from the twin's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class _Factory:
    """The default shown for a field with a default factory (as dataclasses shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_NO_FACTORY = _Factory()


#: One layout twin per class (fast_init, evolver and maker share it).
_TWINS: dict[type, type] = {}


def _twin(cls: type) -> type:
    twin = _TWINS.get(cls)
    if twin is not None:
        return twin
    slots = cls.__dict__.get("__slots__")
    if slots is None or "__dict__" in cls.__dict__:
        raise TypeError(f"{cls.__name__} must be a dataclass with slots=True")
    namespace = {
        "__slots__": (),  # the real class's layout, so a switch is checked in O(1)
        # both: CPython fills the one setattro slot from __setattr__ *and* __delattr__
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
    }
    twin = _TWINS[cls] = type(f"_{cls.__name__}Twin", (cls,), namespace)
    return twin


def _fields_code(cls: type, target: str, ns: dict[str, Any]) -> tuple[str, list[str]]:
    """The parameters of ``cls``'s dataclass ``__init__`` (its names, order, defaults and
    keyword-only marker; the defaults go into ``ns``) and one statement per field that
    writes it to ``target``."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    ns["_NOF"] = _NO_FACTORY
    params: list[str] = []
    kw_params: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: init=False fields are not supported")
        if f.default is not dataclasses.MISSING:
            ns[f"_d_{f.name}"] = f.default
            param = f"{f.name}=_d_{f.name}"
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_f_{f.name}"] = f.default_factory
            param = f"{f.name}=_NOF"
            value = f"_f_{f.name}() if {f.name} is _NOF else {f.name}"
        else:
            param = f.name
            value = f.name
        (kw_params if f.kw_only else params).append(param)
        body.append(f"    {target}.{f.name} = {value}")
    return ", ".join([*params, *(["*", *kw_params] if kw_params else [])]), body


def fast_init(cls: type[T]) -> type[T]:
    """Class decorator, applied on top of ``@dataclass(frozen=True, slots=True)``:
    replace the generated ``__init__`` with one that writes through a layout twin."""
    original = cls.__init__
    ns: dict[str, Any] = {"_Cls": cls, "_orig": original, "_switch": object.__setattr__}
    signature, body = _fields_code(cls, "self", ns)
    ns["_Twin"] = _twin(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    call = ", ".join([*(f.name for f in fields if not f.kw_only)])
    kw_call = ", ".join(f"{f.name}={f.name}" for f in fields if f.kw_only)
    post = ["    self.__post_init__()"] if hasattr(cls, "__post_init__") else []
    src = "\n".join(
        [
            f"def __init__({', '.join(['self', signature])}):",
            "    if type(self) is not _Cls:",
            f"        _orig(self, {', '.join(x for x in (call, kw_call) if x)})",
            "        return",
            "    _switch(self, '__class__', _Twin)",
            *body,
            "    self.__class__ = _Cls",
            *post,
        ]
    )
    exec(src, ns)  # the dataclasses module builds its __init__ the same way
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = dict(getattr(original, "__annotations__", {}))
    init.__doc__ = original.__doc__
    init.__module__ = cls.__module__
    type.__setattr__(cls, "__init__", init)
    return cls


def maker(cls: type[T]) -> Callable[..., T]:
    """``make(...)``: a new instance of a ``fast_init`` class, from the arguments its
    constructor takes (the same signature), without the class call: for a construction
    made on every task transition (``Cls(...)`` runs ``type.__call__`` and a Python
    ``__init__`` called from C, most of a small instance's cost)."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: build it with {cls.__name__}(...)")
    ns: dict[str, Any] = {"_Cls": cls, "_new": object.__new__}
    signature, body = _fields_code(cls, "new", ns)
    ns["_Twin"] = _twin(cls)
    src = "\n".join(
        [
            f"def make({signature}):",
            "    new = _new(_Twin)",
            *body,
            "    new.__class__ = _Cls",
            "    return new",
        ]
    )
    exec(src, ns)
    make: Callable[..., T] = ns["make"]
    make.__qualname__ = make.__name__ = f"make_{cls.__name__}"
    make.__module__ = cls.__module__
    make.__annotations__ = {**getattr(cls.__init__, "__annotations__", {}), "return": cls}
    return make


def evolver(cls: type[T], leading: tuple[str, ...] = ()) -> Callable[..., T]:
    """``evolve(obj, changes) -> copy of obj with changes`` for a frozen slotted
    dataclass, through its layout twin (unknown field names raise TypeError).

    With ``leading`` field names: ``evolve(obj, changes, *values)`` also sets those
    fields to ``values`` (in order) with plain slot stores, before ``changes``, which
    therefore win. For a caller that changes the same fields every time (a status
    transition): a ``setattr`` per changed field is most of a copy's cost.
    """
    twin = _twin(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(leading) - set(names))
    if unknown or len(set(leading)) != len(leading):
        raise TypeError(f"{cls.__name__}: leading fields must be distinct fields, got {leading}")
    params = [f"_v{i}" for i in range(len(leading))]
    given = dict(zip(leading, params, strict=True))
    ns: dict[str, Any] = {"_Cls": cls, "_Twin": twin, "_new": object.__new__}
    src = "\n".join(
        [
            f"def evolve({', '.join(['self', 'changes', *params])}):",
            "    new = _new(_Twin)",
            *(f"    new.{n} = {given.get(n, 'self.' + n)}" for n in names),
            "    if changes:",
            "        try:",
            "            for k, v in changes.items():",
            "                setattr(new, k, v)",
            "        except AttributeError:",
            "            unknown = sorted(set(changes) - set(_NAMES))",
            f"            raise TypeError('{cls.__name__} has no field(s) ' + ', '.join(unknown))",
            "    new.__class__ = _Cls",
            "    return new",
        ]
    )
    ns["_NAMES"] = tuple(names)
    exec(src, ns)
    fn: Callable[..., T] = ns["evolve"]
    return fn


def column_reader(
    cls: type, names: Sequence[str]
) -> Callable[[Sequence[Any]], dict[str, list[Any]]]:
    """``read(records) -> {name: [record.name for record in records], ...}`` for the
    fields ``names`` of ``cls``: a DataFrame's columns from 100,000 records.

    One list comprehension per field, generated from ``names``: in a comprehension
    CPython specialises the attribute load to the slot it reads, where
    ``map(attrgetter(name), records)`` looks the attribute up anew for every record
    (about 1.5x the time over records spread through memory)."""
    known = {f.name for f in dataclasses.fields(cls)}
    bad = [n for n in names if n not in known or not n.isidentifier()]
    if bad or len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: not distinct fields: {list(names)}")
    body = ", ".join(f"{n!r}: [r.{n} for r in records]" for n in names)
    ns: dict[str, Any] = {}
    exec(f"def read(records):\n    return {{{body}}}", ns)
    read: Callable[[Sequence[Any]], dict[str, list[Any]]] = ns["read"]
    read.__qualname__ = read.__name__ = f"read_{cls.__name__}_columns"
    read.__module__ = cls.__module__
    return read

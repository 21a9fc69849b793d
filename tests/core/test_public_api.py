"""``chongming_nb.__all__`` is sorted, unique, resolvable and complete.

Completeness is checked generically: every public class or function in the package
namespace that is defined inside chongming_nb must be listed, whoever adds it.
"""

from __future__ import annotations

import ast
import inspect
import tomllib
from pathlib import Path

import chongming_nb as cn

ROOT = Path(__file__).resolve().parents[2]

#: Called by IPython / Jupyter by name; an entry point, not API for users to import.
HOOKS = frozenset({"load_ipython_extension", "unload_ipython_extension"})

#: Lazily provided names that need an optional extra (name -> extra in pyproject). They
#: stay out of ``__all__`` so ``from chongming_nb import *`` works without the extra.
OPTIONAL_BACKENDS = {"PostgresStore": "postgres", "DaskExecutor": "dask"}


def _lazy_names() -> set[str]:
    """Names the package ``__getattr__`` provides (``if name == "X": ...``)."""
    assert cn.__file__ is not None
    tree = ast.parse(Path(cn.__file__).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Compare):
                    for c in [sub.left, *sub.comparators]:
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            names.add(c.value)
    return names


def _sort_key(name: str) -> tuple[int, str]:
    # ruff's (isort-style) order: CONSTANTS, then Classes, then functions/dunders
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted() -> None:
    assert list(cn.__all__) == sorted(cn.__all__, key=_sort_key)


def test_all_has_no_duplicates() -> None:
    dupes = sorted({n for n in cn.__all__ if cn.__all__.count(n) > 1})
    assert not dupes, f"duplicated in __all__: {dupes}"


def test_every_name_resolves() -> None:
    missing = [n for n in cn.__all__ if not hasattr(cn, n)]
    assert not missing, f"__all__ lists names chongming_nb does not have: {missing}"


def test_all_is_complete() -> None:
    exported = set(cn.__all__)
    unlisted = []
    for name, obj in vars(cn).items():
        if name.startswith("_"):
            continue
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        module = getattr(obj, "__module__", "") or ""
        ours = module == "chongming_nb" or module.startswith("chongming_nb.")
        if ours and name not in exported and name not in HOOKS:
            unlisted.append(name)
    assert not unlisted, f"public names missing from chongming_nb.__all__: {sorted(unlisted)}"


def test_lazily_provided_names_resolve_and_are_listed() -> None:
    lazy = _lazy_names()
    for name in sorted(lazy):
        obj = getattr(cn, name)  # raises if the lazy import is broken
        assert inspect.isclass(obj) or callable(obj), name
    unlisted = sorted(n for n in lazy - set(cn.__all__) if n not in OPTIONAL_BACKENDS)
    assert not unlisted, f"lazily provided names missing from chongming_nb.__all__: {unlisted}"
    leaked = sorted(n for n in OPTIONAL_BACKENDS if n in cn.__all__)
    assert not leaked, f"optional backends in __all__ break star-imports without extras: {leaked}"


def test_optional_backends_name_real_extras() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = meta["project"]["optional-dependencies"]
    for name, extra in OPTIONAL_BACKENDS.items():
        assert extra in extras, (name, extra)


def test_unknown_attribute_is_a_clear_error() -> None:
    try:
        cn.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as err:
        assert "NoSuchThing" in str(err)
    else:
        raise AssertionError("chongming_nb.NoSuchThing resolved")


def test_star_import_gives_exactly_all() -> None:
    ns: dict[str, object] = {}
    exec("from chongming_nb import *", ns)
    assert set(ns) - {"__builtins__"} == set(cn.__all__)


def test_core_names_from_the_design_are_public() -> None:
    for name in ("TaskStatus", "TRANSITIONS", "StateMachine", "RetryPolicy", "Timeout"):
        assert name in cn.__all__

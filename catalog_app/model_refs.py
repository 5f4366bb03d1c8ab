"""Which catalog models a collected test refers to, read from the test itself before it runs (the preflight's map).

Found, per test:
- its `catalog_model` markers (name and resolve options: exact);
- string constants equal to a logical name or to a repo id a manifest pins (compared as the Hub does, without
  case), in the code of the test function (nested functions and lambdas included), of every fixture it uses (its
  whole fixture closure, conftest fixtures included), of the functions of the same module those call by name (two
  levels), in the module-level constants they name (a string, or a tuple, list, set or dict of strings), and in
  its parametrize values. A logical name is taken in the `dir` layout (as the `catalog_model` factory gives it); a
  repo id means a load by repo id, so the `hf-cache` snapshot of the manifest answering for it.

Not found (the test still runs; its guard or its own error names what it lacks): a name built at run time (an
f-string, a concatenation, read from a file or the environment), one that lives only in another module (a helper
imported from elsewhere), options passed to the factory (the `dir` layout is assumed), a repo id several
manifests pin with none `primary: true` (said, not guessed). A constant that names a model without loading it
(an error message a test checks) is taken as a use: the preflight then asks for a pin the test may not need.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from catalog.lookup import Catalog

DEPTH = 2  # how many calls deep module functions are followed from a test or fixture
_SKIPPED_MODULES = ("_pytest", "pytest", "xdist", "pluggy", "catalog_app.pytest_plugin")


@dataclass(frozen=True)
class Ref:
    """A model a test uses: the manifest's name, how the test names it, and the layout that use needs."""

    name: str
    via: str  # "marker", "named" (a logical name in its code), "repo id", "fixture" (resolved by the factory)
    text: str  # what the test says: the name or the repo id
    layout: str = "dir"
    options: tuple[tuple[str, Any], ...] = ()  # a marker's resolve options


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Strings held by a constant: itself, or the items of a tuple, list, set or dict (one level of nesting more)."""
    if isinstance(value, str):
        yield value
    elif depth < 2 and isinstance(value, (tuple, list, set, frozenset)):
        for item in value:
            yield from _strings(item, depth + 1)
    elif depth < 2 and isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key, depth + 1)
            yield from _strings(item, depth + 1)


def code_strings(func: Any, depth: int = DEPTH, seen: set[int] | None = None) -> Iterator[str]:
    """String constants in `func`'s code and nested code, the module-level constants it names, and (to `depth`)
    the same of the functions of its module it names."""
    seen = set() if seen is None else seen
    func = inspect.unwrap(func) if callable(func) else func
    code = getattr(func, "__code__", None)
    if code is None or id(code) in seen:
        return
    seen.add(id(code))
    module_globals: Mapping[str, Any] = getattr(func, "__globals__", {})
    module_name = module_globals.get("__name__", "")
    stack = [code]
    while stack:
        current = stack.pop()
        for const in current.co_consts:
            if isinstance(const, types.CodeType):
                stack.append(const)
            else:
                yield from _strings(const)
        for name in current.co_names:
            value = module_globals.get(name)
            if isinstance(value, types.FunctionType):
                if depth > 0 and value.__module__ == module_name:
                    yield from code_strings(value, depth - 1, seen)
            elif not isinstance(value, (types.ModuleType, type)):
                yield from _strings(value)


def _fixture_funcs(item: pytest.Item) -> Iterator[Any]:
    """The functions of the fixtures `item` uses (its whole closure), other than pytest's and plugins' own."""
    info = getattr(item, "_fixtureinfo", None)
    for definitions in (getattr(info, "name2fixturedefs", None) or {}).values():
        for definition in definitions[-1:]:  # the one that applies (the closest override)
            func = getattr(definition, "func", None)
            module = getattr(func, "__module__", "") or ""
            if func is not None and not module.startswith(_SKIPPED_MODULES):
                yield func


def item_strings(item: pytest.Item) -> Iterator[str]:
    """Every string the test's code, fixtures and parameters hold (see the module doc)."""
    seen: set[int] = set()
    if (func := getattr(item, "obj", None)) is not None:
        yield from code_strings(func, seen=seen)
    for fixture in _fixture_funcs(item):
        yield from code_strings(fixture, seen=seen)
    params = getattr(getattr(item, "callspec", None), "params", {}) or {}
    for value in params.values():
        yield from _strings(value)


@dataclass(frozen=True)
class Names:
    """What a string may name in one catalog: logical names, and repo ids (folded) -> the manifest answering for them
    (None where several pin it and none is primary)."""

    names: frozenset[str]
    repos: Mapping[str, str | None]

    @classmethod
    def of(cls, cat: Catalog) -> Names:
        repos: dict[str, str | None] = {}
        for m in cat:
            key = m.source.hf_repo.casefold()
            if key not in repos:
                owner = cat.repo_owner(m.source.hf_repo, repo_type=m.source.repo_type)
                repos[key] = owner.name if owner is not None else None
        return cls(frozenset(cat.models), repos)


def named_refs(strings: Iterable[str], names: Names) -> tuple[list[Ref], list[str]]:
    """Pure: the models `strings` name, and the repo ids found that no single manifest answers for."""
    refs: dict[tuple[str, str], Ref] = {}
    unmapped: list[str] = []
    for text in strings:
        if text in names.names:
            refs.setdefault((text, "dir"), Ref(text, "named", text))
        elif (folded := text.casefold()) in names.repos:
            owner = names.repos[folded]
            if owner is None:
                if text not in unmapped:
                    unmapped.append(text)
            else:
                refs.setdefault((owner, "hf-cache"), Ref(owner, "repo id", text, "hf-cache"))
    return list(refs.values()), unmapped

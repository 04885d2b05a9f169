"""Every field path of the installed SDKs' request types, walked from their TypedDicts.

The paths are written as :mod:`cachekit.providers.state` writes them (keys joined by ``.``, lists
transparent, an object's ``type`` literal in angle brackets, ``*`` for the keys of a typed map), so
a test can ask the classification table about each one. Unions, ``Optional``, ``Required`` /
``NotRequired`` / ``Annotated``, ``Iterable`` / ``Sequence`` / ``List`` and ``Dict`` are unwrapped; a
recursive type is walked once per branch.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import typing_extensions

_WRAPPERS = {
    typing_extensions.Required,
    typing_extensions.NotRequired,
    typing_extensions.Annotated,
    typing_extensions.ReadOnly,
    typing.Annotated,
}
_LISTS = {list, tuple, set, frozenset, collections.abc.Iterable, collections.abc.Sequence}
_MAPS = {dict, collections.abc.Mapping}
_LITERALS = {typing.Literal, typing_extensions.Literal}

#: What a path ends at: an object type (``node``), a value (``leaf``) or free-form JSON (``payload``:
#: ``object``, ``Dict[str, object]``, whose inside is the caller's own structure).
PathKind = Literal["node", "leaf", "payload"]


@dataclass(frozen=True, slots=True)
class SDKPath:
    """One field path of a request type, and the TypedDict that declares its last field."""

    path: str
    kind: PathKind
    declared_by: str


def _strip(hint: Any) -> Any:
    while typing.get_origin(hint) in _WRAPPERS:
        hint = typing.get_args(hint)[0]
    return hint


def _members(hint: Any) -> list[Any]:
    """The alternatives of a union (``Optional``'s ``None`` left out), else ``[hint]``."""
    hint = _strip(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(hint) if arg is not type(None) for m in _members(arg)]
    # A type alias statement (``type X = ...``) wraps its value.
    value = getattr(hint, "__value__", None)
    if value is not None and not isinstance(hint, type):
        return _members(value)
    return [hint]


def is_typed_dict(hint: Any) -> bool:
    """Whether ``hint`` is a TypedDict class."""
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")


@functools.cache
def fields(cls: type) -> dict[str, Any]:
    """A TypedDict's fields and their (resolved) types."""
    return typing.get_type_hints(cls, include_extras=True)


def _type_tags(cls: type) -> list[str | None]:
    """How an object of this TypedDict names its ``type`` in a path: each literal it may take, and
    ``None`` (no tag) when ``type`` may be absent or is not a literal."""
    hint = fields(cls).get("type")
    if hint is None:
        return [None]
    tags: list[str | None] = []
    optional = typing.get_origin(hint) is typing_extensions.NotRequired or not _required(cls, "type")
    for member in _members(hint):
        if typing.get_origin(member) in _LITERALS:
            tags.extend(str(arg) for arg in typing.get_args(member))
        else:
            optional = True
    if optional or not tags:
        tags.append(None)
    return tags


def _required(cls: type, key: str) -> bool:
    hint = fields(cls)[key]
    origin = typing.get_origin(hint)
    if origin is typing_extensions.Required:
        return True
    if origin is typing_extensions.NotRequired:
        return False
    return bool(getattr(cls, "__total__", True))


def _free_form(hint: Any) -> bool:
    if typing.get_origin(hint) in _MAPS:
        return _strip(typing.get_args(hint)[1]) in (object, Any)
    return hint in (object, dict, Any)


def walk(root: type) -> Iterator[SDKPath]:
    """Every path of the request type ``root`` (each once)."""
    seen: set[tuple[str, str]] = set()

    def emit(path: str, kind: PathKind, owner: str) -> Iterator[SDKPath]:
        if (path, kind) not in seen:
            seen.add((path, kind))
            yield SDKPath(path, kind, owner)

    def value(hint: Any, key: str, prefix: str, owner: str, stack: frozenset[type]) -> Iterator[SDKPath]:
        here = f"{prefix}.{key}" if prefix else key
        for member in _members(hint):
            origin = typing.get_origin(member)
            if _free_form(member):
                yield from emit(here, "payload", owner)
            elif origin in _LISTS:
                args = typing.get_args(member)
                yield from value(args[0] if args else Any, key, prefix, owner, stack)
            elif origin in _MAPS:
                yield from value(typing.get_args(member)[1], "*", here, owner, stack)
            elif is_typed_dict(member):
                yield from typed(member, key, prefix, stack)
            else:
                yield from emit(here, "leaf", owner)

    def typed(cls: type, key: str, prefix: str, stack: frozenset[type]) -> Iterator[SDKPath]:
        if cls in stack:  # a recursive type: its fields are walked where it first appeared
            return
        for tag in _type_tags(cls):
            name = key if tag is None else f"{key}<{tag}>"
            here = f"{prefix}.{name}" if prefix else name
            if key:
                yield from emit(here, "node", cls.__qualname__)
            for field, hint in fields(cls).items():
                yield from value(hint, field, here, cls.__qualname__, stack | {cls})

    yield from typed(root, "", "", frozenset())

"""Anthropic request parts built from the ``anthropic`` SDK's own param types (its TypedDicts).

Where the Messages API accepts a ``cache_control`` marker is written down in the SDK: every block
param that takes one has a ``cache_control`` field, at whatever depth it sits (a document's
``source.content`` blocks, a ``search_result`` inside a ``tool_result``, a document inside a
``web_fetch_result``, ...). Tests read that structure here rather than keep their own list of shapes,
so a new SDK release with a new nesting is tested the day it is installed:

* :func:`marker_examples` gives, for every path to a ``cache_control`` field, a minimal block with a
  marker at exactly that path;
* :func:`blocks` is a hypothesis strategy for content blocks of every kind the SDK allows, with
  ``"cache_control": None`` (a valid "no marker") on every dict that may carry one, so a test can
  choose which of those slots get markers;
* :func:`payload_fields` names the fields typed as free-form JSON (a tool's ``input``, a schema):
  a ``cache_control`` key inside them is the caller's data, not a marker;
* :func:`markers` lists a request body's markers in prefix order, counted here, independently of
  cachekit's own walk; :func:`slots` finds the empty slots of generated blocks and :func:`put`
  fills one;
* :func:`texts` is the strategy for every string of a generated block: empty, short in any script
  (emoji, control characters, right-to-left), and long (thousands of tokens).

Types come from the beta params, a superset of the stable ones (the stable set is checked too).
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from collections.abc import Iterator
from typing import Any

import typing_extensions
from anthropic.types import message_create_params as stable_params
from anthropic.types.beta import message_create_params as beta_params
from hypothesis import strategies as st

_WRAPPERS = {
    typing_extensions.Required,
    typing_extensions.NotRequired,
    typing_extensions.Annotated,
    typing.Annotated,
}
_LISTS = {list, collections.abc.Iterable, collections.abc.Sequence}
_TEXTS = ("Booking 7 is confirmed.", "Checking the record.", "Row 12: paid.", "Done.")
MARKER = {"type": "ephemeral"}


def _strip(hint: Any) -> Any:
    while typing.get_origin(hint) in _WRAPPERS:
        hint = typing.get_args(hint)[0]
    return hint


def _members(hint: Any) -> list[Any]:
    """The alternatives of a union (``Optional`` included, ``None`` left out), else ``[hint]``."""
    hint = _strip(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(hint) if arg is not type(None) for m in _members(arg)]
    return [hint]


def _is_typed_dict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")


@functools.cache
def _fields(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


@functools.cache
def _required(cls: type) -> frozenset[str]:
    """The required keys (read from ``Required``/``NotRequired``: the SDK's modules use postponed
    annotations, so ``__required_keys__`` does not see them)."""
    required = set()
    for key, hint in _fields(cls).items():
        origin = typing.get_origin(hint)
        if origin is typing_extensions.Required or (
            getattr(cls, "__total__", True) and origin is not typing_extensions.NotRequired
        ):
            required.add(key)
    return frozenset(required)


def _element(hint: Any) -> Any | None:
    """The element type of a list/iterable type, else ``None``."""
    if typing.get_origin(hint) in _LISTS:
        return typing.get_args(hint)[0]
    return None


@functools.cache
def _reaches_marker(hint: Any) -> bool:
    """Whether a value of this type may hold a ``cache_control`` field somewhere inside."""
    for member in _members(hint):
        element = _element(member)
        if element is not None and _reaches_marker(element):
            return True
        if _is_typed_dict(member) and any(
            key == "cache_control" or _reaches_marker(value) for key, value in _fields(member).items()
        ):
            return True
    return False


def _free_form(hint: Any) -> bool:
    if typing.get_origin(hint) in (dict, collections.abc.Mapping):
        return typing.get_args(hint)[1] in (object, Any)
    return hint in (object, dict, Any)


# -- the messages, system and tools of a request --------------------------------------------------


def _request_fields(module: Any) -> dict[str, Any]:
    base = next(value for name, value in vars(module).items() if name.endswith("MessageCreateParamsBase"))
    return _fields(base)


def _role_content(module: Any, roles: tuple[str, ...]) -> list[Any]:
    """The content block types of messages with these roles."""
    found: list[Any] = []
    messages = _element(_members(_request_fields(module)["messages"])[0])
    for message in _members(messages):
        fields = _fields(message)
        if typing.get_args(_strip(fields["role"]))[0] not in roles:
            continue
        for member in _members(fields["content"]):
            element = _element(member)
            for block in _members(element) if element is not None else ():
                if _is_typed_dict(block) and block not in found:
                    found.append(block)
    return found


def content_types(*, beta: bool = True) -> list[Any]:
    """The block param types of user and assistant message content."""
    return _role_content(beta_params if beta else stable_params, ("user", "assistant"))


def system_types(*, beta: bool = True) -> list[Any]:
    """The block param types of the top-level ``system`` list."""
    hint = _request_fields(beta_params if beta else stable_params)["system"]
    return [b for m in _members(hint) if (e := _element(m)) is not None for b in _members(e)]


def tool_types(*, beta: bool = True, named: bool = False) -> list[Any]:
    """The tool definition types (only those with a ``name`` field when ``named``)."""
    hint = _request_fields(beta_params if beta else stable_params)["tools"]
    element = _element(_members(hint)[0])
    return [t for t in _members(element) if _is_typed_dict(t) and (not named or "name" in _fields(t))]


def payload_fields() -> set[str]:
    """Fields typed as free-form JSON anywhere in the request's messages, system and tools."""
    found: set[str] = set()
    seen: set[Any] = set()

    def walk(hint: Any, name: str) -> None:
        members = _members(hint)
        if any(_free_form(member) for member in members):
            found.add(name)  # what else the field may hold lies inside the caller's JSON too
            return
        for member in members:
            element = _element(member)
            if element is not None:
                walk(element, name)
            elif typing.get_origin(member) is dict:
                walk(typing.get_args(member)[1], name)
            elif _is_typed_dict(member) and member not in seen:
                seen.add(member)
                for key, value in _fields(member).items():
                    walk(value, key)

    for module in (stable_params, beta_params):
        fields = _request_fields(module)
        for section in ("messages", "system", "tools"):
            walk(fields[section], section)
    return found


# -- one example per marker path ----------------------------------------------------------------


def minimal(hint: Any) -> Any:
    """The simplest valid value of a type (the first alternative that can be built)."""
    members = _members(hint)
    if str in members:
        return _TEXTS[0]
    member = members[0]
    origin = typing.get_origin(member)
    if origin is typing.Literal or origin is typing_extensions.Literal:
        return typing.get_args(member)[0]
    element = _element(member)
    if element is not None:
        return [minimal(element)]
    if _is_typed_dict(member):
        return {key: minimal(value) for key, value in _fields(member).items() if key in _required(member)}
    if member is bool:
        return False
    if member in (int, float):
        return 1
    if member is str:
        return _TEXTS[0]
    return {}  # free-form JSON


def marker_examples(hint: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) for every place a value of type ``hint`` can hold a ``cache_control`` field: a
    minimal value with a marker at exactly that path (``content.0.source.content.0``; ``""`` for the
    value's own marker)."""
    for member in _members(hint):
        element = _element(member)
        if element is not None:
            for inner, value in marker_examples(element, "0"):
                yield _join(path, inner), [value]
        elif _is_typed_dict(member):
            base = minimal(member)
            for key, value_type in _fields(member).items():
                if key == "cache_control":
                    yield path, {**base, "cache_control": dict(MARKER)}
                elif _reaches_marker(value_type):
                    for inner, value in marker_examples(value_type, key):
                        yield _join(path, inner), {**base, key: value}


def _join(path: str, inner: str) -> str:
    return ".".join(part for part in (path, inner) if part)


# -- generated blocks with marker slots ---------------------------------------------------------


def _repeated(piece: str, times: int) -> str:
    return " ".join([piece] * times)


def texts(*, empty: bool = False) -> st.SearchStrategy[str]:
    """Texts of every length a prompt holds: short ones of any Unicode characters a JSON string can
    carry (no lone surrogates), the fixed sample texts, and, one time in five, a long one: a drawn
    piece repeated into thousands of tokens (cheap to draw: the length is what matters to a
    breakpoint). ``empty``: the empty text too (the API refuses an empty text block, so a body that
    holds one is invalid)."""
    short = st.one_of(st.text(min_size=0 if empty else 1, max_size=30), st.sampled_from(_TEXTS))
    long = st.builds(_repeated, st.text(min_size=1, max_size=20), st.integers(200, 1000))
    return st.sampled_from([long, short, short, short, short]).flatmap(lambda kind: kind)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    members = _members(hint)
    return st.one_of([_member_strategy(member) for member in members])


def _deferred(hint: Any) -> st.SearchStrategy[Any]:
    """The strategy of ``hint``, built on first draw (types may refer to themselves)."""
    return st.deferred(lambda: _strategy(hint))


@functools.cache
def _member_strategy(member: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(member)
    if origin is typing.Literal or origin is typing_extensions.Literal:
        return st.sampled_from(typing.get_args(member))
    element = _element(member)
    if element is not None:
        return st.lists(_strategy(element), min_size=1, max_size=2)
    if _is_typed_dict(member):
        return _typed_dict(member)
    if member is str:
        return texts()
    if member is bool:
        return st.booleans()
    if member in (int, float):
        return st.integers(1, 9)
    return st.just({"id": "7"})  # free-form JSON


def _typed_dict(cls: Any) -> st.SearchStrategy[Any]:
    """Required fields always; optional ones only where a marker can sit (the structure under test);
    ``"cache_control": None`` on the dict itself when it may carry a marker (a slot)."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for key, value in _fields(cls).items():
        if key == "cache_control":
            required[key] = st.none()
        elif key in _required(cls):
            required[key] = _deferred(value)
        elif _reaches_marker(value):
            optional[key] = _deferred(value)
    return st.fixed_dictionaries(required, optional=optional)


def blocks(types_: list[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A block of one of ``types_``, every marker slot present and empty."""
    return st.one_of([_member_strategy(t) for t in types_])


# -- markers of a body, counted independently ---------------------------------------------------


def markers(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every ``cache_control`` of a body as (path, value), in prefix order: tools, system, messages,
    and inside a block its contents before the block itself (the block's own marker ends it). The
    bodies tests build hold no ``cache_control`` keys as data, so every one found is a marker."""
    found: list[tuple[str, Any]] = []

    def visit(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                if key != "cache_control":
                    visit(child, f"{path}.{key}")
            if value.get("cache_control") is not None:
                found.append((path, value["cache_control"]))
        elif isinstance(value, list):
            for i, child in enumerate(value):
                visit(child, f"{path}.{i}")

    for section in ("tools", "system", "messages"):
        visit(body.get(section), section)
    return found


def slots(value: Any, path: str = "") -> list[str]:
    """Paths (relative to ``value``) of the dicts inside it with an empty ``cache_control`` slot, in
    prefix order; ``value``'s own slot is not included."""
    found: list[str] = []
    if isinstance(value, dict):
        items: list[tuple[Any, Any]] = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return found
    for key, child in items:
        if key == "cache_control":
            continue
        inner = f"{path}.{key}" if path else str(key)
        found += slots(child, inner)
        if isinstance(child, dict) and "cache_control" in child and child["cache_control"] is None:
            found.append(inner)
    return found


def put(body: Any, path: str, control: dict[str, str]) -> Any:
    """A copy of ``body`` with ``control`` as the ``cache_control`` of the dict at ``path``."""
    key, _, rest = path.partition(".")
    index: Any = int(key) if isinstance(body, list) else key
    copy: Any = list(body) if isinstance(body, list) else dict(body)
    copy[index] = put(body[index], rest, control) if rest else {**body[index], "cache_control": control}
    return copy

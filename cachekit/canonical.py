"""Canonical request bodies: the same request always becomes the same bytes.

Providers' prefix caches and cachekit's exact cache both match on bytes, yet callers often send
semantically identical requests in different byte forms: a tool schema built from a dict whose key
order depends on code paths, tool-call arguments re-serialized with other spacing, tools registered
in a different order. :func:`canonicalize` removes exactly those differences and nothing else:

* keys are sorted recursively inside tool definitions (the whole definition: name, description and
  the schema, Anthropic ``input_schema``, OpenAI Chat ``function.parameters``, OpenAI Responses
  ``parameters``) and inside Anthropic ``tool_use`` / ``server_tool_use`` inputs;
* OpenAI tool-call ``arguments`` strings (Chat assistant ``tool_calls``, Responses ``function_call``
  input items) are re-dumped sorted and compact, but only when they parse as JSON;
* tools are optionally sorted by name (:attr:`CanonicalOptions.tool_order`);
* whitespace in prose is optionally normalized (:attr:`CanonicalOptions.normalize_whitespace`).

Messages, content blocks, tool results and everything else keep their order and bytes. In
particular response-format JSON schemas keep their key order: structured-output property order is
what the model generates in, so sorting it would change answers.

The functions are pure (no I/O) and copy-on-write: new containers are built only along the paths
that change, so untouched subtrees of the result are the input's own objects. Treat the result as
read-only, or copy before mutating it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from cachekit._types import Dialect, JSONObject, ToolOrder

__all__ = ["CanonicalOptions", "CanonicalResult", "Change", "canonicalize", "dumps"]

logger = logging.getLogger("cachekit.canonical")

_SORT_KEYS: Final = orjson.OPT_SORT_KEYS

# Change kinds (the values of Change.kind).
_SORTED_KEYS: Final = "sorted_keys"
_COMPACTED_ARGUMENTS: Final = "compacted_arguments"
_REORDERED_TOOLS: Final = "reordered_tools"
_NORMALIZED_WHITESPACE: Final = "normalized_whitespace"

# Tuples, not sets, for the membership tests below: a malformed body may hold an unhashable "type"
# or "role" (a list, an object), and ``x in tuple`` compares instead of hashing, so it cannot raise.
#: Content parts that carry prose: Anthropic system/message blocks and Chat parts; Responses parts.
_TEXT_PARTS: Final = ("text",)
_RESPONSES_TEXT_PARTS: Final = ("input_text", "output_text")
#: Anthropic blocks whose ``input`` is a model-written JSON object.
_TOOL_USE_TYPES: Final = ("tool_use", "server_tool_use")
#: Chat roles whose content is data produced by a tool, not prose: left alone even when normalizing.
_CHAT_TOOL_ROLES: Final = ("tool", "function")


@dataclass(frozen=True, slots=True)
class CanonicalOptions:
    """How far :func:`canonicalize` goes beyond key order and argument compaction.

    Attributes:
        tool_order: ``"keep"`` (default) leaves tools as sent. ``"sort"`` sorts them by name
            (Anthropic ``name``, Chat ``function.name``, Responses ``name``), comparing names by code
            point; the sort is stable, so tools with equal names keep their relative order. Tools
            without a string name (built-in Responses tools such as ``{"type": "web_search"}``, Chat
            custom tools) go after the named ones, in the order they were sent: cachekit does not
            know what makes them distinct, so it does not guess an order for them. Tools are not
            reordered at all while one carries the caller's ``cache_control`` marker: sorting would
            move that breakpoint within the prompt prefix, and cachekit never moves a caller's
            marker.
        normalize_whitespace: opt-in. In prose only (Anthropic ``system`` text, message text blocks
            and string contents; Chat message contents and text parts; Responses ``instructions``,
            ``input`` strings and message text parts), turn CRLF and CR into LF and strip spaces and
            tabs at line ends (including the end of the text). Tool results, tool inputs, thinking
            blocks and documents are data and are never touched: trailing whitespace in a file the
            model is editing matters.
    """

    tool_order: ToolOrder = "keep"
    normalize_whitespace: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    """One place where the canonical body differs from the input.

    Attributes:
        path: JSON-pointer-like location in the *canonical* body (after any tool reordering), e.g.
            ``/tools/2``, ``/messages/3/content/1/input``,
            ``/messages/4/tool_calls/0/function/arguments``, or ``/tools`` for a reordering.
        kind: ``"sorted_keys"``, ``"compacted_arguments"``, ``"reordered_tools"`` or
            ``"normalized_whitespace"``.
    """

    path: str
    kind: str


@dataclass(frozen=True, slots=True)
class CanonicalResult:
    """What :func:`canonicalize` returns.

    Attributes:
        body: the canonical body, a new top-level dict (the input is never mutated); subtrees that did
            not change are shared with the input.
        changes: every change made, empty when the body was already canonical.
    """

    body: JSONObject
    changes: tuple[Change, ...]


_DEFAULT_OPTIONS: Final = CanonicalOptions()


def canonicalize(
    body: JSONObject, dialect: Dialect, options: CanonicalOptions = _DEFAULT_OPTIONS
) -> CanonicalResult:
    """Return the canonical form of a request ``body`` of the given API ``dialect``.

    Never raises on a JSON object: values of an unexpected type (``tools`` that is not a list, a
    message that is a string, ...) are left as they are, for the provider to reject. An unknown
    ``dialect`` or a ``body`` that is not a dict is returned unchanged.

    One debug line on the ``cachekit.canonical`` logger lists the change paths and kinds (never any
    prompt text) when something changed.
    """
    untyped: object = body  # typed as a dict, but callers may pass any parsed JSON
    if not isinstance(untyped, dict):
        return CanonicalResult(body, ())
    changes: list[Change] = []
    # Always a new top-level dict, so callers may set top-level fields without touching the input.
    out = dict(body)
    ws = options.normalize_whitespace
    if dialect in ("anthropic_messages", "anthropic_count_tokens"):
        _canon_tools(out, options, changes, _tool_name)
        if ws:
            _replace(out, "system", _prose_or_blocks(out.get("system"), "/system", _TEXT_PARTS, changes))
        _canon_list(out, "messages", changes, ws, _anthropic_messages)
    elif dialect == "openai_chat":
        _canon_tools(out, options, changes, _chat_tool_name)
        _canon_list(out, "messages", changes, ws, _chat_messages)
    elif dialect == "openai_responses":
        _canon_tools(out, options, changes, _tool_name)
        if ws:
            _replace(out, "instructions", _prose(out.get("instructions"), "/instructions", changes))
        items = out.get("input")
        if isinstance(items, str):
            if ws:
                _replace(out, "input", _prose(items, "/input", changes))
        else:
            _canon_list(out, "input", changes, ws, _responses_items)
    if changes and logger.isEnabledFor(logging.DEBUG):
        logger.debug("canonicalized %s body: %s", dialect, ", ".join(f"{c.kind} {c.path}" for c in changes))
    return CanonicalResult(out, tuple(changes))


def dumps(body: JSONObject) -> bytes:
    """Compact JSON bytes of a canonical ``body``, with its top-level keys sorted.

    Only the top level is sorted, so SDKs that emit fields in different orders give the same bytes,
    while message contents and response-format schemas keep the order the model should see.
    ``orjson.loads`` of the result equals ``body``. Raises :class:`orjson.JSONEncodeError` (a
    :class:`TypeError`) for values JSON cannot hold, such as integers beyond 64 bits; a body parsed by
    orjson never has them.
    """
    if list(body) != sorted(body):
        body = {key: body[key] for key in sorted(body)}
    return orjson.dumps(body)


# -- copy-on-write plumbing ----------------------------------------------------------------------


def _replace(container: dict[str, Any], key: str, new: Any) -> None:
    """Set ``container[key]`` when ``new`` is a different object (``container`` is already a copy)."""
    if key in container and new is not container[key]:
        container[key] = new


def _canon_list(
    container: dict[str, Any],
    key: str,
    changes: list[Change],
    ws: bool,
    fix: Callable[[list[Any], bool, list[Change]], list[Any]],
) -> None:
    """Replace ``container[key]`` by ``fix(it, ws, changes)`` if it is a list that ``fix`` changed."""
    seq = container.get(key)
    if isinstance(seq, list):
        new_seq = fix(seq, ws, changes)
        if new_seq is not seq:
            container[key] = new_seq


def _map_list(seq: list[Any], fix: Callable[[Any, int], Any]) -> list[Any]:
    """``seq`` with each item replaced by ``fix(item, index)``; ``seq`` itself when nothing changed."""
    out = seq
    for i, item in enumerate(seq):
        new = fix(item, i)
        if new is not item:
            if out is seq:
                out = list(seq)
            out[i] = new
    return out


def _with(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``obj`` with ``key`` set to ``value``, the key staying where it was."""
    new = dict(obj)
    new[key] = value
    return new


# -- key sorting and argument compaction ---------------------------------------------------------


def _sorted_keys(value: Any) -> Any:
    """``value`` with dict keys sorted recursively, or ``value`` itself when already sorted.

    NaN and infinities are not JSON (orjson's parser rejects them); if a lenient parser let one into a
    subtree whose keys need sorting, it comes back as ``None``, as orjson dumps it.
    """
    try:
        ordered = orjson.dumps(value, option=_SORT_KEYS)
        # Typical schemas put "type" first, so an unsorted top level is the common case and settles
        # it; otherwise compare with the unsorted bytes. Two dumps are cheaper than walking the tree
        # in Python, and bytes see key order, which dict equality ignores.
        keys = list(value) if isinstance(value, dict) else None
        if (keys is None or keys == sorted(keys)) and orjson.dumps(value) == ordered:
            return value
    except TypeError:
        # orjson.JSONEncodeError: an integer beyond 64 bits (from a non-orjson parser), nesting deeper
        # than orjson's 255 levels, or a non-string key. The slow path keeps such values exactly.
        return _sorted_keys_py(value)
    return orjson.loads(ordered)


def _sorted_keys_py(value: Any) -> Any:
    """Pure-Python :func:`_sorted_keys` for values orjson cannot dump; never raises."""
    try:
        return _sort_py(value)
    except RecursionError:
        return value


def _sort_py(value: Any) -> Any:
    if isinstance(value, dict):
        items = [(k, _sort_py(v)) for k, v in value.items()]
        changed = any(new is not old for (_, new), old in zip(items, value.values(), strict=True))
        if all(isinstance(k, str) for k, _ in items):
            ordered = sorted(items, key=lambda kv: kv[0])
            if [k for k, _ in ordered] != [k for k, _ in items]:
                items, changed = ordered, True
        return dict(items) if changed else value
    if isinstance(value, list):
        return _map_list(value, lambda v, _i: _sort_py(v))
    return value


# A run of 20 digits may be an integer beyond 64 bits, which orjson parses as a lossy float.
_DIGIT_RUN: Final = re.compile(r"[0-9]{20}")


def _canon_arguments(args: Any) -> Any:
    """A tool-call ``arguments`` string re-dumped sorted and compact when it parses as JSON.

    Anything else (not a string, not JSON, or JSON that would not survive the round trip) is returned
    as is, byte for byte: the model wrote it and the provider decides what it means.
    """
    if not isinstance(args, str):
        return args
    try:
        parsed = orjson.loads(args)
        new = orjson.dumps(parsed, option=_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return args
    if new == args:
        return args
    if _DIGIT_RUN.search(args):
        # orjson turns integers beyond 64 bits into floats; re-dumping would change the value.
        return args
    return new


# -- whitespace ----------------------------------------------------------------------------------


def _normalize_ws(text: str) -> str:
    """CRLF/CR to LF and no spaces or tabs at line ends; ``text`` itself when already so."""
    new = text
    if "\r" in new:
        new = new.replace("\r\n", "\n").replace("\r", "\n")
    if " \n" in new or "\t\n" in new or new.endswith((" ", "\t")):
        # Split/strip rather than a regex: ``[ \t]+$`` is quadratic on long runs of inner spaces.
        new = "\n".join(line.rstrip(" \t") for line in new.split("\n"))
    return text if new == text else new


def _prose(value: Any, path: str, changes: list[Change]) -> Any:
    """Normalized ``value`` when it is a string, else ``value``."""
    if not isinstance(value, str):
        return value
    new = _normalize_ws(value)
    if new is not value:
        changes.append(Change(path, _NORMALIZED_WHITESPACE))
    return new


def _prose_or_blocks(value: Any, path: str, text_types: tuple[str, ...], changes: list[Change]) -> Any:
    """Normalize a string content, or the ``text`` of each block of a type in ``text_types``."""
    if isinstance(value, str):
        return _prose(value, path, changes)
    if not isinstance(value, list):
        return value

    def fix(block: Any, j: int) -> Any:
        if not isinstance(block, dict) or block.get("type") not in text_types:
            return block
        text = block.get("text")
        new = _prose(text, f"{path}/{j}/text", changes)
        return block if new is text else _with(block, "text", new)

    return _map_list(value, fix)


# -- tools ---------------------------------------------------------------------------------------


def _canon_tools(
    out: dict[str, Any],
    options: CanonicalOptions,
    changes: list[Change],
    name_of: Callable[[Any], str | None],
) -> None:
    tools = out.get("tools")
    if not isinstance(tools, list):
        return
    ordered = tools
    if options.tool_order == "sort" and not any(isinstance(t, dict) and "cache_control" in t for t in tools):
        ordered = _sort_tools(tools, name_of)
        if ordered is not tools:
            changes.append(Change("/tools", _REORDERED_TOOLS))
    new, changed = _sorted_tool_definitions(ordered)
    # Paths name positions in the output, so key sorting is recorded after the reordering.
    changes.extend(Change(f"/tools/{i}", _SORTED_KEYS) for i in changed)
    if new is not tools:
        out["tools"] = new


# Tool definitions are re-sent unchanged on every turn of a conversation, so their sorted form is
# remembered by their bytes: a dump of the list (tens of microseconds) replaces re-sorting every schema.
# The cached lists are shared between results, which is why results are documented as read-only.
_TOOLS_CACHE_SIZE: Final = 256
_tools_cache: dict[bytes, tuple[list[Any], tuple[int, ...]]] = {}


def _sorted_tool_definitions(tools: list[Any]) -> tuple[list[Any], tuple[int, ...]]:
    """``tools`` with every definition's keys sorted recursively, and the indices that changed.

    A whole definition is sorted (name, description, schema, ``cache_control``...): its key order
    means nothing to the API, and different code paths build the same tool in different orders.
    """
    try:
        raw = orjson.dumps(tools)
    except TypeError:  # a value orjson cannot dump: the slow path keeps it exactly
        return _sort_each_tool(tools)
    cached = _tools_cache.get(raw)
    if cached is None:
        cached = _sort_each_tool(tools)
        if len(_tools_cache) >= _TOOLS_CACHE_SIZE:
            _tools_cache.pop(next(iter(_tools_cache)))  # oldest first: dicts keep insertion order
        _tools_cache[raw] = cached
    new, changed = cached
    return (tools, ()) if not changed else (new, changed)


def _sort_each_tool(tools: list[Any]) -> tuple[list[Any], tuple[int, ...]]:
    new = [_sorted_keys(tool) if isinstance(tool, dict) else tool for tool in tools]
    changed = tuple(i for i, (a, b) in enumerate(zip(tools, new, strict=True)) if a is not b)
    return (new if changed else tools), changed


def _sort_tools(tools: list[Any], name_of: Callable[[Any], str | None]) -> list[Any]:
    """Tools sorted by name, unnamed ones last in sent order; ``tools`` itself when already sorted."""
    keys: list[tuple[int, str]] = []
    for tool in tools:
        name = name_of(tool)
        keys.append((0, name) if name is not None else (1, ""))
    order = sorted(range(len(tools)), key=keys.__getitem__)  # stable: equal names keep their order
    if all(i == j for i, j in enumerate(order)):
        return tools
    return [tools[i] for i in order]


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tool_name(tool: Any) -> str | None:
    """The name of an Anthropic or Responses tool (``name`` at the top level)."""
    return _str_or_none(tool.get("name")) if isinstance(tool, dict) else None


def _chat_tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return _str_or_none(function.get("name")) if isinstance(function, dict) else None


# -- messages ------------------------------------------------------------------------------------
# These run over every message of every request, so they are plain loops (no per-item closures), and
# copy a list only on its first changed item.


def _anthropic_messages(messages: list[Any], ws: bool, changes: list[Change]) -> list[Any]:
    out = messages
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            new_content = _anthropic_blocks(content, i, ws, changes)
        elif ws and isinstance(content, str):
            new_content = _prose(content, f"/messages/{i}/content", changes)
        else:
            continue
        if new_content is not content:
            if out is messages:
                out = list(messages)
            out[i] = _with(message, "content", new_content)
    return out


def _anthropic_blocks(blocks: list[Any], i: int, ws: bool, changes: list[Change]) -> list[Any]:
    out = blocks
    for j, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in _TOOL_USE_TYPES:
            tool_input = block.get("input")
            if not isinstance(tool_input, dict):
                continue
            new = _sorted_keys(tool_input)
            if new is tool_input:
                continue
            # Paths are built only for changes: this loop runs over every block of every request.
            changes.append(Change(f"/messages/{i}/content/{j}/input", _SORTED_KEYS))
            new_block = _with(block, "input", new)
        elif ws and kind == "text":
            text = block.get("text")
            new = _prose(text, f"/messages/{i}/content/{j}/text", changes)
            if new is text:
                continue
            new_block = _with(block, "text", new)
        else:
            # tool_result, thinking (signed), documents, images: data, never rewritten.
            continue
        if out is blocks:
            out = list(blocks)
        out[j] = new_block
    return out


def _chat_messages(messages: list[Any], ws: bool, changes: list[Change]) -> list[Any]:
    out = messages
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        new_message = message
        role = message.get("role")
        tool_calls = message.get("tool_calls")
        if role == "assistant" and isinstance(tool_calls, list):
            new_calls = _chat_tool_calls(tool_calls, i, changes)
            if new_calls is not tool_calls:
                new_message = _with(new_message, "tool_calls", new_calls)
        if ws and role not in _CHAT_TOOL_ROLES:
            content = message.get("content")
            new_content = _prose_or_blocks(content, f"/messages/{i}/content", _TEXT_PARTS, changes)
            if new_content is not content:
                new_message = _with(new_message, "content", new_content)
        if new_message is not message:
            if out is messages:
                out = list(messages)
            out[i] = new_message
    return out


def _chat_tool_calls(calls: list[Any], i: int, changes: list[Change]) -> list[Any]:
    out = calls
    for k, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            continue
        args = function.get("arguments")
        new = _canon_arguments(args)
        if new is not args:
            changes.append(Change(f"/messages/{i}/tool_calls/{k}/function/arguments", _COMPACTED_ARGUMENTS))
            if out is calls:
                out = list(calls)
            out[k] = _with(call, "function", _with(function, "arguments", new))
    return out


def _responses_items(items: list[Any], ws: bool, changes: list[Change]) -> list[Any]:
    out = items
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            args = item.get("arguments")
            new = _canon_arguments(args)
            if new is args:
                continue
            changes.append(Change(f"/input/{i}/arguments", _COMPACTED_ARGUMENTS))
            new_item = _with(item, "arguments", new)
        elif ws and (kind == "message" or (kind is None and "role" in item)):
            # Messages may omit ``type`` (the SDK's EasyInputMessage).
            content = item.get("content")
            new_content = _prose_or_blocks(content, f"/input/{i}/content", _RESPONSES_TEXT_PARTS, changes)
            if new_content is content:
                continue
            new_item = _with(item, "content", new_content)
        else:
            # function_call_output, reasoning and other items are data.
            continue
        if out is items:
            out = list(items)
        out[i] = new_item
    return out

"""Canonical request bodies: the same request always becomes the same bytes.

Providers' prefix caches and cachekit's exact cache both match on bytes, yet callers often send
semantically identical requests in different byte forms: objects whose key order depends on code
paths, tool-call arguments re-serialized with other spacing, ``temperature`` written ``1`` or ``1.0``,
tools registered in a different order. Canonical form removes exactly the differences the provider
ignores, and nothing else. Two steps:

:func:`canonicalize` rewrites values (copy-on-write):

* OpenAI tool-call ``arguments`` strings (Chat assistant ``tool_calls``, Responses ``function_call``
  input items) are re-dumped sorted and compact, but only when that is provably lossless (no number
  a double cannot hold exactly as written, no duplicate key): otherwise they stay byte for byte;
* integral floats in sampling parameters (:data:`EQUAL_NUMBERS`) become integers: ``1.0`` is ``1``;
* tools are optionally sorted by name (:attr:`CanonicalOptions.tool_order`);
* whitespace in prose is optionally normalized (:attr:`CanonicalOptions.normalize_whitespace`).

:func:`dumps` writes the bytes (sent upstream and hashed into the key) with object keys sorted where
order means nothing to the provider, and in the caller's order where it does:

* the JSON Schemas that drive generation (:data:`ORDER_KEPT`: tool parameter schemas, response
  formats, Anthropic output formats) keep their order, so a reason-before-answer schema is never sent
  answer-first, and two schemas that differ only in property order get different keys;
* top-level fields cachekit does not know (:data:`SORTED_FIELDS`), such as a compatible server's
  extensions, are written as the caller wrote them: cachekit cannot know that their order is free;
* every other object (the top level, messages, content blocks, tool definitions around their schema,
  tool inputs in the history, ``tool_choice``, ``metadata``, ...) has its keys sorted.

Messages, content blocks and lists keep their order and text. The functions are pure (no I/O, no
shared state); untouched subtrees of :func:`canonicalize`'s result are the input's own objects, so
treat the result as read-only, or copy before mutating it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from cachekit._types import Dialect, JSONObject, ToolOrder

__all__ = [
    "EQUAL_NUMBERS",
    "ORDER_KEPT",
    "SORTED_FIELDS",
    "CanonicalOptions",
    "CanonicalResult",
    "Change",
    "canonicalize",
    "dumps",
]

logger = logging.getLogger("cachekit.canonical")

_SORT_KEYS: Final = orjson.OPT_SORT_KEYS

# Change kinds (the values of Change.kind).
_COMPACTED_ARGUMENTS: Final = "compacted_arguments"
_NORMALIZED_NUMBER: Final = "normalized_number"
_REORDERED_TOOLS: Final = "reordered_tools"
_NORMALIZED_WHITESPACE: Final = "normalized_whitespace"

# Tuples, not sets, for the membership tests below: a malformed body may hold an unhashable "type"
# or "role" (a list, an object), and ``x in tuple`` compares instead of hashing, so it cannot raise.
#: Content parts that carry prose: Anthropic system/message blocks and Chat parts; Responses parts.
_TEXT_PARTS: Final = ("text",)
_RESPONSES_TEXT_PARTS: Final = ("input_text", "output_text")
#: Chat roles whose content is data produced by a tool, not prose: left alone even when normalizing.
_CHAT_TOOL_ROLES: Final = ("tool", "function")

_ANTHROPIC_KEPT: Final = (
    "tools/*/input_schema",
    "tools/*/input_examples",
    "output_config/format/schema",
    "output_format/schema",
)

#: Where key order is meaning, per dialect: paths (``*`` is every item of a list) of the subtrees
#: :func:`dumps` writes in the caller's order. Providers generate structured output in a schema's
#: property order (strict tools, response formats), and a model reads every tool schema (strict or
#: not) and example in the order it was written, so these are never reordered. ``output_format`` is
#: Anthropic's structured-outputs beta; ``functions`` is Chat's legacy form of ``tools``.
ORDER_KEPT: Final[Mapping[Dialect, tuple[str, ...]]] = {
    "anthropic_messages": _ANTHROPIC_KEPT,
    "anthropic_count_tokens": _ANTHROPIC_KEPT,
    "openai_chat": (
        "tools/*/function/parameters",
        "functions/*/parameters",
        "response_format/json_schema/schema",
    ),
    "openai_responses": ("tools/*/parameters", "text/format/schema"),
}

_ANTHROPIC_FIELDS: Final = frozenset(
    {
        "cache_control",
        "container",
        "context_management",
        "inference_geo",
        "max_tokens",
        "mcp_servers",
        "messages",
        "metadata",
        "model",
        "output_config",
        "output_format",
        "service_tier",
        "speed",
        "stop_sequences",
        "stream",
        "system",
        "temperature",
        "thinking",
        "tool_choice",
        "tools",
        "top_k",
        "top_p",
    }
)

#: The top-level fields of each dialect whose structure cachekit knows: outside :data:`ORDER_KEPT`
#: their objects' key order means nothing to the provider, so :func:`dumps` sorts it. Any other
#: top-level field (a new API field, a compatible server's extension such as vLLM's ``guided_json``
#: schema) is written as the caller wrote it: when in doubt, order is kept.
SORTED_FIELDS: Final[Mapping[Dialect, frozenset[str]]] = {
    "anthropic_messages": _ANTHROPIC_FIELDS,
    "anthropic_count_tokens": _ANTHROPIC_FIELDS,
    "openai_chat": frozenset(
        {
            "audio",
            "frequency_penalty",
            "function_call",
            "functions",
            "logit_bias",
            "logprobs",
            "max_completion_tokens",
            "max_tokens",
            "messages",
            "metadata",
            "modalities",
            "model",
            "n",
            "parallel_tool_calls",
            "prediction",
            "presence_penalty",
            "prompt_cache_key",
            "prompt_cache_retention",
            "reasoning_effort",
            "response_format",
            "safety_identifier",
            "seed",
            "service_tier",
            "stop",
            "store",
            "stream",
            "stream_options",
            "temperature",
            "tool_choice",
            "tools",
            "top_logprobs",
            "top_p",
            "user",
            "verbosity",
            "web_search_options",
        }
    ),
    "openai_responses": frozenset(
        {
            "background",
            "conversation",
            "include",
            "input",
            "instructions",
            "max_output_tokens",
            "max_tool_calls",
            "metadata",
            "model",
            "parallel_tool_calls",
            "previous_response_id",
            "prompt",
            "prompt_cache_key",
            "prompt_cache_retention",
            "reasoning",
            "safety_identifier",
            "service_tier",
            "store",
            "stream",
            "stream_options",
            "temperature",
            "text",
            "tool_choice",
            "tools",
            "top_logprobs",
            "top_p",
            "truncation",
            "user",
        }
    ),
}

#: Top-level parameters the API types as a *number* (any number, not an integer), where ``1`` and
#: ``1.0`` are one request: :func:`canonicalize` writes an integral float there as an integer.
#: Integer parameters (``max_tokens``, ``top_k``, ``n``, ``seed``, ...) are not listed: an API may
#: refuse ``100.0`` there, and cachekit must not turn a request the provider refuses into one it takes.
EQUAL_NUMBERS: Final[Mapping[Dialect, tuple[str, ...]]] = {
    "anthropic_messages": ("temperature", "top_p"),
    "anthropic_count_tokens": ("temperature", "top_p"),
    "openai_chat": ("temperature", "top_p", "frequency_penalty", "presence_penalty"),
    "openai_responses": ("temperature", "top_p"),
}

# Integral floats up to 2**53 are exactly integers; beyond, a float's integer is not what was written.
_EXACT_INTEGERS: Final = 2.0**53


@dataclass(frozen=True, slots=True)
class CanonicalOptions:
    """How far :func:`canonicalize` goes beyond argument compaction and equal numbers.

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
            ``/temperature``, ``/messages/4/tool_calls/0/function/arguments``, or ``/tools`` for a
            reordering.
        kind: ``"compacted_arguments"``, ``"normalized_number"``, ``"reordered_tools"`` or
            ``"normalized_whitespace"``. (Key order is not a change to the body: :func:`dumps`
            decides it when writing the bytes.)
    """

    path: str
    kind: str


@dataclass(frozen=True, slots=True)
class CanonicalResult:
    """What :func:`canonicalize` returns.

    Attributes:
        body: the canonical body, a new top-level dict (the input is never mutated); subtrees that did
            not change are shared with the input. Write it with :func:`dumps`.
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
    _equal_numbers(out, EQUAL_NUMBERS.get(dialect, ()), changes)
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


def dumps(body: JSONObject, dialect: Dialect) -> bytes:
    """Compact JSON bytes of a ``body`` of ``dialect``: the bytes sent upstream and hashed into keys.

    Object keys are sorted everywhere except in :data:`ORDER_KEPT` subtrees and top-level fields
    outside :data:`SORTED_FIELDS`, which keep the caller's order (an unknown ``dialect`` keeps every
    field's order and sorts only the top level). ``orjson.loads`` of the result equals ``body``.
    Raises :class:`orjson.JSONEncodeError` (a :class:`TypeError`) for what orjson cannot write:
    integers beyond 64 bits (a body parsed by orjson has none), nesting deeper than 255 levels.
    """
    known = SORTED_FIELDS.get(dialect, frozenset())
    kept = _KEPT_TREES.get(dialect, {})
    prepared: dict[str, Any] = {}
    for name, value in body.items():
        if name not in known:
            prepared[name] = _as_written(value)
        elif name in kept:
            prepared[name] = _keep_order(value, kept[name])
        else:
            prepared[name] = value
    # One pass in C sorts every object's keys; the kept subtrees are already bytes (fragments).
    return orjson.dumps(prepared, option=_SORT_KEYS)


# -- key order -----------------------------------------------------------------------------------

#: A compiled :data:`ORDER_KEPT` path set: nested dicts by path part, ``None`` at a kept subtree.
_Trie = dict[str, Any]


def _trie(paths: tuple[str, ...]) -> _Trie:
    root: _Trie = {}
    for path in paths:
        node: _Trie | None = root
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {}) if node is not None else None
        if node is not None:  # else a parent is kept whole already
            node[leaf] = None
    return root


_KEPT_TREES: Final[Mapping[str, _Trie]] = {dialect: _trie(paths) for dialect, paths in ORDER_KEPT.items()}


def _as_written(value: Any) -> Any:
    """``value`` ready to be written in its own key order (an orjson fragment for a container)."""
    if isinstance(value, (dict, list)):
        return orjson.Fragment(orjson.dumps(value))
    return value


def _keep_order(value: Any, node: _Trie | None) -> Any:
    """``value`` with the subtrees at ``node``'s leaves replaced by fragments in their own order
    (``value`` itself is kept when ``node`` is ``None``).

    Only the containers along the way are copied; values off the paths are shared with ``value``.
    """
    if node is None:
        return _as_written(value)
    if isinstance(value, list):
        each = node.get("*")
        return value if each is None else [_keep_order(item, each) for item in value]
    if not isinstance(value, dict) or node.keys().isdisjoint(value):
        return value
    return {k: _keep_order(v, node[k]) if k in node else v for k, v in value.items()}


# -- equal numbers ---------------------------------------------------------------------------------


def _equal_numbers(out: dict[str, Any], fields: tuple[str, ...], changes: list[Change]) -> None:
    """Write the integral floats of ``fields`` (top-level number parameters) as integers."""
    for name in fields:
        value = out.get(name)
        if type(value) is float and value.is_integer() and abs(value) <= _EXACT_INTEGERS:
            out[name] = int(value)
            changes.append(Change(f"/{name}", _NORMALIZED_NUMBER))


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


# -- argument compaction ------------------------------------------------------------------------


def _canon_arguments(args: Any) -> Any:
    """A tool-call ``arguments`` string re-dumped sorted and compact, when that is provably lossless.

    Anything else (not a string, not JSON, or JSON that orjson would not read exactly as written) is
    returned as is, byte for byte: the model wrote it and the provider decides what it means.
    """
    if not isinstance(args, str):
        return args
    try:
        new = orjson.dumps(orjson.loads(args), option=_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return args
    if new == args or not _lossless(args):
        return args
    return new


class _Lossy(ValueError):
    """Part of a JSON text that orjson would not read exactly as written."""


def _exact_int(text: str) -> int:
    value = int(text)
    # orjson reads integers from -2**63 to 2**64 - 1 exactly (others become doubles); "-0" is 0.
    if not -(2**63) <= value < 2**64 or str(value) != text:
        raise _Lossy("integer")
    return value


def _exact_float(text: str) -> float:
    # A number whose shortest double text is not what was written has more digits than a double
    # holds, or is written another way (1.50, 1E2): either way, a rewrite would change the text.
    value = float(text)
    if orjson.dumps(value) != text.encode():
        raise _Lossy("number")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Lossy("duplicate key")  # a parser keeps one of them; which one, the provider decides
    return obj


def _lossless(text: str) -> bool:
    """Whether orjson reads the JSON ``text`` exactly: every number as written, no duplicate key."""
    try:
        json.loads(text, parse_int=_exact_int, parse_float=_exact_float, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError):  # _Lossy is a ValueError, as is any parse error
        return False
    return True


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
    if options.tool_order != "sort" or any(isinstance(t, dict) and "cache_control" in t for t in tools):
        return
    ordered = _sort_tools(tools, name_of)
    if ordered is not tools:
        changes.append(Change("/tools", _REORDERED_TOOLS))
        out["tools"] = ordered


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
# Chat and Responses messages are walked on every request (for their tool-call arguments), so those
# walks are plain loops (no per-item closures) that copy a list only on its first changed item.


def _anthropic_messages(messages: list[Any], ws: bool, changes: list[Change]) -> list[Any]:
    """Prose whitespace in Anthropic messages (string contents and text blocks; called only when
    normalizing). Tool inputs and results, thinking (signed), documents and images are data."""

    def fix(message: Any, i: int) -> Any:
        if not isinstance(message, dict):
            return message
        content = message.get("content")
        new = _prose_or_blocks(content, f"/messages/{i}/content", _TEXT_PARTS, changes)
        return message if new is content else _with(message, "content", new)

    return _map_list(messages, fix)


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

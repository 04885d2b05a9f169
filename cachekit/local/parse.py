"""Provider requests, parsed: the engine's :class:`Prompt` and the billing's cacheable positions.

Each API's body is validated the way the provider validates it (a
:class:`~cachekit.errors.RequestRefusedError` carries the provider's status, message and ``param``),
then reduced to two views:

* a :class:`~cachekit.local.engine.Prompt` for the engine (turns, tools, limits);
* the prompt's cacheable positions in prefix order (tools, then system, then messages: one position
  per tool definition, per system block and per message content block), each with its token count,
  its ``cache_control`` marker, the markers nested inside it at any depth, and whether it may carry
  one, for the providers' caching rules.

Nothing here keeps or logs prompt text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import orjson

from cachekit._types import Dialect, Section, Ttl
from cachekit.errors import RequestRefusedError
from cachekit.local.accounting import Segment
from cachekit.local.compaction import open_item
from cachekit.local.engine import Document, Prompt, Tokenizer, ToolCall, ToolChoice, ToolSpec, Turn
from cachekit.providers.cache_rules import MARKER_FIELDS
from cachekit.providers.registry import Family, family_of
from cachekit.providers.request_fields import EndpointFields, endpoint_fields
from cachekit.shape.blocks import block_text as _block_text
from cachekit.shape.blocks import cache_context, nested_markers, without_markers
from cachekit.shape.blocks import text_of as _text_of

__all__ = ["Compaction", "Parsed", "RequestRefusedError", "check_fields", "parse", "tool_specs"]

_VOLATILE = ("stream", "stream_options")
# Message content blocks without a cache_control field (the anthropic SDK's block params, stable and
# beta): a marker on one is refused, and the automatic one walks back past it.
_UNMARKABLE = frozenset({"thinking", "redacted_thinking", "fallback", "mcp_tool_listing"})


@dataclass(frozen=True)
class Parsed:
    """One request, parsed."""

    prompt: Prompt
    segments: tuple[Segment, ...]
    tokens: tuple[int, ...]
    """The prompt's tokens in prefix order (every position's tokens, concatenated)."""
    automatic: Ttl | None
    """A top-level ``cache_control`` (Anthropic's automatic caching)."""
    context: bytes
    """Canonical bytes of the settings that invalidate the cached messages (tool choice, thinking)."""
    compaction: Compaction | None = None
    """What the request asks of context compaction, when it asks anything."""


@dataclass(frozen=True)
class Compaction:
    """A request's context-compaction settings.

    ``now``: compact whatever the prompt's length (a Responses ``compaction_trigger`` item, the
    Messages ``compaction`` parameter); ``threshold``: compact once the prompt reaches that many
    tokens (Responses ``context_management``, Messages ``compact_20260112``); ``pause``: answer with the
    compaction alone (Messages ``pause_after_compaction``, and always with ``now``); ``edits``: the
    request sends Messages ``context_management`` (its answer reports the edits applied).
    """

    now: bool = False
    threshold: int | None = None
    pause: bool = False
    edits: bool = False

    def triggered(self, prompt_tokens: int) -> bool:
        """Whether a prompt of ``prompt_tokens`` tokens is compacted."""
        return self.now or (self.threshold is not None and prompt_tokens >= self.threshold)


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def digest(payload: dict[str, Any]) -> str:
    """A short stable digest of the request (stream options left out: they do not change the answer)."""
    stable = {key: value for key, value in payload.items() if key not in _VOLATILE}
    return hashlib.sha256(_canonical(stable)).hexdigest()[:12]


# OpenAI caches the rendered prompt, whose role headers and message boundaries are tokens too: the
# flat sequence tags each token id (< 2**32) with its message's role, and each message's first token,
# so two conversations with the same text under other roles never share a cached prefix, while the
# count stays the content's.
_ROLE_TAGS = {"tools": 1, "system": 2, "developer": 2, "user": 3, "assistant": 4, "tool": 5, "function": 5}
_BOUNDARY_TAG = 1 << 47


class _Builder:
    """Collects positions and turns while a request is walked."""

    def __init__(self, tokenizer: Tokenizer, *, nested: bool, salt: bytes = b"") -> None:
        self.tokenizer = tokenizer
        # Markers nested in blocks: the Messages API's (an OpenAI tool's parameters are a schema that
        # may name a property cache_control; Chat content parts hold no blocks).
        self.nested = nested
        self.salt = salt
        self.segments: list[Segment] = []
        self.tokens: list[int] = []
        self.turns: list[Turn] = []
        self.compacted = 0
        # The item types the endpoint takes (None: any) and the request's anthropic-beta values.
        self.items: EndpointFields | None = None
        self.betas: frozenset[str] = frozenset()
        # Responses items of one answer (reasoning, message, calls) arrive one by one: one turn.
        self._open_answer = False

    def turn(self, turn: Turn, *, answer_item: bool = False) -> None:
        """Add a turn; consecutive items of one Responses answer (``answer_item``) make one turn."""
        last = self.turns[-1] if self.turns else None
        if answer_item and self._open_answer and last is not None and last.role == "assistant":
            text = "\n".join(part for part in (last.text, turn.text) if part)
            self.turns[-1] = Turn("assistant", text, last.tool_calls + turn.tool_calls)
        else:
            self.turns.append(turn)
        self._open_answer = answer_item

    def compact(self, content: object, *, drop_billed: bool) -> None:
        """A compaction item or block: it stands for the conversation before it, so the engine sees
        only what follows it (the system prompt stays). ``drop_billed``: the provider drops what came
        before it from the prompt too (the Messages API), so it is not billed either."""
        earlier = [turn for turn in self.turns if turn.role != "system"]
        opened = open_item(self.salt, content)
        answers = sum(turn.role == "assistant" for turn in earlier)
        self.compacted = self.compacted + answers if opened is None else opened
        self.turns = [turn for turn in self.turns if turn.role == "system"]
        self._open_answer = False
        if drop_billed:
            self.segments = [segment for segment in self.segments if segment.section != "messages"]

    def position(
        self,
        section: Section,
        block: Any,
        text: str,
        where: str,
        *,
        eligible: bool = True,
        block_type: str = "",
        role: str = "",
        first: bool = True,
    ) -> None:
        marker, field = _marker(block, where)
        nested = _nested(block, where) if self.nested else ()
        if not isinstance(block, dict):
            content = block
        elif nested:
            content = without_markers(block)  # markers are not part of the prompt, at any depth
        else:
            content = {key: value for key, value in block.items() if key not in MARKER_FIELDS}
        ids = self.tokenizer.encode(text)
        tag = _ROLE_TAGS.get(role or section, 6) << 40
        self.tokens.extend(
            token | tag | (_BOUNDARY_TAG if first and index == 0 else 0) for index, token in enumerate(ids)
        )
        body = _canonical([section, content])
        self.segments.append(
            Segment(section, body, len(ids), marker, eligible, where, block_type, nested, role, field)
        )


def _marker(block: Any, where: str) -> tuple[Ttl | None, str]:
    """A block's breakpoint: its lifetime tier and the field it was given in (``cache_control``, or
    OpenAI's ``prompt_cache_breakpoint``, whose 30m/12h are the short and long tiers)."""
    if not isinstance(block, dict):
        return None, "cache_control"
    if block.get("prompt_cache_breakpoint") is not None:
        where = f"{where}.prompt_cache_breakpoint"
        return breakpoint_ttl(block["prompt_cache_breakpoint"], where), "prompt_cache_breakpoint"
    if block.get("cache_control") is None:
        return None, "cache_control"
    return cache_control_ttl(block["cache_control"], f"{where}.cache_control"), "cache_control"


def breakpoint_ttl(value: Any, where: str) -> Ttl:
    """The lifetime tier of a ``prompt_cache_breakpoint`` (``{"mode": "explicit", "ttl"?: "30m" |
    "12h"}``, the openai SDK's ``PromptCacheBreakpoint``): 30m (the request's default) is the short
    tier, 12h the long one."""
    if not isinstance(value, dict) or value.get("mode") != "explicit":
        raise RequestRefusedError(f"Invalid value for '{where}.mode': expected 'explicit'.", param=where)
    ttl = value.get("ttl", "30m")
    if ttl not in ("30m", "12h"):
        raise RequestRefusedError(f"Invalid value for '{where}.ttl': expected '30m' or '12h'.", param=where)
    return "5m" if ttl == "30m" else "1h"


def _nested(block: Any, where: str) -> tuple[tuple[str, Ttl], ...]:
    """The markers inside a block at any depth (the API takes one on a document's content blocks, a
    search result in a tool result, ...), as (path, ttl) in prefix order."""
    if not isinstance(block, dict):
        return ()
    return tuple(
        (f"{where}.{path}", cache_control_ttl(control, f"{where}.{path}.cache_control"))
        for path, control in nested_markers(block)
    )


def cache_control_ttl(control: Any, where: str) -> Ttl:
    """The TTL of a ``cache_control`` object, validated as the Messages API validates it."""
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise RequestRefusedError(f"{where}.type: Input should be 'ephemeral'")
    ttl = control.get("ttl", "5m")
    if ttl not in ("5m", "1h"):
        raise RequestRefusedError(f"{where}.ttl: Input should be '5m' or '1h'")
    return "5m" if ttl == "5m" else "1h"


def _int_field(
    payload: dict[str, Any], name: str, *, required: bool, minimum: int = 0, family: Family = "anthropic"
) -> int | None:
    value = payload.get(name)
    if value is None:
        if required:
            raise RequestRefusedError(f"{name}: Field required", param=name)
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        if family == "openai":
            raise _openai_invalid(name, "an integer", value)
        raise RequestRefusedError(f"{name}: Input should be a valid integer", param=name)
    if value < minimum:
        if family == "openai":
            raise RequestRefusedError(
                f"Invalid '{name}': integer below minimum value. "
                f"Expected a value >= {minimum}, but got {value} instead.",
                param=name,
                code="integer_below_min_value",
            )
        raise RequestRefusedError(f"{name}: Input should be greater than or equal to {minimum}", param=name)
    return value


def _stops(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise RequestRefusedError(f"{name}: Input should be a valid list of strings", param=name)


# ---------------------------------------------------------------------------------------------
# Anthropic Messages


# The client tools Anthropic defines: the model calls them with tool_use blocks whose input has this
# shape (the tool pages: bash, text editor, memory), and the caller's code runs them.
_ANTHROPIC_CLIENT_TOOLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("bash_", {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    (
        "text_editor_",
        {
            "type": "object",
            "properties": {"command": {"enum": ["view"]}, "path": {"type": "string", "const": "/repo"}},
            "required": ["command", "path"],
        },
    ),
    (
        "memory_",
        {
            "type": "object",
            "properties": {"command": {"enum": ["view"]}, "path": {"const": "/memories"}},
            "required": ["command", "path"],
        },
    ),
)
# Server tools that search the web (the scripted engine's web search answers them).
_WEB_SEARCH = ("web_search",)


def _anthropic_choice(value: Any, payload: dict[str, Any]) -> ToolChoice:
    if not isinstance(value, dict):
        return ToolChoice()
    kind = value.get("type")
    if kind == "tool":
        name = value.get("name")
        offered = payload.get("tools")
        tools: list[Any] = offered if isinstance(offered, list) else []
        named = next((t for t in tools if isinstance(t, dict) and t.get("name") == name), None)
        if named is None:
            raise RequestRefusedError(
                f"tool_choice.tool.name: Tool '{name}' not found in tools", param="tool_choice"
            )
        if str(named.get("type") or "").startswith(_WEB_SEARCH):
            return ToolChoice("web_search")
        return ToolChoice("tool", str(name))
    if kind in ("any", "none"):
        return ToolChoice(kind)
    return ToolChoice()


def _anthropic_tools(payload: dict[str, Any], b: _Builder) -> list[ToolSpec]:
    """The tools the model may call: the caller's own (``custom``, with ``input_schema``) and the
    client tools Anthropic defines (bash, text editor, memory); server tools run at the provider."""
    tools = payload.get("tools") or []
    if not isinstance(tools, list):
        raise RequestRefusedError("tools: Input should be a valid list", param="tools")
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise RequestRefusedError(f"tools.{i}.name: Field required", param="tools")
        b.position(
            "tools",
            tool,
            _canonical({k: v for k, v in tool.items() if k != "cache_control"}).decode(),
            f"tools.{i}",
        )
        kind = tool.get("type")
        if kind in (None, "custom"):
            raw = tool.get("input_schema")
            schema = raw if isinstance(raw, dict) else {}
            specs.append(ToolSpec(tool["name"], str(tool.get("description") or ""), schema))
            continue
        for prefix, shape in _ANTHROPIC_CLIENT_TOOLS:
            if isinstance(kind, str) and kind.startswith(prefix):
                specs.append(ToolSpec(tool["name"], "", shape))
    return specs


def _anthropic_system(payload: dict[str, Any], b: _Builder) -> None:
    system = payload.get("system")
    if isinstance(system, str):
        if system:
            # The string is shorthand for one text block: the same prompt, the same cache entry.
            b.position("system", {"type": "text", "text": system}, system, "system")
            b.turns.append(Turn("system", system))
    elif isinstance(system, list):
        texts = []
        for i, block in enumerate(system):
            if (
                not isinstance(block, dict)
                or block.get("type") != "text"
                or not isinstance(block.get("text"), str)
            ):
                raise RequestRefusedError(f"system.{i}: Input should be a valid text block", param="system")
            if not block["text"]:
                raise RequestRefusedError("system: text content blocks must be non-empty", param="system")
            b.position("system", block, block["text"], f"system.{i}")
            texts.append(block["text"])
        if texts:
            b.turns.append(Turn("system", "\n".join(texts)))
    elif system is not None:
        raise RequestRefusedError(
            "system: Input should be a valid string or list of text blocks", param="system"
        )


def _anthropic_turns(messages: list[Any], b: _Builder) -> None:
    for m, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise RequestRefusedError(
                f"messages.{m}.role: Input should be 'user' or 'assistant'", param="messages"
            )
        content = message.get("content")
        role = message["role"]
        if isinstance(content, str):
            if not content and not (role == "assistant" and m == len(messages) - 1):
                raise RequestRefusedError(
                    f"messages.{m}: text content blocks must be non-empty", param="messages"
                )
            if content:
                # The string shorthand is one text block; it cannot carry a marker.
                b.position(
                    "messages",
                    {"type": "text", "text": content, "role": role},
                    content,
                    f"messages.{m}.content",
                    block_type="text",
                )
            b.turns.append(Turn(role, content))
            continue
        if not isinstance(content, list):
            raise RequestRefusedError(f"messages.{m}.content: Field required", param="messages")
        if not content and not (role == "assistant" and m == len(messages) - 1):
            raise RequestRefusedError(
                f"messages.{m}: all messages must have non-empty content except for the optional final "
                "assistant message",
                param="messages",
            )
        texts: list[str] = []
        calls: list[ToolCall] = []
        for c, block in enumerate(content):
            where = f"messages.{m}.content.{c}"
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise RequestRefusedError(f"{where}.type: Field required", param="messages")
            kind = block["type"]
            if b.items is not None and not b.items.knows_item(kind, b.betas):
                tags = ", ".join(f"'{tag}'" for tag in b.items.items_taken(b.betas))
                raise RequestRefusedError(
                    f"{where}: Input tag '{kind}' found using 'type' does not match any of the expected "
                    f"tags: {tags}",
                    param="messages",
                )
            if kind == "compaction":
                # The API drops every block before the compaction block: it summarizes them.
                b.compact(block.get("encrypted_content"), drop_billed=True)
                texts, calls = [], []
            if kind == "text" and not isinstance(block.get("text"), str):
                raise RequestRefusedError(f"{where}.text: Input should be a valid string", param="messages")
            if kind == "text" and not block.get("text"):
                raise RequestRefusedError(f"{where}: text content blocks must be non-empty", param="messages")
            eligible = kind not in _UNMARKABLE
            b.position(
                "messages",
                {**block, "role": role},
                _block_text(block),
                where,
                eligible=eligible,
                block_type=kind,
            )
            if kind == "text":
                texts.append(str(block["text"]))
            elif kind == "tool_use":
                arguments = block.get("input")
                call_input: dict[str, Any] = arguments if isinstance(arguments, dict) else {}
                calls.append(ToolCall(str(block.get("name")), call_input, str(block.get("id") or "")))
            elif kind == "tool_result":
                b.turns.append(
                    Turn("tool", _block_text(block), tool_call_id=str(block.get("tool_use_id") or ""))
                )
        if texts or calls:
            b.turns.append(Turn(role, "\n".join(texts), tuple(calls)))


def _cites(block: dict[str, Any]) -> bool:
    citations = block.get("citations")
    return isinstance(citations, dict) and citations.get("enabled") is True


def _texts(content: Any) -> tuple[str, ...]:
    """The texts of a list of text blocks (a string is one)."""
    if isinstance(content, str):
        return (content,)
    if not isinstance(content, list):
        return ()
    return tuple(
        str(part["text"]) for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
    )


def _anthropic_documents(messages: list[Any]) -> tuple[Document, ...]:
    """The sources an answer may cite: ``document`` blocks with citations enabled (plain text or
    custom content: the scripted engine reads no PDF) and ``search_result`` blocks with citations
    enabled, at the top of a message or in a tool result, numbered as the API numbers them (every
    document counts towards ``document_index``, every search result towards ``search_result_index``)."""
    found: list[Document] = []
    counts = {"document": 0, "search_result": 0}

    def visit(block: Any) -> None:
        if not isinstance(block, dict):
            return
        kind = block.get("type")
        if kind == "tool_result" and isinstance(block.get("content"), list):
            for inner in block["content"]:
                visit(inner)
            return
        if kind not in counts:
            return
        index = counts[kind]
        counts[kind] += 1
        title = block.get("title") if isinstance(block.get("title"), str) else None
        if not _cites(block):
            return
        source = block.get("source")
        if kind == "search_result":
            origin = source if isinstance(source, str) else ""
            found.append(Document(index, "search_result", _texts(block.get("content")), title, origin))
            return
        held = source if isinstance(source, dict) else {}
        if held.get("type") == "text" and isinstance(held.get("data"), str):
            found.append(Document(index, "text", (held["data"],), title))
        elif held.get("type") == "content":
            found.append(Document(index, "content", _texts(held.get("content")), title))

    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            visit(block)
    return tuple(found)


def _tools_include(payload: dict[str, Any], prefix: str) -> bool:
    """Whether the request offers a tool whose ``type`` starts with ``prefix`` (a server tool)."""
    tools = payload.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and str(tool.get("type") or "").startswith(prefix) for tool in tools
    )


def _reasoning(dialect: Dialect, payload: dict[str, Any]) -> bool:
    """Whether the request turns the model's reasoning on."""
    if family_of(dialect) == "anthropic":
        thinking = payload.get("thinking")
        return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
    if dialect == "openai_chat":
        effort = payload.get("reasoning_effort")
        return isinstance(effort, str) and effort != "none"
    reasoning = payload.get("reasoning")
    return isinstance(reasoning, dict) and reasoning.get("effort") != "none"


def _parallel(dialect: Dialect, payload: dict[str, Any]) -> bool:
    """Whether one answer may make several tool calls."""
    if family_of(dialect) == "anthropic":
        choice = payload.get("tool_choice")
        return not (isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True)
    return payload.get("parallel_tool_calls") is not False


# The context-management edits of the Messages API and the beta each needs (anthropic SDK's
# BetaContextManagementConfigParam; the compaction and context-editing pages).
_EDIT_BETAS = {
    "clear_tool_uses_20250919": "context-management-2025-06-27",
    "clear_thinking_20251015": "context-management-2025-06-27",
    "compact_20260112": "compact-2026-01-12",
}
# "Default trigger is 150,000 tokens, minimum 50,000" (the compaction page, compact_20260112).
_COMPACT_TRIGGER = 150_000
_COMPACT_MINIMUM = 50_000


def _anthropic_compaction(payload: dict[str, Any], betas: frozenset[str]) -> Compaction | None:
    """What ``context_management`` and ``compaction`` ask of compaction (the beta header each needs is
    checked with the request's fields: :meth:`cachekit.providers.request_fields.EndpointFields`)."""
    config = payload.get("context_management")
    on_demand = payload.get("compaction")
    if config is not None and on_demand is not None:
        raise RequestRefusedError(
            "compaction: cannot be combined with context_management", param="compaction"
        )
    if on_demand is not None:
        if not isinstance(on_demand, dict) or on_demand.get("type") != "summarize":
            raise RequestRefusedError("compaction.type: Input should be 'summarize'", param="compaction")
        return Compaction(now=True, pause=True)
    if config is None:
        return None
    edits = config.get("edits") if isinstance(config, dict) else None
    if not isinstance(edits, list):
        raise RequestRefusedError(
            "context_management.edits: Input should be a valid list", param="context_management"
        )
    threshold, pause = None, False
    for n, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind not in _EDIT_BETAS:
            tags = ", ".join(f"'{tag}'" for tag in _EDIT_BETAS)
            raise RequestRefusedError(
                f"context_management.edits.{n}: Input tag '{kind}' found using 'type' does not match any "
                f"of the expected tags: {tags}",
                param="context_management",
            )
        assert isinstance(edit, dict)
        if _EDIT_BETAS[kind] not in betas:
            raise RequestRefusedError(
                f"context_management.edits.{n}: '{kind}' requires the anthropic-beta header "
                f"'{_EDIT_BETAS[kind]}'",
                param="context_management",
            )
        if kind != "compact_20260112":
            continue  # context editing: accepted, not applied (docs/local.md)
        trigger = edit.get("trigger")
        value = trigger.get("value") if isinstance(trigger, dict) else _COMPACT_TRIGGER
        if not isinstance(value, int) or isinstance(value, bool) or value < _COMPACT_MINIMUM:
            raise RequestRefusedError(
                f"context_management.edits.{n}.trigger.value: Input should be greater than or equal to "
                f"{_COMPACT_MINIMUM}",
                param="context_management",
            )
        threshold, pause = value, edit.get("pause_after_compaction") is True
    return Compaction(threshold=threshold, pause=pause, edits=True)


def _parse_messages(
    payload: dict[str, Any], b: _Builder
) -> tuple[ToolChoice, list[ToolSpec], Ttl | None, bytes, dict[str, Any] | None, Compaction | None]:
    messages = payload.get("messages")
    if messages is None:
        raise RequestRefusedError("messages: Field required", param="messages")
    if not isinstance(messages, list):
        raise RequestRefusedError("messages: Input should be a valid list", param="messages")
    if not messages:
        raise RequestRefusedError("messages: at least one message is required", param="messages")
    specs = _anthropic_tools(payload, b)
    _anthropic_system(payload, b)
    _anthropic_turns(messages, b)
    automatic = None
    if payload.get("cache_control") is not None:
        automatic = cache_control_ttl(payload["cache_control"], "cache_control")
    context = cache_context(payload)
    config = payload.get("output_config")
    spec = config.get("format") if isinstance(config, dict) else payload.get("output_format")
    schema = None
    if isinstance(spec, dict) and spec.get("type") == "json_schema":
        schema = spec.get("schema") if isinstance(spec.get("schema"), dict) else {}
    choice = _anthropic_choice(payload.get("tool_choice"), payload)
    return choice, specs, automatic, context, schema, _anthropic_compaction(payload, b.betas)


# ---------------------------------------------------------------------------------------------
# OpenAI Chat Completions and Responses


# Responses tool choices of hosted tools the local backend does not run (ToolChoiceTypes, mcp, shell,
# apply_patch): forcing one is refused rather than silently answered another way.
_WEB_SEARCH_CHOICES = frozenset({"web_search", "web_search_preview", "web_search_preview_2025_03_11"})


def _choice_name(value: dict[str, Any], key: str, dialect: Dialect) -> str:
    """The tool name of a named tool choice (Chat nests it under the type's key)."""
    holder = value.get(key) if dialect == "openai_chat" else value
    if not isinstance(holder, dict) or not isinstance(holder.get("name"), str):
        raise RequestRefusedError(
            f"Invalid value for 'tool_choice': a {key} tool choice needs a {key} name.",
            param="tool_choice",
            code="invalid_value",
        )
    return str(holder["name"])


def _openai_choice(value: Any, dialect: Dialect) -> ToolChoice:
    if value in ("none", "required"):
        return ToolChoice("none" if value == "none" else "any")
    if isinstance(value, str):
        if value != "auto":
            raise RequestRefusedError(
                f"Invalid value for 'tool_choice': {value!r}. "
                "Supported values are: 'none', 'auto' and 'required'.",
                param="tool_choice",
                code="invalid_value",
            )
        return ToolChoice()
    if not isinstance(value, dict):
        return ToolChoice()
    kind = value.get("type")
    if kind in ("function", "custom"):
        return ToolChoice("tool", _choice_name(value, kind, dialect))
    if kind == "allowed_tools":
        holder = value.get("allowed_tools") if dialect == "openai_chat" else value
        mode = holder.get("mode") if isinstance(holder, dict) else None
        listed = holder.get("tools") if isinstance(holder, dict) else None
        if mode not in ("auto", "required") or not isinstance(listed, list):
            raise RequestRefusedError(
                "Invalid value for 'tool_choice.mode': expected 'auto' or 'required' with a list of tools.",
                param="tool_choice",
                code="invalid_value",
            )
        names = []
        for tool in listed:
            inner = (
                tool.get(tool.get("type")) if isinstance(tool, dict) and dialect == "openai_chat" else tool
            )
            if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                names.append(str(inner["name"]))
        return ToolChoice("any" if mode == "required" else "auto", allowed=tuple(names))
    if dialect == "openai_responses" and kind in _WEB_SEARCH_CHOICES:
        return ToolChoice("web_search")
    if dialect == "openai_responses" and isinstance(kind, str):
        raise RequestRefusedError(
            f"tool_choice: the local backend does not run the hosted tool '{kind}', so it cannot be "
            "forced (offer it and let the model choose, or force a function or custom tool).",
            param="tool_choice",
            code="unsupported_value",
        )
    raise RequestRefusedError(
        f"Invalid value for 'tool_choice.type': {kind!r}.", param="tool_choice.type", code="invalid_value"
    )


def _openai_schema(spec: Any, dialect: Dialect) -> dict[str, Any] | None:
    if not isinstance(spec, dict):
        return None
    if spec.get("type") == "json_object":
        return {}
    if spec.get("type") == "json_schema":
        holder = spec.get("json_schema") if dialect == "openai_chat" else spec
        if not isinstance(holder, dict):
            raise RequestRefusedError(
                "Invalid type for 'response_format.json_schema': expected an object.",
                param="response_format.json_schema",
                code="invalid_type",
            )
        schema = holder.get("schema")
        return schema if isinstance(schema, dict) else {}
    if spec.get("type") != "text":
        where = "response_format" if dialect == "openai_chat" else "text.format"
        raise RequestRefusedError(
            f"Invalid value for '{where}.type': {spec.get('type')!r}. "
            "Supported values are: 'text', 'json_object' and 'json_schema'.",
            param=f"{where}.type",
            code="invalid_value",
        )
    return None


def _openai_tools(payload: dict[str, Any], b: _Builder, dialect: Dialect) -> list[ToolSpec]:
    tools = payload.get("tools") or []
    if not isinstance(tools, list):
        raise RequestRefusedError(
            "Invalid type for 'tools': expected an array.", param="tools", code="invalid_type"
        )
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise RequestRefusedError(
                f"Invalid type for 'tools[{i}]': expected an object.", param=f"tools[{i}]"
            )
        b.position(
            "tools",
            tool,
            _canonical({k: v for k, v in tool.items() if k != "cache_control"}).decode(),
            f"tools.{i}",
        )
    return tool_specs(tools, dialect)


def tool_specs(tools: list[Any], dialect: Dialect, *, loaded: bool = False) -> list[ToolSpec]:
    """The functions and freeform (``custom``) tools among OpenAI tool definitions, a ``namespace``'s
    flattened with the namespace on each. A tool with ``defer_loading`` is offered only once loaded
    (``loaded``: declared by a ``tool_search_output`` or ``additional_tools`` input item)."""
    specs: list[ToolSpec] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if kind == "namespace" and dialect == "openai_responses" and isinstance(tool.get("name"), str):
            listed = tool.get("tools")
            inner: list[Any] = listed if isinstance(listed, list) else []
            specs.extend(
                replace(spec, namespace=tool["name"]) for spec in tool_specs(inner, dialect, loaded=loaded)
            )
            continue
        if kind not in ("function", "custom"):
            continue  # hosted tools run at the provider
        held = tool.get(kind) if dialect == "openai_chat" else tool
        if not isinstance(held, dict) or not isinstance(held.get("name"), str):
            continue
        if held.get("defer_loading") is True and not loaded:
            continue
        description = str(held.get("description") or "")
        if kind == "custom":
            raw_format = held.get("format")
            form = raw_format if isinstance(raw_format, dict) else {"type": "text"}
            specs.append(ToolSpec(held["name"], description, {}, kind="custom", format=form))
        else:
            raw = held.get("parameters")
            specs.append(ToolSpec(held["name"], description, raw if isinstance(raw, dict) else {}))
    return specs


def _chat_message(message: Any, m: int, b: _Builder, *, leading: bool, answer_item: bool = False) -> None:
    if not isinstance(message, dict) or message.get("role") not in (
        "system",
        "developer",
        "user",
        "assistant",
        "tool",
        "function",
    ):
        raise RequestRefusedError(
            f"Invalid value for 'messages[{m}].role'.", param=f"messages[{m}].role", code="invalid_value"
        )
    role = message["role"]
    section: Section = "system" if leading and role in ("system", "developer") else "messages"
    content = message.get("content")
    where = f"messages.{m}.content"
    if isinstance(content, str):
        b.position(section, {"type": "text", "text": content, "role": role}, content, where, role=role)
    elif isinstance(content, list):
        for c, part in enumerate(content):
            if not isinstance(part, dict):
                raise RequestRefusedError(
                    f"Invalid type for 'messages[{m}].content[{c}]'.", param=f"messages[{m}].content[{c}]"
                )
            kind = part.get("type")
            b.position(
                section,
                {**part, "role": role},
                _block_text(part),
                f"{where}.{c}",
                role=role,
                first=c == 0,
                block_type=kind if isinstance(kind, str) else "",
            )
    elif content is not None or role != "assistant":
        raise RequestRefusedError(
            f"Missing required parameter: 'messages[{m}].content'.", param=f"messages[{m}].content"
        )
    calls = []
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise RequestRefusedError(
            f"Invalid type for 'messages[{m}].tool_calls': expected an array.",
            param=f"messages[{m}].tool_calls",
            code="invalid_type",
        )
    for k, call in enumerate(tool_calls or []):
        kind = call.get("type", "function") if isinstance(call, dict) else None
        held = call.get(kind) if isinstance(call, dict) and kind in ("function", "custom") else None
        if not isinstance(held, dict) or not isinstance(held.get("name"), str):
            raise RequestRefusedError(
                f"Invalid type for 'messages[{m}].tool_calls[{k}].function': expected an object.",
                param=f"messages[{m}].tool_calls[{k}].function",
                code="invalid_type",
            )
        b.position(
            section,
            {"role": role, "tool_call": call},
            _canonical(call).decode(),
            f"messages.{m}.tool_calls.{k}",
            role=role,
            block_type="tool_call",
        )
        if kind == "custom":
            calls.append(
                ToolCall(held["name"], {}, str(call.get("id", "")), input=str(held.get("input") or ""))
            )
        else:
            calls.append(ToolCall(held["name"], _arguments(held.get("arguments")), str(call.get("id", ""))))
    text = _text_of(content)
    if role in ("system", "developer"):
        b.turn(Turn("system", text))
    elif role in ("tool", "function"):
        b.turn(Turn("tool", text, tool_call_id=str(message.get("tool_call_id") or "")))
    else:
        b.turn(Turn(role, text, tuple(calls)), answer_item=answer_item and role == "assistant")


def _arguments(raw: Any) -> dict[str, Any]:
    """A call's JSON arguments as sent back (a string that is not a JSON object reads as none)."""
    try:
        arguments = orjson.loads(raw) if isinstance(raw, str) and raw else {}
    except orjson.JSONDecodeError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _parse_chat(
    payload: dict[str, Any], b: _Builder
) -> tuple[ToolChoice, list[ToolSpec], dict[str, Any] | None]:
    messages = payload.get("messages")
    if messages is None:
        raise RequestRefusedError(
            "Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter"
        )
    if not isinstance(messages, list):
        raise _openai_invalid("messages", "an array of objects", messages)
    if not messages:
        raise RequestRefusedError(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    specs = _openai_tools(payload, b, "openai_chat")
    leading = True
    for m, message in enumerate(messages):
        leading = leading and isinstance(message, dict) and message.get("role") in ("system", "developer")
        _chat_message(message, m, b, leading=leading)
    return (
        _openai_choice(payload.get("tool_choice"), "openai_chat"),
        specs,
        _openai_schema(payload.get("response_format"), "openai_chat"),
    )


# Responses input items the model wrote (one answer's items make one assistant turn) and the results
# of its calls that the caller sends back (tool turns); other items are context the engine skips.
_ANSWER_ITEMS = frozenset(
    {
        "reasoning",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "tool_search_call",
        "program",
    }
)
_RESULT_ITEMS = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "mcp_approval_response",
        "program_output",
    }
)


def _supported(values: tuple[str, ...]) -> str:
    """OpenAI's list of supported values: ``'a', 'b' and 'c'``."""
    quoted = [f"'{value}'" for value in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _output_text(output: Any) -> str:
    return output if isinstance(output, str) else _canonical(output).decode()


def _responses_item(item: dict[str, Any], i: int, b: _Builder, specs: list[ToolSpec], last: bool) -> bool:
    """One input item; returns whether it asks for a compaction now (``compaction_trigger``)."""
    kind = item.get("type", "message")
    where = f"input.{i}"
    if not isinstance(kind, str) or (b.items is not None and not b.items.knows_item(kind, b.betas)):
        supported = _supported(tuple(sorted(b.items.item_types if b.items else ("message",))))
        raise RequestRefusedError(
            f"Invalid value: '{kind}'. Supported values are: {supported}.",
            param=f"input[{i}]",
            code="invalid_value",
        )
    if kind == "message":
        _chat_message({**item, "role": item.get("role")}, i, b, leading=False, answer_item=True)
        return False
    if kind == "compaction_trigger":
        if not last:
            raise RequestRefusedError(
                "Invalid 'input': a compaction_trigger item must be the final input item.",
                param=f"input[{i}]",
                code="invalid_value",
            )
        return True
    b.position(
        "messages",
        item,
        _output_text(item) if kind in _RESULT_ITEMS else _canonical(item).decode(),
        where,
        block_type=kind,
    )
    call_id = str(item.get("call_id") or "")
    namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
    if kind == "function_call":
        call = ToolCall(str(item.get("name")), _arguments(item.get("arguments")), call_id, namespace)
        b.turn(Turn("assistant", "", (call,)), answer_item=True)
    elif kind == "custom_tool_call":
        call = ToolCall(str(item.get("name")), {}, call_id, namespace, input=str(item.get("input") or ""))
        b.turn(Turn("assistant", "", (call,)), answer_item=True)
    elif kind in _ANSWER_ITEMS:
        b.turn(Turn("assistant", ""), answer_item=True)
    elif kind in _RESULT_ITEMS:
        b.turn(Turn("tool", _output_text(item.get("output")), tool_call_id=call_id))
    elif kind == "compaction":
        b.compact(item.get("encrypted_content"), drop_billed=False)
    if kind in ("additional_tools", "tool_search_output") and isinstance(item.get("tools"), list):
        # Tools declared in the conversation: offered from here on, loaded ones included.
        specs.extend(tool_specs(item["tools"], "openai_responses", loaded=True))
    return False


def _responses_compaction(payload: dict[str, Any]) -> int | None:
    """The ``compact_threshold`` of a ``context_management`` compaction entry (``None``: none)."""
    entries = payload.get("context_management")
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise _openai_invalid("context_management", "an array", entries)
    threshold = None
    for n, entry in enumerate(entries):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind != "compaction":
            raise RequestRefusedError(
                f"Invalid value: '{kind}'. Supported values are: 'compaction'.",
                param=f"context_management[{n}].type",
                code="invalid_value",
            )
        value = entry.get("compact_threshold")
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise _openai_invalid(f"context_management[{n}].compact_threshold", "a positive integer", value)
        threshold = value if value is not None else threshold
    return threshold


def _parse_responses(
    payload: dict[str, Any], b: _Builder
) -> tuple[ToolChoice, list[ToolSpec], dict[str, Any] | None, Compaction | None]:
    if "input" not in payload:
        raise RequestRefusedError(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    specs = _openai_tools(payload, b, "openai_responses")
    instructions = payload.get("instructions")
    if isinstance(instructions, str) and instructions:
        b.position("system", {"instructions": instructions}, instructions, "instructions", role="system")
        b.turn(Turn("system", instructions))
    elif isinstance(instructions, list):  # a prompt template's instructions: input items
        for i, item in enumerate(instructions):
            if not isinstance(item, dict):
                raise _openai_invalid(f"instructions[{i}]", "an object", item)
            _chat_message({**item, "role": item.get("role")}, i, b, leading=True)
    items = payload["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise RequestRefusedError(
            "Invalid 'input': expected a string or a non-empty array.", param="input", code="invalid_value"
        )
    now = False
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestRefusedError(
                f"Invalid type for 'input[{i}]': expected an object.", param=f"input[{i}]"
            )
        now = _responses_item(item, i, b, specs, i == len(items) - 1) or now
    threshold = _responses_compaction(payload)
    compaction = Compaction(now=now, threshold=threshold, pause=now) if now or threshold is not None else None
    text_config = payload.get("text")
    spec = text_config.get("format") if isinstance(text_config, dict) else None
    return (
        _openai_choice(payload.get("tool_choice"), "openai_responses"),
        specs,
        _openai_schema(spec, "openai_responses"),
        compaction,
    )


# ---------------------------------------------------------------------------------------------


def _json_kind(value: Any) -> str:
    """How OpenAI names a JSON value's type in its errors ("but got a string instead")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _openai_invalid(name: str, expected: str, value: Any) -> RequestRefusedError:
    return RequestRefusedError(
        f"Invalid type for '{name}': expected {expected}, but got {_json_kind(value)} instead.",
        param=name,
        code="invalid_type",
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_sampling(dialect: Dialect, payload: dict[str, Any]) -> None:
    """Sampling parameters must be numbers. Anthropic validates in lax mode (a numeric string passes,
    and its message says why another does not); OpenAI wants a JSON number."""
    names = _ANTHROPIC_SAMPLING if family_of(dialect) == "anthropic" else _OPENAI_SAMPLING
    for name in names:
        value = payload.get(name)
        if value is None or _is_number(value):
            continue
        if family_of(dialect) == "openai":
            raise _openai_invalid(name, "a decimal", value)
        if not isinstance(value, str):
            raise RequestRefusedError(f"{name}: Input should be a valid number", param=name)
        try:
            float(value)
        except ValueError:
            raise RequestRefusedError(
                f"{name}: Input should be a valid number, unable to parse string as a number", param=name
            ) from None


_ANTHROPIC_SAMPLING = ("temperature", "top_p")
_OPENAI_SAMPLING = ("temperature", "top_p", "frequency_penalty", "presence_penalty")


def _check_common(dialect: Dialect, payload: dict[str, Any]) -> None:
    """Top-level fields the answer echoes or obeys: refused like the provider refuses them."""
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        if family_of(dialect) == "anthropic":
            raise RequestRefusedError("stream: Input should be a valid boolean", param="stream")
        raise _openai_invalid("stream", "a boolean", stream)
    _check_sampling(dialect, payload)
    if family_of(dialect) == "anthropic":
        return
    for name, kind, expected in (
        ("stream_options", dict, "an object"),
        ("metadata", dict, "an object"),
        ("prompt_cache_key", str, "a string"),
        ("instructions", (str, list), "a string or an array"),
        ("user", str, "a string"),
    ):
        if payload.get(name) is not None and not isinstance(payload[name], kind):
            raise _openai_invalid(name, expected, payload[name])
    retention = payload.get("prompt_cache_retention")
    if retention is not None and retention not in ("in_memory", "24h"):
        raise RequestRefusedError(
            f"Invalid value for 'prompt_cache_retention': {retention!r}. "
            "Supported values are: 'in_memory' and '24h'.",
            param="prompt_cache_retention",
            code="invalid_value",
        )
    truncation = payload.get("truncation")
    if dialect == "openai_responses" and truncation is not None and truncation not in ("auto", "disabled"):
        raise RequestRefusedError(
            f"Invalid value for 'truncation': {truncation!r}. Supported values are: 'auto' and 'disabled'.",
            param="truncation",
            code="invalid_value",
        )
    n = payload.get("n")
    if dialect == "openai_chat" and n is not None and n != 1:
        raise RequestRefusedError(
            "n: the local backend answers one choice per request; send n=1 (or leave it out).",
            param="n",
            code="unsupported_value",
        )


def check_fields(endpoint: str, payload: dict[str, Any], betas: frozenset[str] = frozenset()) -> None:
    """Refuse a top-level field the endpoint does not take, as the provider does
    (:mod:`cachekit.providers.request_fields`; ``endpoint``: a dialect or ``openai_responses_compact``)."""
    unknown = endpoint_fields(endpoint).unknown_field(payload, betas)
    if unknown is None:
        return
    if endpoint.startswith("anthropic"):
        raise RequestRefusedError(f"{unknown}: Extra inputs are not permitted", param=unknown)
    raise RequestRefusedError(f"Unknown parameter: '{unknown}'.", param=unknown, code="unknown_parameter")


def parse(
    dialect: Dialect,
    payload: dict[str, Any],
    tokenizer: Tokenizer,
    *,
    salt: bytes = b"",
    betas: frozenset[str] = frozenset(),
    strict: bool = False,
) -> Parsed:
    """Validate ``payload`` as ``dialect`` does and parse it; raises :class:`RequestRefusedError`.

    ``strict``: also refuse top-level fields and item types the API does not take, with the
    ``anthropic-beta`` values ``betas`` (beta-only fields and blocks need one); the local backend
    asks for it (``LocalBackend(strict_fields=True)``, its default).
    """
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        if family_of(dialect) == "anthropic":
            raise RequestRefusedError("model: Field required", param="model")
        raise RequestRefusedError(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    if strict:
        check_fields(dialect, payload, betas)
    _check_common(dialect, payload)
    b = _Builder(tokenizer, nested=family_of(dialect) == "anthropic", salt=salt)
    b.items = endpoint_fields(dialect) if strict else None
    b.betas = betas
    automatic: Ttl | None = None
    context = b""
    compaction: Compaction | None = None
    stop: tuple[str, ...]
    specs: list[ToolSpec]
    if family_of(dialect) == "anthropic":
        # 0 pre-warms the prompt cache without generating anything (the Messages API documents it).
        max_tokens = _int_field(payload, "max_tokens", required=dialect == "anthropic_messages", minimum=0)
        if max_tokens == 0 and payload.get("stream") is True:
            raise RequestRefusedError("max_tokens: 0 is not supported with streaming", param="max_tokens")
        choice, specs, automatic, context, schema, compaction = _parse_messages(payload, b)
        stop = _stops(payload.get("stop_sequences"), "stop_sequences")
    elif dialect == "openai_chat":
        max_tokens = _int_field(payload, "max_completion_tokens", required=False, minimum=1, family="openai")
        if max_tokens is None:
            max_tokens = _int_field(payload, "max_tokens", required=False, minimum=1, family="openai")
        choice, specs, schema = _parse_chat(payload, b)
        stop = _stops(payload.get("stop"), "stop")
        context = cache_context(payload)
    else:
        max_tokens = _int_field(payload, "max_output_tokens", required=False, minimum=16, family="openai")
        choice, specs, schema, compaction = _parse_responses(payload, b)
        stop = ()
        context = cache_context(payload)
    anthropic = family_of(dialect) == "anthropic"
    messages = payload.get("messages")
    prompt = Prompt(
        model=model,
        turns=tuple(b.turns),
        tools=tuple(specs),
        tool_choice=choice,
        output_schema=schema,
        max_tokens=max_tokens,
        stop=stop,
        salt=salt,
        digest=digest(payload),
        reasoning=_reasoning(dialect, payload),
        parallel_tool_calls=_parallel(dialect, payload),
        documents=_anthropic_documents(messages) if anthropic and isinstance(messages, list) else (),
        web_search=_tools_include(payload, "web_search")
        or choice.mode == "web_search"
        or (dialect == "openai_chat" and payload.get("web_search_options") is not None),
        compacted_turns=b.compacted,
    )
    return Parsed(prompt, tuple(b.segments), tuple(b.tokens), automatic, context, compaction)

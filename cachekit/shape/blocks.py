"""A request's prompt as the providers' prefix caches see it: blocks in prefix order.

Prompt caches match prompts by prefix, block by block, in the order tools → system → messages
(Anthropic documents that order; OpenAI-compatible APIs render tools first as well). Breakpoint
placement, prefix lint and ``cachekit diff`` all reason about the same view, so it is built here
once, leniently (a malformed part is skipped, never an error: validation is the provider's job),
for every dialect:

* Anthropic Messages: one block per tool definition, per system block (a system string is one
  block) and per message content block (a string content is one block);
* OpenAI Chat Completions: one block per tool, per message content part (a string content is one
  block) and per assistant tool call; the leading ``system``/``developer`` messages are the system
  section;
* OpenAI Responses: one block per tool, the ``instructions``, and one per input item or message part.

Each block carries the canonical bytes that identify it in the prefix (sorted keys, without its
``cache_control`` nor those nested in it, with the message role), the text it costs in tokens, its
``cache_control`` value, those nested in it at any depth, and whether it may carry one. A string
shorthand has the same identity as the one text block it stands for, so converting it (to carry a
marker) never changes the prefix.

Nothing here logs or keeps prompt text.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from cachekit import _fork
from cachekit._types import Dialect, Section

__all__ = [
    "Block",
    "BlockMemo",
    "ChainMemo",
    "Section",
    "block_text",
    "cache_context",
    "chain_hashes",
    "content_digest",
    "lookback_positions",
    "nested_markers",
    "prompt_blocks",
    "text_of",
    "without_markers",
]


_TEXT_TYPES = ("text", "input_text", "output_text")
# The Messages API's content blocks that take a cache_control field (the anthropic SDK's block
# params, stable and beta; tests/shape/test_marker_census.py checks the installed SDK against this
# list). An allow-list: a block type cachekit does not know (a new beta block) is never marked.
# Thinking blocks "cannot be explicitly marked with cache_control".
_MARKABLE_TYPES = frozenset(
    {
        "text",
        "image",
        "document",
        "search_result",
        "tool_use",
        "tool_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "tool_reference",
        "container_upload",
        "mcp_tool_use",
        "mcp_tool_result",
        "advisor_tool_result",
        "compaction",
        "tool_addition",
        "tool_removal",
    }
)
# Fields whose value is the caller's own JSON, not content blocks (a tool call's input, a tool's
# schema and examples, a fallback's trigger: the SDK's params type them as free-form objects): a key
# named cache_control inside them is data, never a marker. Everywhere else a cache_control is one.
_PAYLOAD_FIELDS = frozenset({"input", "input_schema", "input_examples", "trigger"})
# Media whose tokens are not their bytes: an image costs about (width x height) / 750 tokens, at most
# ~1,600 for the sizes the API keeps; a PDF page text plus an image per page. Their base64 data is
# never tokenized (a 4 MB image would take a second of tiktoken and count millions of tokens).
_MEDIA_TOKENS = {"image": 1_600, "document": 3_000}
# Anthropic: "a run of consecutive tool_use blocks counts as one position, and so does a run of
# consecutive tool_result blocks" (prompt-caching docs, "How automatic prefix checking works").
_TOOL_RUN_TYPES = frozenset({"tool_use", "tool_result"})
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Block:
    """One cacheable position of a prompt.

    Attributes:
        section: ``tools``, ``system`` or ``messages``.
        where: the block's path in the body, as the APIs name it in errors: ``tools.3``, ``system``
            (a system string), ``system.1``, ``messages.4.content`` (a string content),
            ``messages.4.content.2``, ``messages.5.tool_calls.0``, ``instructions``, ``input.7``.
        kind: the block's type (``text``, ``tool_use``, ``tool_result``, ``image``, ``thinking``, ...;
            ``tool`` for a tool definition, ``tool_call`` for a Chat tool call, the item type for a
            Responses input item).
        text: what the block costs in tokens: its text, or its canonical JSON for structured kinds.
        content: canonical bytes identifying the block in the prefix (without ``cache_control``).
        marker: the block's ``cache_control`` value as sent (``None`` when it has none).
        eligible: whether a ``cache_control`` marker may go on this block.
        message: the index of its message (``messages`` / ``input``), ``None`` for tools and system.
        shorthand: a string standing in for one text block (it must become a block to carry a marker).
        cited: a text block with citations: cachekit never marks it, but the API's automatic caching
            may still take it as the last block.
        nested: ``cache_control`` values inside the block, at any depth, as (path relative to the
            block, value) in prefix order (:func:`nested_markers`): they count against the
            provider's limit and take part in its lifetime order too.
        media_tokens: an estimate of the tokens of base64 image or document data, which ``text``
            leaves out (0 for everything else).
        name: a tool definition's name (Anthropic and Responses ``name``, Chat ``function.name``);
            ``""`` for other blocks.
        digest: an 8-byte digest of ``content`` (:func:`content_digest`), computed once with the block,
            so that comparing prompts across calls (prefix lint) hashes no content again.
    """

    section: Section
    where: str
    kind: str
    text: str
    content: bytes
    marker: Any
    eligible: bool
    message: int | None = None
    shorthand: bool = False
    cited: bool = False
    nested: tuple[tuple[str, Any], ...] = ()
    media_tokens: int = 0
    name: str = ""
    digest: bytes = b""


def content_digest(content: bytes) -> bytes:
    """An 8-byte BLAKE2b digest of ``content``, length-prefixed (as prefix lint digests its parts)."""
    hasher = hashlib.blake2b(digest_size=8)
    hasher.update(len(content).to_bytes(8, "big") + content)
    return hasher.digest()


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def text_of(content: Any) -> str:
    """The plain text of a content value: a string, or the text parts of a list joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in _TEXT_TYPES
            and isinstance(part.get("text"), str)
        )
    return ""


def block_text(block: dict[str, Any]) -> str:
    """What a content block costs in tokens: its text, or its canonical JSON for other kinds."""
    kind = block.get("type")
    if kind in _TEXT_TYPES and isinstance(block.get("text"), str):
        return str(block["text"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        return str(block["thinking"])
    if kind == "tool_result":
        return text_of(block.get("content"))
    return _canonical(without_markers(block)).decode()  # markers are not prompt tokens


def _without_marker(block: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "cache_control"}


def without_markers(block: dict[str, Any]) -> dict[str, Any]:
    """``block`` without its ``cache_control`` and those nested in it (:func:`nested_markers`): a
    marker is not part of the prompt, so moving one never changes the prefix. Copies only the
    containers on the way to a nested marker; ``block`` is unchanged."""
    plain = _without_marker(block)
    for path, _ in nested_markers(block):
        plain = _drop_marker(plain, path.split("."))
    return plain


def _drop_marker(container: Any, path: list[str]) -> Any:
    key: Any = int(path[0]) if isinstance(container, list) else path[0]
    copy: Any = list(container) if isinstance(container, list) else dict(container)
    copy[key] = _drop_marker(container[key], path[1:]) if len(path) > 1 else _without_marker(container[key])
    return copy


def _tool_name(tool: dict[str, Any]) -> str:
    """Anthropic's and Responses' ``name``, or Chat's ``function.name``; ``""`` when there is none."""
    name = tool.get("name")
    function = tool.get("function")
    if not isinstance(name, str) and isinstance(function, dict):
        name = function.get("name")
    return name if isinstance(name, str) else ""


def _markable(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind not in _MARKABLE_TYPES:
        return False
    if kind == "text":
        # "cache_control cannot be set for empty text blocks"; a model-written text block with a list of
        # citations is left alone too (on a document, "citations" is a setting and does not matter).
        return bool(block.get("text")) and not isinstance(block.get("citations"), list)
    return True


def nested_markers(block: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The ``cache_control`` values inside ``block`` (not its own), at any depth, in prefix order.

    Each is ``(path, value)``, the path relative to the block (``content.0.source.content.1``). The
    API accepts a marker on any block nested in another (a document's ``source.content`` blocks, a
    ``search_result`` in a ``tool_result`` and its text, a document in a ``web_fetch_result``, ...),
    and every one counts against the limit, so this walks all of the block except the caller's own
    JSON (:data:`_PAYLOAD_FIELDS`) instead of knowing the shapes. Prefix order: a dict's contents
    come before its own marker, which ends it. Iterative, so a deep body cannot exhaust the stack.
    """
    found: list[tuple[str, Any]] = []
    # (value, path, whether its children were visited: then only its own marker is left)
    stack: list[tuple[Any, str, bool]] = [(child, key, False) for key, child in reversed(_children(block))]
    while stack:
        value, path, visited = stack.pop()
        if visited:
            found.append((path, value["cache_control"]))
        elif isinstance(value, dict):
            if value.get("cache_control") is not None:
                stack.append((value, path, True))
            stack.extend((child, f"{path}.{key}", False) for key, child in reversed(_children(value)))
        elif isinstance(value, list):
            stack.extend(
                (child, f"{path}.{i}", False)
                for i, child in reversed(list(enumerate(value)))
                if isinstance(child, (dict, list))
            )
    return tuple(found)


def _children(value: dict[str, Any]) -> list[tuple[str, Any]]:
    """The parts of a dict that may hold markers: containers, outside the caller's own JSON."""
    return [
        (str(key), child)
        for key, child in value.items()
        if key != "cache_control" and key not in _PAYLOAD_FIELDS and isinstance(child, (dict, list))
    ]


def _media(block: dict[str, Any]) -> tuple[str, int] | None:
    """(text, estimated tokens) for an image or document whose data is inline base64, else ``None``."""
    kind = block.get("type")
    source = block.get("source")
    if kind not in _MEDIA_TOKENS or not isinstance(source, dict) or source.get("type") != "base64":
        return None
    data = source.get("data")
    size = len(data) if isinstance(data, str) else 0
    # Documents scale with their size (about one page per 50 KB of base64); images do not.
    tokens = _MEDIA_TOKENS[kind] if kind == "image" else max(_MEDIA_TOKENS[kind], size // 50_000 * 3_000)
    return str(source.get("media_type") or kind), tokens


class BlockMemo:
    """The blocks of message parts seen before, so a growing conversation builds only its new ones.

    Keyed by the caller's ``scope`` (a pipeline passes the request's partition, so tenants never
    share entries), the dialect, the part's position and section, and the part's own JSON bytes: a
    part is reused only when it is byte for byte the one its blocks were built from, at the same
    place. Bounded by entries and by the bytes of the parts it keys; least recently used first;
    thread-safe. It holds prompt text in memory (the blocks' ``text``), never on disk or in logs.
    """

    def __init__(self, *, max_entries: int = 8192, max_bytes: int = 32 << 20) -> None:
        self._entries: OrderedDict[tuple[bytes, str, bytes], tuple[Block, ...]] = OrderedDict()
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = _fork.lock(self)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[bytes, str, bytes]) -> tuple[Block, ...] | None:
        """The blocks remembered under ``key``, if any (refreshing its place in the LRU order)."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[bytes, str, bytes], blocks: tuple[Block, ...]) -> None:
        """Remember ``blocks`` under ``key``, evicting the least recently used beyond the bounds."""
        size = len(key[2])
        if size > self._max_bytes // 4:
            return  # one huge part would push out everything else
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = blocks
            self._bytes += size
            while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
                old, _ = self._entries.popitem(last=False)
                self._bytes -= len(old[2])


class _Walk:
    def __init__(self, memo: BlockMemo | None = None, scope: bytes = b"") -> None:
        self.blocks: list[Block] = []
        self._memo = memo
        self._scope = scope

    def part(self, tag: str, value: Any, build: Callable[[], None]) -> None:
        """Add the blocks of one part (``tag`` says where it is), reused from the memo when seen."""
        memo = self._memo
        if memo is None:
            build()
            return
        try:
            key = (self._scope, tag, orjson.dumps(value))
        except TypeError:  # not serializable: built (and refused) as without a memo
            build()
            return
        found = memo.get(key)
        if found is not None:
            self.blocks.extend(found)
            return
        start = len(self.blocks)
        build()
        memo.put(key, tuple(self.blocks[start:]))

    def add(  # noqa: PLR0917 - one call site per block kind, each naming every part
        self,
        section: Section,
        where: str,
        kind: str,
        text: str,
        identity: Any,
        marker: Any = None,
        *,
        eligible: bool = True,
        message: int | None = None,
        shorthand: bool = False,
        cited: bool = False,
        nested: tuple[tuple[str, Any], ...] = (),
        media_tokens: int = 0,
        name: str = "",
    ) -> None:
        content = _canonical([section, identity])
        self.blocks.append(
            Block(
                section,
                where,
                kind,
                text,
                content,
                marker,
                eligible,
                message,
                shorthand,
                cited,
                nested,
                media_tokens,
                name,
                content_digest(content),
            )
        )

    def tools(self, tools: Any, *, markable: bool) -> None:
        if not isinstance(tools, list):
            return
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                continue
            plain = without_markers(tool) if markable else _without_marker(tool)
            self.add(
                "tools",
                f"tools.{i}",
                "tool",
                _canonical(plain).decode(),
                plain,
                tool.get("cache_control"),
                # "Tool 'x' cannot have both defer_loading=true and cache_control set" (the API's 400).
                eligible=markable and not tool.get("defer_loading"),
                nested=nested_markers(tool) if markable else (),
                name=_tool_name(tool),
            )

    def content(
        self, section: Section, content: Any, where: str, role: str, m: int | None, *, markable: bool
    ) -> None:
        """A message's content: a string is one text block, a list one block per part."""
        if isinstance(content, str):
            if content:
                identity = (
                    {"type": "text", "text": content, "role": role}
                    if role
                    else {"type": "text", "text": content}
                )
                self.add(
                    section, where, "text", content, identity, eligible=markable, message=m, shorthand=True
                )
            return
        if not isinstance(content, list):
            return
        for c, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            plain = without_markers(part) if markable else _without_marker(part)
            identity = {**plain, "role": role} if role else plain
            media = _media(part)
            self.add(
                section,
                f"{where}.{c}",
                kind if isinstance(kind, str) else "",
                block_text(part) if media is None else media[0],
                identity,
                part.get("cache_control"),
                eligible=markable and _markable(part),
                message=m,
                cited=kind == "text" and isinstance(part.get("citations"), list),
                nested=nested_markers(part) if markable else (),
                media_tokens=0 if media is None else media[1],
            )


def _anthropic(body: dict[str, Any], walk: _Walk) -> None:
    tools, system = body.get("tools"), body.get("system")
    walk.part("a/tools", tools, lambda: walk.tools(tools, markable=True))
    # A system prompt is content without a role: a string is one text block, a list one block each.
    walk.part("a/system", system, lambda: walk.content("system", system, "system", "", None, markable=True))
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for m, message in enumerate(messages):
        if isinstance(message, dict):
            walk.part(f"a/{m}", message, partial(_anthropic_message, message, m, walk))


def _anthropic_message(message: dict[str, Any], m: int, walk: _Walk) -> None:
    role = str(message.get("role") or "")
    walk.content("messages", message.get("content"), f"messages.{m}.content", role, m, markable=True)


def _chat_message(message: dict[str, Any], m: int, section: Section, walk: _Walk, prefix: str) -> None:
    role = str(message.get("role") or "")
    # Explicit markers in Chat bodies (Bailian's explicit cache) go on message content only.
    walk.content(section, message.get("content"), f"{prefix}.{m}.content", role, m, markable=True)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for k, call in enumerate(calls):
            walk.add(
                section,
                f"{prefix}.{m}.tool_calls.{k}",
                "tool_call",
                _canonical(call).decode(),
                {"role": role, "tool_call": call},
                eligible=False,
                message=m,
            )


def _chat(body: dict[str, Any], walk: _Walk) -> None:
    tools = body.get("tools")
    walk.part("c/tools", tools, lambda: walk.tools(tools, markable=False))
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    leading = True
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        leading = leading and message.get("role") in _SYSTEM_ROLES
        section: Section = "system" if leading else "messages"
        walk.part(
            f"c/{section}/{m}",
            message,
            partial(_chat_message, message, m, section, walk, "messages"),
        )


def _responses(body: dict[str, Any], walk: _Walk) -> None:
    tools = body.get("tools")
    walk.part("r/tools", tools, lambda: walk.tools(tools, markable=False))
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        walk.add(
            "system",
            "instructions",
            "instructions",
            instructions,
            {"instructions": instructions},
            eligible=False,
        )
    items = body.get("input")
    if isinstance(items, str):
        if items:
            walk.add(
                "messages",
                "input",
                "text",
                items,
                {"type": "text", "text": items, "role": "user"},
                eligible=False,
            )
        return
    if not isinstance(items, list):
        return
    for i, item in enumerate(items):
        if isinstance(item, dict):
            walk.part(f"r/{i}", item, partial(_responses_item, item, i, walk))


def _responses_item(item: dict[str, Any], i: int, walk: _Walk) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = str(item.get("role") or "")
        walk.content("messages", item.get("content"), f"input.{i}.content", role, i, markable=False)
        return
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _canonical(output).decode()
    else:
        text = _canonical(item).decode()
    walk.add("messages", f"input.{i}", str(kind), text, item, eligible=False, message=i)


def prompt_blocks(
    dialect: Dialect | str, body: dict[str, Any], *, memo: BlockMemo | None = None, scope: bytes = b""
) -> tuple[Block, ...]:
    """The blocks of ``body`` (a request of ``dialect``) in prefix order; malformed parts are skipped.

    With ``memo``, the blocks of tools, system and each message seen before (byte for byte, at the
    same place, under the same ``scope``) are reused instead of built again: the same blocks either way.
    Raises :class:`TypeError` when a block cannot be serialized as JSON (only possible for bodies not
    read from JSON).
    """
    walk = _Walk(memo, scope)
    if dialect in ("anthropic_messages", "anthropic_count_tokens", "anthropic"):
        _anthropic(body, walk)
    elif dialect in ("openai_chat", "chat"):
        _chat(body, walk)
    elif dialect in ("openai_responses", "responses"):
        _responses(body, walk)
    else:
        raise ValueError(f"unknown dialect {dialect!r}")
    return tuple(walk.blocks)


def lookback_positions(kinds: Iterable[str], *, tool_runs_one_position: bool) -> list[int]:
    """Each block's lookback position: consecutive ``tool_use`` (or ``tool_result``) blocks share one
    when the provider counts a run as one position (Anthropic does; Bailian does not say so)."""
    positions: list[int] = []
    current = -1
    previous = ""
    for kind in kinds:
        if not (tool_runs_one_position and kind in _TOOL_RUN_TYPES and kind == previous):
            current += 1
        positions.append(current)
        previous = kind
    return positions


def cache_context(body: dict[str, Any]) -> bytes:
    """Canonical bytes of the settings that invalidate cached messages but not tools or system
    (``tool_choice`` and thinking): they enter a prefix hash just before the first messages block."""
    return _canonical({"thinking": body.get("thinking"), "tool_choice": body.get("tool_choice")})


def chain_hashes(
    blocks: Sequence[Block], root: bytes, context: bytes = b"", *, memo: ChainMemo | None = None
) -> list[bytes]:
    """The prefix hash after each block: block ``i``'s hash covers ``root`` and blocks ``0..i``.

    ``context`` (settings that invalidate the cached messages but not tools or system, such as
    ``tool_choice`` and thinking) enters just before the first messages block, as at the providers.
    Parts are length-prefixed, so no two block lists collide by concatenation. With ``memo``, the
    hashing resumes after the longest prefix of blocks the same chain hashed last time (a growing
    conversation hashes only its new blocks): the same hashes either way.
    """
    first = next((b.content for b in blocks if b.section == "messages"), b"")
    key = (root, context, hashlib.blake2b(first, digest_size=16).digest())
    known = memo.get(key) if memo is not None else None
    start = 0
    if known is not None:
        start = _common_prefix(known.contents, blocks)
    if start:
        assert known is not None  # a common prefix only comes from a known chain
        hasher = known.states[start - 1].copy()
        hashes, states = known.hashes[:start], known.states[:start]
        context_in = any(b.section == "messages" for b in blocks[:start])
    else:
        hasher = hashlib.blake2b(root, digest_size=16)
        hashes, states, context_in = [], [], False
    for block in blocks[start:]:
        if block.section == "messages" and not context_in:
            hasher.update(b"\x01" + len(context).to_bytes(8, "big") + context)
            context_in = True
        hasher.update(b"\x00" + len(block.content).to_bytes(8, "big") + block.content)
        state = hasher.copy()
        hashes.append(state.digest())
        states.append(state)
    if memo is not None:
        memo.put(key, _Chain(tuple(b.content for b in blocks), hashes, states))
    return list(hashes)


def _common_prefix(contents: Sequence[bytes], blocks: Sequence[Block]) -> int:
    """How many leading ``blocks`` have exactly ``contents`` (blocks the memo reused are the same
    objects, so most comparisons stop at identity)."""
    count = 0
    for content, block in zip(contents, blocks, strict=False):
        if content is not block.content and content != block.content:
            break
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class _Chain:
    contents: tuple[bytes, ...]
    hashes: list[bytes]
    states: list[Any]  # the hasher after each block (hashlib's blake2b objects, never mutated)


class ChainMemo:
    """The prefix-hash chains of recent prompts, by root, context and first message block.

    A root names the provider, model and partition (the planner's), so tenants never share entries.
    Bounded (least recently used first) and thread-safe; holds block contents and hasher states in
    memory, never on disk or in logs.
    """

    def __init__(self, capacity: int = 64) -> None:
        self._chains: OrderedDict[tuple[bytes, bytes, bytes], _Chain] = OrderedDict()
        self._capacity = capacity
        self._lock = _fork.lock(self)

    def __len__(self) -> int:
        return len(self._chains)

    def get(self, key: tuple[bytes, bytes, bytes]) -> _Chain | None:
        """The chain last hashed under ``key``, if any."""
        with self._lock:
            chain = self._chains.get(key)
            if chain is not None:
                self._chains.move_to_end(key)
            return chain

    def put(self, key: tuple[bytes, bytes, bytes], chain: _Chain) -> None:
        """Remember ``chain`` under ``key``, evicting the least recently used beyond capacity."""
        with self._lock:
            self._chains[key] = chain
            self._chains.move_to_end(key)
            while len(self._chains) > self._capacity:
                self._chains.popitem(last=False)

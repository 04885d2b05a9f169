"""Where two requests' prompts stop sharing a prefix: the first divergence, as the caches see it.

A provider's prompt cache serves request B from request A's cached prefix up to the first block where
they differ, in prefix order (tools → system → messages, as :func:`cachekit.shape.blocks.prompt_blocks`
lists them). :func:`diff_requests` finds that block and reports it as a block index, a token index
(``o200k_base`` tokens of the block texts, in prefix order) and a character offset, with the text of
both sides around it and the reason in the providers' diagnostic vocabulary: ``model_changed``,
``tools_changed``, ``system_changed``, ``messages_changed``. ``cachekit diff A.json B.json`` prints it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cachekit.shape.blocks import Block, prompt_blocks

__all__ = ["Divergence", "check_dialect", "diff_requests", "guess_dialect", "load_request"]

_BEFORE = 40  # characters of context shown before the divergence
_AFTER = 80  # and after it
# Settings that invalidate the cached messages but not tools or system (Anthropic's prompt-caching
# docs: "changes to tool_choice ... or thinking parameters"): they enter the prefix just before the
# first messages block, as in cachekit.shape.blocks.chain_hashes.
_CONTEXT_FIELDS = ("tool_choice", "thinking")
_SECTION_ORDER = {"tools": 0, "system": 1, "messages": 2}
_REASONS = {"tools": "tools_changed", "system": "system_changed", "messages": "messages_changed"}
# Keys under which a recorded call holds its request (tried in this order, at most a few levels deep):
# cachekit-style records, HTTP envelopes ({"method", "url", "headers", "body"}), and the batch APIs'
# request lines (OpenAI's {"custom_id", "body"}, Anthropic's {"custom_id", "params"}).
_BODY_KEYS = ("request_body", "body", "request", "params", "json", "content")
_MAX_DEPTH = 4


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place where request B's prompt stops sharing request A's prefix.

    Attributes:
        reason: ``model_changed``, ``tools_changed``, ``system_changed`` or ``messages_changed``
            (the section of the first differing block; a changed ``tool_choice`` or ``thinking`` is
            ``messages_changed``, since it invalidates the cached messages).
        block: the index, in prefix order, of the first differing block (for a changed setting, of the
            first messages block); ``None`` when the model changed (nothing is shared).
        where_a: that block's path in A (``system.0``, ``tools.2``, ``messages.3.content.1``); the
            setting's name for a changed setting; ``""`` when A has no block there.
        where_b: the same in B.
        char: the character offset in the block's text where the two first differ (``0`` when the
            block differs as a whole, such as another type or role); ``None`` for a model or setting.
        token: the index of the first differing token in the whole prompt (``o200k_base`` tokens of
            each block's text, in prefix order).
        text_a: A's text around the divergence (up to 40 characters before it and 80 after; a
            setting's JSON value); ``""`` when A has no block there.
        text_b: the same in B.
        detail: one line, such as ``tool 'get_weather' moved from 2 to 0``, ``tool_choice changed``,
            ``block type text -> image``.
        common_tokens: the tokens of the whole blocks before the divergence: what a cache that
            matches block by block (Anthropic's) can still read. ``token`` - ``common_tokens`` is how
            far into the differing block the texts still agree.
    """

    reason: str
    block: int | None
    where_a: str
    where_b: str
    char: int | None
    token: int
    text_a: str
    text_b: str
    detail: str
    common_tokens: int


def guess_dialect(body: dict[str, Any]) -> str:
    """The API dialect a request body is written in.

    ``openai_responses`` when it has ``input``; ``openai_chat`` when a message has a ``system``,
    ``developer`` or ``tool`` role or ``tool_calls``, or a tool has ``function``; else
    ``anthropic_messages``.
    """
    if "input" in body:
        return "openai_responses"
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and (
            message.get("role") in ("system", "developer", "tool") or "tool_calls" in message
        ):
            return "openai_chat"
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and "function" in tool:
            return "openai_chat"
    return "anthropic_messages"


#: Content block types only Anthropic's Messages API has (OpenAI's are text, image_url, input_*...).
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})


def check_dialect(dialect: str, body: dict[str, Any]) -> None:
    """Refuse a body that is visibly not written in ``dialect``: read as another API's, its prompt
    would be read in part (an Anthropic body read as Chat Completions loses its top-level
    ``system``), and a diff or lint of it would be a wrong answer, not an error.

    Raises:
        ValueError: naming what in the body belongs to another dialect.
    """
    own = guess_dialect(body)
    reason = None
    if dialect == "openai_responses" and "input" not in body:
        reason = "it has no 'input'"
    elif dialect != "openai_responses" and "input" in body and "messages" not in body:
        reason = "it has 'input', as an OpenAI Responses request"
    elif dialect == "anthropic_messages" and own == "openai_chat":
        reason = "its messages or tools are written as OpenAI Chat Completions ones"
    elif dialect == "openai_chat" and "system" in body:
        reason = "it has a top-level 'system', as an Anthropic Messages request"
    elif dialect == "openai_chat" and _has_anthropic_blocks(body):
        reason = "its messages hold Anthropic content blocks (tool_use, tool_result, thinking...)"
    if reason is not None:
        raise ValueError(
            f"the request is not a {dialect} request: {reason} (leave the dialect out, and it is guessed)"
        )


def _has_anthropic_blocks(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") in _ANTHROPIC_BLOCKS:
                return True
    return False


def _pair_dialect(a: dict[str, Any], b: dict[str, Any]) -> str:
    """One dialect for both bodies: Anthropic is the guess without evidence, so an OpenAI guess for
    either body wins."""
    guesses = {guess_dialect(a), guess_dialect(b)}
    if len(guesses) > 1:
        guesses.discard("anthropic_messages")
    return guess_dialect(a) if len(guesses) != 1 else guesses.pop()


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _window(text: str, char: int) -> str:
    return text[max(0, char - _BEFORE) : char + _AFTER]


def _identity(block: Block) -> dict[str, Any]:
    """The JSON object that identifies a block (its canonical content without the section)."""
    try:
        section_and_identity = orjson.loads(block.content)
    except orjson.JSONDecodeError:
        return {}
    identity = section_and_identity[1] if isinstance(section_and_identity, list) else None
    return identity if isinstance(identity, dict) else {}


class _Tokens:
    """``o200k_base`` token ids per block text, encoded once."""

    def __init__(self) -> None:
        from cachekit.shape.tokens import encoding

        self._encoding = encoding("o200k_base")
        self._seen: dict[str, list[int]] = {}

    def of(self, text: str) -> list[int]:
        found = self._seen.get(text)
        if found is None:
            found = self._seen[text] = self._encoding.encode(text)
        return found

    def before(self, blocks: Sequence[Block], index: int) -> int:
        return sum(len(self.of(block.text)) for block in blocks[:index])


def _tool_detail(a: Sequence[Block], b: Sequence[Block], index: int) -> str:
    """What happened to the tool at ``index`` (prefix order): moved, added, removed or edited."""
    names_a = [block.name or "?" for block in a if block.section == "tools"]
    names_b = [block.name or "?" for block in b if block.section == "tools"]
    name_a = names_a[index] if index < len(names_a) else None
    name_b = names_b[index] if index < len(names_b) else None
    if name_a is not None and name_a == name_b:
        tool_a, tool_b = _identity(a[index]), _identity(b[index])
        fields = sorted(key for key in tool_a.keys() | tool_b.keys() if tool_a.get(key) != tool_b.get(key))
        return f"tool '{name_a}' changed: {', '.join(fields) or 'definition'}"
    if name_a is not None and name_a not in names_b:
        return f"tool '{name_a}' removed (was {index})"
    if name_b is not None and name_b not in names_a:
        return f"tool '{name_b}' added at {index}"
    if name_b is not None:
        return f"tool '{name_b}' moved from {names_a.index(name_b)} to {index}"
    return f"tool '{name_a}' moved from {index} to {names_b.index(name_a or '')}"


def _block_detail(a: Block | None, b: Block | None, char: int) -> str:
    if b is None:
        return f"B ends before A's {a.where if a else 'block'} (B is a prefix of A)"
    if a is None:
        return f"A ends before B's {b.where}"
    if a.section != b.section:
        return f"A has a {a.section} block ({a.where}) where B has a {b.section} block ({b.where})"
    if a.kind != b.kind:
        return f"block type {a.kind or '?'} -> {b.kind or '?'}"
    if a.text != b.text:
        return f"text differs at char {char}" + ("" if a.kind == "text" else f" ({a.kind or '?'} block)")
    identity_a, identity_b = _identity(a), _identity(b)
    fields = sorted(
        key for key in identity_a.keys() | identity_b.keys() if identity_a.get(key) != identity_b.get(key)
    )
    return f"same text, other fields differ: {', '.join(fields) or 'content'}"


def _block_divergence(a: Sequence[Block], b: Sequence[Block], index: int, tokens: _Tokens) -> Divergence:
    block_a = a[index] if index < len(a) else None
    block_b = b[index] if index < len(b) else None
    present = [block for block in (block_a, block_b) if block is not None]
    section = min((block.section for block in present), key=_SECTION_ORDER.__getitem__)
    common = tokens.before(a, index)  # the blocks before ``index`` are the same on both sides
    char = within = 0
    if block_a is not None and block_b is not None and block_a.text != block_b.text:
        char = _common_prefix(block_a.text, block_b.text)
        within = _common_prefix(tokens.of(block_a.text), tokens.of(block_b.text))
    # Tools come first in prefix order, so a tool's prefix index is its index among the tools.
    detail = _tool_detail(a, b, index) if section == "tools" else _block_detail(block_a, block_b, char)
    return Divergence(
        reason=_REASONS[section],
        block=index,
        where_a=block_a.where if block_a else "",
        where_b=block_b.where if block_b else "",
        char=char,
        token=common + within,
        text_a=_window(block_a.text, char) if block_a else "",
        text_b=_window(block_b.text, char) if block_b else "",
        detail=detail,
        common_tokens=common,
    )


def _json_text(value: Any) -> str:
    return "" if value is None else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


def _setting_divergence(
    a: dict[str, Any], b: dict[str, Any], changed: list[str], *, index: int, common: int
) -> Divergence:
    first = changed[0]
    return Divergence(
        reason="messages_changed",
        block=index,
        where_a=first,
        where_b=first,
        char=None,
        token=common,
        text_a=_json_text(a.get(first)),
        text_b=_json_text(b.get(first)),
        detail=f"{' and '.join(changed)} changed",
        common_tokens=common,
    )


def _first_messages_block(blocks: Sequence[Block]) -> int:
    return next((i for i, block in enumerate(blocks) if block.section == "messages"), len(blocks))


def diff_requests(a: dict[str, Any], b: dict[str, Any], *, dialect: str | None = None) -> Divergence | None:
    """The first divergence between request A's prompt and request B's, or ``None`` when B reads all
    of A's prefix (B equals A or extends it, with the same model and the same ``tool_choice`` and
    ``thinking``).

    ``dialect`` (``anthropic_messages``, ``openai_chat``, ``openai_responses``) is guessed from the
    bodies when not given (:func:`guess_dialect`); a dialect given that a body visibly is not written
    in raises :class:`ValueError` (:func:`check_dialect`). Token indexes need the ``tokens`` extra
    (tiktoken).
    """
    if dialect is not None:
        for name, body in (("A", a), ("B", b)):
            try:
                check_dialect(dialect, body)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
    if a.get("model") != b.get("model"):
        model_a, model_b = _plain(a.get("model")), _plain(b.get("model"))
        detail = f"model {model_a or '(none)'} -> {model_b or '(none)'}"
        return Divergence("model_changed", None, "model", "model", None, 0, model_a, model_b, detail, 0)
    dialect = dialect or _pair_dialect(a, b)
    blocks_a, blocks_b = prompt_blocks(dialect, a), prompt_blocks(dialect, b)
    index = _common_prefix([block.content for block in blocks_a], [block.content for block in blocks_b])
    differs = index < len(blocks_a)  # B running past A's end extends A
    settings = [name for name in _CONTEXT_FIELDS if a.get(name) != b.get(name)]
    # The settings enter just before the first messages block: they come first unless an earlier
    # block differs.
    context_at = min(_first_messages_block(blocks_a), _first_messages_block(blocks_b))
    if settings and (not differs or index >= context_at):
        common = _Tokens().before(blocks_a, context_at)
        return _setting_divergence(a, b, settings, index=context_at, common=common)
    if not differs:
        return None
    return _block_divergence(blocks_a, blocks_b, index, _Tokens())


def _unwrap(value: Any, depth: int) -> dict[str, Any] | None:
    """The request body inside ``value``: the value itself when it has ``messages`` or ``input``,
    else what it holds under one of the known keys (a JSON string there is parsed)."""
    if isinstance(value, (str, bytes)) and depth > 0:
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(value, dict):
        return None
    if "messages" in value or "input" in value:
        return value
    if depth >= _MAX_DEPTH:
        return None
    for key in _BODY_KEYS:
        if key in value:
            found = _unwrap(value[key], depth + 1)
            if found is not None:
                return found
    return None


def load_request(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A request body from a JSON file: the body itself (an object with ``messages`` or ``input``), or
    a recorded call that holds it under ``request_body``, ``body``, ``request``, ``params``, ``json``
    or ``content`` (nested, such as ``{"request": {"method": ..., "body": {...}}}``, or as a JSON
    string).

    Raises :class:`ValueError` naming the file when it cannot be read, is not JSON, or holds no body.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"{os.fspath(path)}: cannot read the file: {error.strerror or error}") from error
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"{os.fspath(path)}: not a JSON document: {error}") from error
    body = _unwrap(value, 0)
    if body is None:
        raise ValueError(
            f"{os.fspath(path)}: no request body: expected an object with 'messages' or 'input', or a "
            f"recorded call holding one under {', '.join(repr(key) for key in _BODY_KEYS)}"
        )
    return body

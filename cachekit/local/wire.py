"""The providers' wire formats as the local backend answers: response bodies, SSE event streams,
errors and headers.

One place knows what an Anthropic ``message``, an OpenAI ``chat.completion`` (and its chunks) and a
Responses ``response`` (and its lifecycle events) look like, field by field, as the official SDKs'
types declare them (``anthropic/types/message.py``, ``raw_message_stream_event.py``,
``openai/types/chat/chat_completion*.py``, ``openai/types/responses/response*.py``), made from a
local engine's generation. The local backend and :class:`cachekit.testing.FakeUpstream` both render
through it. What cachekit's pipeline knows of the same APIs is not written again here: which path is
which dialect (:func:`cachekit.providers.registry.dialect_of`), the error documents
(:mod:`cachekit.providers.error_bodies`), how an event is framed and what an Anthropic stream's
``message_delta`` carries (:mod:`cachekit.providers.sse`), the tools a Responses answer echoes
(:func:`cachekit.providers.echo.echoed_tools`).

Streams are generators: text pieces are sent as the engine produces them, and the closing events
(which carry the final usage) only once it has finished.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from cachekit._types import Dialect
from cachekit.local.engine import (
    Block,
    Citation,
    FinishReason,
    Generation,
    RedactedThinking,
    Refusal,
    Text,
    Thinking,
    ToolCall,
    WebSearch,
)
from cachekit.providers.echo import echoed_tools
from cachekit.providers.error_bodies import status_error
from cachekit.providers.registry import Family, family_of
from cachekit.providers.sse import ANTHROPIC_DELTA_USAGE, CHAT_DONE, encode_event, responses_event

__all__ = [
    "Billing",
    "Empty",
    "Extras",
    "Reply",
    "error_reply",
    "family_for",
    "json_reply",
    "render",
    "responses_usage",
]

JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ORGANIZATION_ID = "8c6f3a3e-5d7e-4b7a-9a0e-2f1d5c3b9e41"
_JSON_PIECE = 16  # characters per streamed tool-argument delta
_TEXT_PIECE = 12  # characters per streamed piece of a text the engine gave whole


@dataclass(frozen=True)
class Billing:
    """How the prompt's tokens were billed: ``total`` = read + written + uncached."""

    total: int
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    writes_as: Literal["bailian", "openai"] = "bailian"
    """How Chat Completions reports writes: Model Studio's ``cache_creation_input_tokens``, or OpenAI's
    ``cache_write_tokens`` (GPT-5.6 and later)."""

    @property
    def cache_write(self) -> int:
        """Tokens written to the cache, both TTLs."""
        return self.cache_write_5m + self.cache_write_1h

    @property
    def uncached(self) -> int:
        """Tokens billed at the plain input price."""
        return self.total - self.cache_read - self.cache_write


class Empty:
    """A generation with nothing in it: a token count's, or an answer that is a compaction alone
    (``finish`` ``"compaction"``)."""

    tool_call: ToolCall | None = None
    blocks: tuple[Block, ...] = ()
    stop_sequence = None
    output_tokens = 0
    reasoning_tokens = 0

    def __init__(self, finish: FinishReason = "end") -> None:
        self.finish_reason: FinishReason = finish

    def __iter__(self) -> Iterator[str]:
        return iter(())


@dataclass(frozen=True)
class Extras:
    """What an answer carries besides the engine's generation and the billing."""

    host: str = "localhost"
    """The host the request was sent to (DeepSeek's hosts get its usage fields)."""
    compaction: str | None = None
    """The encrypted content of a compaction the answer starts with (:mod:`cachekit.local.compaction`)."""
    summary: str = ""
    """The compaction's readable summary (the Messages API shows one)."""
    context_management: bool = False
    """Messages: the request sent ``context_management``, so the answer reports the edits applied."""
    keep: Callable[[dict[str, Any]], None] | None = None
    """Responses: called with the finished response object (to store it)."""


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: a status, headers and either a body or a stream of SSE events."""

    status: int
    headers: tuple[tuple[str, str], ...]
    content: bytes = b""
    events: Iterable[bytes] | None = None
    """A streamed body, one SSE event per chunk; produced lazily."""
    disconnect: bool = False
    """After the events, fail the read like a dropped connection (test fault injection)."""


# ---------------------------------------------------------------------------------------------
# Whose answer


def family_for(dialect: Dialect | None, request_headers: Mapping[str, str]) -> Family:
    """Whose shapes (errors, ids, headers) to answer in: the dialect's family, or for a request the
    routing table does not know (``dialect`` ``None``), a guess from its auth headers (lower-case
    names)."""
    if dialect is not None:
        return family_of(dialect)
    if "anthropic-version" in request_headers or "x-api-key" in request_headers:
        return "anthropic"
    return "openai"


# ---------------------------------------------------------------------------------------------
# Ids, headers and plain replies


def _base62(size: int) -> str:
    return "".join(secrets.choice(_BASE62) for _ in range(size))


def request_id(family: Family) -> str:
    """A fresh request id in the provider's format."""
    return "req_011C" + _base62(20) if family == "anthropic" else "req_" + uuid.uuid4().hex


def headers(family: Family, content_type: str, rid: str) -> tuple[tuple[str, str], ...]:
    """The response headers a provider sends with every answer."""
    if family == "anthropic":
        return (
            ("content-type", content_type),
            ("request-id", rid),
            ("anthropic-organization-id", _ORGANIZATION_ID),
        )
    return (
        ("content-type", content_type),
        ("x-request-id", rid),
        ("openai-organization", "user-cachekit-local"),
        ("openai-processing-ms", "1"),
        ("openai-version", "2020-10-01"),
    )


def json_reply(family: Family, data: Any) -> Reply:
    """A 200 with a JSON body."""
    return Reply(200, headers(family, JSON, request_id(family)), orjson.dumps(data))


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------------------------
# Errors


def error_reply(
    family: Family, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> Reply:
    """An error answer with the provider's body (:func:`cachekit.providers.error_bodies.status_error`),
    headers and status."""
    rid = request_id(family)
    body = status_error(family, status, message, param=param, code=code, request_id=rid)
    return Reply(status, headers(family, JSON, rid), orjson.dumps(body))


# ---------------------------------------------------------------------------------------------
# Rendering an answer


def render(
    dialect: Dialect,
    payload: dict[str, Any],
    generation: Generation,
    billing: Billing,
    extras: Extras | None = None,
) -> Reply:
    """The provider's answer to ``payload``: a JSON body, or an SSE stream when it asked for one."""
    if dialect == "anthropic_count_tokens":
        return json_reply("anthropic", {"input_tokens": billing.total})
    extras = extras or Extras()
    family = family_of(dialect)
    answer = _Answer(generation)
    if payload.get("stream") is True:
        events = _STREAMS[dialect](payload, answer, billing, extras)
        rid = request_id(family)
        return Reply(200, (*headers(family, SSE, rid), ("cache-control", "no-cache")), events=events)
    answer.finish()
    return json_reply(family, _BODIES[dialect](payload, answer, billing, extras))


class _Answer:
    """The generation being rendered, as blocks (:data:`~cachekit.local.engine.Block`).

    An engine that gives its answer as blocks is rendered block by block. Otherwise the answer is
    one tool call, or one text block whose text streams as the engine generates it: :meth:`pieces`
    passes it on and collects it (:meth:`text_of` is the text so far).
    """

    def __init__(self, generation: Generation) -> None:
        self.generation = generation
        # An engine written before blocks existed gives none (the Generation protocol).
        self._blocks: tuple[Block, ...] = tuple(getattr(generation, "blocks", ()) or ())
        self.generated = ""
        self._ended = False  # a generated text has been read to its end (a generation runs once)

    @property
    def live(self) -> bool:
        """The answer is text the engine generates as it is read."""
        return not self._blocks and self.generation.tool_call is None and not self.empty

    @property
    def empty(self) -> bool:
        """The answer has no content at all (a compaction alone)."""
        return isinstance(self.generation, Empty) and self.generation.finish_reason == "compaction"

    @property
    def blocks(self) -> tuple[Block, ...]:
        if self._blocks:
            return self._blocks
        if self.generation.tool_call is not None:
            return (self.generation.tool_call,)
        return () if self.empty else (Text(self.generated),)

    def pieces(self, block: Text | Thinking | Refusal) -> Iterator[str]:
        """The pieces of a block's text to stream; a generated answer's as the engine produces them."""
        if self.live and not self._ended:
            for piece in self.generation:
                self.generated += piece
                yield piece
            self._ended = True
            return
        yield from _pieces(self.generated if self.live else _block_text(block), _TEXT_PIECE)

    def text_of(self, block: Text) -> str:
        return self.generated if self.live else block.text

    def finish(self) -> None:
        if self.live:
            for _ in self.pieces(Text("")):
                pass

    @property
    def finish_reason(self) -> FinishReason:
        return "tool_use" if self.generation.tool_call is not None else self.generation.finish_reason

    @property
    def output_tokens(self) -> int:
        return self.generation.output_tokens

    @property
    def reasoning_tokens(self) -> int:
        return int(getattr(self.generation, "reasoning_tokens", 0))

    @property
    def calls(self) -> list[ToolCall]:
        return [block for block in self.blocks if isinstance(block, ToolCall)]

    @property
    def searches(self) -> int:
        return sum(isinstance(block, WebSearch) for block in self.blocks)


def _block_text(block: Text | Thinking | Refusal) -> str:
    if isinstance(block, Thinking):
        return block.thinking
    return block.text


def _arguments(call: ToolCall) -> str:
    return _dumps(dict(call.arguments))


def _opaque(*parts: str) -> str:
    """A deterministic stand-in for the providers' encrypted fields (search results, indexes)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return base64.b64encode(digest).decode()


# -- Anthropic Messages -------------------------------------------------------------------------

_ANTHROPIC_STOP = {
    "compaction": "compaction",
    "end": "end_turn",
    "length": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "refusal": "refusal",
}


def _anthropic_usage(
    billing: Billing, output_tokens: int, *, reasoning_tokens: int = 0, searches: int = 0
) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": billing.uncached,
        "cache_creation_input_tokens": billing.cache_write,
        "cache_read_input_tokens": billing.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": billing.cache_write_5m,
            "ephemeral_1h_input_tokens": billing.cache_write_1h,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }
    if searches:
        usage["server_tool_use"] = {"web_search_requests": searches, "web_fetch_requests": 0}
    if reasoning_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": reasoning_tokens}
    return usage


def _anthropic_final_usage(billing: Billing, answer: _Answer) -> dict[str, Any]:
    return _anthropic_usage(
        billing, answer.output_tokens, reasoning_tokens=answer.reasoning_tokens, searches=answer.searches
    )


def _anthropic_head(payload: dict[str, Any], billing: Billing) -> dict[str, Any]:
    return {
        "id": "msg_01" + _base62(22),
        "type": "message",
        "role": "assistant",
        "model": payload["model"],
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
        "usage": _anthropic_usage(billing, 1),
    }


def _anthropic_citation(citation: Citation) -> dict[str, Any]:
    """A citation as the Messages API writes it (``anthropic/types/text_citation.py``)."""
    if citation.kind == "web":
        return {
            "type": "web_search_result_location",
            "cited_text": citation.cited_text,
            "url": citation.url,
            "title": citation.title,
            "encrypted_index": _opaque("index", citation.url, citation.cited_text),
        }
    if citation.kind == "search_result":
        return {
            "type": "search_result_location",
            "cited_text": citation.cited_text,
            "search_result_index": citation.index,
            "source": citation.url,
            "title": citation.title,
            "start_block_index": citation.start,
            "end_block_index": citation.end,
        }
    kind, start, end = {
        "char": ("char_location", "start_char_index", "end_char_index"),
        "block": ("content_block_location", "start_block_index", "end_block_index"),
        "page": ("page_location", "start_page_number", "end_page_number"),
    }[citation.kind]
    return {
        "type": kind,
        "cited_text": citation.cited_text,
        "document_index": citation.index,
        "document_title": citation.title,
        start: citation.start,
        end: citation.end,
        "file_id": None,
    }


def _anthropic_blocks(
    payload: dict[str, Any], answer: _Answer, extras: Extras
) -> list[tuple[Block | None, dict[str, Any]]]:
    """Each content block of the answer (a web search is two), with the block it renders; a refusal
    has none (the stop reason says it). Text is as generated so far. A compaction comes first."""
    thinking = _mapping(payload.get("thinking"))
    omitted = thinking.get("display") == "omitted"  # the thinking text is left out, its signature kept
    out: list[tuple[Block | None, dict[str, Any]]] = []
    if extras.compaction is not None:
        compacted = {"type": "compaction", "content": extras.summary, "encrypted_content": extras.compaction}
        out.append((None, compacted))
    for block in answer.blocks:
        if isinstance(block, Text):
            rendered: dict[str, Any] = {"type": "text", "text": answer.text_of(block)}
            if block.citations:
                rendered["citations"] = [_anthropic_citation(c) for c in block.citations]
            out.append((block, rendered))
        elif isinstance(block, Thinking):
            text = "" if omitted else block.thinking
            out.append((block, {"type": "thinking", "thinking": text, "signature": block.signature}))
        elif isinstance(block, RedactedThinking):
            out.append((block, {"type": "redacted_thinking", "data": block.data}))
        elif isinstance(block, ToolCall):
            call_id = block.id or "toolu_01" + _base62(22)
            out.append(
                (
                    block,
                    {"type": "tool_use", "id": call_id, "name": block.name, "input": dict(block.arguments)},
                )
            )
        elif isinstance(block, WebSearch):
            search_id = block.id or "srvtoolu_01" + _base62(22)
            use = {
                "type": "server_tool_use",
                "id": search_id,
                "name": "web_search",
                "input": {"query": block.query},
            }
            results = [
                {
                    "type": "web_search_result",
                    "url": url,
                    "title": title,
                    "encrypted_content": _opaque("page", url),
                    "page_age": None,
                }
                for url, title in block.results
            ]
            out.append((block, use))
            out.append(
                (block, {"type": "web_search_tool_result", "tool_use_id": search_id, "content": results})
            )
    return out


def _anthropic_stop(answer: _Answer) -> dict[str, Any]:
    refused = answer.finish_reason == "refusal"
    return {
        "stop_reason": _ANTHROPIC_STOP[answer.finish_reason],
        "stop_sequence": answer.generation.stop_sequence,
        "stop_details": {"type": "refusal", "category": None, "explanation": None} if refused else None,
    }


# Messages context management: the edits applied (compaction is not an edit, and context editing is
# not emulated: docs/local.md), reported when the request sends context_management.
_NO_EDITS: dict[str, Any] = {"applied_edits": []}


def _anthropic_body(
    payload: dict[str, Any], answer: _Answer, billing: Billing, extras: Extras
) -> dict[str, Any]:
    body = {
        **_anthropic_head(payload, billing),
        "content": [rendered for _, rendered in _anthropic_blocks(payload, answer, extras)],
        **_anthropic_stop(answer),
        "usage": _anthropic_final_usage(billing, answer),
    }
    if extras.context_management:
        body["context_management"] = _NO_EDITS
    return body


def _anthropic_deltas(
    answer: _Answer, block: Block | None, rendered: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The deltas that fill a content block opened empty (none for a block that opens whole)."""
    kind = rendered["type"]
    if kind == "compaction":
        yield {
            "type": "compaction_delta",
            "content": rendered["content"],
            "encrypted_content": rendered["encrypted_content"],
        }
    elif kind == "text":
        assert isinstance(block, Text)
        for citation in rendered.get("citations") or ():
            yield {"type": "citations_delta", "citation": citation}
        for piece in answer.pieces(block):
            yield {"type": "text_delta", "text": piece}
    elif kind == "thinking":
        assert isinstance(block, Thinking)
        if rendered["thinking"]:
            for piece in answer.pieces(block):
                yield {"type": "thinking_delta", "thinking": piece}
        yield {"type": "signature_delta", "signature": rendered["signature"]}
    elif kind in ("tool_use", "server_tool_use"):
        # The API opens the input with an empty piece.
        for piece in ["", *_pieces(_dumps(rendered["input"]), _JSON_PIECE)]:
            yield {"type": "input_json_delta", "partial_json": piece}


def _anthropic_opening(rendered: dict[str, Any]) -> dict[str, Any]:
    """A content block as content_block_start announces it: what streams in deltas left empty."""
    kind = rendered["type"]
    if kind == "text":
        opening: dict[str, Any] = {"type": "text", "text": ""}
        if "citations" in rendered:
            opening["citations"] = []
        return opening
    if kind == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if kind in ("tool_use", "server_tool_use"):
        return {**rendered, "input": {}}
    if kind == "compaction":
        return {"type": "compaction"}  # its content comes in one compaction_delta
    return rendered  # redacted thinking, search results: whole at once


def _anthropic_stream(
    payload: dict[str, Any], answer: _Answer, billing: Billing, extras: Extras
) -> Iterator[bytes]:
    yield encode_event(
        {"type": "message_start", "message": _anthropic_head(payload, billing)}, "message_start"
    )
    for index, (block, rendered) in enumerate(_anthropic_blocks(payload, answer, extras)):
        start = {"type": "content_block_start", "index": index, "content_block": _anthropic_opening(rendered)}
        yield encode_event(start, "content_block_start")
        if index == 0:
            yield encode_event({"type": "ping"}, "ping")
        for delta in _anthropic_deltas(answer, block, rendered):
            yield encode_event(
                {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
            )
        yield encode_event({"type": "content_block_stop", "index": index}, "content_block_stop")
    usage = _anthropic_final_usage(billing, answer)
    delta_usage = {key: usage[key] for key in ANTHROPIC_DELTA_USAGE if key in usage}
    ending: dict[str, Any] = {"type": "message_delta", "delta": _anthropic_stop(answer), "usage": delta_usage}
    if extras.context_management:
        ending["context_management"] = _NO_EDITS
    yield encode_event(ending, "message_delta")
    yield encode_event({"type": "message_stop"}, "message_stop")


# -- OpenAI Chat Completions --------------------------------------------------------------------

_CHAT_FINISH = {
    "compaction": "stop",
    "end": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "tool_use": "tool_calls",
    "refusal": "stop",
}


def _chat_usage(billing: Billing, answer: _Answer, host: str) -> dict[str, Any]:
    output_tokens = answer.output_tokens
    details: dict[str, Any] = {"cached_tokens": billing.cache_read, "audio_tokens": 0}
    if billing.writes_as == "openai":
        # "OpenAI reports writes in cache_write_tokens and reads in cached_tokens" (prompt-caching guide).
        details["cache_write_tokens"] = billing.cache_write
    elif billing.cache_write:
        # Explicit-cache writes (Anthropic-style markers on an OpenAI-compatible API) are reported
        # the way Alibaba Cloud Model Studio (Bailian) reports them.
        details["cache_creation_input_tokens"] = billing.cache_write
        details["cache_creation"] = {
            "ephemeral_5m_input_tokens": billing.cache_write_5m,
            "ephemeral_1h_input_tokens": billing.cache_write_1h,
        }
        details["cache_type"] = "ephemeral"
    usage: dict[str, Any] = {
        "prompt_tokens": billing.total,
        "completion_tokens": output_tokens,
        "total_tokens": billing.total + output_tokens,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": answer.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    if host.endswith("deepseek.com"):  # DeepSeek reports its context cache as hit / miss counts
        usage["prompt_cache_hit_tokens"] = billing.cache_read
        usage["prompt_cache_miss_tokens"] = billing.total - billing.cache_read
    return usage


def _chat_frame(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    model = payload["model"]
    head = {
        "id": "chatcmpl-" + _base62(29),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
    }
    tail = {
        "service_tier": "default",
        "system_fingerprint": "fp_" + hashlib.sha256(model.encode()).hexdigest()[:10],
    }
    return head, tail


def _chat_calls(answer: _Answer) -> list[dict[str, Any]]:
    """The answer's tool calls with their ids (one id per call, for every chunk that names it): a
    function's ``arguments``, a custom tool's ``input`` (the openai SDK's
    ``ChatCompletionMessageCustomToolCall``)."""
    return [
        {
            "id": call.id or "call_" + _base62(24),
            "type": "custom",
            "custom": {"name": call.name, "input": call.input},
        }
        if call.input is not None
        else {
            "id": call.id or "call_" + _base62(24),
            "type": "function",
            "function": {"name": call.name, "arguments": _arguments(call)},
        }
        for call in answer.calls
    ]


def _call_text(call: dict[str, Any]) -> tuple[str, str]:
    """A Chat tool call's streamed part: which field it fills (``arguments`` or ``input``), and its text."""
    if call["type"] == "custom":
        return "input", str(call["custom"]["input"])
    return "arguments", str(call["function"]["arguments"])


def _url_annotations(answer: _Answer) -> list[dict[str, Any]]:
    """Web citations as OpenAI annotates text: each spans the cited text block within the joined text
    (other citation kinds have no OpenAI form)."""
    annotations: list[dict[str, Any]] = []
    offset = 0
    for block in answer.blocks:
        if not isinstance(block, Text):
            continue
        end = offset + len(answer.text_of(block))
        for citation in block.citations:
            if citation.kind == "web":
                annotations.append(
                    {
                        "start_index": offset,
                        "end_index": end,
                        "title": citation.title or "",
                        "url": citation.url,
                    }
                )
        offset = end
    return annotations


def _joined(answer: _Answer, kind: type[Text] | type[Refusal]) -> str | None:
    """The text of every block of ``kind``, joined; ``None`` when the answer has none."""
    blocks = [block for block in answer.blocks if isinstance(block, kind)]
    if not blocks:
        return None
    return "".join(answer.text_of(b) if isinstance(b, Text) else b.text for b in blocks)


def _chat_body(payload: dict[str, Any], answer: _Answer, billing: Billing, extras: Extras) -> dict[str, Any]:
    host = extras.host
    head, tail = _chat_frame(payload)
    annotations = [{"type": "url_citation", "url_citation": a} for a in _url_annotations(answer)]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": _joined(answer, Text),
        "refusal": _joined(answer, Refusal),
        "annotations": annotations,
    }
    if answer.calls:
        message["tool_calls"] = _chat_calls(answer)
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": _CHAT_FINISH[answer.finish_reason],
    }
    return {**head, "choices": [choice], "usage": _chat_usage(billing, answer, host), **tail}


def _chat_stream(
    payload: dict[str, Any], answer: _Answer, billing: Billing, extras: Extras
) -> Iterator[bytes]:
    host = extras.host
    head, tail = _chat_frame(payload)
    options = payload.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    chunk_head = {**head, "object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        data = {**chunk_head, **tail, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        return encode_event(data)

    texts = [block for block in answer.blocks if isinstance(block, Text)]
    first: dict[str, Any] = {"role": "assistant", "content": "" if texts else None, "refusal": None}
    calls = _chat_calls(answer)
    openings = [
        {"index": i, **call, call["type"]: {**call[call["type"]], _call_text(call)[0]: ""}}
        for i, call in enumerate(calls)
    ]
    opened = 0
    if calls and not texts and not any(isinstance(block, Refusal) for block in answer.blocks):
        # A tool-call answer names its first call in its first chunk, as the API does.
        first["tool_calls"] = [openings[0]]
        opened = 1
    yield chunk(first)
    for block in texts:
        for piece in answer.pieces(block):
            yield chunk({"content": piece})
    annotations = _url_annotations(answer)
    if annotations:
        # The API sends a cited answer's annotations in a delta of their own.
        yield chunk({"annotations": [{"type": "url_citation", "url_citation": a} for a in annotations]})
    for refusal in [block for block in answer.blocks if isinstance(block, Refusal)]:
        for piece in answer.pieces(refusal):
            yield chunk({"refusal": piece})
    for i, call in enumerate(calls):
        if i >= opened:
            yield chunk({"tool_calls": [openings[i]]})
        field, text = _call_text(call)
        for piece in _pieces(text, _JSON_PIECE):
            yield chunk({"tool_calls": [{"index": i, call["type"]: {field: piece}}]})
    yield chunk({}, _CHAT_FINISH[answer.finish_reason])
    if include_usage:
        yield encode_event({**chunk_head, **tail, "choices": [], "usage": _chat_usage(billing, answer, host)})
    yield CHAT_DONE


# -- OpenAI Responses ---------------------------------------------------------------------------


def _responses_usage(billing: Billing, answer: _Answer) -> dict[str, Any]:
    return responses_usage(billing, answer.output_tokens, answer.reasoning_tokens)


def responses_usage(billing: Billing, output_tokens: int = 0, reasoning_tokens: int = 0) -> dict[str, Any]:
    """A Responses ``usage`` object (the openai SDK's ``ResponseUsage``) for this billing."""
    details: dict[str, Any] = {"cached_tokens": billing.cache_read, "cache_write_tokens": billing.cache_write}
    if billing.writes_as == "openai":
        # The openai SDK's ResponseUsage splits GPT-5.6 writes by lifetime.
        details["cache_write_tokens_details"] = {
            "ttl_30m_tokens": billing.cache_write_5m,
            "ttl_12h_tokens": billing.cache_write_1h,
        }
    return {
        "input_tokens": billing.total,
        "input_tokens_details": details,
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": billing.total + output_tokens,
    }


def _responses_frame(payload: dict[str, Any], response_id: str, created: int) -> dict[str, Any]:
    text_config = _mapping(payload.get("text"))
    reasoning = _mapping(payload.get("reasoning"))
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": payload.get("instructions"),
        "max_output_tokens": payload.get("max_output_tokens"),
        "max_tool_calls": payload.get("max_tool_calls"),
        "model": payload["model"],
        "output": [],
        "parallel_tool_calls": payload.get("parallel_tool_calls", True),
        "previous_response_id": payload.get("previous_response_id"),
        "prompt_cache_key": payload.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": payload.get("safety_identifier"),
        "service_tier": "default",
        "store": payload.get("store", True),
        "temperature": payload.get("temperature", 1.0),
        "text": {
            "format": text_config.get("format", {"type": "text"}),
            "verbosity": text_config.get("verbosity", "medium"),
        },
        "tool_choice": payload.get("tool_choice", "auto"),
        "tools": echoed_tools(payload),
        "top_logprobs": payload.get("top_logprobs", 0),
        "top_p": payload.get("top_p", 1.0),
        "truncation": payload.get("truncation", "disabled"),
        "usage": None,
        "user": payload.get("user"),
        "metadata": payload.get("metadata") or {},
    }


def _responses_final(
    frame: dict[str, Any], output: list[dict[str, Any]], answer: _Answer, billing: Billing
) -> dict[str, Any]:
    truncated = answer.finish_reason == "length"
    response = {
        **frame,
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "output": output,
        "usage": _responses_usage(billing, answer),
    }
    if not truncated:
        response["completed_at"] = frame["created_at"]
    return response


def _responses_groups(answer: _Answer) -> list[list[Block]]:
    """The answer's blocks as output items: text and refusals next to each other share a message."""
    groups: list[list[Block]] = []
    for block in answer.blocks:
        message = isinstance(block, (Text, Refusal))
        if message and groups and isinstance(groups[-1][0], (Text, Refusal)):
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


def _included(payload: dict[str, Any], what: str) -> bool:
    include = payload.get("include")
    return isinstance(include, list) and what in include


class _ResponsesItems:
    """Renders each output item of a Responses answer, as a whole (bodies) or as the API streams it.

    ``emit(kind, **fields)`` returns one SSE event; :meth:`stream` yields an item's events and leaves
    the finished item in :attr:`output`.
    """

    def __init__(self, payload: dict[str, Any], answer: _Answer) -> None:
        self.payload = payload
        self.answer = answer
        self.output: list[dict[str, Any]] = []

    def stream(self, group: list[Block], emit: Callable[..., bytes]) -> Iterator[bytes]:
        index = len(self.output)
        first = group[0]
        if isinstance(first, (Text, Refusal)):
            yield from self._message(group, index, emit)
            return
        if isinstance(first, (Thinking, RedactedThinking)):
            item = self._reasoning(first)
            yield emit("response.output_item.added", output_index=index, item={**item, "summary": []})
            where = {"item_id": item["id"], "output_index": index}
            for summary_index, part in enumerate(item["summary"]):
                at = {**where, "summary_index": summary_index}
                yield emit("response.reasoning_summary_part.added", **at, part={**part, "text": ""})
                assert isinstance(first, Thinking)
                for piece in self.answer.pieces(first):
                    yield emit("response.reasoning_summary_text.delta", **at, delta=piece)
                yield emit("response.reasoning_summary_text.done", **at, text=part["text"])
                yield emit("response.reasoning_summary_part.done", **at, part=part)
        elif isinstance(first, ToolCall) and first.input is not None:
            # A freeform tool's call: its input streams as text (custom_tool_call_input events).
            item = {
                "id": "ctc_" + secrets.token_hex(24),
                "type": "custom_tool_call",
                "call_id": first.id or "call_" + _base62(24),
                "name": first.name,
                "input": first.input,
            }
            if first.namespace is not None:
                item["namespace"] = first.namespace
            yield emit("response.output_item.added", output_index=index, item={**item, "input": ""})
            where = {"item_id": item["id"], "output_index": index}
            for piece in _pieces(first.input, _JSON_PIECE):
                yield emit("response.custom_tool_call_input.delta", **where, delta=piece)
            yield emit("response.custom_tool_call_input.done", **where, input=first.input)
        elif isinstance(first, ToolCall):
            item = {
                "id": "fc_" + secrets.token_hex(24),
                "type": "function_call",
                "status": "completed",
                "arguments": _arguments(first),
                "call_id": first.id or "call_" + _base62(24),
                "name": first.name,
            }
            if first.namespace is not None:
                item["namespace"] = first.namespace
            added = {**item, "status": "in_progress", "arguments": ""}
            yield emit("response.output_item.added", output_index=index, item=added)
            where = {"item_id": item["id"], "output_index": index}
            for piece in _pieces(item["arguments"], _JSON_PIECE):
                yield emit("response.function_call_arguments.delta", **where, delta=piece)
            yield emit(
                "response.function_call_arguments.done",
                **where,
                arguments=item["arguments"],
            )
        else:
            assert isinstance(first, WebSearch)
            item = self._search(first)
            yield emit(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress"}
            )
            where = {"item_id": item["id"], "output_index": index}
            for stage in ("in_progress", "searching", "completed"):
                yield emit(f"response.web_search_call.{stage}", **where)
        self.output.append(item)
        yield emit("response.output_item.done", output_index=index, item=item)

    def compaction(self, content: str, emit: Callable[..., bytes]) -> Iterator[bytes]:
        """The compaction item an answer starts with (its encrypted content whole in both events)."""
        index = len(self.output)
        item = {"id": "cmp_" + secrets.token_hex(24), "type": "compaction", "encrypted_content": content}
        yield emit("response.output_item.added", output_index=index, item=item)
        yield emit("response.compaction.compacting", item_id=item["id"], output_index=index)
        self.output.append(item)
        yield emit("response.output_item.done", output_index=index, item=item)

    def _reasoning(self, block: Thinking | RedactedThinking) -> dict[str, Any]:
        """A reasoning item: its summary only when the request asks for one, its encrypted content
        only when ``include`` names it."""
        summary = _mapping(self.payload.get("reasoning")).get("summary")
        item: dict[str, Any] = {"id": "rs_" + secrets.token_hex(24), "type": "reasoning", "summary": []}
        if isinstance(block, Thinking) and summary in ("auto", "concise", "detailed"):
            item["summary"] = [{"type": "summary_text", "text": block.thinking}]
        if _included(self.payload, "reasoning.encrypted_content"):
            item["encrypted_content"] = block.signature if isinstance(block, Thinking) else block.data
        return item

    def _search(self, block: WebSearch) -> dict[str, Any]:
        action: dict[str, Any] = {"type": "search", "query": block.query}
        if _included(self.payload, "web_search_call.action.sources"):
            action["sources"] = [{"type": "url", "url": url} for url, _ in block.results]
        return {
            "id": "ws_" + secrets.token_hex(24),
            "type": "web_search_call",
            "status": "completed",
            "action": action,
        }

    def _message(self, group: list[Block], index: int, emit: Callable[..., bytes]) -> Iterator[bytes]:
        item_id = "msg_" + secrets.token_hex(24)
        opening = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "content": [],
            "role": "assistant",
        }
        yield emit("response.output_item.added", output_index=index, item=opening)
        parts: list[dict[str, Any]] = []
        texts = [block for block in group if isinstance(block, Text)]
        where = {"item_id": item_id, "output_index": index}
        if texts:
            at = {**where, "content_index": len(parts)}
            empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            yield emit("response.content_part.added", **at, part=empty)
            for block in texts:
                for piece in self.answer.pieces(block):
                    yield emit("response.output_text.delta", **at, delta=piece, logprobs=[])
            text = "".join(self.answer.text_of(block) for block in texts)
            annotations = self._annotations(texts)
            for n, annotation in enumerate(annotations):
                yield emit(
                    "response.output_text.annotation.added", **at, annotation_index=n, annotation=annotation
                )
            part = {"type": "output_text", "annotations": annotations, "logprobs": [], "text": text}
            yield emit("response.output_text.done", **at, text=text, logprobs=[])
            yield emit("response.content_part.done", **at, part=part)
            parts.append(part)
        for refusal in [block for block in group if isinstance(block, Refusal)]:
            at = {**where, "content_index": len(parts)}
            yield emit("response.content_part.added", **at, part={"type": "refusal", "refusal": ""})
            for piece in self.answer.pieces(refusal):
                yield emit("response.refusal.delta", **at, delta=piece)
            yield emit("response.refusal.done", **at, refusal=refusal.text)
            part = {"type": "refusal", "refusal": refusal.text}
            yield emit("response.content_part.done", **at, part=part)
            parts.append(part)
        status = "incomplete" if self.answer.finish_reason == "length" else "completed"
        item = {**opening, "status": status, "content": parts}
        self.output.append(item)
        yield emit("response.output_item.done", output_index=index, item=item)

    def _annotations(self, texts: list[Text]) -> list[dict[str, Any]]:
        annotations: list[dict[str, Any]] = []
        offset = 0
        for block in texts:
            end = offset + len(self.answer.text_of(block))
            annotations.extend(
                {
                    "type": "url_citation",
                    "start_index": offset,
                    "end_index": end,
                    "title": c.title or "",
                    "url": c.url,
                }
                for c in block.citations
                if c.kind == "web"
            )
            offset = end
        return annotations


def _no_event(kind: str, **fields: Any) -> bytes:
    del kind, fields
    return b""


def _responses_body(
    payload: dict[str, Any], answer: _Answer, billing: Billing, extras: Extras
) -> dict[str, Any]:
    frame = _responses_frame(payload, "resp_" + secrets.token_hex(24), int(time.time()))
    items = _ResponsesItems(payload, answer)
    if extras.compaction is not None:
        for _ in items.compaction(extras.compaction, _no_event):
            pass
    for group in _responses_groups(answer):
        for _ in items.stream(group, _no_event):  # the same items the stream finishes, unsent
            pass
    final = _responses_final(frame, items.output, answer, billing)
    if extras.keep is not None:
        extras.keep(final)
    return final


def _responses_stream(
    payload: dict[str, Any], answer: _Answer, billing: Billing, extras: Extras
) -> Iterator[bytes]:
    frame = _responses_frame(payload, "resp_" + secrets.token_hex(24), int(time.time()))
    sequence = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal sequence
        data = responses_event(kind, sequence, **fields)
        sequence += 1
        return data

    yield event("response.created", response=frame)
    yield event("response.in_progress", response=frame)
    items = _ResponsesItems(payload, answer)
    if extras.compaction is not None:
        yield from items.compaction(extras.compaction, event)
    for group in _responses_groups(answer):
        yield from items.stream(group, event)
    final = _responses_final(frame, items.output, answer, billing)
    if extras.keep is not None:
        extras.keep(final)  # kept once the response is whole, before its last event is sent
    yield event(
        "response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final
    )


_BODIES = {
    "anthropic_messages": _anthropic_body,
    "openai_chat": _chat_body,
    "openai_responses": _responses_body,
}
_STREAMS = {
    "anthropic_messages": _anthropic_stream,
    "openai_chat": _chat_stream,
    "openai_responses": _responses_stream,
}

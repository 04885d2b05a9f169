"""The providers' wire formats: response bodies, SSE event streams, error bodies and headers.

One place knows what an Anthropic ``message``, an OpenAI ``chat.completion`` (and its chunks) and a
Responses ``response`` (and its lifecycle events) look like, field by field, as the official SDKs'
types declare them (``anthropic/types/message.py``, ``raw_message_stream_event.py``,
``openai/types/chat/chat_completion*.py``, ``openai/types/responses/response*.py``). The local backend
and :class:`cachekit.testing.FakeUpstream` both render through it.

Streams are generators: text pieces are sent as the engine produces them, and the closing events
(which carry the final usage) only once it has finished.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from cachekit.local.engine import FinishReason, Generation, ToolCall

__all__ = [
    "Billing",
    "Dialect",
    "Endpoint",
    "Reply",
    "dialect_of",
    "endpoint_of",
    "error_reply",
    "json_reply",
    "render",
    "stream_error_event",
]

Dialect = Literal["anthropic", "openai"]
Endpoint = Literal["messages", "count_tokens", "chat", "responses"]

JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ORGANIZATION_ID = "8c6f3a3e-5d7e-4b7a-9a0e-2f1d5c3b9e41"
_JSON_PIECE = 16  # characters per streamed tool-argument delta


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
# Routing


def endpoint_of(method: str, path: str) -> Endpoint | None:
    """The API a request addresses, matched by path suffix so any base URL works; ``None`` if none."""
    path = path.rstrip("/")
    if method.upper() != "POST":
        return None
    if path.endswith("/v1/messages/count_tokens"):
        return "count_tokens"
    if path.endswith("/v1/messages"):
        return "messages"
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    return None


def dialect_of(endpoint: Endpoint | None, headers: dict[str, str]) -> Dialect:
    """Whose error shapes to answer in (an unknown path: guessed from the auth headers)."""
    if endpoint in ("messages", "count_tokens"):
        return "anthropic"
    if endpoint in ("chat", "responses"):
        return "openai"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


# ---------------------------------------------------------------------------------------------
# Ids, headers and plain replies


def _base62(size: int) -> str:
    return "".join(secrets.choice(_BASE62) for _ in range(size))


def request_id(dialect: Dialect) -> str:
    """A fresh request id in the provider's format."""
    return "req_011C" + _base62(20) if dialect == "anthropic" else "req_" + uuid.uuid4().hex


def headers(dialect: Dialect, content_type: str, rid: str) -> tuple[tuple[str, str], ...]:
    """The response headers a provider sends with every answer."""
    if dialect == "anthropic":
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


def json_reply(dialect: Dialect, data: Any) -> Reply:
    """A 200 with a JSON body."""
    return Reply(200, headers(dialect, JSON, request_id(dialect)), orjson.dumps(data))


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------------------------
# Errors

BAD_JSON: dict[Dialect, str] = {
    "anthropic": "There was an error parsing the body of your request. Please check that it is valid JSON.",
    "openai": "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly.)",
}

# status -> (error.type, default message); https://docs.claude.com/en/api/errors
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "Not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}

# status -> (error.type, error.code, default message); what api.openai.com sends
_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported",
    ),
    404: (
        "invalid_request_error",
        "model_not_found",
        "The model does not exist or you do not have access to it.",
    ),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


def error_body(
    dialect: Dialect,
    status: int,
    message: str | None,
    rid: str,
    *,
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """The provider's error document for ``status`` (``message`` replaces the default text; an empty
    ``code`` sends ``null`` where the status has a default code, as OpenAI does for an unknown path)."""
    if dialect == "anthropic":
        kind, default = _ANTHROPIC_ERRORS.get(
            status, ("api_error" if status >= 500 else "invalid_request_error", f"HTTP {status}")
        )
        error = {"type": kind, "message": message or default}
        return orjson.dumps({"type": "error", "error": error, "request_id": rid})
    kind, default_code, default = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, f"HTTP {status}")
    )
    return orjson.dumps(
        {
            "error": {
                "message": message or default,
                "type": kind,
                "param": param,
                "code": default_code if code is None else (code or None),
            }
        }
    )


def error_reply(
    dialect: Dialect, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> Reply:
    """An error answer with the provider's body, headers and status."""
    rid = request_id(dialect)
    content = error_body(dialect, status, message, rid, param=param, code=code)
    return Reply(status, headers(dialect, JSON, rid), content)


def stream_error_event(endpoint: Endpoint, sequence: int = 0) -> bytes:
    """The event a provider sends when a stream fails midway (no terminator follows it)."""
    if endpoint == "messages":
        return _sse(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"
        )
    if endpoint == "chat":
        return _sse(
            {
                "error": {
                    "message": "The server had an error while processing your request. Sorry about that!",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
        )
    return _sse(
        {
            "type": "error",
            "code": "server_error",
            "message": "The server had an error while processing your request.",
            "param": None,
            "sequence_number": sequence,
        },
        "error",
    )


# ---------------------------------------------------------------------------------------------
# Rendering an answer


def render(
    endpoint: Endpoint, payload: dict[str, Any], generation: Generation, billing: Billing, host: str
) -> Reply:
    """The provider's answer to ``payload``: a JSON body, or an SSE stream when it asked for one."""
    if endpoint == "count_tokens":
        return json_reply("anthropic", {"input_tokens": billing.total})
    dialect: Dialect = "anthropic" if endpoint == "messages" else "openai"
    answer = _Answer(generation)
    if payload.get("stream") is True:
        events = _STREAMS[endpoint](payload, answer, billing, host)
        rid = request_id(dialect)
        return Reply(200, (*headers(dialect, SSE, rid), ("cache-control", "no-cache")), events=events)
    answer.finish()
    return json_reply(dialect, _BODIES[endpoint](payload, answer, billing, host))


class _Answer:
    """The generation being rendered, with the text collected as it streams."""

    def __init__(self, generation: Generation) -> None:
        self.generation = generation
        self.tool_call: ToolCall | None = generation.tool_call
        self.text = ""

    def pieces(self) -> Iterator[str]:
        for piece in self.generation:
            self.text += piece
            yield piece

    def finish(self) -> None:
        for _ in self.pieces():
            pass

    @property
    def finish_reason(self) -> FinishReason:
        return "tool_use" if self.tool_call is not None else self.generation.finish_reason

    @property
    def output_tokens(self) -> int:
        return self.generation.output_tokens

    @property
    def arguments(self) -> str:
        return _dumps(dict(self.tool_call.arguments)) if self.tool_call is not None else ""


# -- Anthropic Messages -------------------------------------------------------------------------

_ANTHROPIC_STOP = {
    "end": "end_turn",
    "length": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
}


def _anthropic_usage(billing: Billing, output_tokens: int) -> dict[str, Any]:
    return {
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


def _anthropic_tool_block(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id or "toolu_01" + _base62(22), "name": call.name, "input": {}}


def _anthropic_body(payload: dict[str, Any], answer: _Answer, billing: Billing, host: str) -> dict[str, Any]:
    del host
    if answer.tool_call is not None:
        block = {**_anthropic_tool_block(answer.tool_call), "input": dict(answer.tool_call.arguments)}
    else:
        block = {"type": "text", "text": answer.text}
    return {
        **_anthropic_head(payload, billing),
        "content": [block],
        "stop_reason": _ANTHROPIC_STOP[answer.finish_reason],
        "stop_sequence": answer.generation.stop_sequence,
        "usage": _anthropic_usage(billing, answer.output_tokens),
    }


def _anthropic_stream(
    payload: dict[str, Any], answer: _Answer, billing: Billing, host: str
) -> Iterator[bytes]:
    del host
    yield _sse({"type": "message_start", "message": _anthropic_head(payload, billing)}, "message_start")
    if answer.tool_call is not None:
        opening: dict[str, Any] = _anthropic_tool_block(answer.tool_call)
        deltas: Iterable[dict[str, Any]] = (
            {"type": "input_json_delta", "partial_json": piece}
            for piece in ["", *_pieces(answer.arguments, _JSON_PIECE)]
        )
    else:
        opening = {"type": "text", "text": ""}
        deltas = ({"type": "text_delta", "text": piece} for piece in answer.pieces())
    yield _sse({"type": "content_block_start", "index": 0, "content_block": opening}, "content_block_start")
    yield _sse({"type": "ping"}, "ping")
    for delta in deltas:
        yield _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    usage = _anthropic_usage(billing, answer.output_tokens)
    delta_usage = {
        key: usage[key]
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    }
    stop = {
        "stop_reason": _ANTHROPIC_STOP[answer.finish_reason],
        "stop_sequence": answer.generation.stop_sequence,
        "stop_details": None,
    }
    yield _sse({"type": "message_delta", "delta": stop, "usage": delta_usage}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


# -- OpenAI Chat Completions --------------------------------------------------------------------

_CHAT_FINISH = {"end": "stop", "stop_sequence": "stop", "length": "length", "tool_use": "tool_calls"}


def _chat_usage(billing: Billing, output_tokens: int, host: str) -> dict[str, Any]:
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
            "reasoning_tokens": 0,
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


def _chat_call(answer: _Answer, call_id: str, arguments: str) -> dict[str, Any]:
    assert answer.tool_call is not None
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": answer.tool_call.name, "arguments": arguments},
    }


def _chat_body(payload: dict[str, Any], answer: _Answer, billing: Billing, host: str) -> dict[str, Any]:
    head, tail = _chat_frame(payload)
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
    if answer.tool_call is not None:
        call_id = answer.tool_call.id or "call_" + _base62(24)
        message["tool_calls"] = [_chat_call(answer, call_id, answer.arguments)]
    else:
        message["content"] = answer.text
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": _CHAT_FINISH[answer.finish_reason],
    }
    return {**head, "choices": [choice], "usage": _chat_usage(billing, answer.output_tokens, host), **tail}


def _chat_stream(payload: dict[str, Any], answer: _Answer, billing: Billing, host: str) -> Iterator[bytes]:
    head, tail = _chat_frame(payload)
    options = payload.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    chunk_head = {**head, "object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        data = {**chunk_head, **tail, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        return _sse(data)

    if answer.tool_call is not None:
        call = {"index": 0, **_chat_call(answer, answer.tool_call.id or "call_" + _base62(24), "")}
        yield chunk({"role": "assistant", "content": None, "tool_calls": [call], "refusal": None})
        for piece in _pieces(answer.arguments, _JSON_PIECE):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    else:
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in answer.pieces():
            yield chunk({"content": piece})
    yield chunk({}, _CHAT_FINISH[answer.finish_reason])
    if include_usage:
        yield _sse(
            {**chunk_head, **tail, "choices": [], "usage": _chat_usage(billing, answer.output_tokens, host)}
        )
    yield b"data: [DONE]\n\n"


# -- OpenAI Responses ---------------------------------------------------------------------------


def _echo_tools(payload: dict[str, Any]) -> list[Any]:
    echoed: list[Any] = []
    for tool in payload.get("tools") or []:
        if isinstance(tool, dict) and tool.get("type") == "function":
            echoed.append(
                {
                    "type": "function",
                    "name": tool.get("name"),
                    "description": tool.get("description"),
                    "parameters": tool.get("parameters"),
                    "strict": tool.get("strict", True),
                }
            )
        else:
            echoed.append(tool)
    return echoed


def _responses_usage(billing: Billing, output_tokens: int) -> dict[str, Any]:
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
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": billing.total + output_tokens,
    }


def _responses_item(answer: _Answer, item_id: str, call_id: str) -> dict[str, Any]:
    if answer.tool_call is not None:
        return {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "arguments": answer.arguments,
            "call_id": call_id,
            "name": answer.tool_call.name,
        }
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": answer.text}
    status = "incomplete" if answer.finish_reason == "length" else "completed"
    return {"id": item_id, "type": "message", "status": status, "content": [part], "role": "assistant"}


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
        "tools": _echo_tools(payload),
        "top_logprobs": payload.get("top_logprobs", 0),
        "top_p": payload.get("top_p", 1.0),
        "truncation": payload.get("truncation", "disabled"),
        "usage": None,
        "user": payload.get("user"),
        "metadata": payload.get("metadata") or {},
    }


def _responses_final(
    frame: dict[str, Any], item: dict[str, Any], answer: _Answer, billing: Billing
) -> dict[str, Any]:
    truncated = answer.finish_reason == "length"
    response = {
        **frame,
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "output": [item],
        "usage": _responses_usage(billing, answer.output_tokens),
    }
    if not truncated:
        response["completed_at"] = frame["created_at"]
    return response


def _responses_ids(answer: _Answer) -> tuple[str, str]:
    if answer.tool_call is not None:
        return "fc_" + secrets.token_hex(24), answer.tool_call.id or "call_" + _base62(24)
    return "msg_" + secrets.token_hex(24), ""


def _responses_body(payload: dict[str, Any], answer: _Answer, billing: Billing, host: str) -> dict[str, Any]:
    del host
    frame = _responses_frame(payload, "resp_" + secrets.token_hex(24), int(time.time()))
    item_id, call_id = _responses_ids(answer)
    return _responses_final(frame, _responses_item(answer, item_id, call_id), answer, billing)


def _responses_stream(
    payload: dict[str, Any], answer: _Answer, billing: Billing, host: str
) -> Iterator[bytes]:
    del host
    frame = _responses_frame(payload, "resp_" + secrets.token_hex(24), int(time.time()))
    sequence = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal sequence
        data = _sse({"type": kind, "sequence_number": sequence, **fields}, kind)
        sequence += 1
        return data

    yield event("response.created", response=frame)
    yield event("response.in_progress", response=frame)
    item_id, call_id = _responses_ids(answer)
    where = {"item_id": item_id, "output_index": 0}
    if answer.tool_call is not None:
        item = _responses_item(answer, item_id, call_id)
        yield event(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "arguments": ""},
        )
        for piece in _pieces(item["arguments"], _JSON_PIECE):
            yield event("response.function_call_arguments.delta", **where, delta=piece)
        yield event(
            "response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"]
        )
    else:
        opening = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "content": [],
            "role": "assistant",
        }
        yield event("response.output_item.added", output_index=0, item=opening)
        empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        yield event("response.content_part.added", **where, content_index=0, part=empty)
        for piece in answer.pieces():
            yield event("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
        item = _responses_item(answer, item_id, call_id)
        yield event("response.output_text.done", **where, content_index=0, text=answer.text, logprobs=[])
        yield event("response.content_part.done", **where, content_index=0, part=item["content"][0])
    yield event("response.output_item.done", output_index=0, item=item)
    final = _responses_final(frame, item, answer, billing)
    yield event(
        "response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final
    )


_BODIES = {"messages": _anthropic_body, "chat": _chat_body, "responses": _responses_body}
_STREAMS = {"messages": _anthropic_stream, "chat": _chat_stream, "responses": _responses_stream}

"""Helpers for your own test suite: an in-process fake of the LLM provider APIs.

:class:`FakeUpstream` is an httpx transport (for ``httpx`` *and* ``httpx2`` clients, sync *and*
async) that answers like the real providers, instantly and offline, and counts what it was asked::

    import anthropic, httpx2
    from cachekit.testing import FakeUpstream

    upstream = FakeUpstream()
    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=upstream)
    )
    message = client.messages.create(model="claude-sonnet-4-5", max_tokens=64,
                                     messages=[{"role": "user", "content": "Hi"}])
    assert upstream.calls == 1

Endpoints (matched by path suffix, so any base URL works — ``https://api.deepseek.com``,
``https://dashscope.aliyuncs.com/compatible-mode/v1``, ...), all ``POST``:

* ``.../v1/messages`` — Anthropic Messages; ``.../v1/messages/count_tokens``;
* ``.../chat/completions`` — OpenAI Chat Completions;
* ``.../responses`` — OpenAI Responses.

Every answer has its provider's exact JSON shape (or SSE event stream, when the body has
``"stream": true``) and headers (``request-id`` / ``x-request-id``). Answers are deterministic
functions of the request: the text quotes a digest of the request body and the last user message,
so identical requests get identical text and different requests different text; ids (``msg_...``,
``chatcmpl-...``, ``resp_...``) and request ids are fresh on every call, so a test can tell a
replayed response from a new one. Usage counts are a rough, deterministic token estimate
(prompt bytes // 4; one output token per word).

Tool calls: when the request offers tools and either its final message is a user message that
mentions "weather" or its ``tool_choice`` forces a tool, the answer is one call of the forced tool
(else the first function tool) with arguments built from the tool's JSON schema. Structured
output (``response_format`` / ``text.format`` / ``output_config.format`` with a JSON schema) is
answered with a JSON document built from that schema. A ``max_tokens`` / ``max_completion_tokens``
/ ``max_output_tokens`` below the answer's length truncates it the way each provider does.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2
import orjson

from cachekit._http import library_of

__all__ = ["FakeUpstream", "RecordedRequest"]

Dialect = Literal["anthropic", "openai"]

_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ORGANIZATION_ID = "8c6f3a3e-5d7e-4b7a-9a0e-2f1d5c3b9e41"
_TEXT_PIECE = 12  # characters per streamed text delta
_JSON_PIECE = 16  # characters per streamed tool-argument delta


@dataclass(frozen=True)
class RecordedRequest:
    """One request as :class:`FakeUpstream` received it."""

    method: str
    url: str
    headers: dict[str, str]
    """Header names are lower-cased; repeated headers are joined with ``", "``."""
    body: bytes

    @property
    def path(self) -> str:
        """The URL path, e.g. ``/v1/messages``."""
        return urlsplit(self.url).path or "/"

    def json(self) -> Any:
        """The body decoded as JSON."""
        return orjson.loads(self.body)


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: tuple[tuple[str, str], ...]
    content: bytes = b""
    events: tuple[bytes, ...] | None = None  # a streamed body, one SSE event per chunk
    disconnect: bool = False  # after the events, fail the read like a dropped connection


@dataclass(frozen=True)
class _Scripted:
    status: int
    body: bytes | None
    content_type: str | None
    headers: tuple[tuple[str, str], ...]
    message: str | None


@dataclass(frozen=True)
class _StreamBreak:
    after: int
    how: Literal["error", "disconnect"]


class FakeUpstream(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """An in-process upstream speaking the Anthropic and OpenAI HTTP APIs; a sync *and* async transport.

    Pass it as ``transport=`` to ``httpx.Client`` / ``httpx.AsyncClient`` or their ``httpx2``
    twins (what the official SDKs use): responses are built with the same library as the request.
    One instance may be shared by many clients and threads; closing a client does not close it.

    Args:
        latency: seconds to wait before answering each request (``time.sleep`` in sync clients,
            ``anyio.sleep`` in async ones), to simulate the network.
        chunk_delay: seconds to wait before each chunk of a streamed answer.
    """

    def __init__(self, *, latency: float = 0.0, chunk_delay: float = 0.0) -> None:
        self.latency = latency
        self.chunk_delay = chunk_delay
        self._lock = threading.Lock()
        self._calls = 0
        self._requests: list[RecordedRequest] = []
        self._scripted: deque[_Scripted] = deque()
        self._stream_breaks: deque[_StreamBreak] = deque()

    # -- inspection and scripting ---------------------------------------------------------------

    @property
    def calls(self) -> int:
        """How many requests reached this upstream (scripted failures and 404s included)."""
        with self._lock:
            return self._calls

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Forget all received requests and drop every queued failure or scripted response."""
        with self._lock:
            self._calls = 0
            self._requests.clear()
            self._scripted.clear()
            self._stream_breaks.clear()

    def fail_next(
        self,
        status: int,
        *,
        times: int = 1,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``times`` requests with an HTTP error instead of serving them.

        Without ``body`` the error body has the shape of the request's API: Anthropic's
        ``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}`` with the
        error type the API uses for ``status`` (429 ``rate_limit_error``, 529 ``overloaded_error``,
        ...), or OpenAI's ``{"error": {"message", "type", "param", "code"}}``. ``message`` replaces
        the default message; ``headers`` are added to (or override) the default ones, e.g.
        ``{"retry-after-ms": "1"}`` to make an SDK's automatic retry instant.
        """
        if times < 1:
            raise ValueError("times must be at least 1")
        entry = _Scripted(status, body, None, _header_items(headers), message)
        with self._lock:
            self._scripted.extend([entry] * times)

    def respond_next(
        self,
        status: int,
        content: bytes,
        content_type: str = _JSON,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next request with exactly this status and body (e.g. a non-JSON 200)."""
        entry = _Scripted(status, content, content_type, _header_items(headers), None)
        with self._lock:
            self._scripted.append(entry)

    def break_next_stream(self, *, after: int = 3, how: Literal["error", "disconnect"] = "error") -> None:
        """Cut the next streamed answer short after ``after`` events.

        ``how="error"`` ends the stream with the provider's mid-stream error (Anthropic's
        ``event: error`` with an ``overloaded_error``, a Chat ``data: {"error": ...}`` chunk, a
        Responses ``error`` event) and no terminator; ``how="disconnect"`` makes reading the body
        fail like a dropped connection (``RemoteProtocolError`` of the client's HTTP library).
        Non-streaming requests are not affected and do not consume it.
        """
        if after < 0:
            raise ValueError("after must not be negative")
        with self._lock:
            self._stream_breaks.append(_StreamBreak(after, how))

    # -- transport interface (duck-typed for httpx and httpx2) ----------------------------------

    def handle_request(self, request: Any) -> Any:
        """Answer one request from a sync client."""
        reply = self._serve(request, request.read())
        if self.latency > 0:
            time.sleep(self.latency)
        lib = library_of(request)
        content: bytes | Iterator[bytes] = (
            reply.content if reply.events is None else self._iter_events(lib, reply)
        )
        return _build_response(lib, reply, content)

    async def handle_async_request(self, request: Any) -> Any:
        """Answer one request from an async client."""
        reply = self._serve(request, await request.aread())
        if self.latency > 0:
            await anyio.sleep(self.latency)
        lib = library_of(request)
        content: bytes | AsyncIterator[bytes] = (
            reply.content if reply.events is None else self._aiter_events(lib, reply)
        )
        return _build_response(lib, reply, content)

    def close(self) -> None:
        """Nothing to release; the upstream stays usable (clients sharing it close it too)."""

    async def aclose(self) -> None:
        """Nothing to release; the upstream stays usable (clients sharing it close it too)."""

    def __enter__(self) -> FakeUpstream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> FakeUpstream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

    # -- internals ------------------------------------------------------------------------------

    def _iter_events(self, lib: ModuleType, reply: _Reply) -> Iterator[bytes]:
        for chunk in reply.events or ():
            if self.chunk_delay > 0:
                time.sleep(self.chunk_delay)
            yield chunk
        if reply.disconnect:
            raise lib.RemoteProtocolError(_DISCONNECT)

    async def _aiter_events(self, lib: ModuleType, reply: _Reply) -> AsyncIterator[bytes]:
        for chunk in reply.events or ():
            if self.chunk_delay > 0:
                await anyio.sleep(self.chunk_delay)
            yield chunk
        if reply.disconnect:
            raise lib.RemoteProtocolError(_DISCONNECT)

    def _serve(self, request: Any, body: bytes) -> _Reply:
        method = str(request.method).upper()
        url = str(request.url)
        headers = {key.lower(): value for key, value in request.headers.items()}
        recorded = RecordedRequest(method, url, headers, body)
        path = recorded.path.rstrip("/")
        with self._lock:
            self._calls += 1
            self._requests.append(recorded)
            scripted = self._scripted.popleft() if self._scripted else None
        endpoint = _endpoint(method, path)
        dialect = _dialect_of(endpoint, headers)
        if scripted is not None:
            return _scripted_reply(scripted, dialect, body)
        if endpoint is None:
            return _error(dialect, 404, _not_found_message(dialect, method, path))
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _error(dialect, 400, _BAD_JSON[dialect])
        if not isinstance(payload, dict):
            return _error(dialect, 400, _BAD_JSON[dialect])
        problem = _validate(endpoint, payload)
        if problem is not None:
            return _error(dialect, 400, problem)
        if endpoint == "count_tokens":
            return _json_reply("anthropic", {"input_tokens": _input_tokens(endpoint, payload)})
        stream_break = None
        if payload.get("stream") is True:
            with self._lock:
                stream_break = self._stream_breaks.popleft() if self._stream_breaks else None
        return _RENDERERS[endpoint](payload, _plan(endpoint, payload), str(request.url.host), stream_break)


# ---------------------------------------------------------------------------------------------
# Routing and validation


def _endpoint(method: str, path: str) -> str | None:
    if method != "POST":
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


def _dialect_of(endpoint: str | None, headers: Mapping[str, str]) -> Dialect:
    if endpoint in ("messages", "count_tokens"):
        return "anthropic"
    if endpoint in ("chat", "responses"):
        return "openai"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


def _validate(endpoint: str, payload: dict[str, Any]) -> str | None:
    if not isinstance(payload.get("model"), str):
        return "model: Field required"
    if endpoint in ("messages", "count_tokens", "chat") and not isinstance(payload.get("messages"), list):
        return "messages: Field required"
    if endpoint == "messages" and not isinstance(payload.get("max_tokens"), int):
        return "max_tokens: Field required"
    if endpoint == "responses" and "input" not in payload and "previous_response_id" not in payload:
        return "Missing required parameter: 'input'."
    return None


# ---------------------------------------------------------------------------------------------
# Errors

_DISCONNECT = "peer closed connection without sending complete message body (incomplete chunked read)"

_BAD_JSON: dict[Dialect, str] = {
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


def _error_body(dialect: Dialect, status: int, message: str | None, request_id: str) -> bytes:
    if dialect == "anthropic":
        kind, default = _ANTHROPIC_ERRORS.get(
            status, ("api_error" if status >= 500 else "invalid_request_error", f"HTTP {status}")
        )
        error = {"type": kind, "message": message or default}
        return orjson.dumps({"type": "error", "error": error, "request_id": request_id})
    kind, code, default = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, f"HTTP {status}")
    )
    return orjson.dumps({"error": {"message": message or default, "type": kind, "param": None, "code": code}})


def _error(dialect: Dialect, status: int, message: str) -> _Reply:
    request_id = _request_id(dialect)
    content = _error_body(dialect, status, message, request_id)
    return _Reply(status, _headers(dialect, _JSON, request_id), content)


def _scripted_reply(scripted: _Scripted, dialect: Dialect, body: bytes) -> _Reply:
    request_id = _request_id(dialect)
    content = scripted.body
    if content is None:
        message = scripted.message
        if message is None and dialect == "openai" and scripted.status == 404:
            model = _model_of(body)
            if model is not None:
                message = f"The model `{model}` does not exist or you do not have access to it."
        content = _error_body(dialect, scripted.status, message, request_id)
    headers = dict(_headers(dialect, scripted.content_type or _JSON, request_id))
    headers.update(scripted.headers)
    return _Reply(scripted.status, tuple(headers.items()), content)


def _model_of(body: bytes) -> str | None:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = payload.get("model") if isinstance(payload, dict) else None
    return model if isinstance(model, str) else None


def _not_found_message(dialect: Dialect, method: str, path: str) -> str:
    return "Not Found" if dialect == "anthropic" else f"Invalid URL ({method} {path})"


# ---------------------------------------------------------------------------------------------
# Ids and headers


def _base62(size: int) -> str:
    return "".join(secrets.choice(_BASE62) for _ in range(size))


def _request_id(dialect: Dialect) -> str:
    return "req_011C" + _base62(20) if dialect == "anthropic" else "req_" + uuid.uuid4().hex


def _headers(dialect: Dialect, content_type: str, request_id: str) -> tuple[tuple[str, str], ...]:
    if dialect == "anthropic":
        return (
            ("content-type", content_type),
            ("request-id", request_id),
            ("anthropic-organization-id", _ORGANIZATION_ID),
        )
    return (
        ("content-type", content_type),
        ("x-request-id", request_id),
        ("openai-organization", "user-fakeupstream"),
        ("openai-processing-ms", "1"),
        ("openai-version", "2020-10-01"),
    )


def _header_items(headers: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple((key.lower(), value) for key, value in (headers or {}).items())


def _build_response(lib: ModuleType, reply: _Reply, content: Any) -> Any:
    phrase: str = lib.codes.get_reason_phrase(reply.status)
    return lib.Response(
        reply.status,
        headers=list(reply.headers),
        content=content,
        extensions={"http_version": b"HTTP/1.1", "reason_phrase": phrase.encode("ascii")},
    )


def _json_reply(dialect: Dialect, data: Any) -> _Reply:
    return _Reply(200, _headers(dialect, _JSON, _request_id(dialect)), orjson.dumps(data))


def _stream_reply(
    dialect: Dialect, events: list[bytes], stream_break: _StreamBreak | None, error: bytes
) -> _Reply:
    headers = (*_headers(dialect, _SSE, _request_id(dialect)), ("cache-control", "no-cache"))
    if stream_break is None:
        return _Reply(200, headers, events=tuple(events))
    kept = events[: stream_break.after]
    if stream_break.how == "error":
        return _Reply(200, headers, events=(*kept, error))
    return _Reply(200, headers, events=tuple(kept), disconnect=True)


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# ---------------------------------------------------------------------------------------------
# What to answer (shared by the dialects)


@dataclass(frozen=True)
class _Plan:
    text: str  # the answer's text (a JSON document for structured output); "" for a tool call
    tool_name: str | None
    tool_input: dict[str, Any]
    input_tokens: int
    output_tokens: int
    truncated: bool


_VOLATILE = ("stream", "stream_options")
_PROMPT_FIELDS = {
    "messages": ("system", "messages", "tools", "tool_choice"),
    "count_tokens": ("system", "messages", "tools", "tool_choice"),
    "chat": ("messages", "tools", "tool_choice", "response_format"),
    "responses": ("instructions", "input", "tools", "tool_choice", "text"),
}


def _digest(payload: dict[str, Any]) -> str:
    stable = {key: value for key, value in payload.items() if key not in _VOLATILE}
    return hashlib.sha256(orjson.dumps(stable, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def _input_tokens(endpoint: str, payload: dict[str, Any]) -> int:
    prompt = {key: payload[key] for key in _PROMPT_FIELDS[endpoint] if key in payload}
    return max(1, len(orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS)) // 4)


def _text_of(content: Any) -> str:
    """The plain text of a message's content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in ("text", "input_text")
            and isinstance(part.get("text"), str)
        ]
        return " ".join(parts)
    return ""


def _conversation(endpoint: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if endpoint == "responses":
        items = payload.get("input")
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return [item for item in items or [] if isinstance(item, dict)]
    return [message for message in payload.get("messages") or [] if isinstance(message, dict)]


def _tools(endpoint: str, payload: dict[str, Any]) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for tool in payload.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if endpoint == "messages" and isinstance(tool.get("name"), str) and "input_schema" in tool:
            found.append((tool["name"], tool["input_schema"]))
        elif endpoint == "chat" and tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            function = tool["function"]
            found.append((str(function.get("name")), function.get("parameters") or {}))
        elif endpoint == "responses" and tool.get("type") == "function" and isinstance(tool.get("name"), str):
            found.append((tool["name"], tool.get("parameters") or {}))
    return found


def _forced_tool(endpoint: str, choice: Any) -> tuple[bool, str | None, bool]:
    """(forced, forced tool name or None for "any tool", tools disabled)."""
    if isinstance(choice, str):
        return choice == "required", None, choice == "none"
    if not isinstance(choice, dict):
        return False, None, False
    kind = choice.get("type")
    if endpoint == "messages":
        if kind == "tool":
            return True, choice.get("name"), False
        return kind == "any", None, kind == "none"
    if kind == "function":
        name = choice.get("function", {}).get("name") if endpoint == "chat" else choice.get("name")
        return True, name, False
    return False, None, False


def _output_schema(endpoint: str, payload: dict[str, Any]) -> tuple[bool, Any]:
    """(structured output requested, its JSON schema or None for free-form JSON)."""
    if endpoint == "chat":
        spec = payload.get("response_format")
    elif endpoint == "responses":
        spec = (payload.get("text") or {}).get("format") if isinstance(payload.get("text"), dict) else None
    else:
        config = payload.get("output_config")
        spec = config.get("format") if isinstance(config, dict) else payload.get("output_format")
    if not isinstance(spec, dict):
        return False, None
    if spec.get("type") == "json_object":
        return True, None
    if spec.get("type") == "json_schema":
        schema = spec.get("json_schema", {}).get("schema") if endpoint == "chat" else spec.get("schema")
        return True, schema if isinstance(schema, dict) else {}
    return False, None


def _plan(endpoint: str, payload: dict[str, Any]) -> _Plan:
    digest = _digest(payload)
    input_tokens = _input_tokens(endpoint, payload)
    conversation = _conversation(endpoint, payload)
    user_turns = [item for item in conversation if item.get("role") == "user"]
    last_user = " ".join(_text_of(user_turns[-1].get("content")).split()) if user_turns else ""
    final = conversation[-1] if conversation else {}
    final_user_text = _text_of(final.get("content")) if final.get("role") == "user" else ""

    tools = _tools(endpoint, payload)
    forced, forced_name, disabled = _forced_tool(endpoint, payload.get("tool_choice"))
    if tools and not disabled and (forced or "weather" in final_user_text.lower()):
        name, schema = next(((n, s) for n, s in tools if n == forced_name), tools[0])
        arguments = _example(schema, name, schema)
        tool_input = arguments if isinstance(arguments, dict) else {}
        return _Plan("", name, tool_input, input_tokens, max(1, len(orjson.dumps(tool_input)) // 4), False)

    structured, schema = _output_schema(endpoint, payload)
    if structured:
        document = {"reply": f"Fake reply {digest}"} if schema is None else _example(schema, "reply", schema)
        text = orjson.dumps(document).decode()
        return _Plan(text, None, {}, input_tokens, max(1, len(text) // 4), False)

    snippet = last_user if len(last_user) <= 80 else last_user[:77] + "..."
    words = f"Fake reply {digest} to: {snippet or '(no text)'}".split()
    limit_key = {"messages": "max_tokens", "chat": "max_completion_tokens", "responses": "max_output_tokens"}
    limit = payload.get(limit_key[endpoint])
    if endpoint == "chat" and not isinstance(limit, int):
        limit = payload.get("max_tokens")
    truncated = isinstance(limit, int) and not isinstance(limit, bool) and 0 <= limit < len(words)
    if truncated:
        words = words[:limit]
    return _Plan(" ".join(words), None, {}, input_tokens, max(1, len(words)), truncated)


def _example(schema: Any, name: str, root: Any, depth: int = 0) -> Any:
    """A deterministic value that satisfies the common JSON-schema keywords of ``schema``."""
    if not isinstance(schema, dict) or depth > 12:
        return f"example {name}"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return _example(target, name, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [
                option
                for option in options
                if not (isinstance(option, dict) and option.get("type") == "null")
            ]
            return _example((usable or options)[0], name, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties") or {}
        return {key: _example(value, key, root, depth + 1) for key, value in properties.items()}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [_example(schema.get("items", {}), name, root, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = 1 if low is None else low + (1 if "minimum" not in schema else 0)
        high = schema.get("maximum")
        if high is not None and value > high:
            value = high
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _STRING_FORMATS.get(schema.get("format"), f"example {name}")


_STRING_FORMATS: dict[Any, str] = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


# ---------------------------------------------------------------------------------------------
# Anthropic Messages (anthropic/types/message.py, raw_message_stream_event.py)


def _anthropic_usage(plan: _Plan, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": plan.input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _render_messages(
    payload: dict[str, Any], plan: _Plan, host: str, stream_break: _StreamBreak | None
) -> _Reply:
    del host
    message_id = "msg_01" + _base62(22)
    if plan.tool_name is not None:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": "toolu_01" + _base62(22),
            "name": plan.tool_name,
            "input": plan.tool_input,
        }
        stop_reason = "tool_use"
    else:
        block = {"type": "text", "text": plan.text}
        stop_reason = "max_tokens" if plan.truncated else "end_turn"
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": payload["model"],
        "content": [block],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "stop_details": None,
        "usage": _anthropic_usage(plan, plan.output_tokens),
    }
    if payload.get("stream") is not True:
        return _json_reply("anthropic", message)

    start = {**message, "content": [], "stop_reason": None, "usage": _anthropic_usage(plan, 1)}
    events = [_sse({"type": "message_start", "message": start}, "message_start")]
    if block["type"] == "tool_use":
        opening = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in ["", *_pieces(_dumps(plan.tool_input), _JSON_PIECE)]
        ]
    else:
        opening = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(plan.text, _TEXT_PIECE)]
    events.append(
        _sse({"type": "content_block_start", "index": 0, "content_block": opening}, "content_block_start")
    )
    events.append(_sse({"type": "ping"}, "ping"))
    events.extend(
        _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
        for delta in deltas
    )
    events.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    usage = _anthropic_usage(plan, plan.output_tokens)
    delta_usage = {
        key: usage[key]
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    }
    events.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None, "stop_details": None},
                "usage": delta_usage,
            },
            "message_delta",
        )
    )
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    error = _sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error")
    return _stream_reply("anthropic", events, stream_break, error)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# ---------------------------------------------------------------------------------------------
# OpenAI Chat Completions (openai/types/chat/chat_completion.py, chat_completion_chunk.py)


def _chat_usage(plan: _Plan, host: str) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": plan.input_tokens,
        "completion_tokens": plan.output_tokens,
        "total_tokens": plan.input_tokens + plan.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    if host.endswith("deepseek.com"):  # DeepSeek reports its context cache as hit / miss counts
        usage["prompt_cache_hit_tokens"] = 0
        usage["prompt_cache_miss_tokens"] = plan.input_tokens
    return usage


def _render_chat(
    payload: dict[str, Any], plan: _Plan, host: str, stream_break: _StreamBreak | None
) -> _Reply:
    completion_id = "chatcmpl-" + _base62(29)
    model = payload["model"]
    head: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
    }
    tail = {
        "service_tier": "default",
        "system_fingerprint": "fp_" + hashlib.sha256(model.encode()).hexdigest()[:10],
    }
    call_id = "call_" + _base62(24)
    arguments = _dumps(plan.tool_input)
    finish_reason = "length" if plan.truncated else "stop"
    if plan.tool_name is not None:
        finish_reason = "tool_calls"

    if payload.get("stream") is not True:
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
        if plan.tool_name is not None:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": plan.tool_name, "arguments": arguments},
                }
            ]
        else:
            message["content"] = plan.text
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        return _json_reply("openai", {**head, "choices": [choice], "usage": _chat_usage(plan, host), **tail})

    options = payload.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    chunk_head = {**head, "object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        data = {**chunk_head, **tail, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        return _sse(data)

    if plan.tool_name is not None:
        call = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": plan.tool_name, "arguments": ""},
        }
        events = [chunk({"role": "assistant", "content": None, "tool_calls": [call], "refusal": None})]
        events.extend(
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in _pieces(arguments, _JSON_PIECE)
        )
    else:
        events = [chunk({"role": "assistant", "content": "", "refusal": None})]
        events.extend(chunk({"content": piece}) for piece in _pieces(plan.text, _TEXT_PIECE))
    events.append(chunk({}, finish_reason))
    if include_usage:
        events.append(_sse({**chunk_head, **tail, "choices": [], "usage": _chat_usage(plan, host)}))
    events.append(b"data: [DONE]\n\n")
    error = _sse(
        {
            "error": {
                "message": "The server had an error while processing your request. Sorry about that!",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    )
    return _stream_reply("openai", events, stream_break, error)


# ---------------------------------------------------------------------------------------------
# OpenAI Responses (openai/types/responses/response.py, response_stream_event.py)


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


def _render_responses(
    payload: dict[str, Any], plan: _Plan, host: str, stream_break: _StreamBreak | None
) -> _Reply:
    del host
    response_id = "resp_" + secrets.token_hex(24)
    created = int(time.time())
    status = "incomplete" if plan.truncated else "completed"
    if plan.tool_name is not None:
        item: dict[str, Any] = {
            "id": "fc_" + secrets.token_hex(24),
            "type": "function_call",
            "status": "completed",
            "arguments": _dumps(plan.tool_input),
            "call_id": "call_" + _base62(24),
            "name": plan.tool_name,
        }
    else:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": plan.text}
        item = {
            "id": "msg_" + secrets.token_hex(24),
            "type": "message",
            "status": status,
            "content": [part],
            "role": "assistant",
        }
    text_config = _mapping(payload.get("text"))
    reasoning = _mapping(payload.get("reasoning"))
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if plan.truncated else None,
        "instructions": payload.get("instructions"),
        "max_output_tokens": payload.get("max_output_tokens"),
        "max_tool_calls": payload.get("max_tool_calls"),
        "model": payload["model"],
        "output": [item],
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
        "usage": {
            "input_tokens": plan.input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": plan.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": plan.input_tokens + plan.output_tokens,
        },
        "user": payload.get("user"),
        "metadata": payload.get("metadata") or {},
    }
    if status == "completed":
        response["completed_at"] = created
    if payload.get("stream") is not True:
        return _json_reply("openai", response)

    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(_sse({"type": kind, "sequence_number": len(events), **fields}, kind))

    pending = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    pending.pop("completed_at", None)
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    where = {"item_id": item["id"], "output_index": 0}
    if item["type"] == "function_call":
        emit(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "arguments": ""},
        )
        for piece in _pieces(item["arguments"], _JSON_PIECE):
            emit("response.function_call_arguments.delta", **where, delta=piece)
        emit("response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"])
    else:
        emit(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "content": []},
        )
        emit("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
        for piece in _pieces(plan.text, _TEXT_PIECE):
            emit("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
        emit("response.output_text.done", **where, content_index=0, text=plan.text, logprobs=[])
        emit("response.content_part.done", **where, content_index=0, part=part)
    emit("response.output_item.done", output_index=0, item=item)
    emit("response.incomplete" if plan.truncated else "response.completed", response=response)
    error = _sse(
        {
            "type": "error",
            "code": "server_error",
            "message": "The server had an error while processing your request.",
            "param": None,
            "sequence_number": stream_break.after if stream_break else 0,
        },
        "error",
    )
    return _stream_reply("openai", events, stream_break, error)


_RENDERERS = {"messages": _render_messages, "chat": _render_chat, "responses": _render_responses}

"""Fuzzing the whole transport pipeline: random and mutated requests, random upstream answers.

Every example goes through a real ``httpx2`` client whose transport is ``cachekit.CachingTransport``
(or ``AsyncCachingTransport``) over :class:`cachekit.testing.FakeUpstream`, with a recording
:class:`MemoryStore`. Each example sends one request and then the identical request again, and checks
every response against an oracle written from the documented contract:

1. nothing raises out of cachekit: the caller always gets a response, and what the upstream answered
   (status and body bytes) reaches it unchanged when it is not served from the cache; an exception
   raised by the upstream itself reaches the caller as that very exception;
2. a non-2xx answer is never stored;
3. a bad ``x-cachekit`` / ``x-cachekit-ttl`` value is the caller's error: a 400 from cachekit in the
   endpoint's own error shape, with no upstream call;
4. a 2xx answer is stored at most once, and only when it is a complete answer of its API (a JSON
   document as docs/exact.md defines one: a stop reason, ...); the identical request again is then
   a hit with the same body, unless the entry lacks the usage its form always carries (then a miss);
5. a request that cachekit says depends on server state or live data is a bypass like any other;
6. a Chat stream the caller asked without ``stream_options.include_usage`` goes upstream asking for
   usage (the caller's other stream options kept), and the caller gets the stream without it.

Bodies: random JSON values, valid requests with one mutated field (wrong types, integers beyond 64
bits, NaN-ish strings, lone surrogates, deep nesting), random bytes (invalid UTF-8 too) and empty
bodies, for all three endpoints, with random control headers and random upstream answers.

The bugs this fuzzing found are pinned by the regression tests at the end.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import orjson
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import cachekit
from cachekit.providers import sse
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.fuzzing import fuzz

# -- the system under test: a recording store and a recording upstream ---------------------------


class CountingStore(MemoryStore):
    """A memory store that remembers every write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, bytes]] = []

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        self.writes.append((key, value))
        super().set(key, value, ttl=ttl)


@dataclass(frozen=True)
class Scripted:
    """An answer to impose on the next upstream call (through FakeUpstream's own scripting API)."""

    status: int
    content: bytes | None  # None: FakeUpstream.fail_next, an error body in the endpoint's shape
    content_type: str


@dataclass
class Answer:
    """What the upstream produced for one request."""

    scripted: bool
    status: int = 0
    content_type: str = ""
    chunks: list[bytes] = field(default_factory=list)
    ended: bool = False  # the whole body was produced (always true for in-memory bodies)
    error: BaseException | None = None
    sent: bytes | None = None  # the request body that reached the upstream

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


class _SyncRecording(httpx2.SyncByteStream):
    def __init__(self, inner: Any, answer: Answer) -> None:
        self._inner, self._answer = inner, answer

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._answer.chunks.append(chunk)
            yield chunk
        self._answer.ended = True

    def close(self) -> None:
        self._inner.close()


class _AsyncRecording(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, answer: Answer) -> None:
        self._inner, self._answer = inner, answer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._answer.chunks.append(chunk)
            yield chunk
        self._answer.ended = True

    async def aclose(self) -> None:
        await self._inner.aclose()


class RecordingUpstream(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """FakeUpstream, plus a record of every answer it produced (streamed bodies as they pass)."""

    def __init__(self, script: Scripted | None = None) -> None:
        self.fake = FakeUpstream()
        self.answers: list[Answer] = []
        self._script = script

    def _arm(self) -> bool:
        script, self._script = self._script, None
        if script is None:
            return False
        if script.content is None:
            self.fake.fail_next(script.status)
        else:
            self.fake.respond_next(script.status, script.content, script.content_type)
        return True

    def _record(self, answer: Answer, response: Any, recording: type[Any]) -> Any:
        answer.status = response.status_code
        answer.content_type = response.headers.get("content-type", "")
        if response.is_stream_consumed:  # an in-memory body
            answer.chunks.append(response.content)
            answer.ended = True
        else:
            response.stream = recording(response.stream, answer)
        return response

    def handle_request(self, request: Any) -> Any:
        answer = Answer(scripted=self._arm(), sent=request.read())
        self.answers.append(answer)
        try:
            response = self.fake.handle_request(request)
        except Exception as exc:
            answer.error = exc
            raise
        return self._record(answer, response, _SyncRecording)

    async def handle_async_request(self, request: Any) -> Any:
        answer = Answer(scripted=self._arm(), sent=await request.aread())
        self.answers.append(answer)
        try:
            response = await self.fake.handle_async_request(request)
        except Exception as exc:
            answer.error = exc
            raise
        return self._record(answer, response, _AsyncRecording)


# -- requests --------------------------------------------------------------------------------------

ENDPOINTS: dict[str, tuple[str, dict[str, str]]] = {
    "anthropic": (
        "https://api.anthropic.com/v1/messages",
        {"x-api-key": "sk-ant-fuzz", "anthropic-version": "2023-06-01"},
    ),
    "chat": ("https://api.openai.com/v1/chat/completions", {"authorization": "Bearer sk-fuzz"}),
    "responses": ("https://api.openai.com/v1/responses", {"authorization": "Bearer sk-fuzz"}),
}

_WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def base_body(endpoint: str) -> dict[str, Any]:
    """A small valid request for ``endpoint``."""
    if endpoint == "anthropic":
        return {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
            "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": _WEATHER}],
        }
    if endpoint == "chat":
        return {
            "model": "gpt-4.1-mini",
            "max_tokens": 64,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": _WEATHER}}],
        }
    return {
        "model": "gpt-4.1-mini",
        "max_output_tokens": 64,
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "Hi"}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": _WEATHER}],
    }


MUTABLE_FIELDS: dict[str, list[str]] = {
    "anthropic": ["model", "messages", "max_tokens", "stream", "tools", "system", "tool_choice", "metadata"],
    "chat": ["model", "messages", "max_tokens", "stream", "stream_options", "tools", "tool_choice", "seed"],
    "responses": ["model", "input", "max_output_tokens", "stream", "tools", "instructions", "text"],
}

#: Nesting kept well under orjson's dump limit (254 levels): deeper bodies hit a known bug, pinned
#: by test_deeply_nested_body_does_not_raise below.
SAFE_DEPTH = 200

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=15,
)
surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)


def _nest(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf] if depth % 2 else {"a": leaf}
    return leaf


weird_values = st.one_of(
    json_values,
    st.integers(min_value=2**64, max_value=2**200),  # beyond 64 bits: orjson reads a float
    st.integers(min_value=-(2**200), max_value=-(2**63) - 1),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "1e999", "-0", "0x10", "", " ", "\x00"]),
    st.floats(allow_nan=True, allow_infinity=True),  # NaN and Infinity tokens: not JSON
    surrogates,
    st.text(st.characters(codec="utf-8"), max_size=30),
    st.tuples(st.integers(min_value=1, max_value=SAFE_DEPTH), json_scalars).map(lambda t: _nest(*t)),
)


def encode(value: Any, ascii_only: bool) -> bytes:
    """JSON text as the stdlib writes it: exact big integers, NaN/Infinity tokens, and lone surrogates
    either escaped (``\\ud800``, valid UTF-8 that no strict parser accepts) or raw (invalid UTF-8)."""
    text = json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def mutated_bodies(draw: st.DrawFn, endpoint: str) -> bytes:
    body = base_body(endpoint)
    if draw(st.booleans()):
        body["stream"] = True
    how = draw(st.sampled_from(["set", "set", "delete", "nested", "none", "none"]))
    name = draw(st.sampled_from(MUTABLE_FIELDS[endpoint]))
    if how == "set":
        body[name] = draw(weird_values)
    elif how == "delete":
        body.pop(name, None)
    elif how == "nested":
        turns = body["input" if endpoint == "responses" else "messages"]
        turns[-1][draw(st.sampled_from(["content", "role"]))] = draw(weird_values)
    return encode(body, draw(st.booleans()))


_anything = st.one_of(
    st.builds(encode, json_values, st.booleans()),
    st.builds(encode, st.dictionaries(st.text(max_size=10), json_values, max_size=5), st.booleans()),
    st.binary(max_size=120),
    st.just(b""),
    st.sampled_from([b"\xff\xfe\xfd", b'{"model": "\xc3\x28"}', b"{", b"null", b"[]", b'"x"', b"1e999"]),
)


@st.composite
def bodies(draw: st.DrawFn, endpoint: str) -> bytes:
    """Mostly requests of the endpoint with one mutation (so that many are cacheable), else anything."""
    if draw(st.integers(min_value=0, max_value=4)):
        return draw(mutated_bodies(endpoint))
    return draw(_anything)


CONTENT_TYPES = st.sampled_from(
    [
        *["application/json"] * 8,
        "application/json; charset=utf-8",
        "Application/JSON",
        "text/plain",
        "application/x-www-form-urlencoded",
        None,
    ]
)

_printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
MODES = ["default", "bypass", "refresh", "only-if-cached"]
_random_controls = st.fixed_dictionaries(
    {},
    optional={
        "x-cachekit": st.one_of(
            st.sampled_from([*MODES, "BYPASS", "Refresh", "sometimes", "", " bypass"]), _printable
        ),
        "x-cachekit-ttl": st.one_of(
            st.sampled_from(
                ["60", "3600", "inf", "1e9", "1e308", "1_000", "0", "-5", "nan", "soon", "", "1e-320"]
            ),
            _printable,
        ),
        "x-cachekit-tenant": _printable,
        "x-cachekit-namespace": _printable,
        "x-cachekit-unknown": _printable,
    },
)
_valid_controls = st.fixed_dictionaries(
    {},
    optional={
        "x-cachekit": st.sampled_from(["", *MODES]),
        "x-cachekit-ttl": st.sampled_from(["60", "3600", " 86400 ", "315360000", "1e8", "1_000", "0.5"]),
        "x-cachekit-tenant": _printable,
        "x-cachekit-namespace": _printable,
    },
)
control_headers: st.SearchStrategy[dict[str, str]] = st.one_of(st.just({}), _valid_controls, _random_controls)

STATUSES = [200, 201, 400, 401, 404, 429, 500, 529]
ANSWER_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "text/event-stream; charset=utf-8",
    "text/plain",
    "text/html",
]
scripted_answers = st.one_of(
    st.none(),
    st.builds(
        Scripted,
        st.sampled_from([200, 200, 200, *STATUSES]),
        st.one_of(
            st.none(),
            st.binary(max_size=80),
            st.builds(encode, json_values, st.just(True)),
            st.sampled_from(
                [b'{"type": "message"}', b'{"choices": 3}', b'{"output": []}', b"data: [DONE]\n\n"]
            ),
        ),
        st.sampled_from(ANSWER_TYPES),
    ),
)


@dataclass(frozen=True)
class Case:
    endpoint: str
    body: bytes
    content_type: str | None
    control: dict[str, str]
    script: Scripted | None


@st.composite
def cases(draw: st.DrawFn) -> Case:
    endpoint = draw(st.sampled_from(sorted(ENDPOINTS)))
    return Case(
        endpoint,
        draw(bodies(endpoint)),
        draw(CONTENT_TYPES),
        draw(control_headers),
        draw(scripted_answers),
    )


# -- the oracle ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """What the store holds for the example's request (the oracle's view)."""

    status: int
    body: bytes
    form: str  # "json" or "sse"
    lasting: bool  # its ttl outlives the example for sure
    served: bytes  # what the caller got when it was stored (a Chat stream: without the usage asked for it)
    usage: bool  # the answer carries its usage


_USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')


def carries_usage(form: str, body: bytes) -> bool:
    """Whether a stored answer holds its usage (a document's ``usage`` object; a stream's usage event)."""
    if form == "sse":
        return _USAGE_OBJECT.search(body) is not None
    data = orjson.loads(body)
    return isinstance(data, dict) and isinstance(data.get("usage"), dict)


def include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def wants_usage(endpoint: str, body: dict[str, Any]) -> bool:
    """docs/exact.md: the forms that always carry usage (every document; Messages and Responses streams;
    a Chat stream that set include_usage)."""
    return body.get("stream") is not True or endpoint != "chat" or include_usage(body)


def asks_usage(endpoint: str, body: dict[str, Any]) -> bool:
    """docs/exact.md: a Chat stream without include_usage (whose stream_options is an object, or
    absent) is sent asking for usage."""
    options = body.get("stream_options")
    return (
        endpoint == "chat"
        and body.get("stream") is True
        and not include_usage(body)
        and (options is None or isinstance(options, dict))
    )


def without_usage(stream: bytes) -> bytes:
    """The stream as the caller gets it when cachekit asked for usage on its behalf."""
    stripper = sse.UsageStripper()
    return stripper.feed(stream) + stripper.flush()


def control_problem(headers: httpx2.Headers) -> str | None:
    """What cachekit's pipeline rejects (``_read_control``): a mode outside MODES (an empty header means
    the default), or a ttl header that is not a positive number of seconds up to ten years as Python's
    ``float`` reads it."""
    mode = headers.get("x-cachekit") or "default"
    if mode not in MODES:
        return "x-cachekit must be one of"
    raw = headers.get("x-cachekit-ttl")
    if raw is not None:
        try:
            ttl = float(raw)
        except ValueError:
            return "x-cachekit-ttl must be a positive number"
        if not 0 < ttl <= 315_360_000:  # at most ten years (docs/exact.md)
            return "x-cachekit-ttl must be a positive number"
    return None


def json_object(content_type: str | None, body: bytes) -> dict[str, Any] | None:
    """The request body as cachekit can use it: a JSON object sent as ``application/json``."""
    if content_type is None or content_type.split(";", 1)[0].strip().lower() != "application/json":
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    # Not keyable either (sent as written, uncached): an integer outside the 64-bit range (orjson would
    # read it as a lossy float), or nesting deeper than orjson writes back.
    try:
        orjson.dumps(value)
        json.loads(body, parse_int=_int64)
    except (TypeError, ValueError, RecursionError):
        return None
    return value


def complete_answer(endpoint: str, content: bytes) -> bool:
    """The oracle's reading of docs/exact.md's table of complete answers, per endpoint."""
    data = orjson.loads(content)
    if not isinstance(data, dict) or data.get("error") is not None:
        return False
    if endpoint == "anthropic":
        kept = data.get("type") == "message" and isinstance(data.get("content"), list)
        return kept and data.get("stop_reason") is not None
    if endpoint == "chat":
        choices = data.get("choices")
        return (
            isinstance(choices, list)
            and len(choices) > 0
            and all(
                isinstance(c, dict) and None not in (c.get("message"), c.get("finish_reason"))
                for c in choices
            )
        )
    return data.get("status") == "completed" and isinstance(data.get("output"), list)


def _is_json(content: bytes) -> bool:
    try:
        orjson.loads(content)
    except orjson.JSONDecodeError:
        return False
    return True


def _int64(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise ValueError("beyond 64 bits")
    return value


def lasting_ttl(headers: httpx2.Headers) -> bool:
    raw = headers.get("x-cachekit-ttl")
    return raw is None or float(raw) >= 60


def error_message(endpoint: str, body: bytes) -> str:
    data = orjson.loads(body)
    if endpoint == "anthropic":
        assert data["type"] == "error"
    message: str = data["error"]["message"]
    return message


@dataclass
class World:
    upstream: RecordingUpstream
    store: CountingStore


def check(
    world: World,
    case: Case,
    sent_headers: httpx2.Headers,
    outcome: httpx2.Response | BaseException,
    answers: list[Answer],
    writes: list[tuple[str, bytes]],
    entry: Entry | None,
) -> Entry | None:
    """Check one exchange against the contract; return what the store holds for the request now.

    ``sent_headers`` is a copy of the request's headers taken before sending (cachekit strips its
    control headers from the request object it is given).
    """
    # An exception is only acceptable when the upstream itself raised it (cachekit passes it on).
    if isinstance(outcome, BaseException):
        raised = [a.error for a in answers if a.error is not None]
        if not raised or raised[-1] is not outcome:
            raise outcome
        event(f"upstream raised {type(outcome).__name__}")
        assert writes == []
        return entry
    response = outcome
    tag = response.headers.get("x-cachekit-cache")
    # Control headers never leave the process.
    for sent in world.upstream.fake.requests:
        assert not any(name.startswith("x-cachekit") for name in sent.headers), sent.headers

    problem = control_problem(sent_headers)
    if problem is not None:
        assert response.status_code == 400
        assert tag == "bypass"
        assert answers == []
        assert writes == []
        message = error_message(case.endpoint, response.content)
        assert message.startswith("cachekit: "), message
        assert problem in message, message
        assert response.headers["x-should-retry"] == "false"
        event("bad control header")
        return entry

    mode = sent_headers.get("x-cachekit") or "default"
    body = json_object(sent_headers.get("content-type"), case.body)
    if body is None and mode == "only-if-cached":
        # Never call upstream: a request the cache cannot key is a 504 like any miss.
        assert response.status_code == 504
        assert answers == []
        assert writes == []
        return entry
    stateful = response.headers.get("x-cachekit-bypass-reason", "").startswith(
        ("server-state:", "live-data:")
    )
    if body is None or mode == "bypass" or (tag == "bypass" and stateful):
        # Not a JSON object, a bypass, or a request on server state: sent upstream as it is, never stored.
        assert tag == "bypass"
        [answer] = answers
        assert (response.status_code, response.content) == (answer.status, answer.body)
        assert writes == []
        event("bypass")
        return entry

    streaming = body.get("stream") is True
    if mode != "refresh" and entry is not None:
        same_form = (entry.form == "sse") == streaming
        if wants_usage(case.endpoint, body) and not entry.usage:
            # An entry without usage is never served in a form that always carries it: a miss.
            assert tag == "miss"
            event(f"miss: {entry.form} entry without usage")
        elif tag == "hit" or (same_form and entry.lasting):
            assert tag == "hit"
            assert answers == []
            assert writes == []
            assert response.status_code == entry.status
            if same_form:
                assert response.content == entry.served
            event(f"hit {entry.form} as {'sse' if streaming else 'json'}")
            return entry
        # Otherwise the entry could not be served in this form (a stored document that is no answer of
        # this endpoint, asked for as a stream), or it expired: a miss.
    if mode == "only-if-cached":
        assert response.status_code == 504
        assert tag == "miss"
        assert answers == []
        assert writes == []
        assert "only-if-cached" in error_message(case.endpoint, response.content)
        event("only-if-cached miss")
        return entry

    assert tag == "miss"
    [answer] = answers
    assert answer.ended
    asked = asks_usage(case.endpoint, body)
    assert answer.sent is not None
    sent = orjson.loads(answer.sent)
    options = body.get("stream_options")
    if asked:
        assert sent["stream_options"] == {**(options or {}), "include_usage": True}
    else:
        assert sent.get("stream_options") == options
    media = answer.content_type.split(";", 1)[0].strip().lower()
    rewritten = asked and 200 <= answer.status < 300 and media == "text/event-stream"
    expected = without_usage(answer.body) if rewritten else answer.body
    assert (response.status_code, response.content) == (answer.status, expected)
    if not 200 <= answer.status < 300:
        assert writes == [], f"a {answer.status} answer was stored"
        event(f"miss non-2xx scripted={answer.scripted}")
        return entry
    lasting = lasting_ttl(sent_headers)
    if streaming and media == "text/event-stream":
        assert len(writes) <= 1
        if not answer.scripted:
            assert len(writes) == 1  # a complete stream from the provider is stored
            assert carries_usage("sse", answer.body)  # asked for, when the caller did not
        event(f"miss 2xx sse stored={bool(writes)} usage_asked={asked}")
        if not writes:
            return entry
        return Entry(answer.status, answer.body, "sse", lasting, expected, carries_usage("sse", answer.body))
    if media == "application/json" and _is_json(answer.body) and complete_answer(case.endpoint, answer.body):
        assert len(writes) == 1
        event(f"miss 2xx json stored scripted={answer.scripted}")
        usage = carries_usage("json", answer.body)
        return Entry(answer.status, answer.body, "json", lasting, answer.body, usage)
    assert writes == []
    event("miss 2xx unstorable")
    return entry


# -- drivers ---------------------------------------------------------------------------------------


def _config(store: CountingStore) -> cachekit.CacheConfig:
    return cachekit.CacheConfig(store=store, ledger=False)


def _build(client: httpx2.Client | httpx2.AsyncClient, case: Case) -> httpx2.Request:
    url, credentials = ENDPOINTS[case.endpoint]
    headers = {**credentials, **case.control}
    if case.content_type is not None:
        headers["content-type"] = case.content_type
    return client.build_request("POST", url, content=case.body, headers=headers)


def _outcome(send: Callable[[httpx2.Request], httpx2.Response], request: httpx2.Request) -> Any:
    try:
        return send(request)
    except Exception as exc:
        return exc


def run_sync(case: Case) -> None:
    world = World(RecordingUpstream(case.script), CountingStore())
    transport = cachekit.CachingTransport(world.upstream, cache=_config(world.store))
    with httpx2.Client(transport=transport) as client:
        entry = None
        for _ in range(2):  # the request, then the identical request again
            answers, writes = len(world.upstream.answers), len(world.store.writes)
            request = _build(client, case)
            sent_headers = request.headers.copy()
            outcome = _outcome(client.send, request)
            new_answers, new_writes = world.upstream.answers[answers:], world.store.writes[writes:]
            entry = check(world, case, sent_headers, outcome, new_answers, new_writes, entry)


def run_async(case: Case) -> None:
    world = World(RecordingUpstream(case.script), CountingStore())

    async def main() -> None:
        transport = cachekit.AsyncCachingTransport(world.upstream, cache=_config(world.store))
        async with httpx2.AsyncClient(transport=transport) as client:
            entry = None
            for _ in range(2):
                answers, writes = len(world.upstream.answers), len(world.store.writes)
                request = _build(client, case)
                sent_headers = request.headers.copy()
                outcome: Any
                try:
                    outcome = await client.send(request)
                except Exception as exc:
                    outcome = exc
                new_answers, new_writes = world.upstream.answers[answers:], world.store.writes[writes:]
                entry = check(world, case, sent_headers, outcome, new_answers, new_writes, entry)

    asyncio.run(main())


FUZZ = fuzz(300)


@FUZZ
@given(case=cases())
def test_fuzz_sync_pipeline(case: Case) -> None:
    run_sync(case)


@FUZZ
@given(case=cases())
def test_fuzz_async_pipeline(case: Case) -> None:
    run_async(case)


# -- targeted properties --------------------------------------------------------------------------


@fuzz(60)
@given(
    endpoint=st.sampled_from(sorted(ENDPOINTS)),
    status=st.sampled_from([s for s in STATUSES if s >= 300]),
    content=st.one_of(st.none(), st.binary(max_size=60), st.builds(encode, json_values, st.just(True))),
    content_type=st.sampled_from(ANSWER_TYPES),
    stream=st.booleans(),
)
def test_valid_request_with_error_answer_is_never_stored(
    endpoint: str, status: int, content: bytes | None, content_type: str, stream: bool
) -> None:
    """A valid, cacheable request answered with a non-2xx: passed through as is, never stored, and the
    same request then goes upstream again (and is stored once that answer is a 2xx)."""
    body = base_body(endpoint) | ({"stream": True} if stream else {})
    case = Case(endpoint, orjson.dumps(body), "application/json", {}, Scripted(status, content, content_type))
    world = World(RecordingUpstream(case.script), CountingStore())
    with httpx2.Client(transport=cachekit.CachingTransport(world.upstream, cache=_config(world.store))) as c:
        first = c.send(_build(c, case))
        assert first.status_code == status
        assert first.headers["x-cachekit-cache"] == "miss"
        assert first.content == world.upstream.answers[0].body
        assert world.store.writes == []
        assert len(world.store) == 0
        second = c.send(_build(c, case))
        assert second.status_code == 200
        assert second.headers["x-cachekit-cache"] == "miss"
        assert world.upstream.fake.calls == 2
        assert len(world.store.writes) == 1
        third = c.send(_build(c, case))
        assert third.headers["x-cachekit-cache"] == "hit"
        assert third.content == second.content
        assert world.upstream.fake.calls == 2


@fuzz(60)
@given(
    endpoint=st.sampled_from(sorted(ENDPOINTS)),
    first_streams=st.booleans(),
    script=st.one_of(
        st.none(),
        st.builds(
            Scripted,
            st.sampled_from([200, 201]),
            st.one_of(st.binary(max_size=60), st.builds(encode, json_values, st.just(True))),
            st.sampled_from(["application/json", "text/event-stream; charset=utf-8"]),
        ),
    ),
)
def test_one_entry_serves_both_forms(endpoint: str, first_streams: bool, script: Scripted | None) -> None:
    """``stream`` is not part of the key: a stored document answers a streamed request and a stored
    stream a plain one. A provider's own answer always converts (a hit); a 2xx answer of the wrong shape
    may not, and is then a miss that goes upstream, never an exception."""
    body = base_body(endpoint)
    first, second = ({**body, "stream": s} for s in (first_streams, not first_streams))
    world = World(RecordingUpstream(script), CountingStore())
    transport = cachekit.CachingTransport(world.upstream, cache=_config(world.store))
    entry = None
    with httpx2.Client(transport=transport) as client:
        for sent in (first, second):
            case = Case(endpoint, orjson.dumps(sent), "application/json", {}, script)
            request = _build(client, case)
            headers = request.headers.copy()
            answers, writes = len(world.upstream.answers), len(world.store.writes)
            outcome = _outcome(client.send, request)
            new_answers, new_writes = world.upstream.answers[answers:], world.store.writes[writes:]
            entry = check(world, case, headers, outcome, new_answers, new_writes, entry)
    assert entry is not None or script is not None
    if script is None:
        assert outcome.headers["x-cachekit-cache"] == "hit"
        assert world.upstream.fake.calls == 1
        media = "text/event-stream" if second["stream"] else "application/json"
        assert outcome.headers["content-type"].startswith(media)


@fuzz(40)
@given(
    method=st.sampled_from(["GET", "PUT", "DELETE", "POST"]),
    path=st.sampled_from(["/v1/models", "/v1/embeddings", "/v1/messages/batches", "/v1/files"]),
    control=control_headers,
    body=st.binary(max_size=40),
)
def test_unrouted_requests_pass_through(method: str, path: str, control: dict[str, str], body: bytes) -> None:
    """Requests cachekit does not cache are never validated or stored; their control headers are still
    stripped."""
    world = World(RecordingUpstream(), CountingStore())
    with httpx2.Client(transport=cachekit.CachingTransport(world.upstream, cache=_config(world.store))) as c:
        request = c.build_request(method, "https://api.openai.com" + path, content=body, headers=control)
        response = c.send(request)
    [answer] = world.upstream.answers
    assert (response.status_code, response.content) == (answer.status, answer.body) == (404, answer.body)
    assert "x-cachekit-cache" not in response.headers
    assert world.store.writes == []
    [sent] = world.upstream.fake.requests
    assert not any(name.startswith("x-cachekit") for name in sent.headers)


def test_oracle_can_fail() -> None:
    """The oracle is not vacuous: a stored error, a changed body and a missing hit are all caught."""
    case = Case("chat", orjson.dumps(base_body("chat")), "application/json", {}, None)
    world = World(RecordingUpstream(), CountingStore())
    request = httpx2.Headers({"content-type": "application/json"})
    error = Answer(True, 500, "application/json", [b"{}"], ended=True, sent=case.body)
    passed = httpx2.Response(500, headers={"x-cachekit-cache": "miss"}, content=b"{}")
    with pytest.raises(AssertionError, match="500 answer was stored"):
        check(world, case, request, passed, [error], [("k", b"v")], None)
    changed = httpx2.Response(500, headers={"x-cachekit-cache": "miss"}, content=b"{ }")
    with pytest.raises(AssertionError):
        check(world, case, request, changed, [error], [], None)
    stored = Entry(200, b"{}", "json", lasting=True, served=b"{}", usage=True)
    missed = httpx2.Response(200, headers={"x-cachekit-cache": "miss"}, content=b"{}")
    ok = Answer(False, 200, "application/json", [b"{}"], ended=True, sent=case.body)
    with pytest.raises(AssertionError):
        check(world, case, request, missed, [ok], [("k", b"v")], stored)
    with pytest.raises(ZeroDivisionError):
        check(world, case, request, ZeroDivisionError(), [], [], None)


# -- regressions: bugs this fuzzing found (each failed before its fix) ----------------------------


def _send_one(
    endpoint: str,
    content: bytes,
    *,
    is_async: bool,
    control: dict[str, str] | None = None,
    script: Scripted | None = None,
    world: World | None = None,
) -> Any:
    case = Case(endpoint, content, "application/json", control or {}, script)
    world = world or World(RecordingUpstream(script), CountingStore())
    if not is_async:
        with httpx2.Client(
            transport=cachekit.CachingTransport(world.upstream, cache=_config(world.store))
        ) as c:
            return c.send(_build(c, case))

    async def main() -> Any:
        transport = cachekit.AsyncCachingTransport(world.upstream, cache=_config(world.store))
        async with httpx2.AsyncClient(transport=transport) as c:
            return await c.send(_build(c, case))

    return asyncio.run(main())


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("control", [{}, {"x-cachekit": "bypass"}], ids=["default", "bypass"])
@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_deeply_nested_body_does_not_raise(endpoint: str, control: dict[str, str], is_async: bool) -> None:
    body = base_body(endpoint)
    body["metadata"] = _nest(300, 1)
    content = encode(body, True)
    # FakeUpstream cannot parse it either, so a scripted answer stands in for the provider's.
    script = Scripted(200, b'{"ok": true}', "application/json")
    world = World(RecordingUpstream(script), CountingStore())
    response = _send_one(endpoint, content, is_async=is_async, control=control, script=script, world=world)
    assert response.status_code == 200
    assert response.headers["x-cachekit-cache"] == "bypass"  # valid, but not keyable: never stored
    [sent] = world.upstream.fake.requests
    assert sent.body == content  # sent exactly as the caller wrote it
    assert world.store.writes == []


def test_integers_beyond_64_bits_do_not_collide() -> None:
    world = World(RecordingUpstream(), CountingStore())
    with httpx2.Client(transport=cachekit.CachingTransport(world.upstream, cache=_config(world.store))) as c:
        answers = []
        for seed in (2**70, 2**70 + 1):
            body = base_body("chat") | {"seed": seed}
            case = Case("chat", encode(body, True), "application/json", {}, None)
            answers.append(c.send(_build(c, case)))
    # Not keyable faithfully, so not cached at all: each goes upstream with its own number.
    assert [a.headers["x-cachekit-cache"] for a in answers] == ["bypass", "bypass"]
    assert [
        str(seed).encode() in r.body
        for seed, r in zip((2**70, 2**70 + 1), world.upstream.fake.requests, strict=True)
    ] == [True, True]
    assert world.store.writes == []


def test_integers_beyond_64_bits_reach_the_provider_unchanged() -> None:
    world = World(RecordingUpstream(), CountingStore())
    content = encode(base_body("chat") | {"seed": 2**70}, True)
    with httpx2.Client(transport=cachekit.CachingTransport(world.upstream, cache=_config(world.store))) as c:
        c.send(_build(c, Case("chat", content, "application/json", {}, None)))
    [sent] = world.upstream.fake.requests
    assert str(2**70).encode() in sent.body


@pytest.mark.parametrize("content", [b"not json", b"[]", b""])
def test_only_if_cached_never_calls_upstream(content: bytes) -> None:
    response = _send_one("anthropic", content, is_async=False, control={"x-cachekit": "only-if-cached"})
    assert response.status_code == 504

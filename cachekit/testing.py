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
replayed response from a new one. Usage counts are a rough, deterministic token estimate (one token
per 4 bytes of UTF-8, prompt and answer alike), every prompt token billed as uncached. It is the
local backend (:mod:`cachekit.local`) with its scripted engine and no cache accounting; use
:class:`cachekit.local.LocalBackend` for the providers' prompt-caching rules and tiktoken counts.

Answers take the shapes of today's answers, by the scripted engine's rules
(:mod:`cachekit.local.scripted`): tool calls when the request offers tools and its final user
message mentions "weather" or names tools (several calls, after a short text, when it names several
and parallel calls are allowed), or its ``tool_choice`` forces one, with arguments built from each
tool's JSON schema; a thinking block (or reasoning item) first when the request turns reasoning on;
text blocks citing the request's documents when they enable citations; a search and cited pages when
it offers web search; a refusal for Anthropic's documented refusal test string. Structured output
(``response_format`` / ``text.format`` / ``output_config.format`` with a JSON schema) is answered
with a JSON document built from that schema. A ``max_tokens`` / ``max_completion_tokens`` /
``max_output_tokens`` below the answer's length truncates it the way each provider does. For any
other shape, pass ``script=``: a function of the parsed request that returns the answer's blocks
(:class:`cachekit.local.ScriptedEngine`).

The local backend as a pytest fixture
-------------------------------------

:class:`LocalAPI` puts :mod:`cachekit.local` at an application's tests: real SDK clients (plain or
cachekit's drop-ins) on one in-process backend, with the providers' prompt-caching rules, a fresh
memory cache and a cost ledger, offline. The pytest fixture ``local_backend`` yields one per test;
enable it in your ``conftest.py`` with either line::

    from cachekit.testing import local_backend  # noqa: F401  (the fixture, by name)
    pytest_plugins = ["cachekit.testing"]          # or: every fixture of this module

and use it::

    def test_summary_is_cached(local_backend):
        app = App(client=local_backend.anthropic())
        assert app.summarize("text") == app.summarize("text")
        assert local_backend.calls == 1             # the repeat never reached the provider

pytest is only imported when the fixture is asked for: this module works without it.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

import anyio
import httpx2
import orjson

from cachekit import _fork
from cachekit._http import library_of
from cachekit.cache import Cache, CacheLike
from cachekit.clients import drop_in_class
from cachekit.config import CacheConfig
from cachekit.cost.ledger import Ledger, MemorySink
from cachekit.local.backend import LocalBackend
from cachekit.local.scripted import ByteTokenizer, Script, ScriptedEngine
from cachekit.local.transport import LocalTransport, aiter_reply, build_response, iter_reply
from cachekit.local.wire import JSON, Reply, family_for, headers, request_id
from cachekit.pipeline.flights import Signal
from cachekit.providers.error_bodies import status_error, stream_error_event
from cachekit.providers.registry import Family, dialect_of

if TYPE_CHECKING:
    from anthropic import Anthropic, AsyncAnthropic
    from openai import AsyncOpenAI, OpenAI

__all__ = ["FakeUpstream", "Hold", "LocalAPI", "RecordedRequest", "StreamHold", "local_backend"]


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


class Hold:
    """Requests that :class:`FakeUpstream` keeps waiting (see :meth:`FakeUpstream.hold_next`).

    Lets a test line up concurrent callers behind a request that is provably upstream, without
    sleeping: wait for :meth:`arrived`, arrange the rest, then :meth:`release`.
    """

    def __init__(self, times: int) -> None:
        self._lock = _fork.lock(self)
        self._free = times
        self._all_arrived = Signal()
        self._released = Signal()

    def _take(self) -> bool:
        """Hold one more request, if this hold has room for it."""
        with self._lock:
            if self._free == 0:
                return False
            self._free -= 1
            if self._free == 0:
                self._all_arrived.set()
            return True

    def arrived(self, timeout: float | None = None) -> bool:
        """Block until every request this hold is for has arrived; ``False`` on timeout."""
        return self._all_arrived.wait(timeout)

    async def arrived_async(self, timeout: float | None = None) -> bool:
        """:meth:`arrived` for a test running in an event loop."""
        return await self._all_arrived.wait_async(timeout)

    def release(self) -> None:
        """Let the held requests (and any that arrive later) be answered."""
        self._released.set()


class StreamHold:
    """A streamed answer that :class:`FakeUpstream` keeps waiting midway (see
    :meth:`FakeUpstream.hold_next_stream`): the events before the hold are sent, the rest wait.

    Lets a test act while a stream is provably in flight (a client that goes away, a server that
    shuts down) without sleeping: wait for :meth:`reached`, act, then :meth:`release` it, or see the
    consumer give up on it (:meth:`closed`).
    """

    def __init__(self, after: int) -> None:
        self.after = after
        self._reached = Signal()
        self._released = Signal()
        self._closed = Signal()

    def reached(self, timeout: float | None = None) -> bool:
        """Block until the stream has sent its first ``after`` events and waits; ``False`` on timeout."""
        return self._reached.wait(timeout)

    def closed(self, timeout: float | None = None) -> bool:
        """Block until the consumer closed the stream before its end; ``False`` on timeout."""
        return self._closed.wait(timeout)

    def release(self) -> None:
        """Let the rest of the stream go."""
        self._released.set()

    def _wrap(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        ended = False
        try:
            for sent, chunk in enumerate(chunks):
                if sent == self.after:
                    self._reached.set()
                    self._released.wait(None)
                yield chunk
            ended = True
        finally:
            if not ended:
                self._closed.set()
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    async def _awrap(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        ended = False
        try:
            sent = 0
            async for chunk in chunks:
                if sent == self.after:
                    self._reached.set()
                    await self._released.wait_async(None)  # a consumer that gives up cancels this
                sent += 1
                yield chunk
            ended = True
        finally:
            if not ended:
                self._closed.set()
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()


class FakeUpstream(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """An in-process upstream speaking the Anthropic and OpenAI HTTP APIs; a sync *and* async transport.

    Pass it as ``transport=`` to ``httpx.Client`` / ``httpx.AsyncClient`` or their ``httpx2``
    twins (what the official SDKs use): responses are built with the same library as the request.
    One instance may be shared by many clients and threads; closing a client does not close it.

    Args:
        latency: seconds to wait before answering each request (``time.sleep`` in sync clients,
            ``anyio.sleep`` in async ones), to simulate the network.
        chunk_delay: seconds to wait before each chunk of a streamed answer.
        script: answers of the test's own: called with each parsed request (a
            :class:`cachekit.local.Prompt`), it returns the answer's blocks (text with citations,
            tool calls, thinking, a refusal, ...), or ``None`` to answer by the default rules.
    """

    def __init__(
        self, *, latency: float = 0.0, chunk_delay: float = 0.0, script: Script | None = None
    ) -> None:
        self.latency = latency
        self.chunk_delay = chunk_delay
        self._lock = _fork.lock(self)
        self._calls = 0
        self._requests: list[RecordedRequest] = []
        self._scripted: deque[_Scripted] = deque()
        self._stream_breaks: deque[_StreamBreak] = deque()
        self._stream_holds: deque[StreamHold] = deque()
        self._holds: list[Hold] = []
        # The local backend's scripted engine answers; usage is a 4-bytes-per-token estimate and
        # every prompt token is billed as uncached (no provider cache is simulated here). Like the
        # providers it imitates, it announces no caching rules (no x-cachekit-rules header).
        engine = ScriptedEngine(ByteTokenizer(), reply_prefix="Fake reply", script=script)
        # A test double takes any body: tests send fields of their own, and no model name is refused.
        self._backend = LocalBackend(
            engine, rules="none", accept_any_model=True, announce=False, strict_fields=False
        )

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
        """Forget all received requests, drop every queued failure or scripted response, and release
        every hold."""
        with self._lock:
            self._calls = 0
            self._requests.clear()
            self._scripted.clear()
            self._stream_breaks.clear()
            stream_holds, self._stream_holds = list(self._stream_holds), deque()
            holds, self._holds = self._holds, []
        for hold in holds:
            hold.release()
        for stream_hold in stream_holds:
            stream_hold.release()

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
        content_type: str = JSON,
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

    def hold_next_stream(self, *, after: int = 1) -> StreamHold:
        """Keep the next streamed answer waiting after its first ``after`` events, until the returned
        :class:`StreamHold` is released (or the consumer closes the stream). Non-streaming requests
        do not consume it."""
        if after < 0:
            raise ValueError("after must not be negative")
        hold = StreamHold(after)
        with self._lock:
            self._stream_holds.append(hold)
        return hold

    def hold_next(self, times: int = 1) -> Hold:
        """Keep the next ``times`` requests waiting, once received (counted, recorded, their scripted
        reply chosen), until the returned :class:`Hold` is released. Async clients wait without
        blocking their event loop."""
        if times < 1:
            raise ValueError("times must be at least 1")
        hold = Hold(times)
        with self._lock:
            self._holds.append(hold)
        return hold

    # -- transport interface (duck-typed for httpx and httpx2) ----------------------------------

    def handle_request(self, request: Any) -> Any:
        """Answer one request from a sync client."""
        reply, hold = self._serve(request, request.read())
        if hold is not None:
            hold._released.wait(None)
        if self.latency > 0:
            time.sleep(self.latency)
        lib = library_of(request)
        content: bytes | Iterator[bytes] = reply.content
        if reply.events is not None:
            content = iter_reply(lib, reply, self._sync_delay)
            if (stream_hold := self._stream_hold()) is not None:
                content = stream_hold._wrap(content)
        return build_response(lib, reply, content)

    async def handle_async_request(self, request: Any) -> Any:
        """Answer one request from an async client."""
        reply, hold = self._serve(request, await request.aread())
        if hold is not None:
            await hold._released.wait_async(None)
        if self.latency > 0:
            await anyio.sleep(self.latency)
        lib = library_of(request)
        content: bytes | AsyncIterator[bytes] = reply.content
        if reply.events is not None:
            content = aiter_reply(lib, reply, self._async_delay)
            if (stream_hold := self._stream_hold()) is not None:
                content = stream_hold._awrap(content)
        return build_response(lib, reply, content)

    def _stream_hold(self) -> StreamHold | None:
        with self._lock:
            return self._stream_holds.popleft() if self._stream_holds else None

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

    def _sync_delay(self) -> None:
        if self.chunk_delay > 0:
            time.sleep(self.chunk_delay)

    async def _async_delay(self) -> None:
        if self.chunk_delay > 0:
            await anyio.sleep(self.chunk_delay)

    def _serve(self, request: Any, body: bytes) -> tuple[Reply, Hold | None]:
        """The reply to ``request``, and the hold it waits for (if one is pending)."""
        method = str(request.method).upper()
        url = str(request.url)
        headers = {key.lower(): value for key, value in request.headers.items()}
        recorded = RecordedRequest(method, url, headers, body)
        with self._lock:
            self._calls += 1
            self._requests.append(recorded)
            scripted = self._scripted.popleft() if self._scripted else None
            # Holds stay listed until reset() (which releases them), full or not.
            hold = next((hold for hold in self._holds if hold._take()), None)
        return self._reply(request, recorded, scripted), hold

    def _reply(self, request: Any, recorded: RecordedRequest, scripted: _Scripted | None) -> Reply:
        method, headers, body = recorded.method, recorded.headers, recorded.body
        dialect = dialect_of(method, recorded.path)
        if scripted is not None:
            return _scripted_reply(scripted, family_for(dialect, headers), body)
        reply = self._backend.handle(method, recorded.path, headers, body, host=str(request.url.host))
        if reply.events is None or dialect is None:
            return reply
        with self._lock:
            stream_break = self._stream_breaks.popleft() if self._stream_breaks else None
        if stream_break is None:
            return reply
        kept = list(itertools.islice(iter(reply.events), stream_break.after))
        if stream_break.how == "error":
            return replace(reply, events=(*kept, stream_error_event(dialect, stream_break.after)))
        return replace(reply, events=tuple(kept), disconnect=True)


def _scripted_reply(scripted: _Scripted, family: Family, body: bytes) -> Reply:
    rid = request_id(family)
    content = scripted.body
    if content is None:
        message = scripted.message
        if message is None and family == "openai" and scripted.status == 404:
            model = _model_of(body)
            if model is not None:
                message = f"The model `{model}` does not exist or you do not have access to it."
        content = orjson.dumps(status_error(family, scripted.status, message, request_id=rid))
    merged = dict(headers(family, scripted.content_type or JSON, rid))
    merged.update(scripted.headers)
    return Reply(scripted.status, tuple(merged.items()), content)


def _model_of(body: bytes) -> str | None:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = payload.get("model") if isinstance(payload, dict) else None
    return model if isinstance(model, str) else None


def _header_items(headers: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple((key.lower(), value) for key, value in (headers or {}).items())


# -- the local backend for an application's tests ---------------------------------------------------

_Provider = Literal["anthropic", "openai"]


class LocalAPI:
    """SDK clients on one in-process :class:`~cachekit.local.LocalBackend`, for an application's tests.

    What the pytest fixture ``local_backend`` yields (see the module docstring); outside pytest, use it
    as a context manager. Clients made by :meth:`anthropic`, :meth:`openai` and their async twins talk
    to the backend through :attr:`transport` (no sockets, no network, no API key) and never retry.
    The cached ones share one memory cache per provider, priced as that provider's models (the
    backend's answers are billed by its prompt-caching rules) and recorded in :attr:`ledger`.
    :meth:`close` closes what this object made.

    Args:
        backend: the backend that answers; by default a new ``LocalBackend()``: the instant, scripted
            engine under each API's own provider rules. One passed in is the caller's to close.
    """

    #: The base URL of the Anthropic clients; the OpenAI ones use it with ``/v1``.
    base_url = "http://local.test"

    def __init__(self, backend: LocalBackend | None = None) -> None:
        self._owns_backend = backend is None
        self.backend: LocalBackend = backend if backend is not None else LocalBackend()
        #: The httpx/httpx2 transport (sync and async) answering from :attr:`backend`.
        self.transport = LocalTransport(self.backend)
        #: Every call of the cached clients: usage, outcome (``miss``, ``exact_hit``, ...), cost.
        self.ledger = Ledger([MemorySink()])
        self._caches: dict[str, Cache] = {}
        self._clients: list[httpx2.Client] = []
        self._lock = _fork.lock(self)

    @property
    def calls(self) -> int:
        """How many requests reached the backend (an answer from cachekit's cache is not one)."""
        return self.backend.stats.requests

    def cache(self, provider: _Provider) -> Cache:
        """The memory cache that the cached clients of ``provider`` share (made on first use)."""
        with self._lock:
            if provider not in self._caches:
                config = CacheConfig(store="memory://", ledger=self.ledger, price_as=provider)
                self._caches[provider] = Cache(config)
            return self._caches[provider]

    def anthropic(self, *, cache: CacheLike | bool = True, **kwargs: Any) -> Anthropic:
        """An Anthropic client on the backend: ``cachekit.Anthropic`` on :meth:`cache` by default.

        ``cache=False`` gives the plain ``anthropic.Anthropic``; any other value is passed to
        ``cachekit.Anthropic(cache=...)``. ``kwargs`` go to the constructor and override the defaults
        (``api_key``, ``base_url``, ``http_client``, ``max_retries=0``).
        """
        return cast("Anthropic", self._client("Anthropic", cache, kwargs))

    def async_anthropic(self, *, cache: CacheLike | bool = True, **kwargs: Any) -> AsyncAnthropic:
        """:meth:`anthropic` for ``AsyncAnthropic``."""
        return cast("AsyncAnthropic", self._client("AsyncAnthropic", cache, kwargs))

    def openai(self, *, cache: CacheLike | bool = True, **kwargs: Any) -> OpenAI:
        """An OpenAI client on the backend (Chat Completions, Responses); see :meth:`anthropic`."""
        return cast("OpenAI", self._client("OpenAI", cache, kwargs))

    def async_openai(self, *, cache: CacheLike | bool = True, **kwargs: Any) -> AsyncOpenAI:
        """:meth:`openai` for ``AsyncOpenAI``."""
        return cast("AsyncOpenAI", self._client("AsyncOpenAI", cache, kwargs))

    def _client(self, name: str, cache: CacheLike | bool, kwargs: dict[str, Any]) -> Any:
        provider: _Provider = "anthropic" if name.endswith("Anthropic") else "openai"
        kwargs.setdefault("api_key", "sk-local-test")
        kwargs.setdefault("base_url", self.base_url if provider == "anthropic" else self.base_url + "/v1")
        kwargs.setdefault("max_retries", 0)  # a test sees the backend's error at once, not after backoff
        if "http_client" not in kwargs:
            if name.startswith("Async"):
                kwargs["http_client"] = httpx2.AsyncClient(transport=self.transport)
            else:
                kwargs["http_client"] = client = httpx2.Client(transport=self.transport)
                with self._lock:
                    self._clients.append(client)
        if cache is False:
            return getattr(importlib.import_module(provider), name)(**kwargs)
        return drop_in_class(name)(cache=self.cache(provider) if cache is True else cache, **kwargs)

    def close(self) -> None:
        """Close the sync clients, caches and ledger made here, and the backend unless it was passed in.

        Async clients hold no connection to the in-process backend; close them in your test if it
        made them. Safe to call twice.
        """
        with self._lock:
            clients, self._clients = self._clients, []
            caches, self._caches = list(self._caches.values()), {}
        for client in clients:
            client.close()
        for cache in caches:
            cache.close()
        self.ledger.close()
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> LocalAPI:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def local_backend() -> Iterator[LocalAPI]:
    """pytest fixture: a :class:`cachekit.testing.LocalAPI` for one test, closed after it.

    SDK clients on cachekit's offline local backend: ``local_backend.anthropic()``,
    ``local_backend.openai()`` (cachekit drop-ins on a fresh memory cache; ``cache=False`` for the
    plain SDK clients), ``local_backend.calls`` (requests that reached the backend) and
    ``local_backend.ledger`` (the cached calls' usage and cost). To change the backend (another
    engine, a ``ManualClock``), define your own fixture named ``local_backend`` that yields
    ``LocalAPI(LocalBackend(...))``.
    """
    with LocalAPI() as local:
        yield local


# The plain generator is kept under a private name; the public name becomes a pytest fixture on first
# access (__getattr__ below), so that importing this module never imports pytest.
_local_backend = local_backend
del local_backend


@functools.cache
def _fixture() -> Any:
    import pytest  # only here: cachekit.testing must not need pytest

    return pytest.fixture(name="local_backend")(_local_backend)


def __getattr__(name: str) -> Any:
    # The fixture is made on first access (PEP 562), so importing this module never imports pytest.
    if name == "local_backend":
        return _fixture()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # pytest finds a plugin module's fixtures through dir(): list the lazy one too.
    return sorted({*globals(), "local_backend"})

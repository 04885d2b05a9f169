"""The sans-I/O core: what happens to one request, as a generator of effects.

:meth:`Pipeline.exchange` decides everything (route, canonical body, key, lookup, what to store) and
*yields* the I/O it needs as small effect objects; the sync and async transports only perform them
(:mod:`cachekit.transport`). So no decision is written twice, and the whole flow can be tested by
driving the generator by hand.

Effects and what the driver sends back:

* :class:`Send` → the upstream response (an ``httpx``/``httpx2`` response, body not yet read)
* :class:`Load` → the stored bytes or ``None``
* :class:`Save` → ``None``
* :class:`Read` → ``None`` (the response's body is then in ``response.content``)
* :class:`Wait` → ``"landed"``, ``"timeout"``, or ``"own"`` when the caller leads the flight itself
  (:meth:`Flight.wait <cachekit.flights.Flight.wait>` and its async twin decide)
* :class:`Tee` → ``None``; the driver wraps the response's stream so the recorder sees each chunk as it
  passes to the caller (telling ``idle`` whose turn it is), and when the stream ends performs
  ``on_end``'s store write, then ``release``
* :class:`Offload` → what its function returns; the async driver runs it in a worker thread
  (embedding and vector search for the semantic cache)

A driver throws an effect's exception back into the generator; cache-path failures are caught here
(logged, counted, then the request goes upstream) and everything else propagates to the caller.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import orjson

from cachekit import canonical, echo, sse
from cachekit._http import Request, Response, build_response, library_of, rebuild_request
from cachekit._types import CacheOutcome, Dialect, PartitionId
from cachekit.blocks import Block, prompt_blocks
from cachekit.breaker import CircuitBreaker
from cachekit.config import MODES, CacheConfig, Mode
from cachekit.context import UNSET, CallPolicy, current_policy
from cachekit.cost.ledger import Ledger, Outcome
from cachekit.cost.usage import usage_of_body
from cachekit.errors import CacheUnavailableError, CorruptEntryError, StoreError, StoreUnavailableError
from cachekit.flights import Flight, Flights, retry_of
from cachekit.gaps import GAP_KIND, STATS_TTL, Expect, breakpoints_setting
from cachekit.keys import EXACT_KIND, exact_key, key_prefix, partition_for, store_key
from cachekit.lint import PrefixLinter, PrefixLintError, lint_request
from cachekit.planner import Applied, PlanError, Planner, stable_first
from cachekit.providers import (
    CREDENTIAL_HEADERS,
    NO_PROMPT_CACHE,
    PROVIDERS,
    RULES_HEADER,
    HostRules,
    Route,
    error_body,
    incomplete_answer,
    route_request,
    server_state,
)
from cachekit.semantic.base import DimensionMismatchError
from cachekit.semantic.binding import EntryBinding
from cachekit.stores import record

if TYPE_CHECKING:
    from cachekit.semantic.layer import Lookup, SemanticLayer

__all__ = [
    "Effect",
    "Exchange",
    "Load",
    "Offload",
    "Pipeline",
    "PipelineStats",
    "Read",
    "Save",
    "Send",
    "Tee",
    "Wait",
]

logger = logging.getLogger("cachekit.pipeline")
_KNOWN_PROVIDERS = frozenset(provider.name for provider in PROVIDERS)

CONTROL_PREFIX = "x-cachekit"
CACHE_HEADER = "x-cachekit-cache"
#: On a semantic hit: the cosine similarity between the question asked and the one answered.
SIMILARITY_HEADER = "x-cachekit-similarity"
#: On a semantic miss: why similar stored questions were not served (guard reasons, comma-separated).
REFUSED_HEADER = "x-cachekit-semantic-refused"
KEY_HEADER = "x-cachekit-key"
#: On a bypass: why the cache was not used, as short stable tokens (comma-separated when several):
#: ``caller``, ``cache-off``, ``not-keyable``, ``store-unavailable``, ``bad-control``, ``lint``, or
#: what the request depends on outside its body (``server-state:conversation``, ``live-data:web_search``,
#: ...: :mod:`cachekit.providers.state`).
BYPASS_REASON_HEADER = "x-cachekit-bypass-reason"
#: On an answer from upstream: the cache_control markers cachekit added (``where=ttl/reason, ...``), the
#: ``prompt_cache_key`` it set, ``none`` (planned, nothing to place), or ``off; <why>`` (the reasons below).
BREAKPOINTS_HEADER = "x-cachekit-breakpoints"
# Why no breakpoints were planned, as ``x-cachekit-breakpoints: off; <why>`` says it.
_OFF_CONFIG = 'CacheConfig(breakpoints="off")'
_OFF_REQUEST = "x-cachekit-breakpoints: off"
_OFF_NOT_YET = "unknown host: no rules announced yet"
_OFF_UNKNOWN = "unknown host: set price_as"
_OFF_NO_CACHE = "host bills no prompt cache"
_OFF_OPENAI_ELSEWHERE = "price_as=openai: prompt_cache_key goes to OpenAI only"
_OFF_NOT_JSON = "not a JSON object"
_OFF_PLAN_ERROR = "plan error"
_ANTHROPIC_DIALECTS = ("anthropic_messages",)

# Response headers that describe one connection or one client rather than the answer. They are not
# stored: replaying a cookie or a transfer encoding to another caller would be wrong.
_UNSTORED_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",  # the stored body is already decoded
        "set-cookie",
        "proxy-authenticate",
        "proxy-connection",
        "upgrade",
        "trailer",
        "te",
        "age",
        CACHE_HEADER,
        KEY_HEADER,
        BYPASS_REASON_HEADER,
        BREAKPOINTS_HEADER,  # describes one upstream call, not the answer
        REFUSED_HEADER,
    }
)


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` through the inner transport."""

    request: Request


@dataclass(frozen=True, slots=True)
class Load:
    """Read the stored value under ``key``."""

    key: str


@dataclass(frozen=True, slots=True)
class Save:
    """Store ``value`` under ``key`` for ``ttl`` seconds."""

    key: str
    value: bytes
    ttl: float | None


@dataclass(frozen=True, slots=True)
class Read:
    """Read ``response``'s whole body."""

    response: Response


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait (at most ``timeout`` seconds) for another request's upstream call to land."""

    flight: Flight
    timeout: float


def _ignore(*_: object) -> None:
    """A :class:`Tee` callback with nothing to do: a stream that no flight follows (``idle``,
    ``release``) or whose store write never happens (``stored``, a bypassed stream)."""


@dataclass(frozen=True, slots=True)
class Tee:
    """Record ``response``'s stream while the caller reads it.

    When the stream ends the driver calls ``on_end`` with the recorder's complete bytes (``None`` if
    the stream was cut, errored, or abandoned), performs the :class:`Save` it returns and reports the
    outcome to ``stored`` (``None`` on success, else the exception), then calls ``release`` whatever
    happened. While it passes, ``idle(True)`` each time a chunk was handed to the caller and
    ``idle(False)`` each time the caller asks for more (a single-flight leader's progress).
    """

    response: Response
    recorder: sse.StreamRecorder
    on_end: Callable[[bytes | None], Save | None]
    release: Callable[[], None]
    stored: Callable[[Exception | None], None]
    idle: Callable[[bool], None] = _ignore


@dataclass(frozen=True, slots=True)
class Offload:
    """Run ``fn`` (CPU-bound or blocking: embedding a question, a vector search) and return its result.

    The sync driver calls it inline; the async driver runs it in a worker thread so the event loop
    never waits on a model.
    """

    fn: Callable[[], Any]


Effect = Send | Load | Save | Read | Wait | Tee | Offload
Exchange = Generator[Effect, Any, Response]


@dataclass(slots=True)
class PipelineStats:
    """Counters of what the response cache did (read them with :meth:`Pipeline.snapshot`)."""

    hits: int = 0
    misses: int = 0
    bypasses: int = 0
    passthroughs: int = 0
    stores: int = 0
    store_errors: int = 0
    #: Store calls skipped without trying (the circuit breaker was open).
    store_skips: int = 0
    semantic_hits: int = 0
    semantic_errors: int = 0
    #: Semantic lookups skipped without trying (the semantic layer's breaker was open).
    semantic_skips: int = 0
    corrupt_entries: int = 0
    #: Requests answered by an identical request's upstream call, after waiting for it (single-flight).
    coalesced: int = 0
    incomplete_streams: int = 0
    #: 2xx JSON documents that were not a complete answer of their dialect (passed on, not stored).
    incomplete_answers: int = 0
    #: Requests that went upstream with markers (or a prompt_cache_key) cachekit added.
    planned: int = 0
    #: Requests whose volatile system blocks were moved after the stable ones (``stable_first``).
    reordered: int = 0
    #: Requests refused before they were sent because lint found volatile content (``lint="raise"``).
    lint_refusals: int = 0
    #: Requests whose breakpoints could not be planned (the caller's markers break the provider's rules).
    plan_errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str) -> None:
        """Increment one counter, thread-safely."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


@dataclass(frozen=True, slots=True)
class _Control:
    """The effective per-request policy after headers, context and config are merged."""

    mode: Mode
    ttl: float | None
    #: The tenant label (for the ledger): the request's own, else the client's configured one.
    tenant: str | None
    namespace: str
    site: str | None
    #: The semantic cache for this request: on, off, or ``None`` (the client's setting).
    semantic: bool | None = None
    semantic_threshold: float | None = None
    #: Plan cache breakpoints (and OpenAI's prompt_cache_key) for this request.
    breakpoints: bool = True
    #: ``x-cachekit-conversation``: the conversation lint compares this request with.
    conversation: str | None = None
    #: The per-request tenant (header, else call site): it narrows the client's partition unless
    #: ``trust_tenant_header`` lets it select one (:func:`cachekit.keys.partition_for`).
    request_tenant: str | None = None
    #: What the caller knows about its traffic (a fixed lifetime, an expected gap): config or header.
    expect: Expect | None = None


def _json_content(request: Request, headers: dict[str, str]) -> bytes | None:
    """The request's JSON body bytes, or ``None`` (not JSON, or a streaming upload we must not read)."""
    if not _is_json(headers.get("content-type")):
        return None
    try:
        content: bytes = request.content
    except Exception:  # a streaming request body (upload) cannot be read without consuming it
        return None
    return content


def _parse_object(content: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or ``None`` when it is not one cachekit can key faithfully.

    Bodies holding an integer beyond 64 bits are refused: orjson reads those as floats, so two
    different requests (``seed`` 2**70 and 2**70+1) would share a key and a re-dumped body would
    change the number sent upstream. Such a request goes upstream byte for byte, uncached.
    """
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    if _has_digit_run(content) and _has_big_int(content):
        return None
    return body


# Nineteen digits in a row may be an integer beyond 64 bits (-2**63 - 1 has 19; or they are just
# digits inside a string: the exact check below tells them apart, and only runs after this cheap scan).
# Digits map to b"1", everything else to b"0", then a substring search: about 12x faster than the
# regex [0-9]{19} on a 40 KB agent request (0.05 ms against 0.63 ms), and every new body pays it.
_DIGITS_AS_ONES = bytes(0x31 if 0x30 <= i <= 0x39 else 0x30 for i in range(256))
_NINETEEN_DIGITS = b"1" * 19


def _has_digit_run(content: bytes) -> bool:
    return _NINETEEN_DIGITS in content.translate(_DIGITS_AS_ONES)


_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


def _has_big_int(content: bytes) -> bool:
    big = False

    def parse_int(text: str) -> int:
        nonlocal big
        value = int(text)
        big = big or not _INT64_MIN <= value <= _UINT64_MAX
        return value

    try:
        json.loads(content, parse_int=parse_int)
    except (ValueError, RecursionError):
        return True  # orjson read it but the standard parser cannot: do not trust either
    return big


class _NotCanonical(Exception):
    """A parsed body that cannot be written back (nesting deeper than orjson writes)."""


#: How many request digests a pipeline remembers (a few hundred bytes each).
_SEEN_SIZE = 4096


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the key needs from a request body, remembered by the digest of its raw bytes."""

    digest: bytes  # SHA-256 of the canonical body without form and opted-out fields
    form: _Form
    model: str


@dataclass(frozen=True, slots=True)
class _Call:
    """One cacheable request, as the steps after routing see it."""

    key: str
    route: Route
    form: _Form
    control: _Control
    model: str
    #: The exact partition (tenant or credential HMAC): it bounds the semantic partition too.
    partition: str = ""
    #: Everything outside the body that the exact key covers (namespace, partition, endpoint, query,
    #: answer-changing headers, the store): the semantic partition covers it too.
    scope: tuple[str, ...] = ()
    #: Binds the semantic index entries this request may be served to its partition.
    binding: EntryBinding | None = None


@dataclass(frozen=True, slots=True)
class _SemanticCall:
    """A semantic lookup that missed, kept to index the fresh answer once it is stored."""

    layer: SemanticLayer
    lookup: Lookup


class _BadControl(ValueError):
    """An ``x-cachekit-*`` header has a value cachekit cannot use."""


def _read_control(headers: dict[str, str], config: CacheConfig, context: CallPolicy) -> _Control:
    mode: str = headers.get(CONTROL_PREFIX) or context.mode or "default"
    if mode not in MODES:
        raise _BadControl(f"x-cachekit must be one of {sorted(MODES - {'default'})}, not {mode!r}")
    ttl = config.ttl if context.ttl is UNSET else context.ttl
    if (raw_ttl := headers.get(CONTROL_PREFIX + "-ttl")) is not None:
        try:
            ttl = float(raw_ttl)
        except ValueError:
            ttl = -1.0
        if not ttl > 0:
            raise _BadControl(f"x-cachekit-ttl must be a positive number of seconds, not {raw_ttl!r}")
    request_tenant = headers.get(CONTROL_PREFIX + "-tenant") or context.tenant or None
    namespace = headers.get(CONTROL_PREFIX + "-namespace") or context.namespace or config.namespace
    semantic, threshold = context.semantic, None
    if (raw_semantic := headers.get(CONTROL_PREFIX + "-semantic")) is not None:
        semantic, threshold = _semantic_header(raw_semantic)
    breakpoints, expect = breakpoints_setting(config.breakpoints)
    if (raw_breakpoints := headers.get(BREAKPOINTS_HEADER)) is not None:
        try:
            breakpoints, expect = breakpoints_setting(raw_breakpoints)
        except ValueError as exc:
            raise _BadControl(f"x-cachekit-breakpoints {exc}") from None
    return _Control(
        mode,  # type: ignore[arg-type]
        ttl,  # type: ignore[arg-type]
        request_tenant or config.tenant,
        namespace,
        context.site,
        semantic,
        threshold,
        breakpoints,
        headers.get(CONTROL_PREFIX + "-conversation") or None,
        request_tenant=request_tenant,
        expect=expect,
    )


def _semantic_header(value: str) -> tuple[bool, float | None]:
    """``x-cachekit-semantic``: ``on``/``off`` (also true/false, yes/no), or a number: a cosine threshold
    in [-1, 1] for this request (which implies on; ``1`` is the strictest threshold, not "true")."""
    word = value.strip().lower()
    if word in ("on", "true", "yes"):
        return True, None
    if word in ("off", "false", "no"):
        return False, None
    try:
        threshold = float(word)
    except ValueError:
        threshold = math.nan
    if not -1.0 <= threshold <= 1.0:
        raise _BadControl(
            f"x-cachekit-semantic must be on, off or a cosine threshold in [-1, 1], not {value!r}"
        )
    return True, threshold


@dataclass(frozen=True, slots=True)
class _Shaped:
    """A request as it goes upstream, and what planning did to it."""

    request: Request
    #: The planner's work, or ``None`` when nothing was planned.
    applied: Applied | None = None
    #: The ``x-cachekit-breakpoints`` value (``None``: an answer that has no breakpoints to speak of).
    breakpoints: str | None = None


def _off(why: str) -> str:
    return f"off; {why}"


def _miss_headers(breakpoints: str | None, semantic: _SemanticCall | None) -> tuple[tuple[str, str], ...]:
    """What cachekit tells about an answer it fetched: the breakpoints it planned (or why none), and
    the guards that refused similar stored questions."""
    headers: list[tuple[str, str]] = []
    if breakpoints is not None:
        headers.append((BREAKPOINTS_HEADER, breakpoints))
    if semantic is not None and semantic.lookup.rejected:
        headers.append((REFUSED_HEADER, ", ".join(sorted(semantic.lookup.rejected))))
    return tuple(headers)


def _reason_header(reason: str | None) -> tuple[tuple[str, str], ...]:
    """The bypass-reason header, on a bypass only."""
    return () if reason is None else ((BYPASS_REASON_HEADER, reason),)


def _bypass_reason(
    config: CacheConfig, dialect: Dialect, control: _Control, seen: _Seen | None, body: dict[str, Any] | None
) -> str | None:
    """Why a request skips the cache, before any key is made (``None``: it may use the cache).

    Bytes already seen were keyed before, so they passed every test here (a request on server state
    is never remembered): only a new body is asked what it depends on.
    """
    if not config.enabled:
        return "cache-off"
    if control.mode == "bypass":
        return "caller"
    if seen is not None:
        return None
    if body is None:
        return "not-keyable"
    return ", ".join(server_state(dialect, body)) or None


def _strip_control_headers(request: Request, headers: dict[str, str]) -> None:
    for name in [n for n in headers if n.startswith(CONTROL_PREFIX)]:
        del request.headers[name]


def _media_type(content_type: str | None) -> str:
    return "" if content_type is None else content_type.split(";", 1)[0].strip().lower()


def _is_json(content_type: str | None) -> bool:
    return _media_type(content_type) == "application/json"


def _is_event_stream(content_type: str | None) -> bool:
    return _media_type(content_type) == "text/event-stream"


def _settle(flight: Flight | None, retry: bool, retry_after: float | None = None) -> None:
    """Record a leader's outcome on its flight (see :meth:`Flight.settle`), if it leads one."""
    if flight is not None:
        flight.settle(retry=retry, retry_after=retry_after)


def _kept_headers(response: Response) -> tuple[tuple[str, str], ...]:
    """The response headers worth replaying (raw names and values, in order)."""
    return tuple(
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in response.headers.raw
        if name.decode("latin-1").lower() not in _UNSTORED_HEADERS
    )


# Fields that choose the *form* of the answer (a stream or one document, usage in the stream or not),
# not the answer: they stay out of the key, so one entry serves both forms.
_FORM_FIELDS = frozenset({"stream", "stream_options"})

JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream; charset=utf-8"


@dataclass(frozen=True, slots=True)
class _Form:
    """The form the caller wants the answer in."""

    streaming: bool
    include_usage: bool

    @classmethod
    def of(cls, dialect: Dialect, body: dict[str, Any]) -> _Form:
        streaming = body.get("stream") is True
        options = body.get("stream_options")
        include_usage = (
            streaming
            and dialect == "openai_chat"
            and isinstance(options, dict)
            and options.get("include_usage") is True
        )
        return cls(streaming, include_usage)


def _in_form(cached: record.CachedResponse, dialect: Dialect, form: _Form) -> record.CachedResponse:
    """``cached`` converted to the form the request wants (stream ↔ document), or as stored.

    Raises :class:`sse.StreamError` when a stored stream cannot be assembled (treated as corrupt).
    """
    if cached.form == "json" and not form.streaming:
        return cached
    if cached.form == "sse" and not form.streaming:
        body, content_type = orjson.dumps(sse.assemble(dialect, cached.body)), JSON_TYPE
    elif cached.form == "json":
        body, content_type = sse.synthesize(dialect, cached.body, include_usage=form.include_usage), SSE_TYPE
    else:
        body, content_type = sse.restream(dialect, cached.body, include_usage=form.include_usage), SSE_TYPE
    headers = tuple((k, v) for k, v in cached.headers if k.lower() != "content-type")
    return replace(
        cached,
        headers=(*headers, ("content-type", content_type)),
        body=body,
        form="sse" if form.streaming else "json",
    )


class Pipeline:
    """The caching decisions for one client (all of its transports share one pipeline)."""

    def __init__(
        self,
        config: CacheConfig,
        *,
        secret: bytes | Callable[[], bytes],
        clock: Callable[[], float] = time.time,
        ledger: Ledger | None = None,
        breaker: CircuitBreaker | None = None,
        flight_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._ledger = ledger
        # A network store's secret is read from the store on first use, not when the client is built:
        # a cache that is down when the application starts must not stop it from starting.
        self._secret: bytes | None = secret if isinstance(secret, bytes) else None
        self._secret_source = secret if callable(secret) else None
        #: Skips the store while it keeps failing (shared by every transport of this pipeline).
        self.breaker = breaker or CircuitBreaker(
            failure_threshold=config.breaker_threshold, cooldown=config.breaker_cooldown
        )
        self._clock = clock
        self._options = canonical.CanonicalOptions(
            tool_order=config.tool_order, normalize_whitespace=config.normalize_whitespace
        )
        self.stats = PipelineStats()
        self._flights = Flights(stale_after=config.coalesce_timeout, clock=flight_clock)
        self._semantic: SemanticLayer | None = None
        self._semantic_lock = threading.Lock()
        self._store_tag: tuple[bytes, str] | None = None
        #: Skips the semantic layer while its index or embedder keeps failing.
        self.semantic_breaker = CircuitBreaker(
            failure_threshold=config.breaker_threshold,
            cooldown=config.breaker_cooldown,
            name="semantic layer",
        )
        if config.semantic:
            self._semantic = self._build_semantic()
        self._credential_headers = CREDENTIAL_HEADERS + tuple(h.lower() for h in config.credential_headers)
        self._seen: dict[bytes, _Seen] = {}
        self._seen_lock = threading.Lock()
        self._plan_salt = os.urandom(16)
        #: Places cache breakpoints on requests going upstream, and learns token ratios from usage.
        self.planner = Planner()
        #: The caching rules that hosts outside the provider table announced (x-cachekit-rules).
        self._hosts = HostRules()
        self._linter = (
            PrefixLinter(
                patterns=config.volatile_patterns,
                on_finding=config.on_lint,
                raise_on=config.lint == "raise",
            )
            if config.lint != "off"
            else None
        )

    # -- the flow ---------------------------------------------------------------------------------

    def exchange(self, request: Request) -> Exchange:
        """Handle one request; see the module docstring for the effects protocol."""
        url = request.url
        route = route_request(request.method, url.scheme, url.host, url.port, url.path)
        # One snapshot of the headers (lower-cased names): each lookup on an httpx Headers object
        # scans and decodes the whole list, and a request needs a dozen lookups.
        headers: dict[str, str] = dict(request.headers.items())
        if route is None:
            _strip_control_headers(request, headers)
            self.stats.add("passthroughs")
            return (yield Send(request))

        try:
            control = _read_control(headers, self.config, current_policy())
        except _BadControl as exc:
            return self._synthetic(
                request, route.dialect, 400, "invalid_request_error", f"cachekit: {exc}", reason="bad-control"
            )
        _strip_control_headers(request, headers)

        content = _json_content(request, headers)
        # A request whose exact bytes were seen before needs no parsing: its canonical digest, form and
        # model are remembered by the digest of those bytes (the hit path's main saving).
        # The dialect is part of what the digest stands for: the same bytes mean other things elsewhere.
        digest = (
            hashlib.sha256(route.dialect.encode() + b"\0" + content).digest() if content is not None else b""
        )
        seen = self._seen.get(digest) if content is not None else None
        body: dict[str, Any] | None = None
        upstream: dict[str, Any] | None = None  # the canonical body, once built
        if seen is None and content is not None:
            body = _parse_object(content)
        if (reason := _bypass_reason(self.config, route.dialect, control, seen, body)) is not None:
            # Not a JSON object (multipart upload, a body we cannot read), the cache is off, the caller
            # asked to bypass, or the answer depends on state outside the request: send it as it is
            # (canonical when it is JSON), never coalesced, never stored.
            if content is not None and (body := body or _parse_object(content)) is not None:
                with contextlib.suppress(_NotCanonical):  # then it goes as the caller wrote it
                    request, _, upstream = self._canonical_request(request, route.dialect, body)
            return (yield from self._uncached(request, route, control, upstream, reason=reason))

        if seen is None:
            parsed = cast("dict[str, Any]", body)  # not None: the branch above took that case
            try:
                request, body_bytes, upstream = self._canonical_request(request, route.dialect, parsed)
            except _NotCanonical:
                # Valid JSON that cannot be keyed (nested deeper than orjson writes): as it is.
                return (yield from self._uncached(request, route, control, reason="not-keyable"))
            seen = self._remember(digest, route.dialect, parsed, body_bytes)
        keyed = self._key(
            request=request, headers=headers, route=route, control=control, body_digest=seen.digest
        )
        if keyed is None:  # the store could not give its secret: no key, so no caching for this call
            return (yield from self._uncached(request, route, control, upstream, reason="store-unavailable"))
        key, partition = keyed
        # Only built for requests that may use the semantic layer: every request passes here.
        scope, binding = (
            self._semantic_scope(request, headers, route, control, partition)
            if self._wants_semantic(control)
            else ((), None)
        )
        call = _Call(key, route, seen.form, control, seen.model, partition, scope, binding)
        flight: Flight | None = None
        semantic: _SemanticCall | None = None
        if control.mode != "refresh":
            answer, flight, semantic = yield from self._from_cache(request, call, body)
            if answer is not None:
                return answer
        elif (layer := self._semantic_for(control)) is not None:
            # A refreshed answer is indexed too (embedding only, no search).
            semantic = (yield from self._semantic_find(layer, request, call, body, search=False))[1]
        if body is None:
            # Known bytes but no stored answer: canonicalize now, since the canonical body is what
            # goes upstream.
            try:
                body = _parse_object(request.content)
                if body is not None:
                    request, _, upstream = self._canonical_request(request, route.dialect, body)
            except BaseException:
                if flight is not None:
                    self._flights.land(key, flight)
                raise
        return (yield from self._fetch(request, call, flight, semantic, upstream))

    def _from_cache(
        self, request: Request, call: _Call, body: dict[str, Any] | None
    ) -> Generator[Effect, Any, tuple[Response | None, Flight | None, _SemanticCall | None]]:
        """The answer from the exact cache, then the semantic one; else ``None``, the flight this
        request now leads (single-flight) and what the semantic layer needs to index the answer."""
        dialect, control, key = call.route.dialect, call.control, call.key
        served, flight = yield from self._find(call, coalesce=control.mode != "only-if-cached")
        if served is not None:
            replayed = self._reechoed(dialect, served, request)
            if replayed is not None:
                return self._replay(request, replayed, key), None, None
            # The echoed prompt could not be put back: answered upstream instead (flight is None).
        semantic: _SemanticCall | None = None
        answer: Response | None = None
        try:
            layer = self._semantic_for(control)
            if layer is not None:
                answer, semantic = yield from self._semantic_find(layer, request, call, body)
        except BaseException:
            if flight is not None:
                self._flights.land(key, flight)
            raise
        if answer is not None:
            if flight is not None:
                flight.settle(retry=False)  # answered: followers look for themselves, at once
                self._flights.land(key, flight)
            return answer, None, None
        if control.mode == "only-if-cached":
            self.stats.add("misses")
            message = "cachekit: not in cache (x-cachekit: only-if-cached)"
            return self._synthetic(request, dialect, 504, "api_error", message), None, None
        return None, flight, semantic

    def _unechoed(self, dialect: Dialect, form: record.BodyForm, body: bytes) -> bytes:
        """``body`` without the prompt fields the provider echoed, when prompts must not be stored."""
        if self.config.store_prompts or not echo.ECHOED_FIELDS[dialect]:
            return body
        return echo.strip_echo(dialect, form, body)

    def _reechoed(
        self, dialect: Dialect, served: record.CachedResponse, request: Request
    ) -> record.CachedResponse | None:
        """A hit with the echoed prompt fields put back from the request (see :mod:`cachekit.echo`),
        or ``None`` when they cannot be (then the request is answered upstream)."""
        if self.config.store_prompts or not echo.ECHOED_FIELDS[dialect]:
            return served
        body = _parse_object(request.content)  # the canonical request: same fields as the original's
        if body is None:
            return served
        try:
            restored = echo.restore_echo(dialect, served.form, served.body, body)
        except (TypeError, ValueError, RecursionError) as exc:  # e.g. nesting deeper than orjson writes
            logger.warning("cannot restore the echoed prompt of a cached answer; going upstream: %s", exc)
            return None
        return replace(served, body=restored)

    # -- the semantic layer ----------------------------------------------------------------------------

    def _build_semantic(self) -> SemanticLayer:
        from cachekit.semantic.layer import SemanticConfig, SemanticLayer

        setting = self.config.semantic
        semantic_config = (
            setting if isinstance(setting, SemanticConfig) else SemanticConfig(enabled=bool(setting))
        )
        return SemanticLayer(semantic_config, store_prompts=self.config.store_prompts)

    @property
    def semantic(self) -> SemanticLayer | None:
        """The semantic layer, once configured or first opted in to (its ``stats`` count its work)."""
        return self._semantic

    def close_semantic(self) -> None:
        """Close the semantic layer's index if it opened one."""
        if self._semantic is not None:
            self._semantic.close()

    def _wants_semantic(self, control: _Control) -> bool:
        """Whether this request uses the semantic layer (header or call site, else the client's setting)."""
        if control.semantic is not None:
            return control.semantic
        layer = self._semantic
        return layer is not None and layer.config.enabled

    def _semantic_for(self, control: _Control) -> SemanticLayer | None:
        """The semantic layer when this request uses it (built on a first opt-in)."""
        if not self._wants_semantic(control):
            return None
        layer = self._semantic
        if layer is None:  # opted in per request or call site on a client without a semantic config
            with self._semantic_lock:
                if self._semantic is None:
                    try:
                        self._semantic = self._build_semantic()
                    except Exception as exc:  # e.g. store_prompts=False: the opt-in is refused, not fatal
                        self.stats.add("semantic_errors")
                        logger.warning("semantic cache unavailable for this client: %s", exc)
                        return None
                layer = self._semantic
        return layer

    def _semantic_scope(
        self, request: Request, headers: dict[str, str], route: Route, control: _Control, partition: str
    ) -> tuple[tuple[str, ...], EntryBinding]:
        """What bounds a semantic partition besides the body: everything else the exact key covers,
        plus an HMAC of the store's secret (partition ids are then unguessable and store-specific);
        and the binding of index entries to this partition, under the same secret."""
        secret = self._secret or b""
        if self._store_tag is None or self._store_tag[0] != secret:  # the secret may be re-read
            self._store_tag = (
                secret,
                hmac.new(secret, b"cachekit/semantic-scope", hashlib.sha256).hexdigest(),
            )
        store_tag = self._store_tag[1]
        scope = (
            control.namespace,
            partition,
            route.base_url,
            request.url.path,
            request.url.query.decode("latin-1"),
            *(f"{name}:{headers.get(name, '')}" for name in route.key_headers),
            store_tag,
        )
        # A hit may only serve an answer of this request's own exact partition.
        return scope, EntryBinding(secret, key_prefix(EXACT_KIND, control.namespace, partition))

    def _semantic_find(
        self,
        layer: SemanticLayer,
        request: Request,
        call: _Call,
        body: dict[str, Any] | None,
        *,
        search: bool = True,
    ) -> Generator[Effect, Any, tuple[Response | None, _SemanticCall | None]]:
        """After an exact miss: the stored answer of a question that means the same, if any.

        Returns the response to serve (or ``None``) and what :meth:`_fetch` needs to index the fresh
        answer. Any failure of the embedder or index is a counted miss, never the caller's error.
        With ``search=False`` (a refresh) only the question is embedded, to index the fresh answer.
        """
        parsed = body if body is not None else _parse_object(request.content)
        binding = call.binding
        if parsed is None or binding is None:
            return None, None
        if not self.semantic_breaker.allow():
            self.stats.add("semantic_skips")
            return None, None
        threshold = call.control.semantic_threshold

        def look() -> Lookup | None:
            prepared = layer.prepare(
                call.route.dialect,
                parsed,
                scope=call.scope,
                options=self._options,
                ignore_fields=self.config.ignore_fields,
            )
            return None if prepared is None else layer.lookup(prepared, binding, threshold, search=search)

        try:
            found: Lookup | None = yield Offload(lambda: layer.run(look))
        except Exception as exc:
            self._semantic_failed("lookup", exc, layer)
            return None, None
        if found is None:
            return None, None
        self.semantic_breaker.success()  # only once the index (or embedder) was actually used
        semantic = _SemanticCall(layer, found)
        hit = found.hit
        if hit is None:
            return None, semantic
        served, failed, source = yield from self._lookup(hit.entry_key, call.route.dialect, call.form)
        if served is None or source is None:
            if not failed:  # the indexed answer expired or was evicted: drop it from the index too
                yield from self._semantic_step(semantic, "forget", hit.entry_key, None)
            return None, semantic
        self.stats.add("semantic_hits")
        logger.debug("semantic hit similarity=%.4f key=%s", hit.similarity, hit.entry_key[-16:])
        self._account(call, source, "semantic_hit")
        replayed = self._reechoed(call.route.dialect, served, request)
        if replayed is None:
            return None, semantic
        extra = ((SIMILARITY_HEADER, f"{hit.similarity:.4f}"),)
        return self._replay(request, replayed, hit.entry_key, "semantic", extra), None

    def _semantic_step(
        self, semantic: _SemanticCall, what: str, entry_key: str, ttl: float | None
    ) -> Generator[Effect, Any, None]:
        """Index a stored answer (``remember``) or drop a stale one (``forget``); failures are counted."""
        layer, found = semantic.layer, semantic.lookup
        if what == "remember":
            action: Callable[[], None] = lambda: layer.remember(found, entry_key, ttl)  # noqa: E731
        else:
            action = lambda: layer.forget(found.request.partition, entry_key)  # noqa: E731
        try:
            yield Offload(action)
        except Exception as exc:
            self._semantic_failed(what, exc, layer)
        else:
            self.semantic_breaker.success()

    def _stream_stored(self, exc: Exception | None, call: _Call, semantic: _SemanticCall | None) -> None:
        """A streamed answer's store write finished: count it and, when stored, index it (in the
        semantic layer's background workers, since this runs in the stream's driver)."""
        self._saved(exc)
        if exc is not None or semantic is None or not self.semantic_breaker.allow():
            return
        layer, found = semantic.layer, semantic.lookup

        def remember() -> None:
            try:
                layer.remember(found, call.key, call.control.ttl)
            except Exception as failure:
                self._semantic_failed("remember", failure, layer)
            else:
                self.semantic_breaker.success()

        layer.submit(remember)  # off the stream's thread or event loop: the index may be remote

    def _semantic_failed(self, what: str, exc: Exception, layer: SemanticLayer) -> None:
        self.semantic_breaker.failure()
        layer.stats.add("errors")
        self.stats.add("semantic_errors")
        if isinstance(exc, DimensionMismatchError):
            logger.error("semantic %s refused: %s", what, exc)
        else:
            logger.warning("semantic %s failed, going on without it: %s: %s", what, type(exc).__name__, exc)

    def _uncached(
        self,
        request: Request,
        route: Route,
        control: _Control,
        upstream: dict[str, Any] | None = None,
        *,
        reason: str,
    ) -> Exchange:
        """Send a request the cache cannot answer (not keyable, cache off, bypassed, store secret
        unavailable, dependent on server state) — unless the caller said never to go upstream. The
        answer says ``reason`` in its bypass header; its cost is still recorded."""
        if control.mode == "only-if-cached":
            self.stats.add("misses")
            message = "cachekit: this request cannot be answered from the cache (x-cachekit: only-if-cached)"
            return self._synthetic(request, route.dialect, 504, "api_error", message)
        self.stats.add("bypasses")
        try:
            shaped = self._shape(request, route, control, None, upstream)
        except PrefixLintError as exc:
            return self._refused(request, route.dialect, exc)
        applied = shaped.applied
        response = yield from self._send(shaped.request, route)
        tagged = self._tag(response, "bypass", None, shaped.breakpoints, reason=reason)
        if not 200 <= response.status_code < 300:
            return tagged
        if applied is not None:
            self.planner.commit(applied)
        if self._ledger is None and (applied is None or not applied.estimate):
            return tagged  # nothing to record or learn: the answer passes untouched
        call = _Call("", route, _Form(False, False), control, "")
        content_type = response.headers.get("content-type")
        if _is_event_stream(content_type):
            # Recorded as it passes, accounted when it ends; nothing is stored.
            status, kept = response.status_code, _kept_headers(response)

            def account(raw: bytes | None) -> None:
                if raw is not None:
                    answer = record.CachedResponse(status, kept, raw, 0.0, "sse")
                    self._account(call, answer, "bypass", applied=applied)

            yield Tee(
                response,
                sse.StreamRecorder(route.dialect),
                on_end=account,
                release=_ignore,
                stored=_ignore,
            )
        elif _is_json(content_type):
            yield Read(response)
            self._account(
                call,
                record.CachedResponse(response.status_code, (), response.content, 0.0),
                "bypass",
                applied=applied,
            )
        return tagged

    def _remember(self, digest: bytes, dialect: Dialect, body: dict[str, Any], body_bytes: bytes) -> _Seen:
        """Work out (and remember by ``digest``) what the key needs from a parsed body."""
        excluded = _FORM_FIELDS | self.config.ignore_fields
        if not excluded.isdisjoint(body):
            # Opted-out and form fields leave the key but still go upstream.
            kept = {k: v for k, v in body.items() if k not in excluded}
            body_bytes = canonical.dumps(canonical.canonicalize(kept, dialect, self._options).body, dialect)
        model = body.get("model")
        seen = _Seen(
            hashlib.sha256(body_bytes).digest(),
            _Form.of(dialect, body),
            model if isinstance(model, str) else "",
        )
        if len(self._seen) >= _SEEN_SIZE:
            with self._seen_lock:  # oldest first: dicts keep insertion order
                for old in list(itertools.islice(self._seen, _SEEN_SIZE // 8)):
                    self._seen.pop(old, None)
        self._seen[digest] = seen
        return seen

    def _find(
        self, call: _Call, *, coalesce: bool
    ) -> Generator[Effect, Any, tuple[record.CachedResponse | None, Flight | None]]:
        """The stored answer, or ``None`` and the flight this request now leads (single-flight)."""
        served, failed, source = yield from self._lookup(call.key, call.route.dialect, call.form)
        if served is not None or not coalesce or failed:
            if source is not None:
                self._hit(call, source)
            return served, None
        return (yield from self._coalesce(call))

    def _coalesce(
        self, call: _Call
    ) -> Generator[Effect, Any, tuple[record.CachedResponse | None, Flight | None]]:
        """Single-flight for a miss: lead the key's flight (``None`` and the flight), or follow it and
        read its answer; ``None, None`` to go upstream alone. See :mod:`cachekit.flights`."""
        key, dialect, form = call.key, call.route.dialect, call.form
        follower = self._flights.follower(key, self.config.coalesce_timeout)
        replacing: Flight | None = None
        while True:
            flight, leading = self._flights.join(key, instead_of=replacing)
            if leading:
                return (yield from self._lead(call, flight))
            step = follower.before(flight)
            if not isinstance(step, str):
                step = follower.after((yield Wait(flight, step)))
            replacing = flight if step == "take over" else None
            if step not in ("read", "give up"):
                continue
            served, failed, source = yield from self._lookup(key, dialect, form)
            if served is not None and source is not None:  # both or neither
                self.stats.add("coalesced")
                self._hit(call, source)
                return served, None
            if step == "give up" or failed or not flight.retry:
                return None, None  # nothing to elect: this request goes upstream on its own
            # The leader failed in a way a retry may fix: join again, where the first to do so leads.

    def _lead(
        self, call: _Call, flight: Flight
    ) -> Generator[Effect, Any, tuple[record.CachedResponse | None, Flight | None]]:
        """Lead ``flight`` after one more look (a leader may have landed between the first look and
        the join)."""
        try:
            served, _, source = yield from self._lookup(call.key, call.route.dialect, call.form)
        except BaseException:
            # Cancelled (or failed) while leading: land now, or followers would wait for nothing.
            self._flights.land(call.key, flight)
            raise
        if served is not None and source is not None:  # both or neither
            flight.settle(retry=False)
            self._flights.land(call.key, flight)
            self._hit(call, source)
            return served, None
        return None, flight

    def _hit(self, call: _Call, source: record.CachedResponse) -> None:
        self.stats.add("hits")
        logger.debug(
            "hit provider=%s dialect=%s key=%s", call.route.provider, call.route.dialect, call.key[-16:]
        )
        self._account(call, source, "exact_hit")

    def _fetch(
        self,
        request: Request,
        call: _Call,
        flight: Flight | None,
        semantic: _SemanticCall | None = None,
        upstream: dict[str, Any] | None = None,
    ) -> Exchange:
        """A miss: go upstream, store a complete 2xx answer, land the flight (if this request leads one)."""
        key, route = call.key, call.route
        handed_off = False
        try:
            self.stats.add("misses")
            yield from self._load_gaps(call, upstream)  # issue 19: the tenant's timing statistics
            try:
                shaped = self._shape(request, route, call.control, call.partition, upstream)
            except PrefixLintError as exc:
                _settle(flight, retry=False)  # the same request would be refused again
                return self._refused(request, route.dialect, exc)
            request, applied, breakpoints = shaped.request, shaped.applied, shaped.breakpoints
            response = yield from self._send(request, route)
            content_type = response.headers.get("content-type")
            if not 200 <= response.status_code < 300:
                # Errors (429, 5xx, 4xx) are never stored; the SDK sees them untouched and retries.
                # Followers elect a new leader when a retry may succeed (after the provider's delay).
                _settle(flight, *retry_of(response.status_code, response.headers))
                return self._tag(response, "miss", key, breakpoints, semantic)
            if applied is not None:
                self.planner.commit(applied)
                yield from self._save_gaps(call, applied)  # issue 19
            if call.form.streaming and _is_event_stream(content_type):
                # The caller reads the stream as it arrives; the recorder keeps a copy and the entry is
                # stored only if the stream reaches its terminator with no error event.
                status, kept = response.status_code, _kept_headers(response)
                yield Tee(
                    response,
                    sse.StreamRecorder(route.dialect),
                    on_end=lambda raw: self._stream_entry(call, status, kept, raw, applied, flight=flight),
                    release=(lambda: self._flights.land(key, flight)) if flight is not None else _ignore,
                    stored=lambda exc: self._stream_stored(exc, call, semantic),
                    idle=flight.idle if flight is not None else _ignore,
                )
                handed_off = True
                if flight is not None:
                    flight.idle(True)  # the caller holds the stream from here; followers watch it
                return self._tag(response, "miss", key, breakpoints, semantic)
            if not _is_json(content_type):
                _settle(flight, retry=False)
                return self._tag(response, "miss", key, breakpoints, semantic)  # not JSON: never stored
            yield Read(response)
            # The answer is in hand: followers read it, or (if it cannot be stored) ask for themselves.
            _settle(flight, retry=False)
            return (
                yield from self._keep_document(
                    request, call, response, applied=applied, breakpoints=breakpoints, semantic=semantic
                )
            )
        finally:
            # A stream's flight lands when the stream ends (see Tee); anything else lands here, whether
            # it succeeded, failed, or was cancelled.
            if flight is not None and not handed_off:
                self._flights.land(key, flight)

    def _keep_document(
        self,
        request: Request,
        call: _Call,
        response: Response,
        *,
        applied: Applied | None,
        breakpoints: str | None,
        semantic: _SemanticCall | None,
    ) -> Exchange:
        """A 2xx JSON answer, read: stored when it is a complete answer of its dialect, accounted
        either way, and returned to the caller."""
        key, route, ttl = call.key, call.route, call.control.ttl
        try:
            document = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            # Labelled JSON but not JSON (a proxy's error page with a 200): passed on, never stored.
            logger.warning("a 2xx answer labelled JSON is not JSON; not stored (key=%s)", key[-16:])
            return self._tag(response, "miss", key, breakpoints, semantic)
        answer = record.CachedResponse(
            status=response.status_code,
            headers=_kept_headers(response),
            body=response.content,
            created_at=self._clock(),
        )
        if (why := incomplete_answer(route.dialect, document)) is not None:
            # A 2xx that is not a complete answer (a gateway's {"error": ...}, a Responses status
            # other than completed): passed on untouched and accounted (it may be paid for),
            # never stored, so the next identical request asks again.
            self.stats.add("incomplete_answers")
            logger.debug("not a complete %s answer (%s); not stored (key=%s)", route.dialect, why, key[-16:])
            self._account(call, answer, None, document, applied=applied)
            return self._tag(response, "miss", key, breakpoints, semantic)
        stored = replace(answer, body=self._unechoed(route.dialect, "json", answer.body))
        if self.breaker.allow():
            try:
                yield Save(key, record.encode(stored), ttl)
                self._saved(None)
            except Exception as exc:  # a failing store must never fail the user's call
                self._saved(exc)
            else:
                if semantic is not None:
                    yield from self._semantic_step(semantic, "remember", key, ttl)
        else:
            self.stats.add("store_skips")
        self._account(call, stored, None, document, applied=applied)
        logger.debug("miss provider=%s dialect=%s key=%s", route.provider, route.dialect, key[-16:])
        return self._replay(request, answer, key, outcome="miss", extra=_miss_headers(breakpoints, semantic))

    def _stream_entry(
        self,
        call: _Call,
        status: int,
        headers: tuple[tuple[str, str], ...],
        raw: bytes | None,
        applied: Applied | None = None,
        *,
        flight: Flight | None = None,
    ) -> Save | None:
        """The store write for a finished stream, or ``None`` when it must not be stored."""
        _settle(flight, retry=raw is None)  # a stream cut short: the leader's followers elect another
        if raw is None:
            self.stats.add("incomplete_streams")
            logger.debug("stream for key=%s ended incomplete or with an error; not stored", call.key[-16:])
            return None
        answer = record.CachedResponse(status, headers, raw, self._clock(), form="sse")
        self._account(call, answer, None, applied=applied)  # paid for whether or not it can be stored
        if not self.breaker.allow():
            self.stats.add("store_skips")
            return None
        entry = replace(answer, body=self._unechoed(call.route.dialect, "sse", raw))
        return Save(call.key, record.encode(entry), call.control.ttl)

    def _account(
        self,
        call: _Call,
        answer: record.CachedResponse,
        outcome: Outcome | None,
        parsed: Any = None,
        *,
        applied: Applied | None = None,
    ) -> None:
        """Record the call's usage and cost in the ledger (a hit records the cost it avoided), and
        teach the token estimator the provider's count for a prompt cachekit estimated (``applied``).

        Streams are accounted from their assembled body, so a streamed and a non-streamed call of
        the same request produce the same record. Never fails the call.
        """
        if self._ledger is None and (applied is None or not applied.estimate):
            return
        try:
            if parsed is not None:
                body: Any = parsed
            elif answer.form == "sse":
                body = sse.assemble(call.route.dialect, answer.body)
            else:
                body = orjson.loads(answer.body)
            if not isinstance(body, dict):
                body = {}
            model = body.get("model")
            provider = self._priced_as(call.route)
            # The usage is normalized once: the ledger's record carries it for the calibration too.
            usage = (
                self._ledger.record_body(
                    provider,
                    call.route.dialect,
                    model if isinstance(model, str) and model else call.model,
                    body,
                    outcome=outcome,
                    tenant=call.control.tenant,
                    site=call.control.site,
                ).usage
                if self._ledger is not None
                else usage_of_body(provider, call.route.dialect, body)
            )
            if applied is not None and applied.estimate and usage.input_total:
                self.planner.estimator.observe(applied.model, applied.estimate, usage.input_total)
        except Exception as exc:
            logger.warning("cost ledger failed to record a call: %s: %s", type(exc).__name__, exc)

    def _send(self, request: Request, route: Route) -> Generator[Effect, Any, Response]:
        """Send a routed request upstream (every path does it here, sync and async alike); the answer
        of a host outside the provider table may announce the caching rules it bills by."""
        response: Response = yield Send(request)
        if route.provider not in _KNOWN_PROVIDERS:
            self._learn_rules(route, response)
        return response

    def _learn_rules(self, route: Route, response: Response) -> None:
        """Remember the rules an unknown host announced; warn once per host that announced none, when
        the caller named no ``price_as`` either and something is lost (planning or prices)."""
        answered = 200 <= response.status_code < 300
        silent = self._hosts.learn(route, response.headers.get(RULES_HEADER), answered=answered)
        wanted = self.config.breakpoints != "off" or self._ledger is not None
        if silent and self.config.price_as is None and wanted:
            logger.warning(
                "cachekit: %s is not a provider cachekit knows and announced no caching rules: its calls "
                "get no cache breakpoints and no price. Name the provider behind it with "
                "CacheConfig(price_as=...), e.g. price_as='anthropic'",
                route.provider,
            )

    def _rules_provider(self, route: Route) -> tuple[str | None, str]:
        """Whose caching rules plan this request, or ``None`` and why not (``x-cachekit-breakpoints:
        off; <why>``). A known provider's own; for a host cachekit does not know (a gateway, a
        compatible server), the ``price_as`` provider's, since only the caller knows what is behind
        it, else the rules the host announced (none yet on the first call: it goes as written).
        OpenAI's ``prompt_cache_key`` goes to OpenAI, or to a host that announced OpenAI's rules."""
        if route.provider in _KNOWN_PROVIDERS:
            return route.provider, ""
        announced = self._hosts.announced(route)
        if self.config.price_as is not None:
            named = self.config.price_as.strip().lower()
            if named == "openai" and announced != "openai":
                return None, _OFF_OPENAI_ELSEWHERE
            return named, ""
        if announced == NO_PROMPT_CACHE:
            return None, _OFF_NO_CACHE
        if announced is not None:
            return announced, ""
        return None, _OFF_UNKNOWN if self._hosts.answered(route) else _OFF_NOT_YET

    def _priced_as(self, route: Route) -> str:
        """Whose price table prices a call: the known provider's, else ``price_as`` (the caller knows
        best), else the rules the host announced, else the host's own name (no price)."""
        if route.provider in _KNOWN_PROVIDERS:
            return route.provider
        if self.config.price_as is not None:
            return self.config.price_as
        announced = self._hosts.announced(route)
        return announced if announced is not None and announced != NO_PROMPT_CACHE else route.provider

    def _plan_partition(self, request: Request, control: _Control) -> str:
        """The planner's and lint's partition for a call without a cache key (bypassed, cache off, store
        down): the cache's partition rules with a per-process salt for the store's secret, so tenants
        and credentials never share their state."""
        return self._partition(request.headers, control, self._plan_salt)

    def _partition(self, headers: Mapping[str, str], control: _Control, secret: bytes) -> PartitionId:
        """The partition of a request (see :func:`cachekit.keys.partition_for`)."""
        return partition_for(
            headers,
            secret=secret,
            credential_headers=self._credential_headers,
            tenant=self.config.tenant,
            share_across_credentials=self.config.share_across_credentials,
            request_tenant=control.request_tenant,
            trust_request_tenant=self.config.trust_tenant_header,
        )

    def _refused(self, request: Request, dialect: Dialect, exc: PrefixLintError) -> Response:
        """``lint="raise"``: the call is answered here with a 400 that names the findings (the SDKs
        raise their BadRequestError, and do not retry); nothing goes upstream."""
        self.stats.add("lint_refusals")
        message = f"cachekit: {exc}"
        return self._synthetic(request, dialect, 400, "invalid_request_error", message, reason="lint")

    def _shape(
        self,
        request: Request,
        route: Route,
        control: _Control,
        partition: str | None,
        body: dict[str, Any] | None = None,
    ) -> _Shaped:
        """The request as it goes upstream: linted, then with cache breakpoints (or OpenAI's
        ``prompt_cache_key``) planned, and the ``x-cachekit-breakpoints`` value that says what was
        planned or why nothing was. A lint error the caller asked to raise propagates; anything else
        that goes wrong here is logged and the request goes as it was."""
        if route.dialect == "anthropic_count_tokens":
            return _Shaped(request)  # counting tokens is not billed: no breakpoints to speak of
        off = "" if control.breakpoints else _OFF_CONFIG if self.config.breakpoints == "off" else _OFF_REQUEST
        if self._linter is None and off:
            return _Shaped(request, breakpoints=_off(off))
        if body is None:
            # Not parsed on the way here (a store-less path): only a JSON body already in memory.
            content = _json_content(request, dict(request.headers.items()))
            body = _parse_object(content) if content is not None else None
        if body is None:
            return _Shaped(request, breakpoints=_off(off or _OFF_NOT_JSON))
        if partition is None:  # a call without a cache key: derived here, only when it is needed
            partition = self._plan_partition(request, control)
        try:
            blocks: tuple[Block, ...] | None = prompt_blocks(route.dialect, body)
        except (TypeError, ValueError):  # not serializable: the provider will refuse it anyway
            return _Shaped(request, breakpoints=_off(off or _OFF_PLAN_ERROR))
        if self._linter is not None:
            try:
                self._linter.check(
                    route.dialect,
                    body,
                    partition=partition.encode(),
                    conversation=control.conversation,
                    blocks=blocks,
                )
            except PrefixLintError:
                raise
            except Exception as exc:
                logger.warning("cachekit lint failed: %s: %s", type(exc).__name__, exc)
        if off:
            return _Shaped(request, breakpoints=_off(off))
        provider, why = self._rules_provider(route)
        if provider is None:
            return _Shaped(request, breakpoints=_off(why))
        try:
            volatile: set[str] = set()
            if self.config.stable_first:
                patterns = self.config.volatile_patterns
                volatile = {f.where for f in lint_request(route.dialect, body, patterns=patterns)}
                reordered = stable_first(route.dialect, body, volatile)
                if reordered is not body:
                    self.stats.add("reordered")
                    body, blocks = reordered, None
                    # The moved blocks' paths changed: find them again in the new order.
                    volatile = {f.where for f in lint_request(route.dialect, body, patterns=patterns)}
                    request = rebuild_request(request, canonical.dumps(body, route.dialect))
            applied = self.planner.apply(
                provider,
                route.dialect,
                body,
                partition=partition.encode(),
                now=self._clock(),
                volatile=volatile,
                blocks=blocks,
                expect=control.expect,
            )
            if not applied.changed:
                return _Shaped(request, applied, applied.header())
            self.stats.add("planned")
            upstream = rebuild_request(request, canonical.dumps(applied.body, route.dialect))
            return _Shaped(upstream, applied, applied.header())
        except PlanError as exc:
            # The provider will refuse the request with its own 400; it goes as the caller wrote it.
            self.stats.add("plan_errors")
            logger.warning("cachekit: no breakpoints planned: %s", exc)
        except Exception as exc:
            self.stats.add("plan_errors")
            logger.warning("cachekit: breakpoint planning failed: %s: %s", type(exc).__name__, exc)
        return _Shaped(request, breakpoints=_off(_OFF_PLAN_ERROR))

    # -- steps --------------------------------------------------------------------------------------

    def _canonical_request(
        self, request: Request, dialect: Dialect, body: dict[str, Any]
    ) -> tuple[Request, bytes, dict[str, Any]]:
        """The request with its canonical body, those bytes, and the canonical body (read-only)."""
        try:
            result = canonical.canonicalize(body, dialect, self._options)
            body_bytes = canonical.dumps(result.body, dialect)
        except (TypeError, ValueError, RecursionError) as exc:  # orjson.JSONEncodeError is a TypeError
            raise _NotCanonical(str(exc)) from exc
        if body_bytes == request.content:
            return request, body_bytes, result.body
        # The canonical body is what goes upstream, so the provider's own prefix cache sees stable bytes.
        return rebuild_request(request, body_bytes), body_bytes, result.body

    def _key(
        self,
        *,
        request: Request,
        headers: dict[str, str],
        route: Route,
        control: _Control,
        body_digest: bytes,
    ) -> tuple[str, str] | None:
        secret = self._current_secret()
        if secret is None:
            return None
        partition = self._partition(headers, control, secret)
        key = exact_key(
            namespace=control.namespace,
            partition=partition,
            method=request.method,
            base_url=route.base_url,
            path=request.url.path,
            query=request.url.query,
            headers=[(name, headers.get(name, "")) for name in route.key_headers],
            body_digest=body_digest,
            secret=secret,
        )
        return key, partition

    def _current_secret(self) -> bytes | None:
        """The store's secret: asked of the store on each request (stores keep it in memory; a network
        store re-checks it now and then, so processes converge on one after the store loses it)."""
        if self._secret_source is None or self._secret is None:
            return self._secret if self._secret is not None else self._load_secret()
        with contextlib.suppress(Exception):  # the store could not check: keep the last known secret
            self._secret = self._secret_source()
        return self._secret

    def _load_secret(self) -> bytes | None:
        """The store's secret, read once; ``None`` while the store cannot give it (counted, and
        raised with ``on_cache_error="raise"``)."""
        if self._secret_source is None:  # pragma: no cover - one of the two is always set
            raise AssertionError("a pipeline needs a secret")
        if not self.breaker.allow():
            self._unavailable("secret", None)
            return None
        try:
            secret = self._secret_source()
        except Exception as exc:
            self._unavailable("secret", exc)
            return None
        self.breaker.success()
        self._secret = secret
        return secret

    def _lookup(
        self, key: str, dialect: Dialect, form: _Form
    ) -> Generator[Effect, Any, tuple[record.CachedResponse | None, bool, record.CachedResponse | None]]:
        """The stored answer under ``key`` in the form this request wants (or ``None``); whether the
        store failed (then the request goes upstream without coalescing: no second lookup); and the
        form of the answer to read its usage from (a JSON document when either form is one, so a
        streamed hit is not re-assembled just for the ledger)."""
        if not self.breaker.allow():
            self._unavailable("lookup", None)
            return None, True, None
        try:
            raw = yield Load(key)
        except Exception as exc:
            self._unavailable("lookup", exc)
            return None, True, None
        self.breaker.success()
        if raw is None:
            return None, False, None
        try:
            stored = record.decode(raw)
            served = _in_form(stored, dialect, form)
        except (CorruptEntryError, sse.StreamError) as exc:
            # Treated as a miss; the fresh answer overwrites it under the same key.
            self.stats.add("corrupt_entries")
            logger.warning("corrupt cache entry %s is ignored and will be overwritten: %s", key[-16:], exc)
            return None, False, None
        return served, False, served if served.form == "json" else stored

    # -- gap memory (issue 19): the planner's timing statistics, kept in the store ------------------

    def _gap_key(self, call: _Call, model: str) -> str:
        return store_key(GAP_KIND, call.control.namespace, call.partition, self.planner.gaps.digest(model))

    def _load_gaps(self, call: _Call, body: dict[str, Any] | None) -> Generator[Effect, Any, None]:
        """Read the partition's timing statistics for the model from the store, once per process, for
        a provider with cache lifetimes to choose. A failing store only means starting from nothing:
        logged, never raised (whatever on_cache_error says), not counted against the store's breaker."""
        model = body.get("model") if body is not None else None
        if not isinstance(model, str) or not model or not call.control.breakpoints:
            return
        provider, _ = self._rules_provider(call.route)
        rules = self.planner.rules(provider, model) if provider is not None else None
        if rules is None or rules.mode != "explicit":
            return
        gaps, partition = self.planner.gaps, call.partition.encode()
        if not gaps.wants_load(partition, model) or not self.breaker.allow():
            return
        try:
            raw = yield Load(self._gap_key(call, model))
        except Exception as exc:
            logger.warning("cache gap statistics not read: %s: %s", type(exc).__name__, exc)
            raw = None
        gaps.loaded(partition, model, raw)

    def _save_gaps(self, call: _Call, applied: Applied) -> Generator[Effect, Any, None]:
        """Write the partition's timing statistics back (when they changed; at most every 30 s)."""
        raw = self.planner.gaps.to_save(call.partition.encode(), applied.model, self._clock())
        if raw is None or not self.breaker.allow():
            return
        try:
            yield Save(self._gap_key(call, applied.model), raw, STATS_TTL)
        except Exception as exc:
            logger.warning("cache gap statistics not saved: %s: %s", type(exc).__name__, exc)

    def _unavailable(self, what: str, exc: Exception | None) -> None:
        """The store could not be asked (``exc``) or was skipped (breaker open) before going upstream.

        With ``on_cache_error="raise"`` this raises, so the call fails before any money is spent.
        """
        if exc is None:
            self.stats.add("store_skips")
        else:
            self._report(exc)
            self.stats.add("store_errors")
            logger.warning(
                "cache %s failed, going on without the cache: %s: %s", what, type(exc).__name__, exc
            )
        if self.config.on_cache_error == "raise":
            reason = "its circuit breaker is open" if exc is None else f"{type(exc).__name__}: {exc}"
            raise CacheUnavailableError(f"cache {what} failed ({reason}); on_cache_error='raise'") from exc

    def _report(self, exc: Exception) -> None:
        """Tell the breaker about a failed store call: only a backend that did not answer counts.

        An error *reply* (Redis out of memory under ``noeviction``, a refused write) means the store is
        up: its reads still work, so they must not be skipped.
        """
        if isinstance(exc, StoreError) and not isinstance(exc, StoreUnavailableError):
            self.breaker.success()
        else:
            self.breaker.failure()

    def _saved(self, exc: Exception | None) -> None:
        """The outcome of a store write. A failed write is logged and counted, never raised: the
        caller already has (and has paid for) the fresh answer."""
        if exc is None:
            self.breaker.success()
            self.stats.add("stores")
            return
        self._report(exc)
        self.stats.add("store_errors")
        logger.warning("cache store failed, the answer is not cached: %s: %s", type(exc).__name__, exc)

    # -- responses ----------------------------------------------------------------------------------

    def _replay(
        self,
        request: Request,
        cached: record.CachedResponse,
        key: str,
        outcome: CacheOutcome = "hit",
        extra: tuple[tuple[str, str], ...] = (),
    ) -> Response:
        headers = [*cached.headers, (CACHE_HEADER, outcome), (KEY_HEADER, key[-16:]), *extra]
        if outcome in ("hit", "semantic"):
            headers.append(("age", str(max(0, int(self._clock() - cached.created_at)))))
        return build_response(library_of(request), cached.status, headers, cached.body)

    def _tag(
        self,
        response: Response,
        outcome: CacheOutcome,
        key: str | None,
        breakpoints: str | None = None,
        semantic: _SemanticCall | None = None,
        *,
        reason: str | None = None,
    ) -> Response:
        response.headers[CACHE_HEADER] = outcome
        if key is not None:
            response.headers[KEY_HEADER] = key[-16:]
        for name, value in (*_miss_headers(breakpoints, semantic), *_reason_header(reason)):
            response.headers[name] = value
        return response

    def _synthetic(
        self,
        request: Request,
        dialect: Dialect,
        status: int,
        error_type: str,
        message: str,
        *,
        reason: str | None = None,
    ) -> Response:
        """An answer made here: a 504 miss (only-if-cached), or a refusal that bypasses the cache for
        ``reason`` (a bad control header, lint)."""
        # x-should-retry: false stops the SDKs from retrying an answer that cannot change.
        headers = [
            ("content-type", "application/json"),
            ("x-should-retry", "false"),
            (CACHE_HEADER, "bypass" if reason is not None else "miss"),
            *_reason_header(reason),
        ]
        content = orjson.dumps(error_body(dialect, error_type, message))
        return build_response(library_of(request), status, headers, content)

"""The proxy: an ASGI app that hands each request to :class:`~cachekit.transport.AsyncCachingTransport`.

A thin front (DESIGN.md, "the proxy"). Each request becomes one httpx2 request to the upstream its
API belongs to; the caching transport decides everything a cachekit client would (controls, shape,
key, exact and semantic lookups, single-flight, store, cost) with the same code, and its answer is
streamed back as it arrives. The proxy itself only:

* routes: Anthropic-shaped requests to ``anthropic_base_url``, OpenAI-shaped ones to
  ``openai_base_url`` (by path, then by headers for paths both APIs have such as ``/v1/models``; the
  prefixes ``/anthropic`` and ``/openai`` say it outright). Paths the pipeline does not cache
  (models, files, batches, ...) go through it untouched and unbuffered (the pipeline passes them on);
* checks proxy-side keys, when configured, answering a missing or wrong one with the provider's own
  401 document, and swaps a proxy key sent as the API key for the upstream key;
* enforces limits (body size, body and upstream time) and answers ``/healthz`` and ``/metrics``;
* cancels the upstream call when the client goes away (the pipeline never stores a cut stream);
* logs one structured line per request: never a prompt, a header value or a credential.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
import orjson

from cachekit import _asgi
from cachekit._asgi import (
    Receive,
    Scope,
    Send,
    check_codings,
    header_dict,
    raw_headers,
    read_body,
    run_lifespan,
    until_disconnected,
)
from cachekit.cache import Cache
from cachekit.config import CacheConfig
from cachekit.cost.ledger import Ledger, LedgerSink, SQLiteSink
from cachekit.errors import ConfigError
from cachekit.pipeline.controls import CACHE_HEADER, CONTROL_PREFIX
from cachekit.providers import CREDENTIAL_HEADERS, Family, dialect_of, family_of
from cachekit.providers.error_bodies import status_error
from cachekit.proxy.config import ProxyConfig
from cachekit.proxy.metrics import ProxyMetrics
from cachekit.stores.base import AsyncStore, Store
from cachekit.stores.keys import credential_fingerprint
from cachekit.transport import AsyncCachingTransport

__all__ = ["PROXY_KEY_HEADER", "ProxyApp", "worker_app"]

logger = logging.getLogger("cachekit.proxy")
access = logging.getLogger("cachekit.proxy.access")

#: Where a client may present its proxy key when it sends its own provider key as its API key. An
#: ``x-cachekit-*`` header: the pipeline removes it before anything goes upstream.
PROXY_KEY_HEADER = CONTROL_PREFIX + "-proxy-key"

# Request headers that describe one connection (RFC 9110 7.6.1), not the request: never forwarded.
_HOP_REQUEST = frozenset(
    {"host", "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "content-length"}
)  # fmt: skip
# Response headers the server writes for its own connection.
_HOP_RESPONSE = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "trailer", "date",
     "server"}
)  # fmt: skip
_FAMILY_PREFIXES: tuple[tuple[str, Family], ...] = (("/anthropic", "anthropic"), ("/openai", "openai"))


@dataclass(frozen=True, slots=True)
class _Target:
    """Where one request goes."""

    family: Family
    api: str  # the metric label: the dialect, or "passthrough"
    url: str
    routed: bool  # a call the pipeline caches (its body is read whole, within the cap)


def _family(path: str, headers: dict[str, str]) -> tuple[Family, str]:
    """The API a request belongs to and its path without the proxy's family prefix (if any)."""
    for prefix, family in _FAMILY_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return family, path[len(prefix) :] or "/"
    dialect = dialect_of("POST", path)
    if dialect is not None:
        return family_of(dialect), path
    # Paths both APIs have (/v1/models, /v1/files, ...): the headers each SDK always sends.
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic", path
    return "openai", path


class ProxyApp:
    """The proxy's ASGI app (see the module docstring).

    ``store`` replaces the store ``config`` names (a store object: the caller's to close), ``sinks`` are
    more cost-ledger sinks, ``transport`` the httpx2 transport that reaches the upstreams (by default
    the one the SDKs would build, with their connection limits and environment proxies), ``metrics`` the
    counters ``/metrics`` serves.
    """

    def __init__(
        self,
        config: ProxyConfig,
        *,
        store: Store | AsyncStore | None = None,
        sinks: Sequence[LedgerSink] = (),
        transport: Any = None,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        self.config = config
        self._store = store
        self._sinks = tuple(sinks)
        self._inner = transport
        self.transport: AsyncCachingTransport | None = None
        self.metrics = metrics if metrics is not None else (ProxyMetrics() if config.metrics else None)
        self._keys = {key.sha256: key for key in config.keys}
        self._timeout = {
            "connect": config.connect_timeout,
            "read": config.upstream_timeout,
            "write": config.upstream_timeout,
            "pool": config.connect_timeout,
        }
        for family in ("anthropic", "openai"):
            if family in config.upstream_keys and not os.environ.get(config.upstream_keys[family]):
                logger.warning(
                    "upstream_keys.%s names $%s, which is empty: proxy keys sent as %s API keys will be "
                    "refused",
                    family,
                    config.upstream_keys[family],
                    family,
                )

    # -- life cycle ------------------------------------------------------------------------------

    def cache_config(self) -> CacheConfig:
        """The cache settings the config asks for (``CACHEKIT_*`` variables fill the rest)."""
        config = self.config
        tenants = dict(config.tenants)
        tenants.update({key.sha256: key.tenant for key in config.keys if key.tenant})
        overrides: dict[str, Any] = {
            "namespace": config.namespace,
            "semantic": config.semantic,
            "lint": config.lint,
            "credential_tenants": tenants,
            # A proxy key is a credential too: its requests get a partition of their own.
            "credential_headers": (PROXY_KEY_HEADER,),
            "ledger": self._ledger(),
        }
        if self._store is not None:
            overrides["store"] = self._store
        elif config.store is not None:
            overrides["store"] = config.store
        if config.ttl is not None:
            overrides["ttl"] = config.ttl
        return CacheConfig.from_env(**overrides)

    def _ledger(self) -> Ledger | bool:
        sinks: list[Any] = list(self._sinks)
        if self.config.ledger:
            sinks.append(SQLiteSink())
        if self.metrics is not None:
            from cachekit.cost.metrics import PrometheusSink

            sinks.append(PrometheusSink(self.metrics.registry))
        return Ledger(sinks) if sinks else False

    async def startup(self) -> None:
        """Build the cache and the upstream transport (in the process that serves: after a fork)."""
        if self.transport is None:
            self.transport = AsyncCachingTransport(
                self._inner, cache=Cache(self.cache_config()), owns_cache=True
            )

    async def shutdown(self) -> None:
        """Close what startup built (the cache's ledger is flushed, its store closed)."""
        if self.transport is not None:
            transport, self.transport = self.transport, None
            await transport.aclose()

    # -- requests --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.startup, self.shutdown)
            return
        if scope["type"] == "websocket":
            # A provider's WebSocket mode (the openai SDK's responses.connect(), Codex) cannot go
            # through the pipeline: a 426 sends the client to HTTP at once, where every layer applies.
            family, _ = _family(scope["path"], header_dict(scope))
            message = "WebSocket mode is not offered through cachekit proxy: send the request over HTTP."
            document = orjson.dumps(status_error(family, 426, message))
            fields = [("content-type", "application/json"), ("x-should-retry", "false")]
            if self.metrics is not None:
                self.metrics.rejected.labels("websocket").inc()
            await _asgi.refuse_websocket(receive, send, 426, fields, document)
            return
        if scope["type"] != "http":
            return
        if self.transport is None:  # served without a lifespan (a bare ASGI host)
            await self.startup()
        path: str = scope["path"]
        if path == "/healthz":
            await self._health(send)
            return
        if path == "/metrics" and self.metrics is not None:
            body, content_type = self.metrics.render()
            await _send_whole(send, 200, [("content-type", content_type)], body)
            return
        await self._proxy(scope, receive, send)

    async def _health(self, send: Send) -> None:
        transport = self.transport
        assert transport is not None
        breaker = transport.cache.pipeline.breaker
        # The breaker opens after repeated store failures: requests are then served uncached.
        state = "ok" if breaker.state == "closed" else "unavailable: serving uncached"
        body = orjson.dumps({"status": "ok", "store": state, "pid": os.getpid()})
        await _send_whole(send, 200, [("content-type", "application/json")], body)

    def _target(self, scope: Scope, headers: dict[str, str]) -> _Target:
        family, path = _family(scope["path"], headers)
        base = self.config.anthropic_base_url if family == "anthropic" else self.config.openai_base_url
        base = base.rstrip("/")
        # The OpenAI SDKs' base URL ends in /v1 and their paths do not repeat it; clients pointed at
        # the proxy's /v1 send /v1/chat/completions: the upstream's own base takes the /v1's place.
        if family == "openai" and (path == "/v1" or path.startswith("/v1/")):
            path = path[3:]
        query: bytes = scope.get("query_string", b"")
        url = base + path + ("?" + query.decode("latin-1") if query else "")
        dialect = dialect_of(scope["method"], path if family == "anthropic" else "/v1" + path)
        routed = dialect is not None
        return _Target(family, dialect if dialect is not None else "passthrough", url, routed)

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        headers = header_dict(scope)
        target = self._target(scope, headers)
        refused = self._authorize(headers, target.family)
        if refused is not None:
            await self._refuse(send, target, "auth", 401, refused)
            return
        forwarded = [(k, v) for k, v in headers.items() if k not in _HOP_REQUEST]
        content: bytes | AsyncIterator[bytes]
        try:
            if target.routed or scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
                content = await read_body(
                    receive, headers, self.config.max_body, _ignore, self.config.body_timeout
                )
            else:
                check_codings(headers)
                content = _stream_body(receive, self.config.body_timeout)
        except _asgi.Disconnected:
            return
        except _asgi.TooLarge:
            await self._refuse(
                send, target, "too_large", 413, "Request exceeds the maximum allowed number of bytes."
            )
            return
        except _asgi.Stalled:
            await self._refuse(send, target, "body_timeout", 408, "The request body did not arrive in time.")
            return
        except _asgi.UnsupportedCoding:
            await self._refuse(
                send, target, "coding", 501, "Transfer codings other than chunked are not implemented."
            )
            return
        request = httpx2.Request(
            scope["method"],
            target.url,
            headers=forwarded,
            content=content,
            extensions={"timeout": self._timeout},
        )
        exchange = _Exchange(self, target, send, started)
        if isinstance(content, bytes):
            # The body is in: from here a client that goes away cancels the upstream call.
            if await until_disconnected(receive, exchange.run(request)):
                exchange.disconnected()
        else:
            await exchange.run(request)

    def _authorize(self, headers: dict[str, str], family: Family) -> str | None:
        """With proxy-side keys: why the request is refused (``None``: it may go on, its headers now
        carrying the upstream key where a proxy key was sent as the API key)."""
        if not self._keys:
            return None
        presented = headers.get(PROXY_KEY_HEADER)
        carrier = None
        if not presented:
            carrier = next((name for name in CREDENTIAL_HEADERS if headers.get(name)), None)
            presented = headers.get(carrier) if carrier is not None else None
        if not presented:
            return "cachekit proxy: a proxy key is required (send it as your API key)"
        fingerprint = credential_fingerprint(presented)
        if not any(hmac.compare_digest(fingerprint, known) for known in self._keys):
            return "cachekit proxy: invalid proxy key"
        if carrier is not None:
            variable = self.config.upstream_keys.get(family)
            upstream = os.environ.get(variable) if variable else None
            if not upstream:
                return f"cachekit proxy: no upstream {family} key is configured for proxy keys"
            scheme = "Bearer " if headers[carrier].strip()[:7].lower() == "bearer " else ""
            headers[carrier] = scheme + upstream
            headers[PROXY_KEY_HEADER] = presented  # the partition is the proxy key's
        return None

    async def _refuse(self, send: Send, target: _Target, reason: str, status: int, message: str) -> None:
        if self.metrics is not None:
            self.metrics.rejected.labels(reason).inc()
        document = status_error(target.family, status, message)
        fields = [("content-type", "application/json"), ("x-should-retry", "false")]
        if status in (408, 413, 501):
            fields.append(("connection", "close"))  # the rest of the body is never read
        await _send_whole(send, status, fields, orjson.dumps(document))
        access.info(
            "%s refused %d (%s)",
            target.api,
            status,
            reason,
            extra={"fields": {"api": target.api, "status": status, "refused": reason}},
        )


class _Exchange:
    """One request's trip upstream and its answer's way back, with its timings."""

    def __init__(self, app: ProxyApp, target: _Target, send: Send, started: float) -> None:
        self.app, self.target, self.send, self.started = app, target, send, started
        self.status = 0
        self.cache = "none"
        self.first_byte: float | None = None
        self.sent = 0
        self.done = False
        self.response: Any = None

    async def run(self, request: Any) -> None:
        app, metrics = self.app, self.app.metrics
        transport = app.transport
        assert transport is not None
        if metrics is not None:
            metrics.in_flight.inc()
        try:
            try:
                response = self.response = await transport.handle_async_request(request)
            except httpx2.TransportError as exc:
                await self._upstream_failed(exc)
                return
            self.status = response.status_code
            self.cache = response.headers.get(CACHE_HEADER, "none")
            await self._answer(response)
            self.done = True
        finally:
            if self.response is not None:
                await self.response.aclose()  # closes the upstream stream: a cut one is never stored
            if metrics is not None:
                metrics.in_flight.dec()
            self._log()

    async def _answer(self, response: Any) -> None:
        if response.is_stream_consumed:
            # Read whole by the pipeline (a JSON answer, a replayed hit): decoded, so sent as plain.
            body: bytes = response.content
            fields = _response_fields(response, drop_encoding=True)
            fields.append(("content-length", str(len(body))))
            await self.send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": raw_headers(fields),
                }
            )
            self._first()
            await self.send({"type": "http.response.body", "body": body})
            self.sent = len(body)
            return
        fields = _response_fields(response, drop_encoding=False)
        await self.send(
            {"type": "http.response.start", "status": response.status_code, "headers": raw_headers(fields)}
        )
        async for chunk in response.aiter_raw():
            if chunk:
                self._first()
                self.sent += len(chunk)
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
        await self.send({"type": "http.response.body", "body": b""})

    def _first(self) -> None:
        if self.first_byte is None:
            self.first_byte = time.perf_counter() - self.started

    async def _upstream_failed(self, exc: Exception) -> None:
        timeout = isinstance(exc, httpx2.TimeoutException)
        status = 504 if timeout else 502
        self.status = status
        if self.app.metrics is not None:
            self.app.metrics.upstream_errors.labels(self.target.api).inc()
        logger.warning("upstream %s failed: %s", self.target.api, type(exc).__name__)
        message = "cachekit proxy: the upstream " + ("timed out" if timeout else "could not be reached")
        document = status_error(self.target.family, status, message)
        await _send_whole(self.send, status, [("content-type", "application/json")], orjson.dumps(document))
        self.done = True

    def disconnected(self) -> None:
        if self.app.metrics is not None:
            self.app.metrics.disconnected(self.target.api)

    def _log(self) -> None:
        elapsed = time.perf_counter() - self.started
        metrics = self.app.metrics
        if metrics is not None and self.status:
            metrics.observe(self.target.api, self.cache, self.status, elapsed, self.first_byte)
        fields = {
            "api": self.target.api,
            "status": self.status,
            "cache": self.cache,
            "ms": round(elapsed * 1000, 3),
            "first_byte_ms": None if self.first_byte is None else round(self.first_byte * 1000, 3),
            "bytes": self.sent,
            "complete": self.done,
        }
        access.info("%s %d %s", self.target.api, self.status, self.cache, extra={"fields": fields})


def _response_fields(response: Any, *, drop_encoding: bool) -> list[tuple[str, str]]:
    skip = _HOP_RESPONSE | ({"content-encoding", "content-length"} if drop_encoding else frozenset())
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in response.headers.raw
        if name.decode("latin-1").lower() not in skip
    ]


def _ignore(_: int) -> None:
    return None


async def _stream_body(receive: Receive, timeout: float) -> AsyncIterator[bytes]:
    """A passthrough request's body, forwarded as it arrives (a file upload is never held whole)."""
    import asyncio

    while True:
        try:
            message = await asyncio.wait_for(receive(), timeout)
        except asyncio.TimeoutError:
            raise httpx2.ReadTimeout("the client's request body stalled") from None
        if message["type"] == "http.disconnect":
            raise httpx2.ReadError("the client went away mid-body")
        chunk: bytes = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _send_whole(send: Send, status: int, fields: list[tuple[str, str]], body: bytes) -> None:
    fields = [*fields, ("content-length", str(len(body)))]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers(fields)})
    await send({"type": "http.response.body", "body": body})


def worker_app() -> ProxyApp:
    """The app of one worker process (uvicorn's factory): its settings from :data:`ENV_CONFIG`."""
    try:
        return ProxyApp(ProxyConfig.from_env())
    except ConfigError:
        logger.exception("cachekit proxy worker: bad settings")
        raise

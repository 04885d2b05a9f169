"""``CachingTransport`` and ``AsyncCachingTransport``: thin shells around the sans-I/O pipeline.

Each wraps an inner transport (``httpx`` or ``httpx2``; see :mod:`cachekit._http`) and performs the
effects :meth:`cachekit.pipeline.Pipeline.exchange` yields. The effect loop is written once, as a
coroutine: the async transport awaits it, the sync transport runs it to completion in one step
(its effects never suspend).

Passing ``transport=`` to an httpx client turns off the client's environment proxies and the SDKs'
connection defaults, so when no inner transport is given cachekit builds the one the SDKs would have
built: their connection limits, TCP keep-alive, and ``HTTP(S)_PROXY``/``NO_PROXY`` from the
environment.
"""

from __future__ import annotations

import functools
import logging
import queue
import socket
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from types import ModuleType, TracebackType
from typing import Any

import anyio.to_thread
import httpx2

from cachekit import _fork
from cachekit._http import Request, Response, build_response, library_of
from cachekit.cache import Cache, CacheLike, as_cache
from cachekit.pipeline import Effect, Exchange, Load, Offload, PipelineStats, Read, Save, Send, Tee, Wait
from cachekit.stores.base import AsyncStore, Store

__all__ = ["AsyncCachingTransport", "CachingTransport"]


async def _drive(exchange: Exchange, perform: Callable[[Effect], Awaitable[Any]]) -> Response:
    """Run ``exchange`` to its response, performing each effect it yields."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = exchange.send(value) if error is None else exchange.throw(error)
        except StopIteration as stop:
            result: Response = stop.value
            return result
        value, error = None, None
        try:
            value = await perform(effect)
        except BaseException as exc:  # handed to the pipeline, which decides what is fatal
            error = exc


def _run_sync(coroutine: Coroutine[Any, Any, Response]) -> Response:
    """Run a coroutine that never suspends (every effect it awaits completes at once)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        result: Response = stop.value
        return result
    coroutine.close()
    raise RuntimeError("a synchronous cache effect suspended; this is a cachekit bug")


# The SDKs' connection defaults (anthropic/openai ``DEFAULT_CONNECTION_LIMITS`` and socket options).
_MAX_CONNECTIONS = 1000
_MAX_KEEPALIVE = 100


def _keepalive_socket_options() -> list[tuple[int, int, int]]:
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPINTVL", 60), ("TCP_KEEPCNT", 5), ("TCP_KEEPIDLE", 60)):
        if (opt := getattr(socket, name, None)) is not None:
            options.append((socket.IPPROTO_TCP, opt, value))
    if sys.platform == "darwin" and not hasattr(socket, "TCP_KEEPIDLE"):
        options.append((socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPALIVE", 0x10), 60))
    return options


class _ProxyRouter:
    """The inner transport httpx would have built without ``transport=``: a default connection pool
    plus one per environment proxy, chosen per request URL with httpx's own mount matching."""

    def __init__(self, library: ModuleType, *, is_async: bool) -> None:
        limits = library.Limits(max_connections=_MAX_CONNECTIONS, max_keepalive_connections=_MAX_KEEPALIVE)
        cls = library.AsyncHTTPTransport if is_async else library.HTTPTransport
        options = _keepalive_socket_options()

        def pool(proxy: object = None) -> Any:
            return cls(limits=limits, socket_options=options, proxy=proxy)

        # httpx's own reading of HTTP(S)_PROXY / ALL_PROXY / NO_PROXY, so routing matches what the
        # SDK's default client does (both libraries keep these helpers in ``_utils``).
        proxies: dict[str, str | None] = library._utils.get_environment_proxies()
        client_cls = library.AsyncClient if is_async else library.Client
        self._client = client_cls(
            transport=pool(),
            mounts={key: (pool(library.Proxy(url)) if url else None) for key, url in proxies.items()},
        )

    def for_url(self, url: Any) -> Any:
        return self._client._transport_for_url(url)

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        await self._client.aclose()


class _TeeState:
    """What both stream wrappers share: the recorder, and ending exactly once."""

    def __init__(self, tee: Tee) -> None:
        self._tee = tee
        self._ended = False

    def _finish(self) -> Save | None:
        """Mark the stream ended; the store write to perform, if any.

        Whether the stream is storable is the recorder's call, from what it saw, not whether the
        caller read to the end: the SDKs stop reading at the terminator (OpenAI's ``[DONE]``) and
        close, and a stream cut before its terminator is incomplete however it ended.
        """
        self._ended = True
        return self._tee.on_end(self._tee.recorder.complete())

    def _stored(self, exc: Exception | None) -> None:
        self._tee.stored(exc)

    def _handed(self, chunk: bytes) -> bytes:
        """Record ``chunk`` as it came; what the caller gets of it now (a rewrite may hold back an
        event not yet ended). When that is something, it is the caller's turn (a stream it holds
        unread is a stalled single-flight leader)."""
        self._tee.recorder.feed(chunk)
        rewrite = self._tee.rewrite
        passed = chunk if rewrite is None else rewrite.feed(chunk)
        if passed:
            self._tee.idle(True)
        return passed

    def _rest(self) -> bytes:
        """At the end of the stream: what a rewrite still held (an event the stream never ended)."""
        rewrite = self._tee.rewrite
        return b"" if rewrite is None else rewrite.flush()

    def _asked(self) -> None:
        """The caller asked for more: from here the stream waits on the provider, not on it."""
        self._tee.idle(False)


class _SyncTee(_TeeState):
    """Pass a sync byte stream through, chunk by chunk, while recording it."""

    def __init__(self, inner: Any, tee: Tee, store: Store) -> None:
        super().__init__(tee)
        self._inner = inner
        self._store = store

    def __iter__(self) -> Any:
        closed_by_gc = False
        try:
            self._asked()
            for chunk in self._inner:
                if passed := self._handed(chunk):
                    yield passed
                    self._asked()
            if rest := self._rest():
                yield rest
        except GeneratorExit:
            # httpx closes streams through close(), so this is the garbage collector finalizing an
            # abandoned stream: finish on the worker, since a finalizer may run while this very
            # thread holds a lock that finishing needs (the store's, the flights').
            closed_by_gc = True
            _defer(self._end)
            raise
        finally:
            if not closed_by_gc:
                self._end()

    def _end(self) -> None:
        if self._ended:
            return
        try:
            save = self._finish()
            if save is not None:
                self._store.set(save.key, save.value, ttl=save.ttl)
                self._stored(None)
        except Exception as exc:  # the caller already has its answer; a store failure is only logged
            self._stored(exc)
        finally:
            self._tee.release()

    def close(self) -> None:
        self._end()
        self._inner.close()


class _AsyncTee(_TeeState):
    """Pass an async byte stream through, chunk by chunk, while recording it."""

    def __init__(self, inner: Any, tee: Tee, astore: AsyncStore | None, store: Store | None) -> None:
        super().__init__(tee)
        self._inner = inner
        self._astore = astore
        self._store = store

    async def __aiter__(self) -> Any:
        try:
            self._asked()
            async for chunk in self._inner:
                if passed := self._handed(chunk):
                    yield passed
                    self._asked()
            if rest := self._rest():
                yield rest
        finally:
            await self._end()

    async def _end(self) -> None:
        if self._ended:
            return
        try:
            save = self._finish()
            if save is not None:
                if self._astore is not None:
                    await self._astore.aset(save.key, save.value, ttl=save.ttl)
                elif self._store is not None:
                    self._store.set(save.key, save.value, ttl=save.ttl)
                self._stored(None)
        except Exception as exc:
            self._stored(exc)
        finally:
            self._tee.release()

    async def aclose(self) -> None:
        await self._end()
        await self._inner.aclose()


class _Deferred:
    """Work that garbage-collection callbacks must not do inline (it takes locks the interrupted code
    may hold) goes to one daemon thread through a SimpleQueue, whose put() is safe in finalizers."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._lock = _fork.lock(self)
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        # The worker is the parent's thread, and the queued cleanups are of the parent's streams.
        self._queue = queue.SimpleQueue()
        self._worker = None

    def start(self) -> None:
        """Start the worker (from ordinary code, never from a finalizer)."""
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="cachekit-deferred", daemon=True)
                self._worker.start()

    def __call__(self, task: Callable[[], object]) -> None:
        self._queue.put(task)

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            try:
                task()
            except Exception:  # a failure here must not kill the worker
                logging.getLogger("cachekit.transport").warning(
                    "deferred stream cleanup failed", exc_info=True
                )


_defer = _Deferred()


# Headers that describe the body as it came, not as rewritten (its length, its encoding: the body in
# hand is already decoded).
_BODY_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding"})


def _rewritten(response: Response, tee: Tee) -> Response | None:
    """For an in-memory response (read whole before cachekit saw it, as mock transports build them)
    that ``tee`` rewrites: a response with the rewritten body, for the caller. ``None``: no rewrite."""
    if tee.rewrite is None:
        return None
    body = tee.rewrite.feed(response.content) + tee.rewrite.flush()
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
    return build_response(library_of(response), response.status_code, headers, body)


def _tee_class(library: ModuleType, is_async: bool) -> type[Any]:
    """The tee wrapper as a subclass of ``library``'s byte-stream base (httpx2 checks the type)."""
    return _tee_class_of(library.__name__, is_async)


# functools.cache: four classes at most, built once each, and its dict is safe to share between threads.
@functools.cache
def _tee_class_of(library_name: str, is_async: bool) -> type[Any]:
    library = sys.modules[library_name]
    base = library.AsyncByteStream if is_async else library.SyncByteStream
    mixin = _AsyncTee if is_async else _SyncTee
    return type(mixin.__name__, (mixin, base), {})


class _CachingBase:
    def __init__(self, transport: Any, cache: CacheLike, owns_cache: bool | None) -> None:
        self._cache, owned = as_cache(cache)
        self._owns_cache = owned if owns_cache is None else owns_cache
        self._inner = transport
        self._router: _ProxyRouter | None = None
        self._router_lock = _fork.lock(self)
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        # The inner transport cachekit built holds the parent's keep-alive connections upstream; a
        # child sending on them would interleave with the parent. Kept, not closed, and built anew.
        if self._router is not None:
            _fork.keep(self._router)
            self._router = None

    @property
    def cache(self) -> Cache:
        """The cache this transport uses (shared with any transport given the same :class:`Cache`)."""
        return self._cache

    @property
    def stats(self) -> PipelineStats:
        """The cache's live counters."""
        return self._cache.stats

    @property
    def inner(self) -> Any:
        """The wrapped transport, or ``None`` while the default one has not been built yet."""
        return self._inner

    def _inner_for(self, request: Request, *, is_async: bool) -> Any:
        if self._inner is not None:
            return self._inner
        with self._router_lock:
            if self._router is None:
                self._router = _ProxyRouter(library_of(request), is_async=is_async)
        return self._router.for_url(request.url)


class CachingTransport(_CachingBase, httpx2.BaseTransport):
    """A synchronous httpx/httpx2 transport that answers repeated LLM requests from a cache.

    Args:
        transport: the transport to send misses through; by default the one the SDKs would build.
        cache: a :class:`~cachekit.cache.Cache`, a :class:`~cachekit.config.CacheConfig`, a store object
            or a store URL; by default ``$CACHEKIT_CACHE_URL`` or SQLite under ``$CACHEKIT_HOME``.
        owns_cache: close the cache's store when this transport closes (default: when it opened it).

    Use it as ``httpx2.Client(transport=CachingTransport())`` (the SDKs' library) or with ``httpx``.
    """

    def __init__(
        self, transport: Any = None, *, cache: CacheLike = None, owns_cache: bool | None = None
    ) -> None:
        super().__init__(transport, cache, owns_cache)

    def handle_request(self, request: Request) -> Response:
        """Answer ``request`` from the cache or send it upstream (httpx transport API)."""
        inner = self._inner_for(request, is_async=False)
        store = self._cache.sync_store
        if store is None:
            raise TypeError("an async-only store cannot serve a synchronous client; use a sync store")

        async def perform(effect: Effect) -> Any:
            if isinstance(effect, Send):
                return inner.handle_request(effect.request)
            if isinstance(effect, Load):
                return store.get(effect.key)
            if isinstance(effect, Save):
                return store.set(effect.key, effect.value, ttl=effect.ttl)
            if isinstance(effect, Read):
                return effect.response.read()
            if isinstance(effect, Wait):
                return effect.flight.wait(effect.timeout)
            if isinstance(effect, Offload):
                return effect.fn()
            if isinstance(effect, Tee):
                response = effect.response
                tee = _tee_class(library_of(response), False)(response.stream, effect, store)
                # A response dropped without being read or closed still lands its flight (deferred:
                # finalizers run at arbitrary points, possibly inside a lock the release takes).
                _defer.start()
                weakref.finalize(tee, _defer, effect.release)
                if response.is_stream_consumed:  # an in-memory response was read when it was built
                    effect.recorder.feed(response.content)
                    tee.close()
                    return _rewritten(response, effect)
                response.stream = tee
                return None
            raise TypeError(f"unknown effect {effect!r}")

        return _run_sync(_drive(self._cache.pipeline.exchange(request), perform))

    def close(self) -> None:
        """Close the inner transport (and the cache, when owned)."""
        if self._inner is not None:
            self._inner.close()
        if self._router is not None:
            self._router.close()
        if self._owns_cache:
            self._cache.close()

    def __enter__(self) -> CachingTransport:
        # httpx clients enter their transports; a duck-typed inner transport may not support it.
        if (enter := getattr(self._inner, "__enter__", None)) is not None:
            enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.close()


class AsyncCachingTransport(_CachingBase, httpx2.AsyncBaseTransport):
    """The asyncio twin of :class:`CachingTransport` (same arguments).

    Local stores (memory, SQLite) are called inline: their operations take microseconds, less than a
    hop to a worker thread. Stores with async methods (Redis) are awaited.
    """

    def __init__(
        self, transport: Any = None, *, cache: CacheLike = None, owns_cache: bool | None = None
    ) -> None:
        super().__init__(transport, cache, owns_cache)

    async def handle_async_request(self, request: Request) -> Response:
        """Answer ``request`` from the cache or send it upstream (httpx async transport API)."""
        inner = self._inner_for(request, is_async=True)
        astore, store = self._cache.async_store, self._cache.sync_store

        async def perform(effect: Effect) -> Any:
            if isinstance(effect, Send):
                return await inner.handle_async_request(effect.request)
            if isinstance(effect, Load):
                if astore is not None:
                    return await astore.aget(effect.key)
                return store.get(effect.key)  # type: ignore[union-attr]  # one of the two is set
            if isinstance(effect, Save):
                if astore is not None:
                    return await astore.aset(effect.key, effect.value, ttl=effect.ttl)
                return store.set(effect.key, effect.value, ttl=effect.ttl)  # type: ignore[union-attr]
            if isinstance(effect, Read):
                return await effect.response.aread()
            if isinstance(effect, Wait):
                return await effect.flight.wait_async(effect.timeout)
            if isinstance(effect, Offload):
                return await anyio.to_thread.run_sync(effect.fn)
            if isinstance(effect, Tee):
                response = effect.response
                tee = _tee_class(library_of(response), True)(response.stream, effect, astore, store)
                _defer.start()
                weakref.finalize(tee, _defer, effect.release)
                if response.is_stream_consumed:  # an in-memory response was read when it was built
                    effect.recorder.feed(response.content)
                    await tee.aclose()
                    return _rewritten(response, effect)
                response.stream = tee
                return None
            raise TypeError(f"unknown effect {effect!r}")

        return await _drive(self._cache.pipeline.exchange(request), perform)

    async def aclose(self) -> None:
        """Close the inner transport (and the cache, when owned)."""
        if self._inner is not None:
            await self._inner.aclose()
        if self._router is not None:
            await self._router.aclose()
        if self._owns_cache:
            await self._cache.aclose()

    async def __aenter__(self) -> AsyncCachingTransport:
        if (enter := getattr(self._inner, "__aenter__", None)) is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

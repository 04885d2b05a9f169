"""In-process httpx transports for the local backend (no sockets, no server).

:class:`LocalTransport` is a sync *and* async transport for ``httpx`` and ``httpx2`` clients (what
the official SDKs use)::

    import anthropic, httpx2
    from cachekit.local import LocalBackend, LocalTransport

    backend = LocalBackend()
    client = anthropic.Anthropic(api_key="local", base_url="http://local",
                                 http_client=httpx2.Client(transport=LocalTransport(backend)))

Async clients run the backend (and a model's generation) in a worker thread, so the event loop
never blocks on the engine; a stream is pulled from the worker one event at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

import anyio.to_thread
import httpx2

from cachekit import _http
from cachekit._http import library_of
from cachekit.local.backend import LocalBackend
from cachekit.local.wire import Reply

__all__ = ["LocalTransport", "aiter_reply", "build_response", "iter_reply"]

_DISCONNECT = "peer closed connection without sending complete message body (incomplete chunked read)"
_END = object()


def build_response(lib: ModuleType, reply: Reply, content: Any) -> Any:
    """An httpx/httpx2 ``Response`` for ``reply`` with ``content`` (bytes or a byte iterator)."""
    return _http.build_response(lib, reply.status, reply.headers, content)


def iter_reply(
    lib: ModuleType, reply: Reply, before_chunk: Callable[[], None] | None = None
) -> Iterator[bytes]:
    """The streamed body of ``reply`` (a dropped connection raises the library's error at the end)."""
    events = iter(reply.events or ())
    try:
        for chunk in events:
            if before_chunk is not None:
                before_chunk()
            yield chunk
        if reply.disconnect:
            raise lib.RemoteProtocolError(_DISCONNECT)
    finally:
        _close(events)


async def aiter_reply(
    lib: ModuleType, reply: Reply, before_chunk: Callable[[], Any] | None = None
) -> AsyncIterator[bytes]:
    """:func:`iter_reply` for async clients: each event is produced in a worker thread."""
    events = iter(reply.events or ())
    try:
        while True:
            chunk = await anyio.to_thread.run_sync(next, events, _END)
            if chunk is _END:
                break
            if before_chunk is not None:
                await before_chunk()
            yield chunk  # type: ignore[misc]
        if reply.disconnect:
            raise lib.RemoteProtocolError(_DISCONNECT)
    finally:
        _close(events)


def _close(events: Iterator[bytes]) -> None:
    close = getattr(events, "close", None)  # a generator: release the engine's resources early
    if close is not None:
        close()


class LocalTransport(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """An httpx/httpx2 transport (sync and async) that answers from a :class:`LocalBackend`.

    Closing a client does not close the backend: it may serve many clients.
    """

    def __init__(self, backend: LocalBackend | None = None) -> None:
        self.backend = backend if backend is not None else LocalBackend()

    def _answer(self, request: Any, body: bytes) -> Reply:
        headers = {key.lower(): value for key, value in request.headers.items()}
        return self.backend.handle(
            str(request.method), request.url.path, headers, body, host=str(request.url.host)
        )

    def handle_request(self, request: Any) -> Any:
        """Answer one request from a sync client."""
        lib = library_of(request)
        reply = self._answer(request, request.read())
        content: bytes | Iterable[bytes] = reply.content if reply.events is None else iter_reply(lib, reply)
        return build_response(lib, reply, content)

    async def handle_async_request(self, request: Any) -> Any:
        """Answer one request from an async client (the backend runs in a worker thread)."""
        lib = library_of(request)
        body = await request.aread()
        reply = await anyio.to_thread.run_sync(self._answer, request, body)
        content: bytes | AsyncIterator[bytes] = (
            reply.content if reply.events is None else aiter_reply(lib, reply)
        )
        return build_response(lib, reply, content)

    def close(self) -> None:
        """Nothing to release: the backend outlives its clients."""

    async def aclose(self) -> None:
        """Nothing to release: the backend outlives its clients."""

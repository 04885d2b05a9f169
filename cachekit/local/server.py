"""The local backend over real HTTP: an ASGI app on uvicorn, cachekit's one HTTP layer.

``cachekit serve`` runs one in the foreground; tests start one on a free loopback port::

    with LocalServer(LocalBackend()) as server:
        client = anthropic.Anthropic(api_key="local", base_url=server.url)

The HTTP work is uvicorn's (:mod:`cachekit._asgi`, the ``proxy`` extra): strict HTTP/1.1 parsing by
llhttp, keep-alive and pipelining, ``Content-Length`` and chunked request bodies, flow control, and
graceful shutdown. Streams go out with chunked transfer encoding, one SSE event per chunk as the
engine produces it. A client that goes away mid-stream stops the generation (the event generator is
closed). The engine runs on worker threads: a slow generation never holds up other connections.

Request bodies are read within a cap: at most ``max_body`` bytes of a body are ever taken, and a
``Content-Length`` over it is refused before a byte is read (a 413 in the API's shape; the connection
is closed, so the unread rest is never taken for the next request). Framing the parser cannot trust
(a malformed ``Content-Length`` or chunk size, both ``Content-Length`` and ``Transfer-Encoding``,
a transfer coding other than ``chunked``, a line not ended by CRLF, a body cut short) is refused by
the server with a 4xx or 5xx, and the connection closed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import anyio.to_thread

from cachekit import _asgi
from cachekit._asgi import (
    Receive,
    Scope,
    Send,
    ServerHandle,
    ServerThread,
    header_dict,
    raw_headers,
    read_body,
    run_lifespan,
    until_disconnected,
)
from cachekit.local.backend import LocalBackend
from cachekit.local.wire import Reply, error_reply, family_for
from cachekit.providers.registry import dialect_of

__all__ = ["MAX_BODY", "LocalServer", "ServeApp"]

logger = logging.getLogger("cachekit.local.server")

#: The default cap on a request body: larger ones get a 413, as the providers answer them.
MAX_BODY = 64 * 1024 * 1024
_TOO_LARGE = "Request exceeds the maximum allowed number of bytes."
_REFUSALS: dict[type[Exception], tuple[int, str]] = {
    _asgi.TooLarge: (413, _TOO_LARGE),
    _asgi.Stalled: (408, "The request body did not arrive in time."),
    _asgi.UnsupportedCoding: (501, "Transfer codings other than chunked are not implemented."),
}
#: Seconds a client may stall in the middle of its request body before it gets a 408.
BODY_TIMEOUT = 60.0
_DONE = object()


class ServeApp:
    """The ASGI app of ``cachekit serve``: every request answered by a :class:`LocalBackend`."""

    def __init__(
        self, backend: LocalBackend, *, max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT
    ) -> None:
        self.backend = backend
        self.max_body = max_body
        self.body_timeout = body_timeout
        #: The most bytes of one request's body taken so far (never more than ``max_body``).
        self.peak_body_read = 0
        self._peak_lock = threading.Lock()

    def _body_read(self, size: int) -> None:
        with self._peak_lock:
            self.peak_body_read = max(self.peak_body_read, size)

    def refusal(self, path: str, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        """The answer to a request whose framing the HTTP parser refused: a 400 in the API's shape,
        with the rules announcement every answer carries."""
        family = family_for(dialect_of("POST", path), headers)
        reply = error_reply(family, 400, "The request could not be read: malformed HTTP framing.")
        return reply.status, [*reply.headers, *self.backend.announcement(family)], reply.content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, _nothing, _nothing)
            return
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        headers = header_dict(scope)
        method, path = scope["method"], scope["path"]
        try:
            body = await read_body(receive, headers, self.max_body, self._body_read, self.body_timeout)
        except _asgi.Disconnected:
            return
        except (_asgi.TooLarge, _asgi.Stalled, _asgi.UnsupportedCoding) as refused:
            family = family_for(dialect_of(method, path), headers)
            status, message = _REFUSALS[type(refused)]
            reply = error_reply(family, status, message)
            extra = [*self.backend.announcement(family), ("connection", "close")]
            await _send_whole(send, reply.status, [*reply.headers, *extra], reply.content)
            return
        host = headers.get("host", "localhost")
        answer: Reply = await anyio.to_thread.run_sync(
            lambda: self.backend.handle(method, path, headers, body, host=host)
        )
        if answer.events is None:
            await _send_whole(send, answer.status, list(answer.headers), answer.content)
            return
        events = iter(answer.events)
        try:
            await until_disconnected(receive, _stream(send, answer, events))
        finally:
            close = getattr(events, "close", None)
            if close is not None:  # stops the generation (on its own thread: it may be mid-token)
                await anyio.to_thread.run_sync(close)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket handshake is the ``GET`` that asked to upgrade: the backend answers it (the
        Responses WebSocket mode is not offered: a 426 that sends the client to HTTP at once)."""
        headers = header_dict(scope)
        host = headers.get("host", "localhost")
        answer: Reply = await anyio.to_thread.run_sync(
            lambda: self.backend.handle("GET", scope["path"], headers, b"", host=host)
        )
        await _asgi.refuse_websocket(receive, send, answer.status, list(answer.headers), answer.content)


async def _nothing() -> None:
    return None


async def _send_whole(send: Send, status: int, headers: list[tuple[str, str]], content: bytes) -> None:
    fields = [(k, v) for k, v in headers if k.lower() != "content-length"]
    fields.append(("content-length", str(len(content))))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers(fields)})
    await send({"type": "http.response.body", "body": content})


def _next(events: Iterator[bytes]) -> Any:
    return next(events, _DONE)


async def _stream(send: Send, reply: Reply, events: Iterator[bytes]) -> None:
    fields = [(k, v) for k, v in reply.headers if k.lower() not in ("content-length", "transfer-encoding")]
    await send({"type": "http.response.start", "status": reply.status, "headers": raw_headers(fields)})
    while True:
        event = await anyio.to_thread.run_sync(_next, events)
        if event is _DONE:
            break
        await send({"type": "http.response.body", "body": event, "more_body": True})
    if reply.disconnect:  # fault injection: end like a dropped connection (no final chunk)
        raise ConnectionAbortedError("the backend was asked to drop this stream")
    await send({"type": "http.response.body", "body": b""})


class LocalServer(ServerHandle):
    """A :class:`LocalBackend` served over HTTP on ``host:port`` (port 0: a free one).

    Use as a context manager, or :meth:`start` / :meth:`stop`; :meth:`serve_forever` blocks (and
    stops gracefully on SIGINT or SIGTERM). The backend is not closed when the server stops.
    ``max_body``: the most bytes of one request's body the server takes (a larger one is a 413);
    ``body_timeout``: the most seconds a client may stall mid-body (a 408 then). Needs the ``proxy``
    extra (uvicorn).
    """

    def __init__(
        self,
        backend: LocalBackend | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body: int = MAX_BODY,
        body_timeout: float = BODY_TIMEOUT,
    ) -> None:
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise ValueError(f"max_body must be a number of bytes >= 0, not {max_body!r}")
        if not body_timeout > 0:
            raise ValueError(f"body_timeout must be a positive number of seconds, not {body_timeout!r}")
        self.backend = backend if backend is not None else LocalBackend()
        self._app = ServeApp(self.backend, max_body=max_body, body_timeout=body_timeout)
        self._server = ServerThread(
            self._app, host=host, port=port, name="cachekit-local", refusal=self._app.refusal
        )

    @property
    def peak_body_read(self) -> int:
        """The most bytes of any one request's body taken so far (never more than ``max_body``):
        what the server held for a body, beyond the HTTP parser's bounded read buffer."""
        return self._app.peak_body_read

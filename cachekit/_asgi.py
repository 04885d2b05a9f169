"""The one HTTP layer of ``cachekit serve`` and ``cachekit proxy``: ASGI apps on uvicorn.

uvicorn (with httptools, the llhttp parser, and uvloop where it installs) does what an HTTP server
must do for a living: strict HTTP/1.1 parsing (a framing it cannot trust is a 400 and the connection
is closed), keep-alive, flow control (it stops reading a connection whose body the app has not taken),
streamed responses, SIGINT/SIGTERM with a graceful shutdown that lets in-flight responses finish, and
worker processes. This module holds what both apps share on top of it: the body read within a cap,
header conversion, the server settings, and a server on a background thread (for tests, the demo and
``LocalServer``). docs/proxy.md says why uvicorn.

Everything here imports uvicorn lazily: without the ``proxy`` extra the rest of cachekit still
imports, and starting a server raises :class:`~cachekit.errors.MissingExtraError` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, TypeVar

from cachekit.errors import MissingExtraError

__all__ = [
    "Receive",
    "Scope",
    "Send",
    "ServerHandle",
    "ServerThread",
    "Stalled",
    "TooLarge",
    "UnsupportedCoding",
    "bind",
    "header_dict",
    "read_body",
    "server_config",
]

logger = logging.getLogger("cachekit.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TooLarge(Exception):
    """A request body over the cap (answer 413: the rest is never read)."""


class Disconnected(Exception):
    """The client went away before its request body was read."""


def header_dict(scope: Scope) -> dict[str, str]:
    """The request's headers, names lower-cased, repeated fields joined with ``", "`` (RFC 9110 5.3)."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


class UnsupportedCoding(Exception):
    """A transfer coding other than ``chunked`` (answer 501: the body would be misread)."""


def check_codings(headers: dict[str, str]) -> None:
    """Refuse a body coded in a way not implemented: llhttp frames ``gzip, chunked`` by its final
    ``chunked`` and hands the still gzip-coded bytes over as if they were the body (RFC 9112 6.1:
    a server SHOULD answer 501 to a transfer coding it does not understand)."""
    codings = [c.strip(" \t").lower() for c in headers.get("transfer-encoding", "").split(",")]
    if any(coding not in ("", "chunked") for coding in codings):
        raise UnsupportedCoding


class Stalled(Exception):
    """The client sent no more of its body for longer than the body timeout (answer 408)."""


async def read_body(
    receive: Receive,
    headers: dict[str, str],
    cap: int,
    on_read: Callable[[int], None],
    timeout: float | None = None,
) -> bytes:
    """The whole request body, never holding more than ``cap`` bytes of it.

    A ``Content-Length`` over the cap is refused before a byte is read; a chunked body is refused as
    soon as what arrived passes the cap. ``on_read`` is told the bytes taken (for the peak the tests
    read). A transfer coding other than ``chunked`` is :class:`UnsupportedCoding`. ``timeout``: the
    most seconds to wait for the next part of the body (a client that stalls mid-body gets
    :class:`Stalled`, not a connection held forever). The HTTP parser has already refused any framing
    it cannot trust (a 400, the connection closed), and stops reading from the socket while the app
    does not take the body, so what the server holds for a body is bounded by the cap plus its read
    buffer, whatever the client sends.
    """
    check_codings(headers)
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        on_read(0)
        raise TooLarge
    body = bytearray()
    try:
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout)
            except asyncio.TimeoutError:
                raise Stalled from None
            if message["type"] == "http.disconnect":
                raise Disconnected
            chunk: bytes = message.get("body", b"")
            if len(body) + len(chunk) > cap:
                raise TooLarge
            body += chunk
            if not message.get("more_body", False):
                return bytes(body)
    finally:
        on_read(len(body))


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), IPv6 when ``host`` is."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)  # uvicorn's worker processes share it
    return sock


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError:
        raise MissingExtraError("uvicorn", "proxy", "cachekit's HTTP server (serve, proxy)") from None
    return uvicorn


#: How an app answers a request the HTTP parser refused (its path and the headers read so far):
#: status, headers, body. The connection is closed after it. A module-level function when the server
#: runs worker processes (it travels to them with the settings).
Refusal = Callable[[str, dict[str, str]], tuple[int, Sequence[tuple[str, str]], bytes]]


def _http_protocol() -> Any:
    try:
        from cachekit._asgi_http import Protocol
    except ImportError:  # pragma: no cover - the proxy extra installs httptools
        raise MissingExtraError("httptools", "proxy", "cachekit's HTTP server (serve, proxy)") from None
    return Protocol


def _loop() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:  # Windows: no uvloop
        return "asyncio"
    return "uvloop"


def server_config(
    app: ASGIApp | str,
    *,
    keep_alive: int = 75,
    graceful_timeout: float | None = None,
    limit_concurrency: int | None = None,
    workers: int | None = None,
    factory: bool = False,
    host: str = "127.0.0.1",
    port: int = 0,
    lifespan: str = "on",
    refusal: Refusal | None = None,
) -> Any:
    """The uvicorn settings both servers run with.

    ``keep_alive``: seconds an idle keep-alive connection stays open (75, above the 60 s idle timeout
    of the common load balancers, so the balancer closes first and never sends on a closed one).
    ``graceful_timeout``: on shutdown, seconds in-flight responses (streams) get to finish (``None``:
    as long as they take). ``limit_concurrency``: connections plus in-flight requests past which new
    ones get a 503. ``refusal``: how a request the parser refused is answered. uvicorn's own logging
    setup is left alone (``log_config=None``): cachekit's loggers and the application's configuration
    apply; the access log is cachekit's (structured).
    """
    uvicorn = _uvicorn()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=_http_protocol(),
        loop=_loop(),
        lifespan=lifespan,
        interface="asgi3",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=keep_alive,
        timeout_graceful_shutdown=None if graceful_timeout is None else max(1, round(graceful_timeout)),
        limit_concurrency=limit_concurrency,
        workers=workers,
        factory=factory,
    )
    config.cachekit_refusal = refusal  # read by the protocol (cachekit._asgi_http)
    return config


class ServerThread:
    """An ASGI app served by uvicorn on a background thread, on a socket bound at construction (so
    :attr:`port` is known before :meth:`start`; connections made before the loop runs wait in the
    kernel's backlog)."""

    def __init__(self, app: ASGIApp, *, host: str, port: int, name: str, **settings: Any) -> None:
        self._socket = bind(host, port)
        self._started = threading.Event()
        self._app = app
        self._name = name
        self._settings = settings
        self._server: Any = None
        self._draining = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def draining(self) -> threading.Event:
        """Set once a graceful shutdown has stopped accepting and waits for an answer in flight."""
        return self._draining

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it listens on."""
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (an IPv6 host in brackets): the base URL an SDK is given."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def _wrapped(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The app's own lifespan runs first; its startup done, the server is up.
        if scope["type"] != "lifespan":
            await self._app(scope, receive, send)
            return

        async def watched_send(message: Message) -> None:
            if message["type"] in ("lifespan.startup.complete", "lifespan.startup.failed"):
                self._started.set()
            await send(message)

        await self._app(scope, receive, watched_send)

    def start(self, timeout: float = 60.0) -> None:
        """Serve in a background thread; returns once the app has started."""
        if self._thread is not None:
            return
        uvicorn = _uvicorn()
        settings = server_config(self._wrapped, **self._settings)
        # Set by the protocol when a shutdown drains. In process only: the settings of worker
        # processes are pickled, and an event cannot be.
        settings.cachekit_draining = self._draining = threading.Event()
        self._server = uvicorn.Server(settings)
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        if not self._started.wait(timeout) or self._error is not None:
            self.stop()
            raise RuntimeError(f"{self._name} did not start") from self._error

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        except BaseException as exc:  # SystemExit from a failed startup included: reported by start()
            self._error = exc
            self._started.set()

    def run_here(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM (handled by uvicorn in the main thread: no new
        connections, in-flight responses finish), then close the socket."""
        uvicorn = _uvicorn()
        self._server = uvicorn.Server(server_config(self._app, **self._settings))
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._socket.close()

    def stop(self, *, graceful: bool = True) -> None:
        """Stop: no new connections; in-flight responses finish first unless ``graceful`` is false."""
        if self._thread is not None:
            self._server.should_exit = True
            if not graceful:
                self._server.force_exit = True
            self._thread.join()
            self._thread = None
        self._socket.close()


_H = TypeVar("_H", bound="ServerHandle")


class ServerHandle:
    """What the servers cachekit runs in a process (``LocalServer``, ``ProxyServer``) have in common:
    a :class:`ServerThread` (set by the subclass as ``_server``), its address, start, stop and the
    context-manager form."""

    _server: ServerThread

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self._server.address[1]

    @property
    def url(self) -> str:
        """The base URL to give an SDK (``http://127.0.0.1:PORT``; OpenAI's SDKs take it plus ``/v1``)."""
        return self._server.url

    @property
    def draining(self) -> threading.Event:
        """Set once :meth:`stop` has stopped accepting and waits for an answer still in flight."""
        return self._server.draining

    def start(self: _H) -> _H:
        """Serve in a background thread."""
        self._server.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM (in-flight answers finish first)."""
        self._server.run_here()

    def stop(self) -> None:
        """Stop: no new connections; in-flight answers (streams) finish first; the socket is closed."""
        self._server.stop()

    def __enter__(self: _H) -> _H:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def raw_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """Headers as ASGI sends them."""
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


async def refuse_websocket(
    receive: Receive, send: Send, status: int, headers: Sequence[tuple[str, str]], content: bytes
) -> None:
    """Answer a WebSocket handshake with a plain HTTP response instead of accepting it (the ASGI
    ``websocket.http.response`` extension, which uvicorn offers): a client that tries a provider's
    WebSocket mode (the openai SDK's ``responses.connect()``, Codex) reads the status, a 426 that sends
    it back to HTTP, where an unanswered handshake would be a bare 500. A host without the extension
    gets the handshake closed (its own 403)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return  # the client went away first
    fields = [(k, v) for k, v in headers if k.lower() != "content-length"]
    fields.append(("content-length", str(len(content))))
    await send({"type": "websocket.http.response.start", "status": status, "headers": raw_headers(fields)})
    await send({"type": "websocket.http.response.body", "body": content})


async def run_lifespan(
    receive: Receive,
    send: Send,
    startup: Callable[[], Awaitable[None]],
    shutdown: Callable[[], Awaitable[None]],
) -> None:
    """Answer the ASGI lifespan protocol with ``startup`` and ``shutdown``."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await startup()
            except Exception as exc:
                logger.exception("startup failed")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await shutdown()
            finally:
                await send({"type": "lifespan.shutdown.complete"})
            return


async def watch_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (after its body was read: nothing else arrives)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnected(receive: Receive, work: Awaitable[None]) -> bool:
    """Run ``work`` (sending a response), cancelled if the client disconnects first; ``True`` when
    it was cancelled that way."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(watch_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        watcher.cancel()
        raise
    if task in done:
        watcher.cancel()
        task.result()  # its error, if any
        return False
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return True

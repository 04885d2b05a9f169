"""The local backend over real HTTP: a threaded HTTP/1.1 server on the standard library.

``cachekit serve`` runs one in the foreground; tests start one on a free loopback port::

    with LocalServer(LocalBackend()) as server:
        client = anthropic.Anthropic(api_key="local", base_url=server.url)

Keep-alive connections, ``Content-Length`` bodies, and streams sent with chunked transfer encoding
one SSE event per chunk, flushed as the engine produces them. A client that goes away mid-stream
stops the generation (the event generator is closed). No dependency beyond the standard library.
"""

from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cachekit.local.backend import LocalBackend
from cachekit.local.wire import dialect_of, endpoint_of, error_reply

__all__ = ["LocalServer"]

logger = logging.getLogger("cachekit.local.server")

_MAX_BODY = 64 * 1024 * 1024  # larger bodies get a 413, as the providers answer them


class _BadBody(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a connection may sit idle or stall mid-body before it is dropped
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body are separate writes: without TCP_NODELAY, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every non-streamed answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        self._answer()

    # Every other method gets the API's own 404 (not http.server's HTML 501).
    do_GET = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return self._chunked()
        length = self.headers.get("content-length")
        try:
            size = int(length) if length is not None else 0
        except ValueError:
            raise _BadBody(400, "Invalid Content-Length header.") from None
        if size < 0:
            raise _BadBody(400, "Invalid Content-Length header.")
        if size > _MAX_BODY:
            raise _BadBody(413, "Request exceeds the maximum allowed number of bytes.")
        return self.rfile.read(size) if size else b""

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadBody(400, "Invalid chunked request body.") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(parts)
            total += size
            if total > _MAX_BODY:
                raise _BadBody(413, "Request exceeds the maximum allowed number of bytes.")
            parts.append(self.rfile.read(size))
            self.rfile.readline(8)  # the CRLF after each chunk

    def _answer(self) -> None:
        headers = {key.lower(): value for key, value in self.headers.items()}
        path = self.path.split("?", 1)[0]
        try:
            body = self._body()
        except _BadBody as bad:
            # The rest of the body is unread: answer in the API's shape and close the connection.
            self.close_connection = True
            dialect = dialect_of(endpoint_of(self.command, path), headers)
            reply = error_reply(dialect, bad.status, str(bad))
            announced = self.server.backend.announcement(dialect)
            self._send(reply.status, [*reply.headers, *announced, ("connection", "close")], reply.content)
            return
        reply = self.server.backend.handle(
            self.command, path, headers, body, host=headers.get("host", "localhost")
        )
        if reply.events is None:
            self._send(reply.status, list(reply.headers), reply.content)
            return
        self.send_response(reply.status)
        for key, value in reply.headers:
            self.send_header(key, value)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        events = iter(reply.events)
        try:
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def _send(self, status: int, headers: list[tuple[str, str]], content: bytes) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("content-length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up or stalls is routine: a debug line, not a traceback on stderr."""
        logger.debug("connection from %s ended abruptly", client_address, exc_info=True)

    def __init__(self, address: tuple[str, int], backend: LocalBackend) -> None:
        self.backend = backend
        super().__init__(address, _Handler)


class LocalServer:
    """A :class:`LocalBackend` served over HTTP on ``host:port`` (port 0: a free one).

    Use as a context manager, or :meth:`start` / :meth:`stop`; :meth:`serve_forever` blocks.
    The backend is not closed when the server stops.
    """

    def __init__(
        self, backend: LocalBackend | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.backend = backend if backend is not None else LocalBackend()
        self._server = _Server((host, port), self.backend)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to give an SDK (``http://127.0.0.1:PORT``)."""
        host = str(self._server.server_address[0])
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def start(self) -> LocalServer:
        """Serve in a background thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="cachekit-local", daemon=True
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

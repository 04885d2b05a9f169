"""The local backend over real HTTP: a threaded HTTP/1.1 server on the standard library.

``cachekit serve`` runs one in the foreground; tests start one on a free loopback port::

    with LocalServer(LocalBackend()) as server:
        client = anthropic.Anthropic(api_key="local", base_url=server.url)

Keep-alive connections (pipelined requests too), ``Content-Length`` and chunked request bodies, and
streams sent with chunked transfer encoding one SSE event per chunk, flushed as the engine produces
them. A client that goes away mid-stream stops the generation (the event generator is closed). No
dependency beyond the standard library.

Request bodies are read strictly (RFC 9112) and never past the cap: whatever the framing says, the
server reads at most ``max_body`` bytes of a request's body, framing included, before it has either
the whole body or a reason to refuse it. Framing it cannot trust is a 400 and the connection is closed
(the rest of the body is never read, so it is never taken for the next request): ``Content-Length``
other than one run of ASCII digits; both ``Content-Length`` and ``Transfer-Encoding`` (the request
smuggling rule of RFC 9112 section 6.3); a chunk size other than hex digits (no sign, prefix or
whitespace), with optional ``;name[=value]`` extensions; a line not ended by CRLF or longer than 4 KiB;
chunk data not followed by CRLF; a malformed trailer, or more than 64; a body cut short by the
client. A transfer coding other than ``chunked`` alone is a 501; a body over the cap a 413.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from cachekit.local.backend import LocalBackend
from cachekit.local.wire import error_reply, family_for
from cachekit.providers.registry import dialect_of

__all__ = ["LocalServer"]

logger = logging.getLogger("cachekit.local.server")

#: The default cap on a request body, framing included: larger ones get a 413, as the providers
#: answer them.
MAX_BODY = 64 * 1024 * 1024
#: The longest chunk-size line (extensions included) or trailer line, CRLF included.
_MAX_LINE = 4096
#: The most trailer fields after a chunked body.
_MAX_TRAILERS = 64

# RFC 9110 5.6.2 token; 5.6.4 quoted-string; 5.5 field-value characters (obs-text included).
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
#: RFC 9112 7.1: chunk-size [ chunk-ext ] CRLF, chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ).
_EXTENSION = rb"[ \t]*;[ \t]*" + _TOKEN + rb"(?:[ \t]*=[ \t]*(?:" + _TOKEN + rb"|" + _QUOTED + rb"))?"
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]+)(?:" + _EXTENSION + rb")*\r\n")
#: RFC 9112 7.1.2: a trailer field line.
_TRAILER_LINE = re.compile(_TOKEN + rb":[\t \x21-\x7e\x80-\xff]*\r\n")
_DIGITS = re.compile(r"[0-9]+")


class _BadBody(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_TOO_LARGE = "Request exceeds the maximum allowed number of bytes."


class _Stream(Protocol):
    def read(self, size: int, /) -> bytes: ...

    def readline(self, size: int, /) -> bytes: ...


class _BodyReader:
    """Reads one request body from a connection, never more than ``cap`` bytes in all.

    Every read asks the stream for at most what is left of the cap (a line for at most the line
    limit), so no framing, however malformed, makes the server read or hold more; ``used`` is what
    was read, framing included.
    """

    def __init__(self, stream: _Stream, cap: int) -> None:
        self._stream = stream
        #: The most bytes this body may take on the wire.
        self.cap = cap
        self.used = 0

    def _left(self) -> int:
        return self.cap - self.used

    def exactly(self, size: int) -> bytes:
        """``size`` bytes: a 413 before reading if they would pass the cap, a 400 if the body ends first."""
        if size > self._left():
            raise _BadBody(413, _TOO_LARGE)
        data = self._stream.read(size) if size else b""
        self.used += len(data)
        if len(data) < size:
            raise _BadBody(400, "The request body ended before its declared length.")
        return data

    def line(self) -> bytes:
        """One CRLF-terminated line of at most :data:`_MAX_LINE` bytes."""
        limit = min(_MAX_LINE, self._left())
        line = self._stream.readline(limit) if limit > 0 else b""
        self.used += len(line)
        if line.endswith(b"\n"):
            if not line.endswith(b"\r\n"):
                raise _BadBody(400, "Invalid chunked request body: lines must end with CRLF.")
            return line
        if limit < _MAX_LINE and len(line) == limit:
            raise _BadBody(413, _TOO_LARGE)  # the cap, not the line limit, cut it short
        if len(line) == limit:
            raise _BadBody(400, "Invalid chunked request body: a line is too long.")
        raise _BadBody(400, "The request body ended before its last chunk.")

    def chunked(self) -> bytes:
        """A chunked body (RFC 9112 7.1), its trailers read and dropped."""
        body = bytearray()
        while True:
            match = _CHUNK_LINE.fullmatch(self.line())
            if match is None:
                raise _BadBody(400, "Invalid chunked request body: malformed chunk size line.")
            digits = match.group(1).lstrip(b"0") or b"0"
            # More hex digits than the cap has bytes' worth cannot be a size under the cap (and this
            # keeps int() from parsing a 4 KiB number).
            size = int(digits, 16) if len(digits) <= 16 else self.cap + 1
            if size == 0:
                break
            body += self.exactly(size)
            if self.exactly(2) != b"\r\n":
                raise _BadBody(400, "Invalid chunked request body: chunk data not followed by CRLF.")
        for _ in range(_MAX_TRAILERS + 1):
            line = self.line()
            if line == b"\r\n":
                return bytes(body)
            if _TRAILER_LINE.fullmatch(line) is None:
                raise _BadBody(400, "Invalid chunked request body: malformed trailer field.")
        raise _BadBody(400, "Invalid chunked request body: too many trailer fields.")


def _read_body(headers: Any, reader: _BodyReader) -> bytes:
    """The request body as the headers frame it (``headers``: the request's parsed header fields)."""
    codings_fields: list[str] = headers.get_all("transfer-encoding") or []
    lengths: list[str] = headers.get_all("content-length") or []
    if codings_fields and lengths:
        # Two framings: an intermediary may have used the other one (request smuggling).
        raise _BadBody(400, "A request may not have both Content-Length and Transfer-Encoding.")
    if codings_fields:
        codings = [c.strip(" \t").lower() for field in codings_fields for c in field.split(",")]
        if codings[-1:] != ["chunked"] or codings.count("chunked") > 1:
            # The body's end is unknown (RFC 9112 6.3): chunked must be last, and applied once.
            raise _BadBody(400, "Invalid Transfer-Encoding header: chunked must be the last coding, once.")
        if codings != ["chunked"]:
            raise _BadBody(501, "Transfer codings other than chunked are not implemented.")
        return reader.chunked()
    if not lengths:
        return b""
    value = lengths[0].strip(" \t")
    if len(lengths) != 1 or _DIGITS.fullmatch(value) is None:
        raise _BadBody(400, "Invalid Content-Length header.")
    digits = value.lstrip("0") or "0"
    # Checked by length first: int() refuses numbers of more than 4300 digits.
    size = int(digits) if len(digits) <= 19 else reader.cap + 1
    return reader.exactly(size)


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
        reader = _BodyReader(self.rfile, self.server.max_body)
        try:
            return _read_body(self.headers, reader)
        finally:
            self.server.body_read(reader.used)

    def _answer(self) -> None:
        headers = {key.lower(): value for key, value in self.headers.items()}
        path = self.path.split("?", 1)[0]
        try:
            body = self._body()
        except _BadBody as bad:
            # The rest of the body is unread: answer in the API's shape and close the connection.
            self.close_connection = True
            family = family_for(dialect_of(self.command, path), headers)
            reply = error_reply(family, bad.status, str(bad))
            announced = self.server.backend.announcement(family)
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

    def __init__(self, address: tuple[str, int], backend: LocalBackend, max_body: int) -> None:
        self.backend = backend
        self.max_body = max_body
        self.peak_body_read = 0
        self._peak_lock = threading.Lock()
        super().__init__(address, _Handler)

    def body_read(self, size: int) -> None:
        """Note that one request's body took ``size`` bytes off its connection."""
        with self._peak_lock:
            self.peak_body_read = max(self.peak_body_read, size)


class LocalServer:
    """A :class:`LocalBackend` served over HTTP on ``host:port`` (port 0: a free one).

    Use as a context manager, or :meth:`start` / :meth:`stop`; :meth:`serve_forever` blocks.
    The backend is not closed when the server stops. ``max_body``: the most bytes of one request's
    body, framing included, that the server reads (a larger one is a 413).
    """

    def __init__(
        self,
        backend: LocalBackend | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body: int = MAX_BODY,
    ) -> None:
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise ValueError(f"max_body must be a number of bytes >= 0, not {max_body!r}")
        self.backend = backend if backend is not None else LocalBackend()
        self._server = _Server((host, port), self.backend, max_body)
        self._thread: threading.Thread | None = None

    @property
    def peak_body_read(self) -> int:
        """The most bytes any one request's body has taken off its connection so far, framing
        included (never more than ``max_body``): what the server held for a body at most."""
        return self._server.peak_body_read

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

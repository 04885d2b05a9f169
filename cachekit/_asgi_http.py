"""uvicorn's httptools protocol (llhttp: strict and fast) with two things cachekit's servers need.

* The end of a client's input is the client gone, as uvicorn (and nginx) take it: what it asked is
  cancelled (a proxied call upstream included), never answered into a closed connection.
* A request the parser refuses (malformed framing) is answered by the app's ``cachekit_refusal``
  (set on the uvicorn config by :func:`cachekit._asgi.server_config`): an API error document an SDK
  can read, instead of uvicorn's plain text, sent after the answers to the requests pipelined before
  it; nothing more is read from that connection.
* A graceful shutdown sets the settings' ``cachekit_draining`` event when it reaches a connection
  with an answer still in flight (which then finishes).
* A request's head is bounded: at most :data:`MAX_FIELDS` header fields, :data:`MAX_TRAILERS` trailer
  fields and :data:`MAX_HEAD_BYTES` bytes of target and fields (a 400 beyond).

A module of its own, imported only when a server starts (it imports uvicorn at the top, so that the
class is defined once at module level and travels to worker processes with the settings).
"""

from __future__ import annotations

import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["Protocol"]

logger = logging.getLogger("cachekit.http")

#: The most header fields of one request, the most trailer fields after a chunked body, and the most
#: bytes of a request's target and header fields: llhttp streams them through callbacks without a
#: bound of its own, and uvicorn keeps every field (trailers too) in the request's scope.
MAX_FIELDS = 256
MAX_TRAILERS = 64
MAX_HEAD_BYTES = 256 * 1024

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large", 501: b"Not Implemented"}


class Protocol(HttpToolsProtocol):
    """One HTTP/1.1 connection (see the module's docstring)."""

    _refused: bytes | None = None
    #: The cycle whose app runs (uvicorn's ``cycle`` is the newest one parsed).
    _running: Any = None

    _fields = 0
    _trailers = 0
    _head_bytes = 0
    _in_body = False

    def on_message_begin(self) -> None:
        self._fields = self._trailers = self._head_bytes = 0
        self._in_body = False
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # Raising here makes llhttp refuse the message (a parser error: send_400_response).
        self._count(len(name) + len(value))
        if self._in_body:
            self._trailers += 1
            if self._trailers > MAX_TRAILERS:
                raise ValueError("too many trailer fields")
            return  # trailers are read and dropped, as RFC 9112 lets a server do
        self._fields += 1
        if self._fields > MAX_FIELDS:
            raise ValueError("too many header fields")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_body = True
        super().on_headers_complete()

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError("request head too large")

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    def _cut(self, newest: Any) -> None:
        """The newest request will never get its body: its app stops waiting, and it is never run."""
        newest.disconnected = True
        newest.message_event.set()
        kept = [item for item in self.pipeline if item[0] is not newest]
        self.pipeline.clear()
        self.pipeline.extend(kept)

    def send_400_response(self, msg: str) -> None:
        answer = getattr(self.config, "cachekit_refusal", None)
        if answer is None:
            super().send_400_response(msg)
            return
        logger.debug("refused a request the HTTP parser could not read: %s", msg)
        try:
            self._refused = self._refusal(answer)
        except Exception:  # never leave the connection hanging for want of a pretty answer
            logger.warning("refusal handler failed", exc_info=True)
            super().send_400_response(msg)
            return
        newest = self.cycle
        if newest is not None and not newest.response_complete and newest.more_body:
            self._cut(newest)
        self.flow.pause_reading()
        self._refuse_when_idle()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts the next pipelined request, if any
        self._refuse_when_idle()

    def shutdown(self) -> None:
        # The server is shutting down gracefully: this connection's answer in flight finishes first.
        draining = getattr(self.config, "cachekit_draining", None)
        if draining is not None:
            draining.set()
        super().shutdown()

    def _refuse_when_idle(self) -> None:
        running = self._running
        busy = self.pipeline or (
            running is not None and not running.response_complete and not running.disconnected
        )
        if self._refused is None or busy or self.transport.is_closing():
            return
        self.transport.write(self._refused)
        self.transport.close()

    def _refusal(self, answer: Any) -> bytes:
        path = bytes(getattr(self, "url", b"") or b"/").split(b"?", 1)[0].decode("latin-1")
        headers: dict[str, str] = {}
        for raw_name, raw_value in getattr(self, "headers", None) or ():
            headers[raw_name.decode("latin-1").lower()] = raw_value.decode("latin-1")
        status, fields, content = answer(path, headers)
        out = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
        for name, value in fields:
            if name.lower() not in ("content-length", "connection"):
                out.append(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")))
        out.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(content))
        out.append(content)
        return b"".join(out)

"""``cachekit serve`` reads every request body within its cap, whatever the framing says.

A real :class:`LocalServer` on loopback with a small body cap, spoken to over a raw socket so that
any framing can be sent: ``Content-Length`` and chunked bodies, chunk sizes, extensions and trailers,
and several requests pipelined on one keep-alive connection. The HTTP parsing is uvicorn's (llhttp);
the oracle is written from RFC 9112 and docs/local.md, not from the server's code:

* a request whose framing is valid and whose body (its bytes, not the chunk framing around them)
  fits the cap is answered 200, with the answer the backend gives for exactly that body (so no byte
  of one pipelined request is read as part of another);
* a valid framing over the cap is a 413; a malformed one a 400 or 413, an unsupported transfer coding
  a 400 or 501 (RFC 9112 6.3 asks 400 where chunked is not the final coding); every refusal is an
  API error document; after it the server answers nothing more on that connection (it closes it);
* llhttp is stricter than RFC 9112 in one place: whitespace around a chunk extension's ``;`` or
  ``=`` (the RFC's BWS) is refused, a hardening against request smuggling. Such a request is
  answered correctly or refused, never misread;
* the server never takes more than the cap of one body (:attr:`LocalServer.peak_body_read`; the
  parser stops reading a connection whose body the app has not taken), so what it holds for a body
  is bounded by the cap, not by what the client sends.

Each example sends its bytes and reads the answers it expects, or until the server closes the
connection (as it does after a refusal). A body that never comes whole is refused when the server's
body timeout (short here) passes; nothing else depends on time.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import tiktoken  # noqa: F401 - LocalBackend() below counts with it: without it, the module skips
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cachekit.local import LocalBackend, LocalServer

CAP = 8192
MODEL = "claude-sonnet-4-5"
HEAD = b"POST /v1/messages HTTP/1.1\r\nHost: local\r\nx-api-key: k\r\ncontent-type: application/json\r\n"


@functools.cache
def _oracle() -> LocalBackend:
    """Backends answer the scripted engine's deterministic reply for a body: this one is the oracle
    (made on first use, not at import: collection must not need the tokens extra)."""
    return LocalBackend()


@pytest.fixture
def server() -> Iterator[LocalServer]:
    """A server per test, so that what one test made it read is not charged to another."""
    # A short body timeout: a request whose body never comes whole (truncated) is answered 408 soon.
    with LocalServer(LocalBackend(), max_body=CAP, body_timeout=0.5) as running:
        yield running


def body_of(marker: int, padding: int) -> bytes:
    request = {
        "model": MODEL,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": f"req{marker} " + "x" * padding}],
    }
    return orjson.dumps(request)


def expected_text(body: bytes) -> str:
    reply = _oracle().handle("POST", "/v1/messages", {"x-api-key": "k"}, body, host="local")
    assert reply.status == 200
    text: str = orjson.loads(reply.content)["content"][0]["text"]
    return text


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


def _parsed(received: bytes) -> tuple[list[Response], bytes]:
    """The whole responses at the start of ``received``, and what follows them."""
    responses: list[Response] = []
    while True:
        head, separator, rest = received.partition(b"\r\n\r\n")
        if not separator:
            return responses, received
        lines = head.split(b"\r\n")
        fields = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(fields[b"content-length"])
        if len(rest) < length:
            return responses, received
        responses.append(Response(int(lines[0].split(b" ")[1]), rest[:length]))
        received = rest[length:]


def exchange(server: LocalServer, data: bytes, answers: int) -> list[Response]:
    """Send ``data`` and parse responses until ``answers`` of them came or the server closed the
    connection. (The client does not half-close: the end of its input is the client gone.)"""
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        # A broken pipe or a reset: the server refused the framing and closed before taking
        # everything (allowed).
        with contextlib.suppress(OSError):
            sock.sendall(data)
        received, responses = b"", list[Response]()
        try:
            while len(responses) < answers and (chunk := sock.recv(65536)):
                received += chunk
                responses, _ = _parsed(received)
        except ConnectionResetError:
            pass  # closed with bytes of ours unread: a reset, after what it had sent
    responses, rest = _parsed(received)
    assert not rest, f"a truncated response: {rest[:200]!r}"
    return responses


# -- the "-1" chunk size: it used to read the connection to its end, past the cap ------------------


def test_a_negative_chunk_size_is_refused_without_reading_on(server: LocalServer) -> None:
    flood = b"x" * (8 * CAP)  # what a read(-1) would take in: all of it, to the end of the stream
    data = HEAD + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n" + flood
    responses = exchange(server, data, 1)
    assert [r.status for r in responses] == [400]
    assert orjson.loads(responses[0].body)["type"] == "error"
    assert server.peak_body_read <= CAP


# -- framing fuzz ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wire:
    """One request on the wire and what the server must answer to it."""

    data: bytes
    #: The statuses allowed; a 200 is checked against the oracle's answer for ``body``.
    expect: frozenset[int]
    body: bytes
    #: A malformed request must be the last on its connection (a wrong length would eat the next).
    last: bool = False


OK = frozenset({200})
REFUSED = frozenset({400, 413})
#: A body that never comes whole: refused once the server stops waiting for it.
STALLED = frozenset({400, 408, 413})
#: Valid by RFC 9112, refused by llhttp (whitespace in a chunk extension): answered right, or refused.
STRICTER = frozenset({200, 400})


@st.composite
def hex_size(draw: st.DrawFn, size: int) -> bytes:
    digits = f"{size:x}"
    digits = "".join(c.upper() if draw(st.booleans()) else c for c in digits)
    return (b"0" * draw(st.integers(0, 3))) + digits.encode()


_TOKENS = st.text(alphabet="abcXYZ019!#$%&'*+-.^_`|~", min_size=1, max_size=8)
_QUOTED = st.text(alphabet='ab c;=,\t\\"', max_size=8).map(
    lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
)


@st.composite
def extensions(draw: st.DrawFn, spaces: bool = False) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 2))):
        space = draw(st.sampled_from([" ", "\t "] if spaces else [""]))
        name = draw(_TOKENS)
        value = draw(st.none() | _TOKENS | _QUOTED)
        parts.append(f"{space};{space}{name}" + ("" if value is None else f"{space}={space}{value}"))
    return "".join(parts).encode()


@st.composite
def trailers(draw: st.DrawFn) -> bytes:
    count = draw(st.integers(0, 3))
    values = st.text(alphabet="abc 012\t:;,", max_size=12).map(str.strip)
    return b"".join(f"X-T{i}: {draw(values)}\r\n".encode() for i in range(count))


@st.composite
def chunked(draw: st.DrawFn, body: bytes) -> bytes:
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=6)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
    out = b"".join(draw(hex_size(len(p))) + draw(extensions()) + b"\r\n" + p + b"\r\n" for p in pieces)
    return out + draw(hex_size(0)) + draw(extensions()) + b"\r\n" + draw(trailers()) + b"\r\n"


@st.composite
def valid(draw: st.DrawFn, marker: int) -> Wire:
    body = body_of(marker, draw(st.integers(0, CAP + 200)))
    if draw(st.booleans()):
        value = draw(st.sampled_from(["{}", " {} ", "0{}", "\t{}"])).format(len(body))
        wire, framing = body, f"Content-Length: {value}\r\n".encode()
    else:
        coding = draw(st.sampled_from(["chunked", "Chunked", " chunked", "CHUNKED "]))
        wire, framing = draw(chunked(body)), f"Transfer-Encoding: {coding}\r\n".encode()
    # The cap is on the body's bytes: llhttp takes the chunk framing off as it reads, keeping none of it.
    return Wire(HEAD + framing + b"\r\n" + wire, OK if len(body) <= CAP else frozenset({413}), body)


KINDS = [
    "size",
    "huge size",
    "extension",
    "long line",
    "bare LF",
    "no CRLF after data",
    "short data",
    "long data",
    "trailer",
    "many trailers",
    "length",
    "two lengths",
    "huge length",
    "both",
    "coding",
    "unknown coding",
    "truncated",
    "spaced extension",
]
_BAD_SIZES = [
    b"-1",
    b"-0",
    b"+5",
    b"0x5",
    b" 5",
    b"5 ",
    b"\t5",
    b"5_0",
    b"1g",
    b"",
    b"\xd9\xa5",
    b"5;",
    b"5;=x",
]
_BAD_EXTENSIONS = [b";", b"; =x", b';a="open', b";a=b c", b";a\x00", b';a="\x01"']
_BAD_LENGTHS = ["-1", "+5", "5_0", "0x10", "1e3", "", "5 5", "5, 5", "\u0665"]


@st.composite
def malformed(draw: st.DrawFn, marker: int, kind: str) -> Wire:
    body = body_of(marker, draw(st.integers(0, 300)))
    te = b"Transfer-Encoding: chunked\r\n"
    size = f"{len(body):x}".encode()
    if kind == "size":
        bad = draw(st.sampled_from(_BAD_SIZES))
        return Wire(HEAD + te + b"\r\n" + bad + b"\r\n" + body + b"\r\n0\r\n\r\n", REFUSED, body)
    if kind == "huge size":
        huge = draw(
            st.sampled_from([b"ffffffffffffffffff", b"7fffffffffffffff", b"1" + b"0" * 40, b"%x" % (CAP + 1)])
        )
        # Past the cap: a 413, or a 400 where the size overflows the parser's 64 bits.
        return Wire(HEAD + te + b"\r\n" + huge + b"\r\n" + body + b"\r\n0\r\n\r\n", REFUSED, body)
    if kind == "extension":
        bad = draw(st.sampled_from(_BAD_EXTENSIONS))
        return Wire(HEAD + te + b"\r\n" + size + bad + b"\r\n" + body + b"\r\n0\r\n\r\n", REFUSED, body)
    if kind == "long line":
        # llhttp reads a chunk extension through without keeping it (nothing of it is held, and the
        # body timeout bounds how long a client may feed one): answered right, or refused.
        line = size + b";a=" + b"b" * 5000
        return Wire(HEAD + te + b"\r\n" + line + b"\r\n" + body + b"\r\n0\r\n\r\n", STRICTER, body, last=True)
    if kind == "bare LF":
        return Wire(HEAD + te + b"\r\n" + size + b"\n" + body + b"\r\n0\r\n\r\n", REFUSED, body)
    if kind == "no CRLF after data":
        after = draw(st.sampled_from([b"\n", b"", b"\r", b"XX"]))
        return Wire(HEAD + te + b"\r\n" + size + b"\r\n" + body + after + b"0\r\n\r\n", REFUSED, body)
    if kind == "short data":  # the size promises more than is sent
        wire = b"%x\r\n" % (len(body) + draw(st.integers(1, 50))) + body + b"\r\n0\r\n\r\n"
        return Wire(HEAD + te + b"\r\n" + wire, STALLED, body, last=True)
    if kind == "long data":  # the size promises less than is sent
        wire = b"%x\r\n" % (len(body) - draw(st.integers(1, 10))) + body + b"\r\n0\r\n\r\n"
        return Wire(HEAD + te + b"\r\n" + wire, REFUSED, body)
    if kind == "trailer":
        bad = draw(st.sampled_from([b"NoColon", b" X: folded", b"X : y", b"X\x00: y", b": y", b"X: a\rb"]))
        return Wire(
            HEAD + te + b"\r\n" + size + b"\r\n" + body + b"\r\n0\r\n" + bad + b"\r\n\r\n", REFUSED, body
        )
    if kind == "many trailers":
        many = b"".join(b"X-%d: y\r\n" % i for i in range(65))
        return Wire(
            HEAD + te + b"\r\n" + size + b"\r\n" + body + b"\r\n0\r\n" + many + b"\r\n", REFUSED, body
        )
    if kind == "length":
        value = draw(st.sampled_from(_BAD_LENGTHS))
        return Wire(HEAD + f"Content-Length: {value}\r\n\r\n".encode() + body, REFUSED, body)
    if kind == "two lengths":
        other = draw(st.sampled_from([len(body), len(body) + 1]))
        framing = f"Content-Length: {len(body)}\r\nContent-Length: {other}\r\n\r\n".encode()
        return Wire(HEAD + framing + body, REFUSED, body)
    if kind == "huge length":
        value = draw(st.sampled_from([str(CAP + 1), "9" * 30, "1" + "0" * 5000]))
        # Past the cap: a 413, or a 400 where the length overflows the parser's 64 bits.
        return Wire(HEAD + f"Content-Length: {value}\r\n\r\n".encode() + body, REFUSED, body)
    if kind == "both":
        framing = f"Content-Length: {len(body)}\r\n".encode() + te
        if draw(st.booleans()):
            framing = te + f"Content-Length: {len(body)}\r\n".encode()
        return Wire(
            HEAD + framing + b"\r\n" + size + b"\r\n" + body + b"\r\n0\r\n\r\n", frozenset({400}), body
        )
    if kind == "coding":  # chunked is not the (only) last coding: the length is unknown
        coding = draw(
            st.sampled_from(["gzip", "chunked, gzip", "identity", "chunked, chunked", "chunked;q=1"])
        )
        framing = f"Transfer-Encoding: {coding}\r\n\r\n".encode()
        return Wire(HEAD + framing + size + b"\r\n" + body + b"\r\n0\r\n\r\n", frozenset({400}), body)
    if kind == "unknown coding":  # framed by chunked, but the body is coded in a way not implemented
        framing = b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        if draw(st.booleans()):
            framing = b"Transfer-Encoding: gzip, chunked\r\n\r\n"
        return Wire(HEAD + framing + size + b"\r\n" + body + b"\r\n0\r\n\r\n", frozenset({400, 501}), body)
    if kind == "spaced extension":
        ext = draw(extensions(spaces=True)) or b" ;a"
        wire = HEAD + te + b"\r\n" + size + ext + b"\r\n" + body + b"\r\n0\r\n\r\n"
        return Wire(wire, STRICTER, body, last=True)
    assert kind == "truncated"  # the client stops before the declared length
    framing = f"Content-Length: {len(body) + draw(st.integers(1, 100))}\r\n\r\n".encode()
    return Wire(HEAD + framing + body, STALLED, body, last=True)


@st.composite
def connections(draw: st.DrawFn, kind: str | None) -> list[Wire]:
    """One to four valid requests, one of them replaced by a malformed one of ``kind`` (if any)."""
    count = draw(st.integers(1, 4))
    wires = [draw(valid(i)) for i in range(count)]
    if kind is not None:
        at = draw(st.integers(0, count - 1))
        wires[at] = draw(malformed(at, kind))
        if wires[at].last:
            del wires[at + 1 :]
    return wires


def check(server: LocalServer, wires: list[Wire]) -> None:
    data = b"".join(w.data for w in wires)
    if any(w.expect != OK for w in wires) and not wires[-1].last:
        # Nothing after a refused request may be read: bytes enough that reading on to the end of
        # the stream would pass the cap.
        data += b"x" * (2 * CAP)
    # The answers expected: one per request up to and including the first refused one.
    expected: list[Wire] = []
    for wire in wires:
        expected.append(wire)
        if wire.expect != OK:
            break
    responses = exchange(server, data, len(expected))
    assert len(responses) <= len(expected)
    for wire, response in zip(expected, responses, strict=False):
        assert response.status in wire.expect, (response.status, response.body[:200], wire.data[:300])
        if response.status == 200:
            assert orjson.loads(response.body)["content"][0]["text"] == expected_text(wire.body)
        else:
            assert orjson.loads(response.body)["type"] == "error"
    # Every request that is answered at all is answered in order; only a refused one may go unanswered
    # (the server closed the connection with bytes of it unread, and the reset can overtake its answer).
    assert len(responses) >= len(expected) - (expected[-1].expect != OK)
    event(f"answered {len(responses)} of {len(expected)}")
    assert server.peak_body_read <= CAP


_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


@settings(max_examples=80, **_SETTINGS)
@given(data=st.data())
def test_valid_framings_are_answered_in_order_within_the_cap(
    server: LocalServer, data: st.DataObject
) -> None:
    check(server, data.draw(connections(None)))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=12, **_SETTINGS)
@given(data=st.data())
def test_malformed_framings_are_refused_within_the_cap(
    server: LocalServer, kind: str, data: st.DataObject
) -> None:
    check(server, data.draw(connections(kind)))

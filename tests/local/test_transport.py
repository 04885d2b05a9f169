"""Transport (issue 29 item 4): compressed request bodies decoded, bounded; a Responses WebSocket
attempt answered so the client falls back to HTTP at once."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from typing import Any

import httpx2
import orjson
import pytest
import websockets.exceptions
import zstandard

from cachekit.errors import RequestRefusedError
from cachekit.local import LocalBackend, LocalServer
from cachekit.local.encoding import decoded_body
from tests.local.conftest import GPT, gpt_client

BODY = orjson.dumps({"model": GPT, "input": "What's compressed?"})


def _post(server: LocalServer, content: bytes, encoding: str) -> httpx2.Response:
    headers = {"content-encoding": encoding, "content-type": "application/json", "authorization": "Bearer k"}
    with httpx2.Client(base_url=server.url) as http:
        return http.post("/v1/responses", content=content, headers=headers)


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("zstd", lambda data: zstandard.ZstdCompressor().compress(data)),
        ("gzip, zstd", lambda data: zstandard.ZstdCompressor().compress(gzip.compress(data))),
    ],
)
def test_compressed_bodies_are_decoded(server: LocalServer, encoding: str, compress: Any) -> None:
    answered = _post(server, compress(BODY), encoding)
    assert answered.status_code == 200, answered.text
    assert "What's compressed?" in answered.json()["output"][0]["content"][0]["text"]


def test_a_decompression_bomb_stops_at_the_cap() -> None:
    """The decoded body is never allowed past the cap: a bomb is a 413 whatever its codec, and what
    was decoded of it before the refusal stays near the cap (the allocations traced), far from the
    bomb's size."""
    cap = 1024 * 1024
    bomb = b"{" + b" " * (32 * cap)
    for encoding, packed in (
        ("gzip", gzip.compress(bomb)),
        ("zstd", zstandard.ZstdCompressor().compress(bomb)),
    ):
        assert len(packed) < 64 * 1024
        tracemalloc.start()
        try:
            with pytest.raises(RequestRefusedError) as refused:
                decoded_body({"content-encoding": encoding}, packed, cap=cap)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert refused.value.status == 413, encoding
        assert peak < 4 * cap, (encoding, peak)
    backend = LocalBackend(max_body=1024 * 1024)
    reply = backend.handle("POST", "/v1/responses", {"content-encoding": "gzip"}, gzip.compress(bomb))
    assert reply.status == 413


@pytest.mark.parametrize(
    ("encoding", "content", "status"),
    [
        ("gzip", b"not gzip", 400),
        ("gzip", gzip.compress(BODY)[:-6], 400),  # cut short
        ("zstd", b"not zstd at all", 400),
        ("br", BODY, 415),
    ],
)
def test_bodies_that_are_not_what_their_coding_says(
    server: LocalServer, encoding: str, content: bytes, status: int
) -> None:
    refused = _post(server, content, encoding)
    assert refused.status_code == status
    assert refused.json()["error"]["type"] == "invalid_request_error"


def test_a_responses_websocket_attempt_is_told_to_use_http(server: LocalServer) -> None:
    """The openai SDK's ``responses.connect()`` (the WebSocket mode) gets the 426 that makes a client
    fall back to HTTP at once, and the same client's HTTP request is answered."""
    before = server.backend.stats.requests
    with gpt_client(server, key="k", strict=False) as gpt:
        with (
            pytest.raises(websockets.exceptions.InvalidStatus) as refused,
            gpt.responses.connect() as connection,
        ):
            connection.close()
        assert refused.value.response.status_code == 426
        assert b"POST /v1/responses" in refused.value.response.body
        assert server.backend.stats.requests == before + 1  # one answer, no retries
        assert gpt.responses.create(model=GPT, input="Over HTTP then").status == "completed"

"""The transports themselves: default inner transport, real HTTP on loopback, raw httpx, failures."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import httpx2
import pytest

import cachekit
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.requests import openai_chat


class _Handler(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self) -> None:
        type(self).calls += 1
        length = int(self.headers["content-length"])
        body = json.loads(self.rfile.read(length))
        answer = json.dumps(
            {
                "id": f"chatcmpl-{type(self).calls}",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.send_header("set-cookie", "session=abc")
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.calls = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_default_inner_transport_talks_real_http(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import openai

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    client = openai.OpenAI(
        api_key="sk-x",
        base_url=server,
        http_client=httpx2.Client(transport=cachekit.CachingTransport(cache=MemoryStore())),
    )
    first = client.chat.completions.with_raw_response.create(**openai_chat())
    second = client.chat.completions.with_raw_response.create(**openai_chat())
    assert _Handler.calls == 1
    assert second.parse().id == first.parse().id == "chatcmpl-1"
    assert "set-cookie" not in second.headers  # cookies are never replayed to another caller
    client.close()


def test_async_default_inner_transport_talks_real_http(server: str) -> None:
    async def main() -> list[str]:
        # An httpx2 transport, which plain httpx drives by duck typing (the same methods).
        transport: Any = cachekit.AsyncCachingTransport(cache=MemoryStore())
        async with httpx.AsyncClient(transport=transport, base_url=server) as client:
            ids = []
            for _ in range(3):
                r = await client.post(
                    "/chat/completions", json=openai_chat(), headers={"authorization": "Bearer sk-x"}
                )
                ids.append(r.json()["id"] + ":" + r.headers["x-cachekit-cache"])
            return ids

    assert asyncio.run(main()) == ["chatcmpl-1:miss", "chatcmpl-1:hit", "chatcmpl-1:hit"]
    assert _Handler.calls == 1


@pytest.mark.parametrize("library", [httpx, httpx2])
def test_default_inner_transport_honours_environment_proxies(
    library: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    transport = cachekit.CachingTransport(cache=MemoryStore())
    proxied = transport._inner_for(library.Request("POST", "https://api.openai.com/v1/x"), is_async=False)
    direct = transport._inner_for(library.Request("POST", "https://internal.example/v1/x"), is_async=False)
    assert type(proxied._pool).__name__ == "HTTPProxy"
    assert type(direct._pool).__name__ == "ConnectionPool"
    # The SDKs' connection limits are kept.
    assert direct._pool._max_connections == 1000
    assert direct._pool._max_keepalive_connections == 100
    transport.close()


@pytest.mark.parametrize("library", [httpx, httpx2])
def test_raw_httpx_clients_of_both_libraries(library: Any) -> None:
    upstream = FakeUpstream()
    store = MemoryStore()
    with library.Client(transport=cachekit.CachingTransport(upstream, cache=store)) as client:
        answers = [
            client.post(
                "https://api.openai.com/v1/chat/completions",
                json=openai_chat(),
                headers={"authorization": "Bearer k"},
            )
            for _ in range(2)
        ]
    assert [type(a) for a in answers] == [library.Response, library.Response]
    assert [a.headers["x-cachekit-cache"] for a in answers] == ["miss", "hit"]
    assert answers[0].json() == answers[1].json()
    assert upstream.calls == 1


def test_multipart_upload_passes_through() -> None:
    upstream = FakeUpstream()
    store = MemoryStore()
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=store)) as client:
        client.post("https://api.openai.com/v1/chat/completions", files={"file": ("a.txt", b"data")})
        client.post(
            "https://api.openai.com/v1/chat/completions",
            content=b"not json",
            headers={"content-type": "application/json"},
        )
    assert upstream.calls == 2
    assert len(store) == 0


class _FailingStore(MemoryStore):
    def get(self, key: str) -> bytes | None:
        raise cachekit.StoreUnavailableError("store is down")

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        raise cachekit.StoreUnavailableError("store is down")


def test_a_failing_store_never_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    upstream = FakeUpstream()
    transport = cachekit.CachingTransport(upstream, cache=_FailingStore())
    with httpx2.Client(transport=transport) as client:
        for _ in range(2):
            r = client.post("https://api.openai.com/v1/chat/completions", json=openai_chat())
            assert r.status_code == 200
            assert r.json()["object"] == "chat.completion"
    assert upstream.calls == 2
    # lookup, store, lookup fail: three failures in a row open the breaker, so the last store is skipped
    assert transport.stats.store_errors == 3
    assert transport.stats.store_skips == 1
    assert any("store is down" in r.getMessage() for r in caplog.records)


def test_network_errors_propagate_unchanged() -> None:
    class Down:
        def handle_request(self, request: Any) -> Any:
            raise httpx2.ConnectError("connection refused", request=request)

        def close(self) -> None:
            pass

    transport = cachekit.CachingTransport(Down(), cache=MemoryStore())
    with httpx2.Client(transport=transport) as client, pytest.raises(httpx2.ConnectError, match="refused"):
        client.post("https://api.openai.com/v1/chat/completions", json=openai_chat())


def test_owned_stores_are_closed_with_the_transport(tmp_path: Any) -> None:
    transport = cachekit.CachingTransport(FakeUpstream(), cache=f"sqlite:///{tmp_path}/c.db")
    store = transport.cache.store
    transport.close()
    with pytest.raises(cachekit.StoreError):
        store.get("k")  # type: ignore[union-attr]
    shared = MemoryStore()
    cachekit.CachingTransport(FakeUpstream(), cache=shared).close()
    shared.set("still", b"open")
    assert shared.get("still") == b"open"

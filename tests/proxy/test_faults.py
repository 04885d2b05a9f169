"""Faults through the proxy: the upstream's 429 and 5xx answers and cut streams reach the client as the
upstream sent them (and are never stored); a store that is down leaves every request served, uncached.

The upstream here is :class:`cachekit.testing.FakeUpstream`, in process as the proxy's upstream
transport: it scripts the failures. The proxy, its HTTP server and the SDKs are real.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from cachekit.proxy import ProxyConfig, ProxyServer
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client
from tests.proxy.conftest import CHAT_MODEL, MODEL

BASE = "http://upstream.invalid"
PARAMS = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "fault"}]}


#: The fake fixture: a proxy over a :class:`FakeUpstream`, and what it stores.
Fake = tuple[ProxyServer, FakeUpstream, MemoryStore]


@pytest.fixture
def fake() -> Iterator[Fake]:
    upstream = FakeUpstream()
    store = MemoryStore()
    config = ProxyConfig(port=0, anthropic_base_url=BASE, openai_base_url=BASE + "/v1", ledger=False)
    with ProxyServer(config, store=store, transport=upstream) as proxy:
        yield proxy, upstream, store


def _claude(proxy: ProxyServer) -> Any:
    return sdk_client("anthropic", plain=True, api_key="sk-f", base_url=proxy.url)


def test_a_429_passes_through_as_sent_and_is_never_stored(fake: Fake) -> None:
    proxy, upstream, _store = fake
    upstream.fail_next(429, headers={"retry-after": "7"}, message="slow down")
    with _claude(proxy) as client:
        with pytest.raises(anthropic.RateLimitError) as limited:
            client.messages.create(**PARAMS)
        raw = client.messages.with_raw_response.create(**PARAMS)
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.body["error"] == {"type": "rate_limit_error", "message": "slow down"}  # type: ignore[index]
    assert raw.headers["x-cachekit-cache"] == "miss"  # the error was not stored: asked again
    assert upstream.calls == 2


@pytest.mark.parametrize("status", [500, 503, 529])
def test_5xx_passes_through_as_sent(fake: tuple, status: int) -> None:
    proxy, upstream, _ = fake
    upstream.fail_next(status, message="upstream trouble")
    with (
        sdk_client("openai", plain=True, api_key="sk-f", base_url=proxy.url + "/v1") as client,
        pytest.raises(openai.APIStatusError) as failed,
    ):
        client.chat.completions.create(model=CHAT_MODEL, messages=[{"role": "user", "content": "x"}])
    assert failed.value.status_code == status
    assert failed.value.body["message"] == "upstream trouble"  # type: ignore[index]


def test_a_stream_that_ends_in_an_error_event_passes_through_and_is_never_stored(fake: Fake) -> None:
    proxy, upstream, store = fake
    upstream.break_next_stream(after=2, how="error")
    with _claude(proxy) as client:
        with pytest.raises(anthropic.APIStatusError), client.messages.stream(**PARAMS) as events:
            events.get_final_message()
        assert len(store) == 0
        with client.messages.stream(**PARAMS) as events:
            events.get_final_message()
            assert events.response.headers["x-cachekit-cache"] == "miss"
    assert upstream.calls == 2
    assert len(store) == 1


def test_a_stream_cut_upstream_is_cut_for_the_client_and_never_stored(fake: Fake) -> None:
    proxy, upstream, store = fake
    upstream.break_next_stream(after=2, how="disconnect")
    with httpx2.Client(base_url=proxy.url) as http:
        body = {**PARAMS, "stream": True}
        with http.stream("POST", "/v1/messages", json=body, headers={"x-api-key": "k"}) as response:
            assert response.status_code == 200
            with pytest.raises(httpx2.RemoteProtocolError):  # the chunked body never ends properly
                response.read()
    assert len(store) == 0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_redis_down_is_served_uncached() -> None:
    pytest.importorskip("redis", reason="the redis extra")
    upstream = FakeUpstream()
    config = ProxyConfig(
        port=0,
        anthropic_base_url=BASE,
        openai_base_url=BASE + "/v1",
        store=f"redis://127.0.0.1:{_closed_port()}/0",
        ledger=False,
    )
    with ProxyServer(config, transport=upstream) as proxy, _claude(proxy) as client:
        answers = [client.messages.with_raw_response.create(**PARAMS) for _ in range(4)]
        health = httpx2.get(proxy.url + "/healthz").json()
    assert [a.status_code for a in answers] == [200] * 4
    assert {a.headers["x-cachekit-cache"] for a in answers} == {"bypass"}
    assert {a.headers["x-cachekit-bypass-reason"] for a in answers} == {"store-unavailable"}
    assert upstream.calls == 4
    assert health["store"].startswith("unavailable")  # the breaker opened: no timeout paid per call

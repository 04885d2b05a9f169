"""Regressions found in review: each test failed before its fix."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import httpx2
import pytest

import cachekit
from cachekit.local import ManualClock
from cachekit.pipeline.flights import Flight, Flights, WaitResult
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.requests import anthropic_messages, openai_chat


def _transport(upstream: Any, **config: Any) -> cachekit.CachingTransport:
    return cachekit.CachingTransport(
        upstream, cache=cachekit.CacheConfig(store=MemoryStore(), ledger=False, **config)
    )


def test_every_credential_header_partitions() -> None:
    """A gateway's fixed x-api-key must not make two users' bearer tokens share entries."""
    upstream = FakeUpstream()
    with httpx2.Client(transport=_transport(upstream)) as client:
        base = {"anthropic-version": "2023-06-01", "x-api-key": "gateway-placeholder"}
        for user in ("alice", "bob"):
            r = client.post(
                "https://api.anthropic.com/v1/messages",
                json=anthropic_messages(),
                headers={**base, "authorization": f"Bearer {user}"},
            )
            assert r.headers["x-cachekit-cache"] == "miss"
    assert upstream.calls == 2


def test_configured_credential_headers_partition() -> None:
    upstream = FakeUpstream()
    transport = _transport(upstream, credential_headers=("X-Portkey-Api-Key",))
    with httpx2.Client(transport=transport) as client:
        outcomes = [
            client.post(
                "https://api.openai.com/v1/chat/completions",
                json=openai_chat(),
                headers={"x-portkey-api-key": who},
            ).headers["x-cachekit-cache"]
            for who in ("alice", "bob", "alice")
        ]
    assert outcomes == ["miss", "miss", "hit"]


def test_a_copy_with_a_new_http_client_keeps_the_cache() -> None:
    upstream = FakeUpstream()
    config = cachekit.CacheConfig(store=MemoryStore(), tenant="acme", ttl=60, ledger=False)
    client = cachekit.Anthropic(api_key="k", cache=config, http_client=httpx2.Client(transport=upstream))
    for copied in (
        client.with_options(http_client=httpx2.Client(transport=upstream)),
        client.copy(max_retries=1),
    ):
        assert cachekit.cache_of(copied) is cachekit.cache_of(client)
    client.messages.create(**anthropic_messages())
    copied = client.with_options(http_client=httpx2.Client(transport=upstream))
    assert (
        copied.messages.with_raw_response.create(**anthropic_messages()).headers["x-cachekit-cache"] == "hit"
    )


def test_a_stream_dropped_unread_does_not_hold_its_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    # The dropped stream's flight lands from its finalizer, on cachekit's worker thread. The test
    # waits for that landing (an event, not a timeout), then makes the identical request: it must
    # find no flight to wait for. Before the fix the flight never landed, and the next request waited
    # for the lost leader until it gave up (or, from the same thread, went upstream beside it).
    landed = threading.Event()
    land = Flights.land

    def recording_land(flights: Flights, key: str, flight: Flight) -> None:
        land(flights, key, flight)
        landed.set()

    waits: list[WaitResult] = []
    wait = Flight.wait

    def recording_wait(flight: Flight, timeout: float) -> WaitResult:
        waits.append(wait(flight, timeout))
        return waits[-1]

    monkeypatch.setattr(Flights, "land", recording_land)
    monkeypatch.setattr(Flight, "wait", recording_wait)
    upstream = FakeUpstream()
    client = cachekit.OpenAI(
        api_key="k",
        http_client=httpx2.Client(transport=upstream),
        cache=cachekit.Cache(
            cachekit.CacheConfig(store=MemoryStore(), ledger=False, coalesce_timeout=3600),
            clock=ManualClock(),  # nobody gives up on a flight, nor judges one stalled
        ),
    )
    stream = client.chat.completions.create(**openai_chat(), stream=True)
    del stream
    gc.collect()
    assert landed.wait(60)  # a guard against a hang: only the landing sets it
    client.chat.completions.create(**openai_chat())
    assert waits == []  # no flight was left to wait for
    assert upstream.calls == 2
    client.close()


def test_a_leader_cancelled_while_looking_up_lands_its_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    # Any wait for a flight is recorded and refused at once ("own": the caller goes upstream), so a
    # flight the cancelled leader left behind shows up as a wait, not as a pause of coalesce_timeout
    # that ends in the same upstream call (which is how this test passed without the fix).
    waits: list[Flight] = []

    async def refused_wait(flight: Flight, timeout: float) -> WaitResult:
        waits.append(flight)
        return "own"

    monkeypatch.setattr(Flight, "wait_async", refused_wait)

    class HeldStore(MemoryStore):
        """Holds the second lookup (the leader's look again after joining its flight) until cancelled."""

        def __init__(self) -> None:
            super().__init__()
            self.lookups = 0
            self.holding = asyncio.Event()

        async def aget(self, key: str) -> bytes | None:
            self.lookups += 1
            if self.lookups == 2:
                self.holding.set()
                await asyncio.Future()  # never resolves: only the cancellation ends it
            return self.get(key)

        async def aset(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
            self.set(key, value, ttl=ttl)

        async def adelete(self, key: str) -> None:
            self.delete(key)

        async def aclose(self) -> None:
            self.close()

    upstream = FakeUpstream()

    async def main() -> cachekit.Cache:
        store = HeldStore()
        cache = cachekit.Cache(cachekit.CacheConfig(store=store, ledger=False))
        transport = cachekit.AsyncCachingTransport(upstream, cache=cache)
        async with httpx2.AsyncClient(transport=transport) as client:

            def post() -> Any:
                return client.post("https://api.openai.com/v1/chat/completions", json=openai_chat())

            leader = asyncio.ensure_future(post())
            await store.holding.wait()
            leader.cancel()  # during its second lookup
            with pytest.raises(asyncio.CancelledError):
                await leader
            await post()
        return cache

    cache = asyncio.run(main())
    assert waits == []  # the next request found no flight of the cancelled leader to wait for
    assert cache.stats.coalesced == 0
    assert upstream.calls == 1


def test_the_same_bytes_on_another_endpoint_are_understood_afresh() -> None:
    """The pipeline remembers request bytes per dialect: bytes first seen on /responses must not
    lend their form (stream options) to a Chat request."""
    upstream = FakeUpstream()
    body = {**openai_chat(), "stream": True, "stream_options": {"include_usage": True}}
    with httpx2.Client(transport=_transport(upstream)) as client:
        client.post("https://api.openai.com/v1/responses", json=body)
        for _ in range(2):
            with client.stream("POST", "https://api.openai.com/v1/chat/completions", json=body) as r:
                text = r.read()
    assert b'"choices":[]' in text  # the usage chunk asked for by stream_options

"""A full Redis (``maxmemory`` reached, ``noeviction``) keeps serving what it holds.

Redis then refuses every command that may allocate, ``SET NX`` on an existing key included. A client
started after Redis filled up must still read the store's secret (it only needs a ``GET``), so it
derives the same partitions and serves the stored answers; only its writes of new entries fail, softly
(counted, logged, the caller gets its upstream answer), without tripping the circuit breaker.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
from redis.crc import key_slot

import cachekit
from cachekit.stores.redis import RedisStore
from tests.conftest import Harness
from tests.redis_servers import RedisCluster3, RedisServer, redis7_binary

pytestmark = pytest.mark.slow

NOEVICTION = ("--maxmemory-policy", "noeviction")
#: Bytes of one filler value: Redis refuses a command once its memory is over the limit, so filling
#: goes a little over it, whatever the allocator's rounding.
FILLER = 64 * 1024


def _ask(provider: str, question: str) -> tuple[str, dict[str, Any]]:
    """The raw-response method and arguments of one small greedy call of ``provider``'s SDK."""
    messages = [{"role": "user", "content": question}]
    if provider == "anthropic":
        return "messages.with_raw_response.create", {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "messages": messages,
        }
    return "chat.completions.with_raw_response.create", {"model": "gpt-4.1-mini", "messages": messages}


def _names_for(node: RedisServer, slots: range | None) -> Iterator[str]:
    """Endless fresh key names that ``node`` serves (a cluster node: only those of its ``slots``)."""
    for i in itertools.count():
        name = f"filler:{uuid.uuid4().hex}:{i}"
        if slots is None or key_slot(name.encode()) in slots:
            yield name


def _fill(node: RedisServer, slots: range | None) -> list[str]:
    """Write filler values to ``node`` until it answers OOM; return their names."""
    used = int(node.command("INFO", "memory")["used_memory"])
    node.command("CONFIG", "SET", "maxmemory", used + 2 * 2**20)
    names: list[str] = []
    client = node.client(socket_timeout=10)
    try:
        for name in _names_for(node, slots):
            try:
                client.set(name, b"x" * FILLER)
            except redis.exceptions.OutOfMemoryError:
                break
            names.append(name)
            assert len(names) < 10_000, "Redis never reported that it is full"
    finally:
        client.close()
    # Full. Memory freed later (a closed connection's buffers) must not make room again: the limit
    # goes a little below what is used, which Redis treats the same way (noeviction evicts nothing).
    used = int(node.command("INFO", "memory")["used_memory"])
    node.command("CONFIG", "SET", "maxmemory", used - 2**20)
    return names


@contextlib.contextmanager
def full(nodes: Sequence[RedisServer], ranges: Sequence[tuple[int, int]] | None = None) -> Iterator[None]:
    """Fill every node to its ``maxmemory`` (until Redis answers OOM), then empty it again."""
    fillers: list[tuple[RedisServer, list[str]]] = []
    try:
        for i, node in enumerate(nodes):
            slots = None if ranges is None else range(ranges[i][0], ranges[i][1] + 1)
            fillers.append((node, _fill(node, slots)))
        yield
    finally:
        for node, names in fillers:
            for name in names:
                node.command("DEL", name)
        for node in nodes:
            node.command("CONFIG", "SET", "maxmemory", 0)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    srv = RedisServer(redis7_binary(), extra_args=NOEVICTION).start()
    yield srv
    srv.cleanup()


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster3]:
    nodes = RedisCluster3(redis7_binary(), extra_args=NOEVICTION).start()
    yield nodes
    nodes.cleanup()


def _config(url: str) -> cachekit.CacheConfig:
    # A URL: each client opens (and closes) a RedisStore of its own, as a process started afterwards
    # would, knowing no secret yet.
    return cachekit.CacheConfig(store=url + "&timeout=1", ledger=False)


def _serves_after_filling(
    harness: Harness,
    provider: str,
    url: str,
    nodes: Sequence[RedisServer],
    ranges: Sequence[tuple[int, int]] | None = None,
) -> None:
    method, kwargs = _ask(provider, "What is the capital of France?")
    before = harness.sdk(provider, cache=_config(url))
    assert before.call(method, **kwargs).headers["x-cachekit-cache"] == "miss"
    assert before.call(method, **kwargs).headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 1

    with full(nodes, ranges):
        after = harness.sdk(provider, cache=_config(url))
        first = after.call(method, **kwargs)
        assert first.headers["x-cachekit-cache"] == "hit"
        assert harness.upstream.calls == 1  # served from Redis: no paid call

        # A new entry cannot be written: the caller still gets its upstream answer, the failure is
        # counted, and the breaker stays closed, so the next read is served again.
        new_method, new_kwargs = _ask(provider, "And the capital of Italy?")
        fresh = after.call(new_method, **new_kwargs)
        assert fresh.status_code == 200
        assert fresh.headers["x-cachekit-cache"] == "miss"
        assert harness.upstream.calls == 2
        stats = cachekit.cache_of(after.client).stats
        assert stats.store_errors == 1
        assert cachekit.cache_of(after.client).pipeline.breaker.state == "closed"
        assert after.call(method, **kwargs).headers["x-cachekit-cache"] == "hit"
        assert harness.upstream.calls == 2


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_client_started_after_redis_filled_up_serves_hits(
    harness: Harness, server: RedisServer, provider: str
) -> None:
    url = f"{server.url}?prefix=full-{uuid.uuid4().hex[:8]}:"
    _serves_after_filling(harness, provider, url, [server])


def test_a_full_redis_cluster_keeps_serving_hits(harness: Harness, cluster: RedisCluster3) -> None:
    url = f"{cluster.url}?prefix=full-{uuid.uuid4().hex[:8]}:"
    _serves_after_filling(harness, "openai", url, cluster.nodes, cluster.RANGES)


def test_a_store_that_never_had_a_secret_cannot_make_one_when_full(server: RedisServer) -> None:
    """Nothing to read, and nothing can be written: a clear StoreError (the pipeline bypasses)."""
    store = RedisStore(f"{server.url}?prefix=never-{uuid.uuid4().hex[:8]}:", timeout=1.0)
    try:
        with full([server]), pytest.raises(cachekit.StoreError, match="secret"):
            _ = store.secret
        assert len(store.secret) == 32  # room again: made now
    finally:
        store.close()

"""Regressions for defects a review of the Redis, breaker and encryption work found (each failed before
its fix): construction must not touch a down store, paid calls are always in the ledger, secrets
converge after Redis loses them, credentials never reach a repr or an error."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import httpx2
import pytest

import cachekit
import cachekit.stores.redis as redis_module
from cachekit.cost.ledger import Ledger, MemorySink
from cachekit.errors import ConfigError
from cachekit.stores import MemoryStore, SQLiteStore, store_from_url
from cachekit.stores.encrypted import generate_key
from cachekit.stores.redis import RedisStore
from cachekit.testing import FakeUpstream
from tests.redis_servers import RedisServer, free_port, redis7_binary, redis7_server  # noqa: F401

CHAT = "https://api.openai.com/v1/chat/completions"
KEYS = "k1:" + generate_key()


def _chat(question: str, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # a Chat stream reports usage only if asked
    return body


def test_an_encrypted_redis_store_that_is_down_does_not_stop_the_client() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    cache = cachekit.Cache(cachekit.CacheConfig(store=url, encryption_keys=KEYS, ledger=False))
    with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=cache)) as client:
        response = client.post(CHAT, json=_chat("q"))
    assert response.status_code == 200
    assert response.headers["x-cachekit-cache"] == "bypass"
    cache.close()


def test_encryption_over_a_real_redis_store(redis7_server: RedisServer) -> None:  # noqa: F811
    store = RedisStore(redis7_server.url, prefix="enc-regress:")
    try:
        config = cachekit.CacheConfig(store=store, encryption_keys=KEYS, ledger=False)
        with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config)) as client:
            first = client.post(CHAT, json=_chat("secret question"))
            second = client.post(CHAT, json=_chat("secret question"))
        assert [first.headers["x-cachekit-cache"], second.headers["x-cachekit-cache"]] == ["miss", "hit"]
        [entry] = list(store.entries(""))
        raw = store.get(entry.key)
        assert raw is not None
        assert raw.startswith(b"CKE1")
        assert b"secret question" not in raw
        assert b"Fake reply" not in raw
    finally:
        store.clear()
        store.close()


def _open(path: str, results: Any) -> None:
    try:
        SQLiteStore(path).close()
        results.put("ok")
    except Exception as exc:  # pragma: no cover - reported by the assertion
        results.put(f"{type(exc).__name__}: {exc}")


def test_many_processes_creating_one_sqlite_store_at_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    for trial in range(3):
        path = str(tmp_path / f"new-{trial}.db")
        results = context.Queue()
        procs = [context.Process(target=_open, args=(path, results)) for _ in range(16)]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        assert outcomes == ["ok"] * 16


class Down(MemoryStore):
    def get(self, key: str) -> bytes | None:
        raise cachekit.StoreUnavailableError("down")

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        raise cachekit.StoreUnavailableError("down")


class NoSecret(MemoryStore):
    @property
    def secret(self) -> bytes:
        raise cachekit.StoreUnavailableError("down")


@pytest.mark.parametrize("store", [Down, NoSecret])
@pytest.mark.parametrize("stream", [False, True])
def test_paid_calls_reach_the_ledger_while_the_store_is_down(store: type[MemoryStore], stream: bool) -> None:
    sink = MemorySink()
    ledger = Ledger([sink])
    config = cachekit.CacheConfig(store=store(), ledger=ledger)
    with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config)) as client:
        for i in range(6):
            response = client.post(CHAT, json=_chat(f"q{i}", stream))
            assert response.status_code == 200
            response.read()
    ledger.flush()
    records = ledger.records()
    assert len(records) == 6
    assert all(r.usage.known for r in records)
    ledger.close()


def test_processes_converge_on_one_secret_after_redis_loses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_module, "SECRET_RESYNC", 0.0)
    server = RedisServer(redis7_binary()).start()  # no persistence: a restart loses everything
    try:
        old = RedisStore(server.url)
        first = old.secret
        server.restart()
        newcomer = RedisStore(server.url)  # a process started after the restart makes a new secret
        assert newcomer.secret != first
        assert old.secret == newcomer.secret  # the old process adopts what Redis holds now
        server.restart()
        assert old.secret == newcomer.secret  # ... and writes it back when Redis has none
        late = RedisStore(server.url)
        assert late.secret == old.secret
        for s in (old, newcomer, late):
            s.close()
    finally:
        server.cleanup()


def test_credentials_never_reach_an_error_or_a_repr() -> None:
    with pytest.raises(ConfigError) as caught:
        store_from_url("redis://:s3cr?tpass@cache.internal:6379/0", home=Path("/tmp"))
    assert "s3cr" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        store_from_url("rediss://user:pa#ss?w0rd@", home=Path("/tmp"))
    assert "w0rd" not in str(caught.value)
    assert "hunter2" not in repr(cachekit.CacheConfig(store="redis://default:hunter2secret@h:6379/0"))


def test_a_store_whose_secret_is_an_instance_attribute_is_accepted() -> None:
    class Plain:
        def __init__(self) -> None:
            self.secret = os.urandom(32)
            self._inner = MemoryStore()

        def get(self, key: str) -> bytes | None:
            return self._inner.get(key)

        def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
            self._inner.set(key, value, ttl=ttl)

        def delete(self, key: str) -> None:
            self._inner.delete(key)

        def clear(self) -> None:
            self._inner.clear()

        def close(self) -> None:
            self._inner.close()

    cache = cachekit.Cache(cachekit.CacheConfig(store=Plain(), ledger=False))  # type: ignore[arg-type]
    assert cache.sync_store is not None


def test_keys_are_keyed_by_the_store_secret() -> None:
    """Someone who can guess a prompt cannot compute its key without the store's secret, even for an
    explicit tenant (whose partition label is in the clear)."""
    keys = []
    for _ in range(2):
        store = MemoryStore()
        config = cachekit.CacheConfig(store=store, ledger=False, tenant="acme")
        with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config)) as client:
            client.post(CHAT, json=_chat("same question"))
        [entry] = list(store.entries(""))
        keys.append(entry.key)
    assert keys[0].rsplit(":", 1)[0] == keys[1].rsplit(":", 1)[0]  # same namespace and partition
    assert keys[0] != keys[1]


def test_a_cached_answer_whose_echo_cannot_be_restored_goes_upstream() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(120):
        deep = {"type": "object", "properties": {"x": deep}}
    body = {
        "model": "gpt-4.1-mini",
        "input": "hello",
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "f", "parameters": deep}],
    }
    config = cachekit.CacheConfig(store=MemoryStore(), ledger=False, store_prompts=False)
    upstream = FakeUpstream()
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=config)) as client:
        outcomes = []
        for stream in (False, True, True):
            response = client.post("https://api.openai.com/v1/responses", json={**body, "stream": stream})
            assert response.status_code == 200
            response.read()
            outcomes.append(response.headers["x-cachekit-cache"])
    assert outcomes[0] == "miss"


def test_an_answer_served_upstream_because_its_echo_cannot_be_restored_is_no_hit() -> None:
    """A hit is counted, and recorded in the ledger, only when it is served: a stored answer whose
    echoed prompt cannot be put back is answered upstream, and that is one miss, not a hit and a miss."""
    # As deep as a request's tools can be written (orjson writes 255 levels): the stored document holds
    # them, but a stream's events, which carry them one level deeper, cannot.
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(125):
        deep = {"type": "object", "properties": {"x": deep}}
    body = {
        "model": "gpt-4.1-mini",
        "input": "hello",
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "f", "parameters": deep}],
    }
    sink = MemorySink()
    cache = cachekit.Cache(
        cachekit.CacheConfig(store=MemoryStore(), ledger=Ledger([sink]), store_prompts=False)
    )
    upstream = FakeUpstream()
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=cache)) as client:
        outcomes = []
        for stream in (False, True):  # a stream of the stored document cannot be given its echo back
            response = client.post("https://api.openai.com/v1/responses", json={**body, "stream": stream})
            response.read()
            outcomes.append(response.headers["x-cachekit-cache"])
    assert outcomes == ["miss", "miss"]
    assert upstream.calls == 2
    assert cache.stats.stores >= 1  # the first answer was stored: the second call found it
    assert (cache.stats.hits, cache.stats.misses) == (0, 2)
    recorded = [r.outcome for r in sink.read()]
    assert recorded[0] == "miss"
    assert "exact_hit" not in recorded

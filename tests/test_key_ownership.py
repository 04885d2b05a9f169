"""Every key cachekit writes has an owner: ``cachekit stats`` counts it and ``cachekit purge`` removes it.

Every feature that writes keys runs against real servers, under one key prefix: the exact store on
Redis 7, the semantic index on Redis 8 (vector sets). Exact answers and semantic entries (the real
SDK and the real embedding model), memoized results, the breakpoint planner's timing statistics (an
Anthropic conversation with a pause, against the local backend), for two tenants in two namespaces;
and the operator tools' probes, left behind the way a crash leaves them (``cachekit health`` whose
delete fails, ``semantic-eval`` whose clean-up fails).

Then every key on both servers is read raw (``SCAN``) and sorted by the layouts docs/operations.md
describes: the store's secret, a store entry (whose store key must have a kind of the key schema,
:data:`cachekit.stores.keys.LAYERS`), or a semantic partition's three keys. A key of any other shape,
a store key of an unknown kind, or a kind of the schema that no feature here wrote fails the test, so
a new kind of key is either known to stats and purge or noticed here. ``cachekit stats --json`` must
count exactly what is there, and each ``cachekit purge`` (tenant, namespace, age, all) must leave
exactly what it should not remove.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import redis

import cachekit
from cachekit import cli
from cachekit.cache import Cache
from cachekit.errors import StoreError
from cachekit.local import ByteTokenizer, LocalBackend, LocalTransport, ManualClock, ScriptedEngine
from cachekit.ops import health, store_stats
from cachekit.semantic import SemanticConfig
from cachekit.semantic.embedders import default_embedder
from cachekit.semantic.evaluate import Pair, evaluate
from cachekit.semantic.index_memory import MemoryVectorIndex
from cachekit.semantic.index_redis import RedisVectorIndex
from cachekit.stores import MemoryStore
from cachekit.stores.keys import (
    EXACT_KIND,
    LAYERS,
    PROBE_KIND,
    KeyParts,
    parse_key,
    partition_names_tenant,
    probe_key,
    store_key,
)
from cachekit.stores.redis import RedisStore
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client
from tests.redis_servers import RedisServer, redis7_server, redis8_server

pytestmark = pytest.mark.slow

SERVER_FIXTURES = (redis7_server, redis8_server)

TENANTS = ("acme", "globex")
NAMESPACES = ("support", "sales")
SYSTEM = " ".join(f"Clause {i}: refunds need a booking id and the traveller's name." for i in range(120))


@dataclass(frozen=True)
class Servers:
    prefix: str
    kv: RedisServer
    vectors: RedisServer

    @property
    def store_url(self) -> str:
        return f"{self.kv.url}?prefix={self.prefix}&timeout=5"

    @property
    def index_url(self) -> str:
        return f"{self.vectors.url}?prefix={self.prefix}&timeout=5"


@pytest.fixture
def servers(redis7_server: RedisServer, redis8_server: RedisServer) -> Iterator[Servers]:
    made = Servers(f"own-{uuid.uuid4().hex[:10]}:", redis7_server, redis8_server)
    yield made
    redis7_server.delete_prefix(made.prefix)
    redis8_server.delete_prefix(made.prefix)


# -- every feature that writes keys ------------------------------------------------------------------


def _exact_and_semantic(store: RedisStore, index: RedisVectorIndex, tenant: str, namespace: str) -> None:
    """An answer from upstream (an exact entry and a semantic index entry), through the real SDK."""
    config = cachekit.CacheConfig(
        store=store, tenant=tenant, namespace=namespace, semantic=SemanticConfig(index=index), ledger=False
    )
    upstream = FakeUpstream()
    client = sdk_client("openai", transport=upstream, api_key="sk-test", cache=config)
    with client:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4.1-mini",
            temperature=0,
            messages=[{"role": "user", "content": f"How do I reset my password at {tenant} ({namespace})?"}],
        )
    assert raw.headers["x-cachekit-cache"] == "miss"
    assert upstream.calls == 1


def _memo(store: RedisStore, tenant: str, namespace: str) -> None:
    @cachekit.cached(memoize=True, cache=store, tenant=tenant, namespace=namespace, name="summary")
    def summary(topic: str) -> str:
        return f"about {topic}"

    assert summary("refunds") == "about refunds"


def _gap_statistics(store: RedisStore, tenant: str, namespace: str) -> None:
    """Two turns of an Anthropic conversation six minutes apart: the planner saves what it learned."""
    clock = ManualClock(1_000.0)
    with LocalBackend(ScriptedEngine(ByteTokenizer()), rules="anthropic", clock=clock) as backend:
        config = cachekit.CacheConfig(
            store=store, tenant=tenant, namespace=namespace, ledger=False, lint="off", price_as="anthropic"
        )
        client = sdk_client(
            "anthropic",
            transport=LocalTransport(backend),
            api_key="sk-ant",
            base_url="http://provider.invalid",
            cache=Cache(config, clock=clock),
        )
        with client:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Can I move my flight?"}]
            client.messages.create(model="claude-sonnet-4-5", max_tokens=16, system=SYSTEM, messages=messages)
            clock.advance(360.0)
            messages += [
                {"role": "assistant", "content": "Yes."},
                {"role": "user", "content": "To Friday?"},
            ]
            client.messages.create(model="claude-sonnet-4-5", max_tokens=16, system=SYSTEM, messages=messages)


class _CrashingDelete(RedisStore):
    """A store whose delete fails: what a health probe leaves when the process dies mid-probe."""

    def delete(self, key: str) -> None:
        raise StoreError("the process died")


class _CrashingRemove(RedisVectorIndex):
    """An index whose removal fails: what ``semantic-eval`` leaves when the process dies mid-run."""

    def remove(self, partition: str, entry_key: str) -> None:
        raise RuntimeError("the process died")


def _probes(servers: Servers) -> None:
    with _CrashingDelete(servers.kv.url, prefix=servers.prefix, timeout=5.0) as crashing:
        assert not health(crashing).ok
    crashing_index = _CrashingRemove(servers.vectors.url, prefix=servers.prefix, timeout=5.0)
    with crashing_index, pytest.raises(RuntimeError, match="died"):
        evaluate(
            [Pair("How do I reset my password?", "How can I reset my password?", True)],
            embedder=default_embedder(),
            index=crashing_index,
            verifier=False,
        )


def populate(servers: Servers) -> None:
    with (
        RedisStore(servers.kv.url, prefix=servers.prefix, timeout=5.0) as store,
        RedisVectorIndex(servers.vectors.url, prefix=servers.prefix, timeout=5.0) as index,
    ):
        for tenant in TENANTS:
            for namespace in NAMESPACES:
                _exact_and_semantic(store, index, tenant, namespace)
                _memo(store, tenant, namespace)
                _gap_statistics(store, tenant, namespace)
    _probes(servers)


# -- what the servers hold, read raw ------------------------------------------------------------------


@dataclass
class Held:
    """Every key under the prefix, sorted by owner."""

    secrets: int
    #: The store key inside each store entry's braces, parsed.
    entries: list[KeyParts]
    #: Each semantic index element's entry key, parsed (``None``: an entry key of no known kind).
    semantic: list[KeyParts | None]

    def kinds(self) -> set[str]:
        return {parts.kind for parts in [*self.entries, *self.semantic] if parts is not None}


def held(servers: Servers) -> Held:
    prefix = re.escape(servers.prefix)
    secret = re.compile(prefix + r"__secret__")
    entry = re.compile(prefix + r"\{(?P<key>[^{}]*)\}")
    partition = re.compile(prefix + r"\{sem:[0-9a-f]{32}\}:(?P<part>vs|ex|ord)")
    found = Held(0, [], [])
    for server in (servers.kv, servers.vectors):
        client: redis.Redis = server.client(socket_timeout=10)
        try:
            for raw in client.scan_iter(match=servers.prefix.replace("*", r"\*") + "*", count=1000):
                name = raw.decode()
                if secret.fullmatch(name):
                    found.secrets += 1
                elif match := entry.fullmatch(name):
                    parts = parse_key(match["key"])
                    assert parts is not None, f"a store key of a kind the key schema does not know: {name}"
                    found.entries.append(parts)
                elif match := partition.fullmatch(name):
                    if match["part"] == "vs":
                        card = int(client.execute_command("VCARD", name))
                        for element in client.execute_command("VRANDMEMBER", name, card):
                            attributes = json.loads(client.execute_command("VGETATTR", name, element))
                            found.semantic.append(parse_key(attributes["k"]))
                else:
                    raise AssertionError(f"a key cachekit wrote that no layout describes: {name}")
        finally:
            client.close()
    return found


def stats(servers: Servers) -> dict[str, Any]:
    out = io.StringIO()
    assert (
        cli.main(
            ["stats", "--store", servers.store_url, "--semantic-index", servers.index_url, "--json"], out=out
        )
        == 0
    )
    store: dict[str, Any] = json.loads(out.getvalue())["store"]
    return store


def purge(servers: Servers, *args: str) -> None:
    out = io.StringIO()
    code = cli.main(
        ["purge", "--store", servers.store_url, "--semantic-index", servers.index_url, *args], out=out
    )
    assert code == 0, out.getvalue()


def assert_stats_count_what_is_held(servers: Servers) -> Held:
    now = held(servers)
    counted = stats(servers)
    expected: dict[str, Counter[str]] = {}
    for parts in now.entries:
        if parts.kind != PROBE_KIND:
            expected.setdefault(parts.namespace, Counter())[LAYERS[parts.kind]] += 1
    for maybe in now.semantic:
        if maybe is not None and maybe.kind != PROBE_KIND:
            expected.setdefault(maybe.namespace, Counter())["semantic"] += 1
    assert {name: dict(ns["entries"]) for name, ns in counted["namespaces"].items()} == {
        name: dict(layers) for name, layers in expected.items()
    }
    probes = sum(
        1 for parts in [*now.entries, *now.semantic] if parts is not None and parts.kind == PROBE_KIND
    )
    assert counted["probes"] == probes
    assert counted["semantic"] == sum(
        1 for parts in now.semantic if parts is not None and parts.kind != PROBE_KIND
    )
    assert counted["foreign"] == sum(1 for parts in now.semantic if parts is None) == 0
    return now


def _names(parts: KeyParts | None, tenant: str) -> bool:
    return parts is not None and partition_names_tenant(parts.partition, tenant)


# -- the test -------------------------------------------------------------------------------------------


def test_every_key_written_is_counted_and_purged(servers: Servers) -> None:
    populate(servers)
    before = assert_stats_count_what_is_held(servers)
    assert before.kinds() == set(LAYERS), "a kind of the key schema that no feature here wrote"
    assert before.secrets == 1  # the exact store's (kept by every purge)
    text = io.StringIO()
    command = ["stats", "--store", servers.store_url, "--semantic-index", servers.index_url]
    assert cli.main(command, out=text) == 0
    semantic = sum(1 for p in before.semantic if p is not None and p.kind != PROBE_KIND)
    assert f"; semantic index: {semantic} entries (2 operator probes)\n" in text.getvalue()
    rows = {tuple(line.split()[:3]) for line in text.getvalue().splitlines()}  # namespace, layer, entries
    assert ("sales", "exact", "6") in rows
    assert ("sales", "semantic", "2") in rows
    for tenant in TENANTS:
        for namespace in NAMESPACES:
            mine = [p for p in before.entries if _names(p, tenant) and p.namespace == namespace]
            # Three answers (the OpenAI question, the conversation's two turns), one memo, one statistics.
            assert Counter(LAYERS[p.kind] for p in mine) == {"exact": 3, "memo": 1, "gaps": 1}

    purge(servers, "--tenant", "acme")
    after = assert_stats_count_what_is_held(servers)
    assert not [p for p in [*after.entries, *after.semantic] if _names(p, "acme")]
    assert len(after.entries) == len(before.entries) - sum(_names(p, "acme") for p in before.entries)
    assert len(after.semantic) == len(before.semantic) - sum(_names(p, "acme") for p in before.semantic)

    purge(servers, "--namespace", "sales")
    after = assert_stats_count_what_is_held(servers)
    assert not [p for p in [*after.entries, *after.semantic] if p is not None and p.namespace == "sales"]
    assert {p.namespace for p in after.entries if p.kind != PROBE_KIND} == {"support"}

    purge(servers, "--older-than", "0s")  # everything written until now, the probe included
    after = assert_stats_count_what_is_held(servers)
    assert after.entries == []
    # The index follows the store by age (its entries have no write time): what pointed at the purged
    # entries is gone; semantic-eval's probes point at no entry, and only --all removes them.
    assert {p.kind for p in after.semantic if p is not None} == {PROBE_KIND}

    populate(servers)
    purge(servers, "--all", "--yes")
    after = assert_stats_count_what_is_held(servers)
    assert (after.entries, after.semantic, after.secrets) == ([], [], 1)


def test_stats_count_a_memory_index_by_the_same_rule() -> None:
    """The in-process index, through ``store_stats(store, index=...)`` (docs/operations.md)."""
    index = MemoryVectorIndex()
    vector = np.ones(4, dtype=np.float32)
    for namespace, tenant in [("support", "acme"), ("support", "globex"), ("sales", "acme")]:
        index.add("p", store_key(EXACT_KIND, namespace, f"tenant:{tenant}", "ab" * 32), vector, "q", ttl=60)
    index.add("p", probe_key("eval.1"), vector, "q", ttl=60)
    index.add("p", "not-a-store-key", vector, "q", ttl=60)
    counted = store_stats(MemoryStore(), index=index)
    assert {name: ns.entries for name, ns in counted.namespaces.items()} == {
        "support": {"semantic": 2},
        "sales": {"semantic": 1},
    }
    assert (counted.semantic, counted.probes, counted.foreign, counted.entries) == (3, 1, 1, 0)
    assert store_stats(MemoryStore(), index=index, namespace="sales").semantic == 1
    assert len(index.search("p", vector, k=10, min_similarity=-1.0)) == 5  # counting removed nothing

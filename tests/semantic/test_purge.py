"""``cachekit purge --tenant/--namespace`` also removes the semantic index's entries, question text included.

Semantic partitions are opaque digests (nobody can tell a tenant's from the name), but each indexed
entry names the exact-store key it answers with, and that key holds its namespace and partition in the
clear: the purge reads them, so it needs no prompt. Checked on a real Redis 8 (a server and a Cluster)
by reading Redis raw after the purge, through the command line as an operator runs it, with the real
SDKs and the real embedding model; and on the in-process memory index through :mod:`cachekit.ops`.
"""

from __future__ import annotations

import contextlib
import io
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

import cachekit
from cachekit import cli
from cachekit.errors import ConfigError
from cachekit.ops import purge, purge_semantic
from cachekit.semantic import SemanticConfig
from cachekit.semantic.index_memory import MemoryVectorIndex
from cachekit.stores import MemoryStore, SQLiteStore
from tests.conftest import SDK, Harness
from tests.redis_servers import RedisServer, redis8_server  # noqa: F401
from tests.semantic.test_cache import redis8_cluster  # noqa: F401  (a Redis 8 Cluster for the module)

pytestmark = pytest.mark.slow

#: Each tenant's question and a paraphrase of it (a semantic hit within the tenant's partition).
QUESTIONS = {
    "acme": ("How do I reset my account password?", "How can I reset the password of my account?"),
    "globex": ("How do I cancel my subscription?", "How can I cancel my subscription?"),
}


def _ask(sdk: SDK, question: str) -> str:
    """One greedy Chat Completions call (eligible for the semantic cache); its cache outcome."""
    response = sdk.call(
        "chat.completions.with_raw_response.create",
        model="gpt-4.1-mini",
        temperature=0,
        messages=[
            {"role": "system", "content": "You are the help desk of Example Corp."},
            {"role": "user", "content": question},
        ],
    )
    return str(response.headers["x-cachekit-cache"])


def _client(harness: Harness, tenant: str, store: Any, index: Any) -> SDK:
    config = cachekit.CacheConfig(
        store=store, tenant=tenant, semantic=SemanticConfig(index=index), ledger=False
    )
    return harness.sdk("openai", cache=config)


def _raw_values(nodes: list[RedisServer], prefix: str) -> list[bytes]:
    """Every byte string Redis holds under ``prefix``, whatever the key's type: names, values,
    members, and each vector-set element with its attributes (the question text)."""
    found: list[Any] = []  # bytes: redis-py types its replies as bytes or str
    for node in nodes:
        client: redis.Redis = node.client(socket_timeout=10)
        try:
            for name in client.scan_iter(match=prefix + "*", count=1000):
                found.append(name)
                kind = client.type(name)
                if kind == b"string":
                    found.append(client.get(name))
                elif kind == b"hash":
                    found.extend(client.hgetall(name).values())
                elif kind == b"zset":
                    found.extend(client.zrange(name, 0, -1))
                elif kind == b"vectorset":
                    card = int(client.execute_command("VCARD", name))
                    for element in client.execute_command("VRANDMEMBER", name, card):
                        found.append(element)
                        found.append(client.execute_command("VGETATTR", name, element) or b"")
                else:
                    raise AssertionError(f"unexpected {kind!r} key {name!r}")
        finally:
            client.close()
    return found


def _holds(values: list[bytes], text: str) -> bool:
    return any(text.encode() in value for value in values)


@pytest.mark.parametrize("kind", ["standalone", "cluster"])
def test_purge_by_tenant_removes_its_vectors_and_question_texts(
    harness: Harness, kind: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("redis8_server" if kind == "standalone" else "redis8_cluster")
    nodes = [server] if kind == "standalone" else server.nodes
    prefix = f"purge-{uuid.uuid4().hex[:8]}:"
    url = f"{server.url}?prefix={prefix}&timeout=1"
    # The exact store and the semantic index share the Redis (and the prefix): the usual layout.
    clients = {tenant: _client(harness, tenant, url, url) for tenant in QUESTIONS}
    for tenant, (question, paraphrase) in QUESTIONS.items():
        assert _ask(clients[tenant], question) == "miss"
        assert _ask(clients[tenant], paraphrase) == "semantic"
    assert harness.upstream.calls == 2
    before = _raw_values(nodes, prefix)
    assert _holds(before, QUESTIONS["acme"][0])
    assert _holds(before, QUESTIONS["globex"][0])

    dry, real = io.StringIO(), io.StringIO()
    assert cli.main(["purge", "--store", url, "--tenant", "acme", "--dry-run"], out=dry) == 0
    assert _raw_values(nodes, prefix) == before  # a dry run deletes nothing
    assert cli.main(["purge", "--store", url, "--tenant", "acme"], out=real) == 0

    after = _raw_values(nodes, prefix)
    assert not _holds(after, QUESTIONS["acme"][0])  # the question text is gone with its vector
    assert _holds(after, QUESTIONS["globex"][0])
    assert sum(1 for value in after if value.endswith(b"}:vs")) == 1  # globex's vector set only
    assert dry.getvalue() == "would delete 1 entries\nwould delete 1 semantic index entries\n"
    assert real.getvalue() == "deleted 1 entries\ndeleted 1 semantic index entries\n"

    # globex still hits, semantically too (from a fresh client); acme's paraphrase now goes upstream.
    assert _ask(_client(harness, "globex", url, url), QUESTIONS["globex"][1]) == "semantic"
    assert _ask(clients["acme"], QUESTIONS["acme"][1]) == "miss"
    assert harness.upstream.calls == 3


def test_purge_by_namespace_with_the_index_elsewhere(
    harness: Harness,
    redis8_server: RedisServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The exact store in SQLite, the index on Redis 8 (named by --semantic-index): by namespace."""
    index_url = f"{redis8_server.url}?prefix=purge-ns-{uuid.uuid4().hex[:8]}:&timeout=1"
    store_url = f"sqlite:///{tmp_path / 'cache.db'}"
    sdks = {}
    for namespace in ("support", "sales"):
        config = cachekit.CacheConfig(
            store=store_url, namespace=namespace, semantic=SemanticConfig(index=index_url), ledger=False
        )
        sdks[namespace] = harness.sdk("openai", cache=config)
        assert _ask(sdks[namespace], QUESTIONS["acme"][0]) == "miss"
    # By age, only the index entries of the answers the purge deletes go (none is a day old).
    out = io.StringIO()
    argv = ["purge", "--store", store_url, "--semantic-index", index_url, "--namespace", "sales"]
    assert cli.main([*argv, "--older-than", "1d"], out=out) == 0
    assert out.getvalue() == "deleted 0 entries\ndeleted 0 semantic index entries\n"

    out = io.StringIO()
    argv = ["purge", "--store", store_url, "--semantic-index", index_url, "--namespace", "support"]
    assert cli.main(argv, out=out) == 0
    assert out.getvalue() == "deleted 1 entries\ndeleted 1 semantic index entries\n"
    assert _ask(sdks["support"], QUESTIONS["acme"][1]) == "miss"
    assert _ask(sdks["sales"], QUESTIONS["acme"][1]) == "semantic"


def test_purge_of_the_memory_index_in_its_process(harness: Harness) -> None:
    index = MemoryVectorIndex()
    store = MemoryStore()
    clients = {tenant: _client(harness, tenant, store, index) for tenant in QUESTIONS}
    for tenant, (question, _) in QUESTIONS.items():
        assert _ask(clients[tenant], question) == "miss"
    assert len(index) == 2

    assert purge(store, tenant="acme") == 1
    assert purge_semantic(index, tenant="acme", dry_run=True) == 1
    assert len(index) == 2
    layer = cachekit.cache_of(clients["acme"].client).pipeline.semantic  # as docs/operations.md shows
    assert layer is not None
    assert purge_semantic(layer.index, tenant="acme") == 1
    assert len(index) == 1
    assert purge_semantic(index, tenant="acme") == 0
    assert _ask(clients["acme"], QUESTIONS["acme"][1]) == "miss"
    assert _ask(clients["globex"], QUESTIONS["globex"][1]) == "semantic"


def test_purge_by_age_removes_the_index_entries_of_the_purged_answers(
    harness: Harness, tmp_path: Path
) -> None:
    """Index entries have no write time: with --older-than, those whose answer the purge deleted go."""
    now = [1_800_000_000.0]
    index = MemoryVectorIndex(clock=lambda: now[0])
    store = SQLiteStore(tmp_path / "cache.db", clock=lambda: now[0])  # it keeps write times
    sdk = _client(harness, "acme", store, index)
    assert _ask(sdk, QUESTIONS["acme"][0]) == "miss"
    now[0] += 3600
    assert _ask(sdk, QUESTIONS["globex"][0]) == "miss"  # the same tenant, an hour later
    matched: set[str] = set()
    assert purge(store, older_than=1800, clock=lambda: now[0], matched=matched) == 1
    assert purge_semantic(index, keys=matched) == 1
    assert len(index) == 1
    assert _ask(sdk, QUESTIONS["acme"][1]) == "miss"
    assert _ask(sdk, QUESTIONS["globex"][1]) == "semantic"
    store.close()


def test_purge_semantic_needs_a_filter_and_a_purgeable_index() -> None:
    with pytest.raises(ConfigError, match="tenant"):
        purge_semantic(MemoryVectorIndex())
    with pytest.raises(ConfigError, match="cannot be purged"):
        purge_semantic(object(), tenant="acme")
    out, err = io.StringIO(), io.StringIO()
    argv = ["purge", "--store", "memory://", "--semantic-index", "memory://", "--tenant", "acme"]
    with contextlib.redirect_stderr(err):
        assert cli.main(argv, out=out) == 2
    assert "memory" in err.getvalue()


def test_without_the_semantic_extra_a_redis_store_is_still_purged(
    monkeypatch: pytest.MonkeyPatch,
    redis8_server: RedisServer,  # noqa: F811
) -> None:
    """The index of the store's Redis is only searched by default: without numpy (the semantic extra)
    the store is purged and the output says the index was not; asked for by name, it is an error."""
    import cachekit.semantic.index_redis as index_redis

    def missing() -> None:
        raise cachekit.MissingExtraError("numpy", "semantic", "the semantic cache")

    monkeypatch.setattr(index_redis, "require_numpy", missing)
    url = f"{redis8_server.url}?prefix=purge-extra-{uuid.uuid4().hex[:8]}:"
    out = io.StringIO()
    assert cli.main(["purge", "--store", url, "--tenant", "acme"], out=out) == 0
    assert out.getvalue() == (
        "deleted 0 entries\nsemantic index not searched: it needs pip install 'cachekit-llm[semantic]'\n"
    )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):  # a missing extra: the fix is an install, status 1
        assert cli.main(["purge", "--store", url, "--semantic-index", url, "--tenant", "acme"], out=out) == 1
    assert out.getvalue() == ""  # before anything was deleted
    assert err.getvalue().startswith("cachekit purge: ")
    assert "cachekit-llm[semantic]" in err.getvalue()

"""Operator tools: ``cachekit stats``, ``purge`` and ``health``, over entries written by real clients."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import cachekit
from cachekit import cli
from cachekit.errors import ConfigError, StoreError
from cachekit.ops import health, purge, store_stats
from cachekit.stores import MemoryStore, SQLiteStore
from cachekit.stores.keys import EXACT_KIND, parse_key, store_key
from cachekit.stores.redis import RedisStore
from cachekit.testing import FakeUpstream
from tests.redis_servers import redis7_server, redis_cluster  # noqa: F401  (fixtures)
from tests.requests import openai_chat

URL = "https://api.openai.com/v1/chat/completions"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "sqlite", "redis7", "redis-cluster"])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[Any]:
    made: Any
    if request.param == "memory":
        made = MemoryStore(clock=clock)
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "c.db", clock=clock)
    else:
        server = request.getfixturevalue("redis7_server" if request.param == "redis7" else "redis_cluster")
        # A prefix of its own per test: the server is shared by the session.
        made = RedisStore(server.url, prefix=f"ops-{uuid.uuid4().hex[:12]}:", clock=clock, timeout=1.0)
    yield made
    if request.param.startswith("redis"):
        made.clear()
    made.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _ask(store: Any, question: str, *, namespace: str = "default", tenant: str | None = None) -> str:
    upstream = FakeUpstream()
    config = cachekit.CacheConfig(store=store, ledger=False, namespace=namespace, tenant=tenant)
    body = openai_chat()
    body["messages"] = [{"role": "user", "content": question}]
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=config)) as client:
        response = client.post(URL, json=body, headers={"authorization": "Bearer sk-test"})
    assert response.status_code == 200
    return response.headers["x-cachekit-cache"]


def test_keys_name_their_namespace_and_partition_in_the_clear() -> None:
    for namespace in ("default", "a:b", "100%", "ünï code", "x/y?z#"):
        key = store_key(EXACT_KIND, namespace, "tenant:acme:eu", "ab" * 32)
        parts = parse_key(key)
        assert parts is not None
        assert (parts.namespace, parts.partition, parts.digest) == (namespace, "tenant:acme:eu", "ab" * 32)
        assert key.count(":") == 3
    assert parse_key("ck2:default:" + "a" * 64) is None  # an older schema's key is foreign
    assert parse_key("something-else") is None


def test_stats_count_entries_and_bytes_per_namespace(store: Any) -> None:
    for q in ("a", "b", "c"):
        assert _ask(store, q, namespace="app1") == "miss"
    assert _ask(store, "a", namespace="app2") == "miss"
    store.set("not-ours", b"12345")
    stats = store_stats(store)
    assert stats.entries == 4
    assert stats.foreign == 1
    assert stats.namespaces["app1"].entries == {"exact": 3}
    assert stats.namespaces["app2"].entries == {"exact": 1}
    sizes = sorted(info.size for info in store.entries("") if info.key != "not-ours")
    assert stats.bytes == sum(sizes)
    only = store_stats(store, namespace="app2")
    assert (only.entries, list(only.namespaces)) == (1, ["app2"])


def test_purge_by_tenant_leaves_other_tenants_serving(store: Any) -> None:
    for tenant in ("acme", "globex"):
        for q in ("a", "b"):
            assert _ask(store, q, tenant=tenant) == "miss"
    assert _ask(store, "a") == "miss"  # the credential's partition, not a tenant
    assert purge(store, tenant="acme", dry_run=True) == 2
    assert _ask(store, "a", tenant="acme") == "hit"
    assert purge(store, tenant="acme") == 2
    assert _ask(store, "a", tenant="acme") == "miss"  # gone (and stored again now)
    assert _ask(store, "b", tenant="globex") == "hit"
    assert _ask(store, "a") == "hit"
    assert purge(store, tenant="nobody") == 0


def test_purge_by_namespace_and_age(store: Any, clock: Clock) -> None:
    assert _ask(store, "old", namespace="n1") == "miss"
    clock.now += 3600
    assert _ask(store, "new", namespace="n1") == "miss"
    assert _ask(store, "old", namespace="n2") == "miss"
    knows_age = not isinstance(store, MemoryStore)  # a memory store keeps no write times
    assert purge(store, namespace="n1", older_than=1800, clock=clock) == (1 if knows_age else 0)
    assert _ask(store, "old", namespace="n1") == ("miss" if knows_age else "hit")
    assert _ask(store, "new", namespace="n1") == "hit"
    assert _ask(store, "old", namespace="n2") == "hit"
    assert purge(store, namespace="n2") == 1
    assert store_stats(store).namespaces.keys() == {"n1"}
    assert store_stats(store).namespaces["n1"].entries == {"exact": 2}


def test_purge_needs_a_filter(store: Any) -> None:
    with pytest.raises(ConfigError, match="needs"):
        purge(store)
    with pytest.raises(ConfigError):
        purge(store, older_than=float("nan"))


def test_health_reports_a_working_store(store: Any) -> None:
    ticks = iter([10.0, 10.004])  # the round trip took 4 ms (real time is no business of this test)
    result = health(store, clock=lambda: next(ticks))
    assert result.ok, result
    assert result.error is None
    assert result.latency_ms == pytest.approx(4.0)
    assert store_stats(store).entries == 0  # the probe entry is removed


def test_health_reports_a_failing_or_lying_store() -> None:
    class Down(MemoryStore):
        def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
            raise StoreError("connection refused")

    class Lying(MemoryStore):
        def get(self, key: str) -> bytes | None:
            return b"something else"

    clock = Clock()

    class Slow(MemoryStore):
        def get(self, key: str) -> bytes | None:
            clock.now += 0.05  # the read takes 50 ms
            return super().get(key)

    assert health(Down()).error == "StoreError: connection refused"
    assert not health(Lying()).ok
    slow = health(Slow(), budget_ms=10, clock=clock)
    assert not slow.ok
    assert slow.latency_ms == pytest.approx(50.0)
    assert slow.error == "round trip took 50.0 ms, over the 10 ms budget"
    assert health(Slow(), budget_ms=60, clock=clock).ok


def test_cli_stats_purge_health_on_a_sqlite_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cache.db"
    url = f"sqlite://{db}"
    with SQLiteStore(db) as s:
        for tenant in ("acme", "globex"):
            _ask(s, "q", tenant=tenant, namespace="svc")
    ledger = tmp_path / "ledger.jsonl"
    ledger.touch()  # a ledger with no call in it yet

    def run(*argv: str) -> tuple[int, str]:
        from io import StringIO

        out = StringIO()
        code = cli.main(list(argv), out=out)
        return code, out.getvalue()

    code, text = run("stats", "--store", url, "--json", "--ledger", str(ledger))
    assert code == 0
    data = json.loads(text)
    assert data["store"]["entries"] == 2
    assert data["store"]["namespaces"]["svc"]["entries"] == {"exact": 2}
    assert data["ledger"]["calls"] == 0
    code, text = run("stats", "--store", url, "--ledger", str(ledger))
    assert code == 0
    assert text.startswith("store: 2 entries, ")
    lines = text.splitlines()
    assert lines[lines.index("namespace  layer  entries  bytes") + 2].split()[:3] == ["svc", "exact", "2"]
    assert run("purge", "--store", url, "--tenant", "acme", "--dry-run") == (0, "would delete 1 entries\n")
    assert run("purge", "--store", url, "--tenant", "acme") == (0, "deleted 1 entries\n")
    assert run("purge", "--store", url)[0] == 2  # no filter
    # A budget no busy machine misses: the check is the command, not the speed of this machine.
    code, text = run("health", "--store", url, "--budget-ms", "60000")
    assert code == 0
    assert json.loads(text)["ok"] is True
    code, text = run("health", "--store", "sqlite://relative/path.db")
    assert code == 1
    assert json.loads(text)["ok"] is False


def test_cli_health_on_redis_up_and_down(redis7_server: Any) -> None:  # noqa: F811
    from io import StringIO

    from tests.redis_servers import free_port

    out = StringIO()
    assert cli.main(["health", "--store", redis7_server.url, "--budget-ms", "60000"], out=out) == 0
    assert json.loads(out.getvalue())["ok"] is True
    out = StringIO()
    # How long an unreachable Redis takes to fail: benchmarks/store_timeouts.py.
    assert cli.main(["health", "--store", f"redis://user:hunter2@127.0.0.1:{free_port()}/0"], out=out) == 1
    report = json.loads(out.getvalue())
    assert report["ok"] is False
    assert "hunter2" not in out.getvalue()

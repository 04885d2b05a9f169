"""RedisStore: what is particular to Redis. The store contract (every kind) is in test_stores.py.

Real servers throughout (:mod:`tests.redis_servers`): the session's Redis 7, Redis 8 and three-node
cluster, isolated by key prefix, and private servers for tests that pause, restart or lock one.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import threading
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import cachekit.stores.redis
from cachekit.errors import ConfigError, MissingExtraError, StoreError
from cachekit.stores import RedisStore, store_from_url
from cachekit.stores.url import SUPPORTED_SCHEMES
from tests.redis_servers import (
    RedisCluster3,
    RedisServer,
    free_port,
    redis7_binary,
    redis7_server,
    redis8_server,
    redis_cluster,
)

#: The session's servers, imported as fixtures (named here so linters see them used).
SERVER_FIXTURES = (redis7_server, redis8_server, redis_cluster)

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0
#: For tests about what is stored, not how fast: a busy machine must not fail them.
SLOW_OK = 5.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture(params=["redis7", "redis8", "cluster"])
def server(request: pytest.FixtureRequest) -> RedisServer | RedisCluster3:
    name = {"redis7": "redis7_server", "redis8": "redis8_server", "cluster": "redis_cluster"}[request.param]
    found: RedisServer | RedisCluster3 = request.getfixturevalue(name)
    return found


@pytest.fixture
def open_store(prefix: str) -> Iterator[Callable[..., RedisStore]]:
    """Open RedisStores under this test's prefix; close them and delete the prefix afterwards."""
    made: list[tuple[RedisStore, RedisServer | RedisCluster3 | None]] = []

    def make(target: RedisServer | RedisCluster3 | str, **kwargs: Any) -> RedisStore:
        url = target if isinstance(target, str) else target.url
        kwargs.setdefault("prefix", prefix)
        kwargs.setdefault("timeout", SLOW_OK)
        store = RedisStore(url, **kwargs)
        made.append((store, None if isinstance(target, str) else target))
        return store

    yield make
    for store, target in made:
        store.close()
        if target is not None and (not isinstance(target, RedisServer) or target.running):
            target.delete_prefix(store.prefix)


def _raw_name(prefix: str, key: str) -> bytes:
    return f"{prefix}{{{key}}}".encode()


def _owner(target: RedisServer | RedisCluster3, name: bytes) -> RedisServer:
    """The server that holds ``name``: the server itself, or the cluster node serving its slot."""
    if isinstance(target, RedisServer):
        return target
    slot = target.nodes[0].command("CLUSTER", "KEYSLOT", name)
    assert isinstance(slot, int)
    return target.node_for_slot(slot)


def _hget_calls(server: RedisServer) -> int:
    raw = server.client()
    try:
        return int(raw.info("commandstats").get("cmdstat_hget", {}).get("calls", 0))
    finally:
        raw.close()


# -- layout ----------------------------------------------------------------------------------------


def test_each_entry_is_one_hash_with_value_and_time(
    redis7_server: RedisServer, open_store: Callable[..., RedisStore], prefix: str
) -> None:
    store = open_store(redis7_server, clock=FakeClock(T0 + 0.25))
    store.set("k", b"val\x00", ttl=100)
    store.set("forever", b"x")
    secret = store.secret
    raw = redis7_server.client()
    try:
        name = _raw_name(prefix, "k")
        assert raw.type(name) == b"hash"
        assert raw.hgetall(name) == {b"v": b"val\x00", b"t": b"1700000000.250000"}
        assert 99_000 < raw.pttl(name) <= 100_000
        assert raw.pttl(_raw_name(prefix, "forever")) == -1
        secret_name = f"{prefix}__secret__".encode()
        assert raw.get(secret_name) == secret
        assert raw.ttl(secret_name) == -1  # never expires, so volatile-* eviction never takes it
        assert sorted(raw.scan_iter(match=f"{prefix}*")) == sorted(
            [secret_name, name, _raw_name(prefix, "forever")]
        )
    finally:
        raw.close()


def test_cluster_keys_are_hash_tagged(
    redis_cluster: RedisCluster3, open_store: Callable[..., RedisStore], prefix: str
) -> None:
    store = open_store(redis_cluster)
    keys = [f"key-{i}" for i in range(60)]
    for key in keys:
        store.set(key, key.encode())
    admin = redis_cluster.nodes[0].client()
    raw = {node.port: node.client() for node in redis_cluster.nodes}
    owners = set()
    try:
        for key in keys:
            name = _raw_name(prefix, key)
            slot = admin.execute_command("CLUSTER", "KEYSLOT", name)
            # Only the part in braces picks the slot: the entry, and any key kept beside it later
            # (<prefix>{key}:...), hash like the cachekit key itself.
            assert slot == admin.execute_command("CLUSTER", "KEYSLOT", key)
            assert slot == admin.execute_command("CLUSTER", "KEYSLOT", name + b":sidecar")
            owner = redis_cluster.node_for_slot(int(slot))
            assert raw[owner.port].hget(name, "v") == key.encode()
            owners.add(owner.port)
    finally:
        admin.close()
        for client in raw.values():
            client.close()
    assert owners == set(redis_cluster.ports)  # entries spread over every node
    assert sorted(e.key for e in store.entries()) == sorted(keys)  # SCAN reached every primary
    assert sorted(e.key for e in store.entries("key-1")) == sorted(k for k in keys if k.startswith("key-1"))
    secret = store.secret
    store.clear()
    assert list(store.entries()) == []
    left = []
    for node in redis_cluster.nodes:
        raw = node.client()
        try:
            left += list(raw.scan_iter(match=f"{prefix}*"))
        finally:
            raw.close()
    assert left == [f"{prefix}__secret__".encode()]  # clear() went to every node, and kept the secret
    assert store.secret == secret


# -- atomic writes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kind", ["redis7", "cluster"])
def test_readers_never_see_half_a_write(
    request: pytest.FixtureRequest, open_store: Callable[..., RedisStore], prefix: str, kind: str, mode: str
) -> None:
    target: RedisServer | RedisCluster3 = request.getfixturevalue(
        "redis7_server" if kind == "redis7" else "redis_cluster"
    )
    clock = FakeClock()
    store = open_store(target, clock=clock)
    # Write i stores value i, created at T0 + i, with a TTL on even i only: a reader can tell
    # whether what it sees belongs to one write.
    values = [bytes([65 + i]) * (200_000 + i) for i in range(6)]
    ttls: list[float | None] = [60 if i % 2 == 0 else None for i in range(6)]
    name = _raw_name(prefix, "k")
    stop = threading.Event()
    seen: list[int] = []
    problems: list[str] = []

    def raw_reader() -> None:
        raw = _owner(target, name).client(socket_timeout=SLOW_OK)
        try:
            while not stop.is_set():
                pipe = raw.pipeline(transaction=True)  # one consistent snapshot of value, time and TTL
                pipe.hmget(name, "v", "t")
                pipe.pttl(name)
                (value, created), pttl = pipe.execute()
                if value is None:
                    problems.append(f"missing entry (t={created!r}, pttl={pttl})")
                    continue
                if value not in values:
                    problems.append(f"a value that was never written ({len(value)} bytes)")
                    continue
                i = values.index(value)
                seen.append(i)
                if float(created) != T0 + i:
                    problems.append(f"value {i} with the time of write {float(created) - T0}")
                if (pttl == -1) != (ttls[i] is None):
                    problems.append(f"value {i} with pttl {pttl}")
        finally:
            raw.close()

    def store_reader() -> None:
        while not stop.is_set():
            got = store.get("k")
            if got not in values:
                problems.append(f"store.get gave {None if got is None else len(got)} bytes")

    rounds = 150
    store.set("k", values[0], ttl=ttls[0])  # from here on the entry always exists
    threads = [threading.Thread(target=raw_reader), threading.Thread(target=store_reader)]
    for thread in threads:
        thread.start()
    try:
        if mode == "sync":
            for n in range(rounds):
                i = n % len(values)
                clock.now = T0 + i
                store.set("k", values[i], ttl=ttls[i])
        else:

            async def write() -> None:
                for n in range(rounds):
                    i = n % len(values)
                    clock.now = T0 + i
                    await store.aset("k", values[i], ttl=ttls[i])

            asyncio.run(write())
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert problems == []
    assert len(set(seen)) >= 2, "the reader saw too few writes to prove anything"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_overwrite_replaces_the_ttl(
    server: RedisServer | RedisCluster3, open_store: Callable[..., RedisStore], prefix: str, mode: str
) -> None:
    store = open_store(server)
    name = _raw_name(prefix, "k")
    owner = _owner(server, name)

    def put(ttl: float | None) -> None:
        if mode == "sync":
            store.set("k", b"v", ttl=ttl)
        else:
            asyncio.run(store.aset("k", b"v", ttl=ttl))

    put(100)
    assert 99_000 < owner.command("PTTL", name) <= 100_000
    put(None)
    assert owner.command("PTTL", name) == -1
    put(50)
    assert 49_000 < owner.command("PTTL", name) <= 50_000
    put(float("inf"))
    assert owner.command("PTTL", name) == -1
    put(1e300)  # longer than PEXPIRE accepts: capped, not an error
    assert owner.command("PTTL", name) > 10**12
    put(0.0001)  # under a millisecond: still stored with a TTL (1 ms), never without one
    assert owner.command("PTTL", name) in (1, 0, -2)  # a millisecond left, or gone already; never -1
    put(0)
    assert owner.command("EXISTS", name) == 0


# -- the secret ------------------------------------------------------------------------------------


def test_secret_is_shared_by_every_store_object_of_a_prefix(
    redis7_server: RedisServer, open_store: Callable[..., RedisStore], prefix: str
) -> None:
    stores = [open_store(redis7_server) for _ in range(8)]
    secrets: list[bytes] = []
    start = threading.Barrier(len(stores))

    def first_access(store: RedisStore) -> None:
        start.wait()
        secrets.append(store.secret)  # all at once: SET NX lets exactly one of them create it

    threads = [threading.Thread(target=first_access, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(secrets) == 8
    assert len(set(secrets)) == 1
    assert len(secrets[0]) == 32
    other = open_store(redis7_server, prefix=prefix + "other:")
    assert other.secret != secrets[0]


def test_secret_and_entries_survive_a_restart_with_appendonly(
    open_store: Callable[..., RedisStore],
) -> None:
    with RedisServer(redis7_binary(), appendonly=True) as server:
        store = open_store(server)
        secret = store.secret
        store.set("k", b"kept")
        server.restart(kill=True)  # SIGKILL: only what was fsync'd survives
        again = open_store(server)
        assert again.secret == secret
        assert again.get("k") == b"kept"
        # The store that was open across the restart reconnects by itself.
        assert store.get("k") == b"kept"
        assert store.secret == secret


def test_secret_needs_redis(open_store: Callable[..., RedisStore]) -> None:
    store = open_store(f"redis://127.0.0.1:{free_port()}/0", timeout=0.05)
    with pytest.raises(StoreError, match="secret"):
        _ = store.secret


def test_processes_converge_on_one_secret_after_redis_loses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes that outlive a Redis restart which lost the secret converge on one secret again
    (found in review: it failed before its fix)."""
    monkeypatch.setattr(cachekit.stores.redis, "SECRET_RESYNC", 0.0)
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


# -- credentials -----------------------------------------------------------------------------------

PASSWORD = "Sup3r-s3cret-pa55"
WRONG = "Wr0ng-pa55word-xyz"
USER = "cachekit-user-77"


def test_credentials_never_appear_in_errors_logs_or_repr(
    caplog: pytest.LogCaptureFixture, open_store: Callable[..., RedisStore]
) -> None:
    with RedisServer(redis7_binary(), password=PASSWORD) as server:
        good = open_store(f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0")
        good.set("k", b"v")
        assert good.get("k") == b"v"
        for url in (
            f"redis://:{WRONG}@127.0.0.1:{server.port}/0",
            f"redis://{USER}:{WRONG}@127.0.0.1:{server.port}/0",
            f"redis://{WRONG}@127.0.0.1:{server.port}/0",  # a lone userinfo is the password
            f"redis://127.0.0.1:{server.port}/0",  # no password at all: NOAUTH
            f"redis+cluster://{USER}:{WRONG}@127.0.0.1:{free_port()}",
        ):
            store = open_store(url)
            texts = [repr(store), str(store), store.url]
            with caplog.at_level(logging.DEBUG):
                uses: list[Callable[[], object]] = [
                    lambda s=store: s.get("k"),  # type: ignore[misc]
                    lambda s=store: s.set("k", b"v"),  # type: ignore[misc]
                    lambda s=store: s.delete("k"),  # type: ignore[misc]
                    lambda s=store: s.secret,  # type: ignore[misc]
                    lambda s=store: s.ping(),  # type: ignore[misc]
                    lambda s=store: list(s.entries()),  # type: ignore[misc]
                    lambda s=store: s.delete_many(["k"]),  # type: ignore[misc]
                    lambda s=store: s.clear(),  # type: ignore[misc]
                    lambda s=store: asyncio.run(s.aget("k")),  # type: ignore[misc]
                    lambda s=store: asyncio.run(s.aset("k", b"v")),  # type: ignore[misc]
                ]
                for use in uses:
                    with pytest.raises(StoreError) as info:
                        use()
                    texts.append("".join(traceback.format_exception(info.value)))
                    assert "127.0.0.1" in str(info.value)  # it does say where
            texts += [record.getMessage() for record in caplog.records]
            for text in texts:
                assert WRONG not in text
                assert PASSWORD not in text
                assert USER not in text
            caplog.clear()


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{WRONG}@host:notaport/0",
        f"redis://{USER}:{WRONG}@host:6379/x",
        f"redis+cluster://{USER}:{WRONG}@a:7000/2",
        f"rediss://{USER}:{WRONG}@host?what=1",
        f"redis://{USER}:{WRONG}@a:1,b:2",
        f"redis://{USER}:{WRONG}@",
    ],
)
def test_url_errors_never_echo_credentials(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        RedisStore(url)
    assert WRONG not in str(info.value)
    assert USER not in str(info.value)


def test_credentials_never_reach_an_error_or_a_repr() -> None:
    """A store URL's password is redacted in every error and repr, odd characters included (found in
    review: it failed before its fix)."""
    with pytest.raises(ConfigError) as caught:
        store_from_url("redis://:s3cr?tpass@cache.internal:6379/0", home=Path("/tmp"))
    assert "s3cr" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        store_from_url("rediss://user:pa#ss?w0rd@", home=Path("/tmp"))
    assert "w0rd" not in str(caught.value)
    assert "hunter2" not in repr(cachekit.CacheConfig(store="redis://default:hunter2secret@h:6379/0"))


# -- URLs and options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("redis://", "no host"),
        ("redis://:6379", "no host"),
        ("redis://host:0", "port"),
        ("redis://host:65536", "port"),
        ("redis://host:abc", "port"),
        ("redis://host:+1", "port"),
        ("redis://host/abc", "database number"),
        ("redis://host/-1", "database number"),
        ("redis://[::1", "IPv6"),
        ("redis://a:1,b:2", r"redis\+cluster"),
        ("redis+cluster://a:1,b:2/1", "only database 0"),
        ("redis+cluster://a:1,,b:2", "no host"),
        ("redis://host#frag", "fragment"),
        ("redis://host?timeout=0", "timeout"),
        ("redis://host?timeout=-1", "timeout"),
        ("redis://host?timeout=abc", "timeout"),
        ("redis://host?timeout=inf", "timeout"),
        ("redis://host?timeout=nan", "timeout"),
        ("redis://host?connect_timeout=0", "connect_timeout"),
        ("redis://host?timeout=1&timeout=2", "once"),
        ("redis://host?max_value_bytes=0", "max_value_bytes"),
        ("redis://host?max_value_bytes=-5", "max_value_bytes"),
        ("redis://host?max_value_bytes=1.5", "max_value_bytes"),
        ("redis://host?prefix=", "prefix"),
        ("redis://host?prefix=a%7Bb", "prefix"),
        ("redis://host?prefix", "prefix"),
        ("redis://host?size=1", "size"),
        ("redis://host?timeout", "timeout"),
        ("redis://host?ssl_ca_certs=/ca.pem", "TLS"),
        ("redis://host?a=1&&b", "malformed"),
        ("http://host", "not a Redis URL"),
        ("redis:/host", "not a Redis URL"),
    ],
)
def test_bad_urls(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RedisStore(url)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": float("nan")},
        {"timeout": float("inf")},
        {"timeout": True},
        {"connect_timeout": 0},
        {"max_value_bytes": 0},
        {"max_value_bytes": 1.5},
        {"max_value_bytes": True},
        {"prefix": ""},
        {"prefix": "a}"},
        {"prefix": "{a"},
        {"ssl_ca_certs": "/ca.pem"},
    ],
)
def test_bad_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RedisStore("redis://localhost", **kwargs)


def test_url_parameters_and_defaults() -> None:
    store = RedisStore(
        "rediss://u:p@cache.example:6380/2?prefix=app:&timeout=0.2&connect_timeout=1&max_value_bytes=1000"
        "&ssl_ca_certs=/etc/ssl/ca.pem"
    )
    assert store.url == "rediss://***@cache.example:6380/2"
    assert repr(store) == "RedisStore('rediss://***@cache.example:6380/2', prefix='app:')"
    assert (store.prefix, store.timeout, store.connect_timeout, store.max_value_bytes) == (
        "app:",
        0.2,
        1.0,
        1000,
    )
    assert not store.is_cluster
    plain = RedisStore("REDIS://localhost")
    assert plain.url == "redis://localhost:6379/0"
    assert (plain.prefix, plain.timeout, plain.connect_timeout) == ("cachekit:", 0.05, 0.05)
    assert plain.max_value_bytes == 16 * 2**20
    assert RedisStore("redis://localhost", timeout=0.3).connect_timeout == 0.3  # follows timeout
    cluster = RedisStore("redis+cluster://h1:7000,[::1]:7001,h3")
    assert cluster.is_cluster
    assert cluster.url == "redis+cluster://h1:7000,[::1]:7001,h3:6379"
    assert RedisStore("rediss+cluster://h:7000/0").is_cluster
    assert RedisStore("redis://[::1]:6390/3").url == "redis://[::1]:6390/3"
    assert RedisStore("redis://pw@h").url == "redis://***@h:6379/0"
    assert RedisStore("redis://h?prefix=a%3Ab%20c").prefix == "a:b c"  # percent-decoded


def test_store_from_url_opens_redis(redis8_server: RedisServer, tmp_path: Path, prefix: str) -> None:
    assert {"redis", "rediss", "redis+cluster", "rediss+cluster"} <= set(SUPPORTED_SCHEMES)
    store = store_from_url(f"{redis8_server.url}?prefix={prefix}&timeout=5", home=tmp_path)
    try:
        assert isinstance(store, RedisStore)
        assert (store.prefix, store.timeout) == (prefix, 5.0)
        store.set("k", b"v")
        assert store.get("k") == b"v"
    finally:
        store.close()
        redis8_server.delete_prefix(prefix)
    for url in ("rediss://h:1", "redis+cluster://a:1,b:2", "rediss+cluster://a:1"):
        other = store_from_url(url, home=tmp_path)  # nothing connects until first use
        assert isinstance(other, RedisStore)
        other.close()
    with pytest.raises(ConfigError, match="timeout"):
        store_from_url("redis://h?timeout=x", home=tmp_path)
    assert list(tmp_path.iterdir()) == []


# -- async -----------------------------------------------------------------------------------------


def _clients(target: RedisServer | RedisCluster3) -> int:
    nodes = target.nodes if isinstance(target, RedisCluster3) else [target]
    total = 0
    for node in nodes:
        raw = node.client()
        try:
            total += len(raw.client_list())  # this client's own connection included
        finally:
            raw.close()
    return total


def test_async_on_two_event_loops_and_shared_with_sync(
    server: RedisServer | RedisCluster3, open_store: Callable[..., RedisStore]
) -> None:
    baseline = _clients(server)  # each count includes its own CLIENT LIST connection
    store = open_store(server)
    store.set("from-sync", b"s")

    async def run(n: int) -> list[bytes | None]:
        await store.aset(f"from-async-{n}", str(n).encode())
        # Several at once in this loop: they share this loop's client.
        return list(await asyncio.gather(*(store.aget(k) for k in ("from-sync", "from-async-1", "nope"))))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert asyncio.run(run(1)) == [b"s", b"1", None]
        assert asyncio.run(run(2)) == [b"s", b"1", None]  # a second loop: no "attached to a different loop"
        gc.collect()
    assert [str(w.message) for w in caught] == []  # no unclosed connection or transport left behind
    assert store.get("from-async-2") == b"2"
    store.delete("from-async-1")
    assert asyncio.run(store.aget("from-async-1")) is None
    # Each loop's connections were closed as its asyncio.run ended; only the sync client's remain.
    store_sync_only = _clients(server) - baseline
    store.close()
    assert _clients(server) == baseline
    assert store_sync_only >= 1


def test_aclose_closes_this_loops_connections(
    redis7_server: RedisServer, open_store: Callable[..., RedisStore]
) -> None:
    baseline = _clients(redis7_server)
    store = open_store(redis7_server)

    async def use_then_close() -> None:
        async with store:
            await store.aset("k", b"v")
            assert await store.aget("k") == b"v"
            assert _clients(redis7_server) > baseline
        assert _clients(redis7_server) == baseline
        await store.aclose()  # idempotent
        with pytest.raises(StoreError, match="closed"):
            await store.aget("k")
        with pytest.raises(StoreError, match="closed"):
            await store.aset("k", b"v")
        with pytest.raises(StoreError, match="closed"):
            await store.adelete("k")

    asyncio.run(use_then_close())
    with pytest.raises(StoreError, match="closed"):
        store.get("k")


async def _settle() -> None:
    """Let the loop run what was handed to it from outside, then wait for the tasks that started."""
    await asyncio.sleep(0)  # callbacks queued before this task ran first; one more turn for their tasks
    await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))


def test_close_from_sync_code_while_a_loop_holds_a_client(
    redis7_server: RedisServer, open_store: Callable[..., RedisStore]
) -> None:
    baseline = _clients(redis7_server)
    store = open_store(redis7_server)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(store.aset("k", b"v"))
        store.close()  # no running loop here: the loop is asked to close its client when it next runs
        loop.run_until_complete(_settle())
        assert _clients(redis7_server) == baseline
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


# -- limits and failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["keyword", "url"])
def test_values_over_max_value_bytes_are_not_stored(
    redis7_server: RedisServer,
    open_store: Callable[..., RedisStore],
    caplog: pytest.LogCaptureFixture,
    prefix: str,
    how: str,
) -> None:
    if how == "keyword":
        store = open_store(redis7_server, max_value_bytes=100)
    else:
        store = open_store(f"{redis7_server.url}?max_value_bytes=100&prefix={prefix}")
    store.set("k", b"a" * 100)
    assert store.get("k") == b"a" * 100
    with caplog.at_level(logging.WARNING, logger="cachekit.stores"):
        store.set("k", b"b" * 101)
    assert store.get("k") is None  # not stored, and the earlier value is not served stale
    assert any("101 bytes" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    asyncio.run(store.aset("k", b"c" * 100))
    assert store.get("k") == b"c" * 100
    asyncio.run(store.aset("k", b"d" * 101))
    assert store.get("k") is None


def test_missing_redis_package_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # `import redis` now fails like an absent package
    for make in (
        lambda: RedisStore("redis://localhost"),
        lambda: store_from_url("redis+cluster://localhost:7000", home=tmp_path),
    ):
        with pytest.raises(MissingExtraError, match=r"pip install 'cachekit-llm\[redis\]'") as info:
            make()
        assert info.value.extra == "redis"
        assert isinstance(info.value, ImportError)
    with pytest.raises(ConfigError):  # a bad URL is still reported as such, first
        RedisStore("redis://localhost:0")


def test_importing_the_stores_does_not_import_redis() -> None:
    code = (
        "import sys, cachekit, cachekit.stores, cachekit.stores.redis\n"
        "assert 'redis' not in sys.modules, 'imported redis'\n"
        "from cachekit.stores import RedisStore\n"
        "assert RedisStore is cachekit.stores.redis.RedisStore\n"
        "assert 'redis' not in sys.modules, 'imported redis'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_an_unreachable_redis_fails_fast_as_store_errors(
    open_store: Callable[..., RedisStore], scheme: str
) -> None:
    port = free_port()  # nothing listens there
    suffix = "/0" if scheme == "redis" else ""
    store = open_store(f"{scheme}://127.0.0.1:{port}{suffix}", timeout=0.05)
    uses: dict[str, Callable[[], object]] = {
        "get": lambda: store.get("k"),
        "set": lambda: store.set("k", b"v", ttl=5),
        "delete": lambda: store.delete("k"),
        "secret": lambda: store.secret,
        "ping": store.ping,
        "entries": lambda: list(store.entries()),
        "delete_many": lambda: store.delete_many(["k"]),
        "clear": store.clear,
        "aget": lambda: asyncio.run(store.aget("k")),
        "aset": lambda: asyncio.run(store.aset("k", b"v")),
        "adelete": lambda: asyncio.run(store.adelete("k")),
    }
    for name, use in uses.items():  # how long each takes to fail: benchmarks/store_timeouts.py
        with pytest.raises(StoreError, match=f"127.0.0.1:{port}") as info:
            use()
        assert "failed" in str(info.value), name


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stalled_server_times_out_once_without_retries(
    open_store: Callable[..., RedisStore], mode: str
) -> None:
    """A silent server costs one timeout, never a retry (how long: benchmarks/store_timeouts.py)."""
    with RedisServer(redis7_binary()) as server:
        store = open_store(server, timeout=0.05)

        def stall_then_get() -> tuple[int, threading.Thread]:
            before = _hget_calls(server)
            sleeper = server.debug_sleep(0.6)  # the server stops answering anyone
            with pytest.raises(StoreError, match=r"get failed: TimeoutError"):
                store.get("k")
            return before, sleeper

        async def astall_then_aget() -> tuple[int, threading.Thread]:
            await store.aset("k", b"v")  # this loop's client is connected, the connection pooled
            before = _hget_calls(server)
            sleeper = server.debug_sleep(0.6)
            with pytest.raises(StoreError, match=r"get failed: TimeoutError"):
                await store.aget("k")
            return before, sleeper

        store.set("k", b"v")  # connected, and the connection pooled
        before, sleeper = stall_then_get() if mode == "sync" else asyncio.run(astall_then_aget())
        sleeper.join()
        # The server ran every HGET it had been sent once it woke up: one, so nothing was retried.
        assert _hget_calls(server) - before == 1
        assert store.get("k") == b"v"  # and the store recovers by itself


def test_a_stalled_cluster_node_times_out_fast(
    redis_cluster: RedisCluster3, open_store: Callable[..., RedisStore], prefix: str
) -> None:
    store = open_store(redis_cluster, timeout=0.05)
    store.set("k", b"v")
    owner = _owner(redis_cluster, _raw_name(prefix, "k"))
    before = _hget_calls(owner)
    sleeper = owner.debug_sleep(0.5)
    with pytest.raises(StoreError, match="get failed"):
        store.get("k")
    sleeper.join()
    assert _hget_calls(owner) - before == 1  # one timeout, no retry (how long: benchmarks/store_timeouts.py)
    # The node is awake: the store serves again by itself (the cluster client may spend a call
    # refreshing its view of the nodes first).
    assert b"v" in [_get_or_none(store, "k") for _ in range(3)]


class _Namespace:
    """A module's view of ``asyncio`` with some names replaced (the rest are asyncio's own)."""

    def __init__(self, **replaced: Any) -> None:
        self._replaced = replaced

    def __getattr__(self, name: str) -> Any:
        return self._replaced[name] if name in self._replaced else getattr(asyncio, name)


def test_an_async_call_ends_at_its_overall_deadline(monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    """docs/operations.md: "async calls also get one overall deadline (connect_timeout + 2 * timeout)".

    A Cluster node that serves the key but sees a slot nobody serves answers CLUSTERDOWN; redis-py's
    async cluster client then pauses before it re-reads the layout, a pause no socket timeout bounds.
    Here that pause never ends (an event nobody sets), so only the deadline can end the call: without
    it the call hangs (until the test's own guard)."""
    import redis.asyncio.cluster

    paused = asyncio.Event()
    deadlines: list[float] = []

    async def pause_forever(delay: float) -> None:
        paused.set()
        await asyncio.Event().wait()

    async def wait_for(call: Any, timeout: float) -> Any:
        deadlines.append(timeout)
        return await asyncio.wait_for(call, timeout)

    cluster = RedisCluster3(redis7_binary()).start()
    store = RedisStore(cluster.url, prefix=prefix, timeout=0.05, connect_timeout=0.2)
    try:

        async def main() -> None:
            await store.aset("k", b"v")  # connected; the client knows the layout
            owner = _owner(cluster, _raw_name(prefix, "k"))
            low, high = cluster.RANGES[cluster.nodes.index(owner)]
            taken = owner.command("CLUSTER", "KEYSLOT", _raw_name(prefix, "k"))
            owner.command("CLUSTER", "DELSLOTS", low if taken != low else high)
            monkeypatch.setattr(redis.asyncio.cluster, "asyncio", _Namespace(sleep=pause_forever))
            monkeypatch.setattr(cachekit.stores.redis, "asyncio", _Namespace(wait_for=wait_for))
            with pytest.raises(StoreError, match="get failed: TimeoutError"):
                await asyncio.wait_for(store.aget("k"), 60)  # the guard: only a hang reaches it
            assert paused.is_set()  # the client did pause: the deadline ended the call
            assert deadlines == [0.2 + 2 * 0.05]
            await store.aclose()

        asyncio.run(main())
    finally:
        store.close()
        cluster.cleanup()


def _get_or_none(store: RedisStore, key: str) -> bytes | None:
    try:
        return store.get(key)
    except StoreError:
        return None

"""The exact-response stores: one contract for every store, then what is particular to each.

The contract runs on every kind: memory, SQLite, Redis 7, Redis 8 and a three-node Redis Cluster
(real servers from :mod:`tests.redis_servers`, shared by the session; each test gets a key prefix of
its own and deletes it afterwards). Redis-only behaviour is in ``test_redis.py``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cachekit
from cachekit.config import MAX_TTL
from cachekit.errors import ConfigError, StoreError
from cachekit.stores import (
    AsyncStore,
    EntryInfo,
    Inspectable,
    MemoryStore,
    SQLiteStore,
    Store,
    store_from_url,
)
from cachekit.stores import sqlite as sqlite_module
from cachekit.stores.redis import RedisStore
from tests.redis_servers import RedisCluster3, RedisServer, redis7_server, redis8_server, redis_cluster
from tests.redis_time import age_keys

#: The session's servers, imported as fixtures (named here so linters see them used).
SERVER_FIXTURES = (redis7_server, redis8_server, redis_cluster)

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0

KINDS = ["memory", "sqlite", "redis7", "redis8", "cluster"]
REDIS_FIXTURES = {"redis7": "redis7_server", "redis8": "redis8_server", "cluster": "redis_cluster"}
#: Per-operation timeout of the Redis stores in the contract: generous, since the contract is about
#: what a store keeps, not how fast (a busy test machine must not turn into failures here).
REDIS_TEST_TIMEOUT = 5.0


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


AnyStore = MemoryStore | SQLiteStore | RedisStore
MakeStore = Callable[..., AnyStore]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def key_prefix() -> str:
    """The Redis key prefix of one test."""
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def server(kind: str, request: pytest.FixtureRequest) -> RedisServer | RedisCluster3 | None:
    """The session's Redis server (or cluster) for a Redis kind; ``None`` for an in-process store."""
    return request.getfixturevalue(REDIS_FIXTURES[kind]) if kind in REDIS_FIXTURES else None


@pytest.fixture
def make_store(
    kind: str, server: RedisServer | RedisCluster3 | None, key_prefix: str, tmp_path: Path
) -> Iterator[MakeStore]:
    """A factory for the parametrized store kind; every store it made is closed afterwards.

    Redis stores of one test share a fresh prefix (so they share entries and the secret, like two
    processes would), and everything under it is deleted afterwards.
    """
    made: list[AnyStore] = []

    def make(clock: Callable[[], float] = time.time) -> AnyStore:
        store: AnyStore
        if kind == "memory":
            store = MemoryStore(clock=clock)
        elif kind == "sqlite":
            store = SQLiteStore(tmp_path / "store.sqlite3", clock=clock)
        else:
            assert server is not None
            store = RedisStore(server.url, prefix=key_prefix, clock=clock, timeout=REDIS_TEST_TIMEOUT)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
    if server is not None:
        server.delete_prefix(key_prefix)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class Timeline:
    """Moves time for the store under test, without waiting.

    Every store reads an injected :class:`FakeClock`, which jumps. Redis also expires keys by its own
    clock, so for Redis the keys under the test's prefix are aged by as much (:func:`age_keys`).
    ``slack`` is the time between "just before" and the expiry instant: for Redis it is time that may
    really pass between a step and the check after it on a busy machine, so it is seconds, not a
    millisecond.
    """

    def __init__(self, server: RedisServer | RedisCluster3 | None, prefix: str) -> None:
        self.clock = FakeClock()
        self._server = server
        self._prefix = prefix
        #: Seconds between "just before" and the expiry instant.
        self.slack = 0.001 if server is None else 5.0

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if self._server is not None:
            age_keys(self._server, self._prefix, seconds)

    def advance_far(self) -> None:
        """A century: any default TTL would show."""
        self.advance(100 * 365 * 86400)


@pytest.fixture
def timeline(server: RedisServer | RedisCluster3 | None, key_prefix: str) -> Timeline:
    return Timeline(server, key_prefix)


in_process_only = pytest.mark.parametrize("kind", ["memory", "sqlite"], indirect=True)


# -- the contract ----------------------------------------------------------------------------------


def test_is_a_store_and_async_only_when_it_does_network_io(make_store: MakeStore, kind: str) -> None:
    store = make_store()
    assert isinstance(store, Store)
    assert isinstance(store, Inspectable)
    # Redis serves sync and async clients with one object; the in-process stores have no async side.
    assert isinstance(store, AsyncStore) == (kind in REDIS_FIXTURES)


def test_get_set_delete(make_store: MakeStore) -> None:
    store = make_store()
    assert store.get("k") is None
    store.set("k", b"v1")
    assert store.get("k") == b"v1"
    store.delete("k")
    assert store.get("k") is None
    store.delete("k")  # deleting a missing key is not an error
    assert store.get("k") is None


def test_overwrite_replaces(make_store: MakeStore) -> None:
    store = make_store()
    store.set("k", b"first")
    store.set("k", b"second, longer")
    assert store.get("k") == b"second, longer"
    store.set("k", b"3")
    assert store.get("k") == b"3"


def test_clear_removes_everything_but_keeps_the_secret(make_store: MakeStore, kind: str) -> None:
    store = make_store()
    secret = store.secret
    for i in range(20):
        store.set(f"k{i}", b"x")
    store.clear()
    assert all(store.get(f"k{i}") is None for i in range(20))
    assert store.secret == secret
    if kind != "memory":  # still stored, not only remembered by this object
        assert make_store().secret == secret
    store.set("after", b"y")
    assert store.get("after") == b"y"


def test_keys_are_distinct_strings(make_store: MakeStore) -> None:
    store = make_store()
    keys = ["a", "A", "a ", "ä", "a\u0301", "ключ", "🔑", "x" * 1000, "{a}", "a}", "*", "a:b"]
    for i, key in enumerate(keys):
        store.set(key, str(i).encode())
    assert [store.get(key) for key in keys] == [str(i).encode() for i in range(len(keys))]


def test_ttl_expires_with_the_clock(make_store: MakeStore, timeline: Timeline) -> None:
    store = make_store(timeline.clock)
    store.set("k", b"v", ttl=10)
    timeline.advance(10 - timeline.slack)
    assert store.get("k") == b"v"
    timeline.advance(timeline.slack)  # at expires_at (exactly, for a fake clock): expired
    assert store.get("k") is None
    timeline.clock.advance(-5)  # an entry found expired may be gone for good; never resurrected wrongly
    assert store.get("k") in (None, b"v")


def test_ttl_none_never_expires(make_store: MakeStore, timeline: Timeline) -> None:
    store = make_store(timeline.clock)
    store.set("k", b"v")
    store.set("k2", b"v2", ttl=None)
    timeline.advance_far()
    assert store.get("k") == b"v"
    assert store.get("k2") == b"v2"
    assert {e.key: e.expires_at for e in store.entries()} == {"k": None, "k2": None}


def test_overwrite_replaces_the_ttl_too(make_store: MakeStore, timeline: Timeline) -> None:
    store = make_store(timeline.clock)
    store.set("forever", b"old", ttl=5)
    store.set("forever", b"new")
    store.set("short", b"old")
    store.set("short", b"new", ttl=5)
    timeline.advance(6)
    assert store.get("forever") == b"new"
    assert store.get("short") is None


@pytest.mark.parametrize("ttl", [0, -1, -0.5, -math.inf])
def test_non_positive_ttl_is_already_expired(make_store: MakeStore, clock: FakeClock, ttl: float) -> None:
    store = make_store(clock)
    store.set("k", b"earlier")
    store.set("k", b"v", ttl=ttl)
    assert store.get("k") is None
    assert list(store.entries()) == []  # nothing written, and the earlier value gone


def test_a_fractional_ttl_is_kept_to_the_fraction(make_store: MakeStore, timeline: Timeline) -> None:
    store = make_store(timeline.clock)
    store.set("k", b"v", ttl=10.5)
    timeline.advance(10.5 - timeline.slack)
    assert store.get("k") == b"v"
    timeline.advance(timeline.slack)
    assert store.get("k") is None


@pytest.mark.parametrize("ttl", [math.inf, 1e308, 1e20, float(2**63)])
def test_an_infinite_or_huge_ttl_is_kept_not_refused(
    make_store: MakeStore, timeline: Timeline, ttl: float
) -> None:
    """Past any clock (1e308 seconds overflowed Redis's milliseconds and failed every write): the
    entry is written, sync and async, and outlives a century."""
    store = make_store(timeline.clock)
    store.set("k", b"v", ttl=ttl)
    if isinstance(store, AsyncStore):
        asyncio.run(store.aset("async", b"a", ttl=ttl))
        assert store.get("async") == b"a"
    timeline.advance_far()
    assert store.get("k") == b"v"


def test_ten_years_the_longest_ttl_cachekit_sends_is_kept_exactly(
    make_store: MakeStore, timeline: Timeline
) -> None:
    store = make_store(timeline.clock)
    store.set("k", b"v", ttl=MAX_TTL)
    timeline.advance(MAX_TTL - timeline.slack)
    assert store.get("k") == b"v"
    timeline.advance(timeline.slack)
    assert store.get("k") is None


def test_nan_ttl_is_refused(make_store: MakeStore) -> None:
    store = make_store()
    store.set("k", b"earlier")
    with pytest.raises(ValueError, match="NaN"):
        store.set("k", b"v", ttl=float("nan"))
    assert store.get("k") == b"earlier"  # refused before anything changed


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00",
        bytes(range(256)),
        b"head\x00tail\x00",
        b"\xff\xfe not utf-8 \x80",
        os.urandom(100_000),
    ],
    ids=["empty", "nul", "nuls", "all-bytes", "inner-nul", "not-utf8", "100k-random"],
)
def test_binary_values_survive(make_store: MakeStore, value: bytes) -> None:
    store = make_store()
    store.set("k", value)
    got = store.get("k")
    assert type(got) is bytes
    assert got == value


def test_secret(make_store: MakeStore) -> None:
    store = make_store()
    assert isinstance(store.secret, bytes)
    assert len(store.secret) >= 32
    assert store.secret == store.secret
    assert len(set(store.secret)) > 8  # random, not a constant fill


def test_closed_store_refuses_use(make_store: MakeStore) -> None:
    store = make_store()
    store.set("k", b"v")
    store.close()
    store.close()  # idempotent
    uses: list[Callable[[], object]] = [
        lambda: store.get("k"),
        lambda: store.set("k", b"v"),
        lambda: store.delete("k"),
        store.clear,
        lambda: list(store.entries()),
        lambda: store.delete_many(["k"]),
        store.ping,
    ]
    if not isinstance(store, RedisStore):  # Redis expires keys itself: it has nothing to purge
        uses.append(store.purge_expired)
    for use in uses:
        with pytest.raises(StoreError, match="closed"):
            use()


def test_context_manager_closes(make_store: MakeStore) -> None:
    with make_store() as store:
        store.set("k", b"v")
        assert store.get("k") == b"v"
    with pytest.raises(StoreError):
        store.get("k")


@in_process_only
def test_purge_expired_counts(make_store: MakeStore, clock: FakeClock) -> None:
    store = make_store(clock)
    assert not isinstance(store, RedisStore)
    store.set("a", b"1", ttl=1)
    store.set("b", b"2", ttl=1)
    store.set("c", b"3", ttl=100)
    store.set("d", b"4")
    clock.advance(2)
    assert store.purge_expired() == 2
    assert store.purge_expired() == 0
    assert [store.get(k) for k in "abcd"] == [None, None, b"3", b"4"]


def test_threads_lose_nothing(make_store: MakeStore, kind: str) -> None:
    store = make_store()
    # Fewer rounds over a network: each one is a round trip, and 8 x 60 still interleave plenty.
    n_threads, per_thread = 8, (60 if kind in REDIS_FIXTURES else 200)
    shared_values = {f"writer-{t}".encode() * 50 for t in range(n_threads)}
    start = threading.Barrier(n_threads * 2)
    errors: list[BaseException] = []
    torn: list[bytes] = []

    def writer(t: int) -> None:
        try:
            start.wait()
            mine = f"writer-{t}".encode() * 50
            for i in range(per_thread):
                store.set(f"t{t}-k{i}", f"{t}:{i}".encode())
                store.set("shared", mine)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            start.wait()
            for _ in range(per_thread * 2):
                value = store.get("shared")
                if value is not None and value not in shared_values:
                    torn.append(value)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    threads += [threading.Thread(target=reader) for _ in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert torn == []
    missing = [
        (t, i)
        for t in range(n_threads)
        for i in range(per_thread)
        if store.get(f"t{t}-k{i}") != f"{t}:{i}".encode()
    ]
    assert missing == []
    assert store.get("shared") in shared_values


def test_a_store_whose_secret_is_an_instance_attribute_is_accepted() -> None:
    """A store whose ``secret`` is a plain attribute, not a property, is a store (found in review: it
    failed before its fix)."""

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

    cache = cachekit.Cache(cachekit.CacheConfig(store=Plain(), ledger=False))
    assert cache.sync_store is not None


# -- the contract: Inspectable ---------------------------------------------------------------------

#: Keys whose prefixes hold every character a Redis MATCH pattern (or SQL LIKE) treats specially.
_GLOBBY = ["a1", "a2", "ab", "b1", "a*x", "a?y", "a[1]", "a\\z", "a%", "a_", "\U0010ffffz", "\U0010ffff"]


def test_entries_filter_by_prefix_literally(make_store: MakeStore) -> None:
    store = make_store()
    for key in _GLOBBY:
        store.set(key, key.encode() * 2)

    def keys(prefix: str) -> list[str]:
        return sorted(e.key for e in store.entries(prefix))

    assert keys("") == sorted(_GLOBBY)
    assert keys("a") == sorted(k for k in _GLOBBY if k.startswith("a"))
    assert keys("a*") == ["a*x"]  # the star is a character, not "anything"
    assert keys("a?") == ["a?y"]
    assert keys("a[") == ["a[1]"]
    assert keys("a[1") == ["a[1]"]
    assert keys("a\\") == ["a\\z"]
    assert keys("a%") == ["a%"]
    assert keys("a_") == ["a_"]
    assert keys("\U0010ffff") == ["\U0010ffff", "\U0010ffffz"]  # no code point above it to bound a range
    assert keys("a1") == ["a1"]
    assert keys("zzz") == []
    assert keys("a1-and-more") == []


def test_entries_report_size_and_times(make_store: MakeStore, clock: FakeClock, kind: str) -> None:
    store = make_store(clock)
    store.set("forever", b"x" * 1234)
    store.set("short", b"", ttl=100)
    store.set("big", os.urandom(70_000), ttl=3600)
    found = {e.key: e for e in store.entries()}
    assert set(found) == {"forever", "short", "big"}
    assert all(isinstance(e, EntryInfo) for e in found.values())
    assert [found[k].size for k in ("forever", "short", "big")] == [1234, 0, 70_000]
    if kind == "memory":  # it does not keep creation times
        assert all(e.created_at is None for e in found.values())
    else:
        assert all(e.created_at == pytest.approx(T0, abs=1e-3) for e in found.values())
    assert found["forever"].expires_at is None
    # Redis reports the remaining TTL, which a slow machine may have eaten into a little.
    assert found["short"].expires_at == pytest.approx(T0 + 100, abs=2)
    assert found["big"].expires_at == pytest.approx(T0 + 3600, abs=2)


def test_entries_skip_expired_ones(make_store: MakeStore, timeline: Timeline) -> None:
    store = make_store(timeline.clock)
    store.set("gone", b"1", ttl=2)
    store.set("kept", b"2", ttl=1000)
    timeline.advance(3)
    assert [e.key for e in store.entries()] == ["kept"]
    assert store.delete_many(["gone", "kept"]) == 1  # an expired entry does not count as existing
    assert list(store.entries()) == []


def test_delete_many_counts_what_existed(make_store: MakeStore) -> None:
    store = make_store()
    for i in range(30):
        store.set(f"k{i}", b"v")
    assert store.delete_many([]) == 0
    assert store.delete_many(["k0", "k1", "missing", "k0"]) == 2
    assert store.delete_many(iter(["k1", "k2"])) == 1  # any iterable
    assert store.delete_many(f"k{i}" for i in range(30)) == 27
    assert list(store.entries()) == []
    assert store.get("k5") is None


def test_delete_many_many_keys(make_store: MakeStore) -> None:
    store = make_store()
    keys = [f"key-{i}" for i in range(1200)]  # more than one batch of every store
    for key in keys:
        store.set(key, b"v")
    assert len(list(store.entries("key-"))) == 1200
    assert store.delete_many(keys) == 1200
    assert list(store.entries()) == []


def test_ping(make_store: MakeStore) -> None:
    store = make_store()
    assert store.ping() is None
    store.close()
    with pytest.raises(StoreError):
        store.ping()


# -- MemoryStore -----------------------------------------------------------------------------------


def test_memory_secret_differs_between_instances() -> None:
    a, b = MemoryStore(), MemoryStore()
    assert len(a.secret) == 32
    assert a.secret != b.secret


def test_memory_lru_evicts_oldest_first_and_get_refreshes() -> None:
    store = MemoryStore(max_entries=3)
    store.set("a", b"1")
    store.set("b", b"2")
    store.set("c", b"3")
    assert store.get("a") == b"1"  # a is now the most recent; b is the oldest
    store.set("d", b"4")
    assert store.get("b") is None
    assert [store.get(k) for k in "acd"] == [b"1", b"3", b"4"]
    # Recency now (oldest first): a, c, d.
    store.set("e", b"5")
    assert store.get("a") is None
    assert [store.get(k) for k in "cde"] == [b"3", b"4", b"5"]
    assert len(store) == 3
    assert store.stats().evictions == 2


def test_memory_set_refreshes_recency() -> None:
    store = MemoryStore(max_entries=2)
    store.set("a", b"1")
    store.set("b", b"2")
    store.set("a", b"1 again")  # a becomes the most recent
    store.set("c", b"3")
    assert store.get("b") is None
    assert store.get("a") == b"1 again"
    assert store.get("c") == b"3"


def test_memory_miss_does_not_refresh_or_evict() -> None:
    store = MemoryStore(max_entries=2)
    store.set("a", b"1")
    store.set("b", b"2")
    assert store.get("zzz") is None
    store.set("c", b"3")
    assert store.get("a") is None
    assert store.get("b") == b"2"


def test_memory_byte_bound_is_exact() -> None:
    # Each entry costs len(key) + len(value) = 2 + 40 = 42 bytes.
    store = MemoryStore(max_bytes=126)
    for name in ("k1", "k2", "k3"):
        store.set(name, b"x" * 40)
    assert store.stats().bytes == 126  # exactly at the budget: nothing evicted
    assert len(store) == 3
    store.set("k4", b"x" * 40)
    assert store.get("k1") is None
    assert store.stats().bytes == 126
    # One big entry pushes out as many old ones as it needs, oldest first.
    store.set("k5", b"y" * 80)  # 82 bytes: 126 + 82 = 208 -> drop k2 (166), k3 (124)
    assert [store.get(k) for k in ("k2", "k3")] == [None, None]
    assert store.get("k4") == b"x" * 40
    assert store.get("k5") == b"y" * 80
    stats = store.stats()
    assert (stats.entries, stats.bytes, stats.evictions) == (2, 124, 3)


def test_memory_overwrite_accounts_bytes() -> None:
    store = MemoryStore(max_bytes=1000)
    store.set("k", b"x" * 500)
    store.set("k", b"x" * 10)
    assert store.stats().bytes == 11
    store.delete("k")
    assert store.stats().bytes == 0
    store.set("k", b"x" * 10)
    store.clear()
    assert store.stats().bytes == 0
    assert len(store) == 0


def test_memory_too_large_value_is_not_stored(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(max_bytes=100)
    store.set("small", b"s" * 10)
    store.set("big", b"old")
    secret_payload = b"PAYLOAD-" * 20  # 160 bytes: over the whole budget
    with caplog.at_level(logging.DEBUG, logger="cachekit.stores"):
        store.set("big", secret_payload)
    assert store.get("big") is None  # not stored, and the earlier value is not served stale
    assert store.get("small") == b"s" * 10  # nothing was evicted to make room for it
    assert store.stats().evictions == 0
    records = [r for r in caplog.records if r.name == "cachekit.stores"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING  # as in the Redis store: a setting to fix
    assert "PAYLOAD" not in records[0].getMessage()  # values are never logged


def test_memory_value_exactly_max_bytes_is_stored() -> None:
    store = MemoryStore(max_bytes=10)
    store.set("k", b"123456789")
    assert store.get("k") == b"123456789"
    store.set("k", b"1234567890")
    assert store.get("k") is None


def test_memory_expired_entries_are_removed_lazily(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    store.set("a", b"1", ttl=1)
    store.set("b", b"2")
    clock.advance(5)
    assert len(store) == 2  # not noticed yet
    assert store.get("a") is None
    assert len(store) == 1
    assert store.stats().bytes == len("b") + 1


def test_memory_stats_count_hits_and_misses(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    store.set("a", b"1", ttl=1)
    store.get("a")
    store.get("a")
    store.get("nope")
    clock.advance(1)
    store.get("a")  # expired: a miss
    stats = store.stats()
    assert (stats.hits, stats.misses) == (2, 2)
    with pytest.raises(AttributeError):
        stats.hits = 5  # type: ignore[misc]


def test_memory_stored_value_is_immutable() -> None:
    store = MemoryStore()
    buffer = bytearray(b"abc")
    store.set("k", buffer)  # type: ignore[arg-type]
    buffer[0] = ord("z")
    assert store.get("k") == b"abc"


@pytest.mark.parametrize(
    "kwargs",
    [{"max_bytes": 0}, {"max_bytes": -1}, {"max_bytes": True}, {"max_bytes": 1.5}, {"max_entries": 0}],
)
def test_memory_bad_budgets(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        MemoryStore(**kwargs)  # type: ignore[arg-type]


class _ReferenceLRU:
    """The obvious, slow LRU the MemoryStore must agree with: a list of keys, oldest first."""

    def __init__(self, max_bytes: int, max_entries: int | None) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.order: list[str] = []
        self.values: dict[str, bytes] = {}

    def size(self) -> int:
        return sum(len(k) + len(v) for k, v in self.values.items())

    def get(self, key: str) -> bytes | None:
        if key not in self.values:
            return None
        self.order.remove(key)
        self.order.append(key)
        return self.values[key]

    def set(self, key: str, value: bytes) -> None:
        self.delete(key)
        if len(key) + len(value) > self.max_bytes:
            return
        self.order.append(key)
        self.values[key] = value
        while self.size() > self.max_bytes or (
            self.max_entries is not None and len(self.order) > self.max_entries
        ):
            del self.values[self.order.pop(0)]

    def delete(self, key: str) -> None:
        if key in self.values:
            self.order.remove(key)
            del self.values[key]


_ops = st.lists(
    st.tuples(
        st.sampled_from(["get", "set", "delete"]),
        st.sampled_from(["a", "b", "cc", "ddd", "eeee"]),
        st.integers(min_value=0, max_value=40),
    ),
    max_size=60,
)


@given(
    ops=_ops,
    max_bytes=st.integers(min_value=1, max_value=120),
    max_entries=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
)
def test_memory_matches_a_reference_lru(
    ops: list[tuple[str, str, int]], max_bytes: int, max_entries: int | None
) -> None:
    store = MemoryStore(max_bytes=max_bytes, max_entries=max_entries)
    model = _ReferenceLRU(max_bytes, max_entries)
    for op, key, size in ops:
        if op == "get":
            assert store.get(key) == model.get(key)
        elif op == "set":
            value = key.encode() * size
            store.set(key, value)
            model.set(key, value)
        else:
            store.delete(key)
            model.delete(key)
        stats = store.stats()
        assert (stats.entries, stats.bytes) == (len(model.order), model.size())
        assert stats.bytes <= max_bytes
    assert {k: store.get(k) for k in model.order} == model.values


# -- SQLiteStore: on its own -----------------------------------------------------------------------


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_sqlite_persists_across_reopen_with_the_same_secret(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with SQLiteStore(path) as store:
        store.set("k", b"v\x00")
        secret = store.secret
    with SQLiteStore(path) as again:
        assert again.get("k") == b"v\x00"
        assert again.secret == secret
    with SQLiteStore(tmp_path / "other.db") as other:
        assert other.secret != secret


def test_sqlite_creates_parents_schema_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c.db"
    with SQLiteStore(path) as store:
        assert store.path == path
    assert path.exists()
    conn = _raw(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        columns = [row[1:4] for row in conn.execute("PRAGMA table_info(entries)")]
        assert columns == [
            ("key", "TEXT", 0),
            ("value", "BLOB", 1),
            ("created_at", "REAL", 0),
            ("expires_at", "REAL", 0),
        ]
        meta = dict(conn.execute("SELECT name, value FROM meta"))
        assert meta["schema_version"] == sqlite_module.SCHEMA_VERSION
        assert isinstance(meta["secret"], bytes)
        assert len(meta["secret"]) == 32
    finally:
        conn.close()


def test_sqlite_rows_record_times(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "c.db"
    with SQLiteStore(path, clock=clock) as store:
        store.set("forever", b"1")
        store.set("short", b"2", ttl=30)
    conn = _raw(path)
    try:
        rows = {k: (c, e) for k, c, e in conn.execute("SELECT key, created_at, expires_at FROM entries")}
    finally:
        conn.close()
    assert rows == {"forever": (T0, None), "short": (T0, T0 + 30)}


def test_sqlite_rows_for_unusual_ttls(tmp_path: Path, clock: FakeClock) -> None:
    """No expired row is written (a non-positive TTL deletes, as in every store), and infinity is
    stored as no expiry, not as an infinite float."""
    path = tmp_path / "c.db"
    with SQLiteStore(path, clock=clock) as store:
        for key in ("zero", "negative", "minus-inf"):
            store.set(key, b"earlier")
        store.set("zero", b"1", ttl=0)
        store.set("negative", b"1", ttl=-1)
        store.set("minus-inf", b"1", ttl=-math.inf)
        store.set("inf", b"1", ttl=math.inf)
        store.set("half", b"1", ttl=0.5)
        store.set("huge", b"1", ttl=1e308)
    conn = _raw(path)
    try:
        rows = dict(conn.execute("SELECT key, expires_at FROM entries"))
    finally:
        conn.close()
    assert rows == {"inf": None, "half": T0 + 0.5, "huge": 1e308}


def test_sqlite_purges_expired_rows_while_writing(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "c.db"
    with SQLiteStore(path, clock=clock) as store:
        for i in range(10):
            store.set(f"old{i}", b"x", ttl=1)
        clock.advance(2)
        conn = _raw(path)
        try:
            count = "SELECT COUNT(*) FROM entries WHERE key LIKE 'old%'"
            assert conn.execute(count).fetchone()[0] == 10  # misses, but still on disk
            for i in range(sqlite_module.PURGE_EVERY - 10 - 1):
                store.set(f"new{i}", b"y")
            assert conn.execute(count).fetchone()[0] == 10  # one write short of the purge
            store.set("last", b"y")
            assert conn.execute(count).fetchone()[0] == 0
            assert (
                conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == sqlite_module.PURGE_EVERY - 10
            )
        finally:
            conn.close()


@pytest.mark.parametrize(
    "content",
    [b"this is a text file, not a database\n" * 10, b"SQLite format 3\x00" + b"\xff" * 200, os.urandom(8192)],
    ids=["text", "bad-header", "random"],
)
def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="not a SQLite database") as info:
        SQLiteStore(path)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    assert path.read_bytes() == content  # left untouched


def test_sqlite_refuses_another_applications_database(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = _raw(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.close()
    with pytest.raises(ConfigError, match=r"another application.*users"):
        SQLiteStore(path)
    conn = _raw(path)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert tables == {"users"}  # nothing of ours was added


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    SQLiteStore(path).close()
    conn = _raw(path)
    conn.execute(
        "UPDATE meta SET value = ? WHERE name = 'schema_version'", (sqlite_module.SCHEMA_VERSION + 1,)
    )
    conn.close()
    with pytest.raises(ConfigError, match=f"schema version {sqlite_module.SCHEMA_VERSION + 1}.*upgrade"):
        SQLiteStore(path)


def test_sqlite_opens_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()  # a zero-length file is a valid, empty SQLite database
    with SQLiteStore(path) as store:
        store.set("k", b"v")
        assert store.get("k") == b"v"


def test_sqlite_errors_become_store_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with SQLiteStore(path, timeout=0.05) as store:
        store.set("k", b"v")
        blocker = _raw(path)
        try:
            blocker.execute("BEGIN EXCLUSIVE")  # holds the write lock past the store's timeout
            with pytest.raises(StoreError, match="locked") as info:
                store.set("k2", b"v")
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        store.set("k2", b"v")  # usable again once the lock is gone
        assert store.get("k2") == b"v"


def test_sqlite_waits_for_a_busy_writer_only_briefly_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default busy timeout is 50 ms: a cache write is skipped, not waited for. Checked as the
    setting SQLite runs with (how long a locked write takes to fail is in benchmarks/store_timeouts.py)."""
    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def recording_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        opened.append(conn)
        return conn

    path = tmp_path / "c.db"
    monkeypatch.setattr(sqlite3, "connect", recording_connect)
    with SQLiteStore(path) as store:
        store.set("k", b"v")
        monkeypatch.undo()
        [conn] = opened
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (50,)
        blocker = _raw(path)
        try:
            blocker.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StoreError, match="locked"):
                store.set("k2", b"v")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        store.set("k2", b"v")
        assert store.get("k2") == b"v"


@pytest.mark.parametrize(
    ("prefix", "upper"),
    [
        ("", None),
        ("a", "b"),
        ("ab", "ac"),
        ("a\U0010ffff", "b"),
        ("\U0010ffff", None),
        ("x\ud7ff", "x\ue000"),  # surrogates are skipped: they cannot be encoded
    ],
)
def test_sqlite_prefix_range_upper_bound(prefix: str, upper: str | None) -> None:
    assert sqlite_module._successor(prefix) == upper


def test_sqlite_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    directory = tmp_path / "dir.db"
    directory.mkdir()
    with pytest.raises(StoreError):
        SQLiteStore(directory)


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf")])
def test_sqlite_bad_timeout(tmp_path: Path, timeout: float) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        SQLiteStore(tmp_path / "c.db", timeout=timeout)


# -- SQLiteStore: several processes ----------------------------------------------------------------

_WORKER = r"""
import sys
from cachekit.stores import SQLiteStore

path, me, other, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
print("ready", flush=True)
assert sys.stdin.readline() == "go\n"
store = SQLiteStore(path, timeout=30)
for i in range(count):
    store.set(f"{me}-{i}", f"{me}:{i}".encode() + b"\x00" * (i % 7))
print("written", flush=True)
assert sys.stdin.readline() == "read\n"
missing = sum(store.get(f"{other}-{i}") != f"{other}:{i}".encode() + b"\x00" * (i % 7) for i in range(count))
print(f"missing {missing} secret {store.secret.hex()}", flush=True)
store.close()
"""

_OPENER = r"""
import sys
from cachekit.stores import SQLiteStore

print("ready", flush=True)
for line in sys.stdin:  # one fresh file per line, opened the moment the line arrives
    with SQLiteStore(line.strip(), timeout=30) as store:
        print(store.secret.hex(), flush=True)
"""


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )


def _expect(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(prefix):
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"worker said {line!r}, expected {prefix!r}; stderr:\n{err}")
    return line.strip()


def _send(procs: list[subprocess.Popen[str]], line: str) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(line)
        proc.stdin.flush()


def _finish(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err


def test_sqlite_two_processes_write_concurrently_and_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "c.db"  # a fresh file: both also race to create it
    count = 500
    procs = [
        _python(_WORKER, str(path), "A", "B", str(count)),
        _python(_WORKER, str(path), "B", "A", str(count)),
    ]
    try:
        for proc in procs:
            _expect(proc, "ready")
        _send(procs, "go\n")  # both start opening and writing at the same moment
        for proc in procs:
            _expect(proc, "written")
        _send(procs, "read\n")  # each now reads every key the other one wrote
        reports = [_expect(proc, "missing").split() for proc in procs]
        _finish(procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert [report[1] for report in reports] == ["0", "0"]
    assert reports[0][3] == reports[1][3]  # one secret for the file
    with SQLiteStore(path) as store:
        assert store.secret.hex() == reports[0][3]
        for me in "AB":
            lost = [
                i for i in range(count) if store.get(f"{me}-{i}") != f"{me}:{i}".encode() + b"\x00" * (i % 7)
            ]
            assert lost == [], me


def test_sqlite_processes_opening_a_fresh_file_at_once_agree_on_the_secret(tmp_path: Path) -> None:
    """Four processes open a new file at the same moment, three times over (the same processes, a new
    file each time: starting interpreters is the slow part, not the race)."""
    procs = [_python(_OPENER) for _ in range(4)]
    try:
        for proc in procs:
            _expect(proc, "ready")
        for attempt in range(3):
            path = tmp_path / f"fresh{attempt}.db"
            _send(procs, f"{path}\n")
            secrets = {_expect(proc, "") for proc in procs}
            assert len(secrets) == 1, attempt
            (secret,) = secrets
            assert len(bytes.fromhex(secret)) == 32
            with SQLiteStore(path) as store:
                assert store.secret.hex() == secret
        _finish(procs)  # closes their stdin: the end of the files
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _open(path: str, results: Any) -> None:
    try:
        SQLiteStore(path).close()
        results.put("ok")
    except Exception as exc:  # pragma: no cover - reported by the assertion
        results.put(f"{type(exc).__name__}: {exc}")


def test_many_processes_creating_one_sqlite_store_at_once(tmp_path: Path) -> None:
    """Sixteen processes creating one new SQLite file at once all open it (found in review: it failed
    before SQLite opened with a longer timeout)."""
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


_fork_only = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)


def _fork(target: Callable[[], None]) -> int | None:
    """Run ``target`` in a forked child; return its exit code (None if it hung and was killed)."""
    ctx = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads; these tests fork on purpose.
        warnings.simplefilter("ignore", DeprecationWarning)
        child = ctx.Process(target=target)
        child.start()
    child.join(timeout=15)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return child.exitcode


@_fork_only
def test_sqlite_store_keeps_working_in_a_forked_child(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "c.db") as store:
        store.set("parent", b"p")
        inherited = store._conn

        def child() -> None:
            store.set("child", b"c")
            if store._conn is inherited:  # SQLite forbids using a connection across fork()
                raise SystemExit(4)
            if store.get("parent") != b"p":
                raise SystemExit(3)
            store.close()

        assert _fork(child) == 0
        assert store.get("child") == b"c"  # the parent's own connection still works
        store.set("parent2", b"p2")
        assert store.get("parent2") == b"p2"


@_fork_only
def test_sqlite_fork_while_another_thread_holds_the_lock(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "c.db") as store:
        store.set("k", b"v")
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store._lock:
                holding.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert holding.wait(10)

            def child() -> None:
                if store.get("k") != b"v":  # would deadlock on the copied, held lock
                    raise SystemExit(3)

            assert _fork(child) == 0
        finally:
            release.set()
            holder.join()
        assert store.get("k") == b"v"


# -- store_from_url --------------------------------------------------------------------------------


def test_url_memory_defaults(tmp_path: Path) -> None:
    store = store_from_url("memory://", home=tmp_path)
    assert isinstance(store, MemoryStore)
    assert store.max_bytes == 64 * 2**20
    assert store.max_entries is None
    assert list(tmp_path.iterdir()) == []  # nothing written to home


def test_url_memory_parameters(tmp_path: Path) -> None:
    store = store_from_url("memory://?max_bytes=1000&max_entries=5", home=tmp_path)
    assert isinstance(store, MemoryStore)
    assert (store.max_bytes, store.max_entries) == (1000, 5)
    only_entries = store_from_url("MEMORY://?max_entries=7", home=tmp_path)
    assert isinstance(only_entries, MemoryStore)
    assert (only_entries.max_bytes, only_entries.max_entries) == (64 * 2**20, 7)


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("max_bytes=abc", "max_bytes"),
        ("max_bytes=0", "max_bytes"),
        ("max_bytes=-5", "max_bytes"),
        ("max_bytes=1.5", "max_bytes"),
        ("max_bytes=1_000", "max_bytes"),
        ("max_bytes=", "max_bytes"),
        ("max_bytes=1&max_bytes=2", "max_bytes"),
        ("max_entries=x", "max_entries"),
        ("max_entries=0", "max_entries"),
        ("size=10", "size"),
        ("max_bytes", "query"),
    ],
)
def test_url_memory_bad_parameters(tmp_path: Path, query: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        store_from_url(f"memory://?{query}", home=tmp_path)


def test_url_memory_refuses_a_host(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="memory://"):
        store_from_url("memory://somewhere", home=tmp_path)


def test_url_sqlite_absolute_path(tmp_path: Path) -> None:
    path = tmp_path / "sub dir" / "x.db"
    store = store_from_url(f"sqlite://{path}", home=tmp_path / "home")
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == path
    finally:
        store.close()
    assert path.exists()
    assert not (tmp_path / "home").exists()


def test_url_sqlite_percent_encoded_path(tmp_path: Path) -> None:
    store = store_from_url(f"sqlite://{tmp_path}/what%3F.db", home=tmp_path)
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == tmp_path / "what?.db"
    finally:
        store.close()


def test_url_sqlite_default_path_is_in_home(tmp_path: Path) -> None:
    home = tmp_path / "home" / "cachekit"  # does not exist yet
    store = store_from_url("sqlite://", home=home)
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == home / "cache.sqlite3"
        store.set("k", b"v")
    finally:
        store.close()
    assert (home / "cache.sqlite3").is_file()


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("sqlite://relative/x.db", "absolute path"),
        ("sqlite://x.db", "absolute path"),
        ("sqlite:///tmp/", "directory"),
        ("sqlite:///tmp/x.db?mode=ro", "query"),
    ],
)
def test_url_sqlite_bad(tmp_path: Path, url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        store_from_url(url, home=tmp_path)


def test_url_errors_never_echo_a_password(tmp_path: Path) -> None:
    for url in (
        "redis://:hunter2@host:notaport",
        "rediss://user:hunter2@host:6379/x",
        "redis+cluster://user:hunter2@a:7000/3",
        "redis://user:hunter2@host?nope=1",
        "user:hunter2@host",
        "ftp://user:hunter2@host",
        "u:hunter2@x://y",
    ):
        with pytest.raises(ConfigError) as info:
            store_from_url(url, home=tmp_path)
        assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("url", ["ftp://x", "postgres://db/x", "", "memory", "/tmp/x.db", "file:///tmp/x.db"])
def test_url_unknown_scheme(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError, match=r"memory://.*sqlite://"):
        store_from_url(url, home=tmp_path)


def test_url_must_be_a_string(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="string"):
        store_from_url(tmp_path / "x.db", home=tmp_path)  # type: ignore[arg-type]

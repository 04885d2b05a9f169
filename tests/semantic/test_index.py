"""The vector indexes: one contract, run on the memory index, a Redis 8 server and a Redis 8 Cluster.

Real servers only (Redis 8 vector sets; a Redis 7 to show the refusal). Expiry uses an injected clock
(both indexes compare entry expiry times with their ``clock``); the keys' own Redis TTLs are read with
``PTTL``, and time passes for them by ageing the keys (:func:`tests.redis_time.age_keys`), never by waiting.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import pytest

from cachekit.errors import ConfigError, StoreError
from cachekit.semantic.base import (
    AsyncVectorIndex,
    Candidate,
    DimensionMismatchError,
    SemanticError,
    VectorIndex,
)
from cachekit.semantic.index_memory import MemoryVectorIndex
from cachekit.semantic.index_redis import RedisVectorIndex
from tests.redis_servers import (
    RedisCluster3,
    RedisServer,
    escape_glob,
    free_port,
    redis7_server,
    redis8_binary,
    redis8_server,
)
from tests.redis_time import age_keys

#: The session's servers, imported as fixtures (named here so linters see them used).
SERVER_FIXTURES = (redis7_server, redis8_server)

T0 = 1_700_000_000.0
#: For tests about what is stored, not how fast: a busy machine must not fail them.
SLOW_OK = 5.0
DIM = 16


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def unit_rows(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def unit(vector: np.ndarray) -> np.ndarray:
    return (vector / np.linalg.norm(vector)).astype(np.float32)


@pytest.fixture(scope="module")
def redis8_cluster() -> Iterator[RedisCluster3]:
    """A three-master Redis 8 cluster for this module (the shared one runs Redis 7: no vector sets)."""
    cluster = RedisCluster3(redis8_binary()).start()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}:"


def _target(request: pytest.FixtureRequest, kind: str) -> RedisServer | RedisCluster3:
    found: RedisServer | RedisCluster3 = request.getfixturevalue(
        {"redis8": "redis8_server", "cluster": "redis8_cluster"}[kind]
    )
    return found


def near(value: float) -> float:
    """A similarity equal to any within 1e-5 of ``value`` (``pytest.approx``, in the field's type)."""
    return cast(float, pytest.approx(value, abs=1e-5))


class Backend:
    """Makes indexes of one kind under this test's prefix, with a shared fake clock."""

    def __init__(self, kind: str, target: RedisServer | RedisCluster3 | None, prefix: str) -> None:
        self.kind = kind
        self.target = target
        self.prefix = prefix
        self.clock = FakeClock()
        self.made: list[Any] = []

    def make(self, **kwargs: Any) -> Any:
        kwargs.setdefault("clock", self.clock)
        if self.target is None:
            index: Any = MemoryVectorIndex(**kwargs)
        else:
            kwargs.setdefault("prefix", self.prefix)
            kwargs.setdefault("timeout", SLOW_OK)
            index = RedisVectorIndex(self.target.url, **kwargs)
        self.made.append(index)
        return index

    def stored_keys(self) -> list[bytes]:
        """Every key under this test's prefix, on every node."""
        assert self.target is not None
        nodes = self.target.nodes if isinstance(self.target, RedisCluster3) else [self.target]
        found: list[bytes] = []
        for node in nodes:
            raw = node.client(socket_timeout=SLOW_OK)
            try:
                found += list(raw.scan_iter(match=escape_glob(self.prefix) + "*", count=1000))
            finally:
                raw.close()
        return found

    def close(self) -> None:
        for index in self.made:
            index.close()
        if self.target is not None:
            self.target.delete_prefix(self.prefix)


@pytest.fixture(params=["memory", "redis8", "cluster"])
def backend(request: pytest.FixtureRequest, prefix: str) -> Iterator[Backend]:
    target = None if request.param == "memory" else _target(request, request.param)
    made = Backend(request.param, target, prefix)
    yield made
    made.close()


@pytest.fixture(params=["redis8", "cluster"])
def redis_backend(request: pytest.FixtureRequest, prefix: str) -> Iterator[Backend]:
    made = Backend(request.param, _target(request, request.param), prefix)
    yield made
    made.close()


def keys_of(found: list[Candidate]) -> list[str]:
    return [c.entry_key for c in found]


# -- the contract ----------------------------------------------------------------------------------


def test_implements_the_protocols(backend: Backend) -> None:
    index = backend.make()
    assert isinstance(index, VectorIndex)
    assert isinstance(index, AsyncVectorIndex) == (backend.kind != "memory")


def test_search_orders_by_cosine_with_exact_similarities(backend: Backend) -> None:
    index = backend.make()
    rows = unit_rows(40)
    for i, row in enumerate(rows):
        index.add("p", f"k{i}", row, f"question {i}", ttl=60)
    for q in range(5):
        query = unit(rows[q] + 0.3 * rows[q + 10])
        expected = rows @ query
        found = index.search("p", query, k=6, min_similarity=-1.0)
        best = np.argsort(-expected)[:6]
        assert keys_of(found) == [f"k{i}" for i in best]
        for candidate in found:
            i = int(candidate.entry_key[1:])
            assert candidate.similarity == pytest.approx(float(expected[i]), abs=1e-5)
            assert candidate.text == f"question {i}"


def test_min_similarity_and_k(backend: Backend) -> None:
    index = backend.make()
    base = unit_rows(1, seed=1)[0]
    other = unit_rows(1, seed=2)[0]
    other = unit(other - (other @ base) * base)  # orthogonal to base
    # Entries at cosines 0.95, 0.8, 0.5, 0.0 from the query.
    for key, cos in (("a", 0.95), ("b", 0.8), ("c", 0.5), ("d", 0.0)):
        index.add("p", key, unit(cos * base + np.sqrt(1 - cos**2) * other), key, ttl=None)
    assert keys_of(index.search("p", base, k=10, min_similarity=0.79)) == ["a", "b"]
    assert keys_of(index.search("p", base, k=10, min_similarity=0.96)) == []
    assert keys_of(index.search("p", base, k=10, min_similarity=-1.0)) == ["a", "b", "c", "d"]
    assert keys_of(index.search("p", base, k=2, min_similarity=-1.0)) == ["a", "b"]
    assert keys_of(index.search("p", base, k=1, min_similarity=0.0)) == ["a"]
    assert index.search("p", base, k=0, min_similarity=-1.0) == []
    found = index.search("p", base, k=4, min_similarity=0.49)
    assert [round(c.similarity, 4) for c in found] == [0.95, 0.8, 0.5]
    # The opposite vector: cosine -0.95 to "a", still in [-1, 1].
    lowest = index.search("p", -base, k=4, min_similarity=-1.0)
    assert lowest[-1].entry_key == "a"
    assert lowest[-1].similarity == pytest.approx(-0.95, abs=1e-5)
    assert all(-1.0 <= c.similarity <= 1.0 for c in lowest)


def test_add_replaces_an_entry(backend: Backend) -> None:
    index = backend.make()
    first, second = unit_rows(2, seed=3)
    index.add("p", "k", first, "first text", ttl=60)
    index.add("p", "k", second, "second text", ttl=60)
    found = index.search("p", second, k=10, min_similarity=-1.0)
    assert found == [Candidate(entry_key="k", similarity=near(1.0), text="second text")]
    # The old vector is gone: searching by it finds the one entry at the new vector's similarity.
    again = index.search("p", first, k=10, min_similarity=-1.0)
    assert keys_of(again) == ["k"]
    assert again[0].similarity == pytest.approx(float(first @ second), abs=1e-5)


def test_remove(backend: Backend) -> None:
    index = backend.make()
    rows = unit_rows(3, seed=4)
    for i, row in enumerate(rows):
        index.add("p", f"k{i}", row, f"t{i}", ttl=60)
    index.remove("p", "k1")
    index.remove("p", "k1")  # already gone: no error
    index.remove("p", "never-added")
    index.remove("no-such-partition", "k0")
    assert sorted(keys_of(index.search("p", rows[1], k=10, min_similarity=-1.0))) == ["k0", "k2"]
    index.remove("p", "k0")
    index.remove("p", "k2")
    assert index.search("p", rows[0], k=10, min_similarity=-1.0) == []
    if backend.kind != "memory":
        assert backend.stored_keys() == []  # an emptied partition leaves no keys behind
    # An emptied partition takes vectors of any dimension again (it is forgotten, not kept empty).
    index.add("p", "small", np.ones(4, dtype=np.float32), "x", ttl=60)
    assert keys_of(index.search("p", np.ones(4, dtype=np.float32), k=1, min_similarity=0.9)) == ["small"]


def test_partitions_are_isolated(backend: Backend) -> None:
    index = backend.make()
    row = unit_rows(1, seed=5)[0]
    index.add("tenant-a|model", "ka", row, "same question", ttl=60)
    assert keys_of(index.search("tenant-a|model", row, k=5, min_similarity=0.0)) == ["ka"]
    for other in ("tenant-b|model", "tenant-a|model ", "Tenant-a|model", ""):
        assert index.search(other, row, k=5, min_similarity=-1.0) == []
    index.add("tenant-b|model", "kb", row, "same question", ttl=60)
    assert keys_of(index.search("tenant-a|model", row, k=5, min_similarity=-1.0)) == ["ka"]
    assert keys_of(index.search("tenant-b|model", row, k=5, min_similarity=-1.0)) == ["kb"]
    index.remove("tenant-b|model", "ka")  # not there: the other partition's entry stays
    assert keys_of(index.search("tenant-a|model", row, k=5, min_similarity=-1.0)) == ["ka"]


def test_entries_expire_after_their_ttl(backend: Backend) -> None:
    index = backend.make()
    rows = unit_rows(3, seed=6)
    index.add("p", "short", rows[0], "s", ttl=10)
    index.add("p", "long", rows[1], "l", ttl=100)
    index.add("p", "forever", rows[2], "f", ttl=None)
    backend.clock.now = T0 + 9.99
    assert sorted(keys_of(index.search("p", rows[0], k=10, min_similarity=-1.0))) == [
        "forever",
        "long",
        "short",
    ]
    backend.clock.now = T0 + 10.0
    assert sorted(keys_of(index.search("p", rows[0], k=10, min_similarity=-1.0))) == ["forever", "long"]
    backend.clock.now = T0 + 1e6
    assert keys_of(index.search("p", rows[0], k=10, min_similarity=-1.0)) == ["forever"]
    # Re-adding an expired key makes it live again with its new TTL.
    index.add("p", "short", rows[0], "s2", ttl=5)
    assert index.search("p", rows[0], k=1, min_similarity=0.5)[0].text == "s2"


def test_non_positive_ttl_stores_nothing_and_drops_an_earlier_entry(backend: Backend) -> None:
    index = backend.make()
    row = unit_rows(1, seed=7)[0]
    index.add("p", "k", row, "t", ttl=0)
    index.add("p", "k2", row, "t", ttl=-5)
    assert index.search("p", row, k=5, min_similarity=-1.0) == []
    index.add("p", "k", row, "t", ttl=60)
    index.add("p", "k", row, "t", ttl=0)
    assert index.search("p", row, k=5, min_similarity=-1.0) == []
    with pytest.raises(ValueError, match="NaN"):
        index.add("p", "k", row, "t", ttl=float("nan"))
    index.add("p", "inf", row, "t", ttl=float("inf"))
    backend.clock.now = T0 + 1e9
    assert keys_of(index.search("p", row, k=5, min_similarity=-1.0)) == ["inf"]


def test_fractional_huge_and_negative_infinite_ttls(backend: Backend) -> None:
    index = backend.make()
    rows = unit_rows(3, seed=17)
    index.add("p", "half", rows[0], "t", ttl=10.5)
    index.add("p", "huge", rows[1], "t", ttl=1e308)
    index.add("p", "gone", rows[2], "t", ttl=60)
    index.add("p", "gone", rows[2], "t", ttl=-float("inf"))  # drops the earlier entry, stores nothing

    def present() -> list[str]:
        return sorted(keys_of(index.search("p", rows[0], k=10, min_similarity=-1.0)))

    backend.clock.now = T0 + 10.49
    assert present() == ["half", "huge"]
    backend.clock.now = T0 + 10.5
    assert present() == ["huge"]
    backend.clock.now = T0 + 100 * 365 * 86400.0
    assert present() == ["huge"]


def test_size_cap_evicts_the_oldest_added(backend: Backend) -> None:
    index = backend.make(max_entries_per_partition=3)
    rows = unit_rows(7, seed=8)

    def present() -> list[str]:
        return sorted(keys_of(index.search("p", rows[0], k=10, min_similarity=-1.0)))

    for i in range(5):
        index.add("p", f"k{i}", rows[i], f"t{i}", ttl=60)
    assert present() == ["k2", "k3", "k4"]
    index.add("p", "k2", rows[2], "t2 again", ttl=60)  # replacing counts as newly added
    index.add("p", "k5", rows[5], "t5", ttl=60)
    assert present() == ["k2", "k4", "k5"]
    index.add("other", "o", rows[6], "o", ttl=60)  # the cap is per partition
    assert keys_of(index.search("other", rows[6], k=10, min_similarity=-1.0)) == ["o"]


def test_cap_drops_expired_entries_before_live_ones(backend: Backend) -> None:
    index = backend.make(max_entries_per_partition=3)
    rows = unit_rows(4, seed=9)
    index.add("p", "old-live", rows[0], "a", ttl=None)
    index.add("p", "expiring", rows[1], "b", ttl=5)
    index.add("p", "newer", rows[2], "c", ttl=None)
    backend.clock.now = T0 + 6
    index.add("p", "newest", rows[3], "d", ttl=None)
    backend.clock.now = T0  # "expiring" would be live again now, had it not been dropped
    assert sorted(keys_of(index.search("p", rows[0], k=10, min_similarity=-1.0))) == [
        "newer",
        "newest",
        "old-live",
    ]


def test_a_vector_of_another_dimension_is_refused(backend: Backend) -> None:
    index = backend.make()
    rows = unit_rows(2, dim=DIM, seed=10)
    index.add("p", "k", rows[0], "t", ttl=60)
    small = unit_rows(1, dim=8, seed=11)[0]
    with pytest.raises(DimensionMismatchError, match=r"8 dimensions.*16-dimensional"):
        index.add("p", "k2", small, "t", ttl=60)
    with pytest.raises(DimensionMismatchError, match=r"8 dimensions.*16-dimensional"):
        index.search("p", small, k=3, min_similarity=-1.0)
    assert isinstance(DimensionMismatchError("x"), SemanticError)
    # Nothing was mixed in: the partition still holds its one entry and serves 16-d queries.
    assert keys_of(index.search("p", rows[0], k=3, min_similarity=-1.0)) == ["k"]
    # Another partition may hold another dimension.
    index.add("q", "k", small, "t", ttl=60)
    assert keys_of(index.search("q", small, k=3, min_similarity=0.9)) == ["k"]


def test_bad_vectors_and_arguments(backend: Backend) -> None:
    index = backend.make()
    row = unit_rows(1, seed=12)[0]
    for bad in (np.zeros(DIM), np.full(DIM, np.nan), np.array([]), np.ones((2, DIM)), "text"):
        with pytest.raises(SemanticError):
            index.add("p", "k", bad, "t", ttl=60)
        with pytest.raises(SemanticError):
            index.search("p", bad, k=1, min_similarity=0.0)
    with pytest.raises(ValueError, match="min_similarity"):
        index.search("p", row, k=1, min_similarity=float("nan"))
    with pytest.raises(TypeError, match="k must be"):
        index.search("p", row, k=1.5, min_similarity=0.0)
    # A (1, d) matrix and an unnormalized or float64 vector are accepted (and normalized).
    index.add("p", "k", (3 * row).astype(np.float64)[None, :], "t", ttl=60)
    found = index.search("p", 7 * row, k=1, min_similarity=0.0)
    assert found[0].similarity == pytest.approx(1.0, abs=1e-5)
    for bad_cap in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="max_entries_per_partition"):
            backend.make(max_entries_per_partition=bad_cap)


def test_texts_and_keys_round_trip(backend: Backend) -> None:
    index = backend.make()
    rows = unit_rows(3, seed=13)
    texts = ['Quote " and \\ backslash', "Ünïcödé — 日本語 🙂\n\ttabs", ""]
    for i, (row, text) in enumerate(zip(rows, texts, strict=True)):
        index.add("p\0{weird}", f"key:{{{i}}}:\u00e9", row, text, ttl=60)
    for i, (row, text) in enumerate(zip(rows, texts, strict=True)):
        assert index.search("p\0{weird}", row, k=1, min_similarity=0.99) == [
            Candidate(entry_key=f"key:{{{i}}}:\u00e9", similarity=near(1.0), text=text)
        ]


def test_clear_removes_every_partition(backend: Backend) -> None:
    index = backend.make()
    rows = unit_rows(20, seed=14)
    for i, row in enumerate(rows):
        index.add(f"partition-{i}", "k", row, "t", ttl=None)
    index.clear()
    for i, row in enumerate(rows):
        assert index.search(f"partition-{i}", row, k=1, min_similarity=-1.0) == []
    if backend.kind != "memory":
        assert backend.stored_keys() == []
    index.add("partition-0", "k", rows[0], "t", ttl=60)  # usable after clear
    assert keys_of(index.search("partition-0", rows[0], k=1, min_similarity=0.5)) == ["k"]


def test_close_is_idempotent_and_final(backend: Backend) -> None:
    index = backend.make()
    row = unit_rows(1, seed=15)[0]
    index.add("p", "k", row, "t", ttl=60)
    index.close()
    index.close()
    with pytest.raises((SemanticError, StoreError), match="closed"):
        index.search("p", row, k=1, min_similarity=0.0)
    with pytest.raises((SemanticError, StoreError), match="closed"):
        index.add("p", "k", row, "t", ttl=60)


# -- memory index specifics ------------------------------------------------------------------------


def test_memory_index_total_cap_and_sweep() -> None:
    clock = FakeClock()
    index = MemoryVectorIndex(max_entries_per_partition=10, max_entries=5, clock=clock)
    rows = unit_rows(8, seed=16)
    for i, row in enumerate(rows):
        index.add(f"p{i}", "k", row, "t", ttl=60)
    assert len(index) == 5
    assert [index.partition_size(f"p{i}") for i in range(8)] == [0, 0, 0, 1, 1, 1, 1, 1]
    # Expired entries of partitions nobody searches go in a sweep (after as many adds as partitions).
    clock.now += 61
    for i in range(256):
        index.add("fresh", f"k{i}", rows[0], "t", ttl=None)
    assert all(index.partition_size(f"p{i}") == 0 for i in range(8))


def test_memory_index_grows_and_shrinks_its_matrix() -> None:
    index = MemoryVectorIndex(max_entries_per_partition=1000, clock=FakeClock())
    rows = unit_rows(300, seed=17)
    for i, row in enumerate(rows):
        index.add("p", f"k{i}", row, f"t{i}", ttl=60)
    for i in range(0, 290):
        index.remove("p", f"k{i}")
    survivors = index.search("p", rows[295], k=20, min_similarity=-1.0)
    assert sorted(keys_of(survivors)) == sorted(f"k{i}" for i in range(290, 300))
    assert survivors[0].entry_key == "k295"
    assert [c.text for c in survivors if c.entry_key == "k291"] == ["t291"]


def test_memory_index_is_thread_safe() -> None:
    import threading

    index = MemoryVectorIndex(max_entries_per_partition=50, clock=FakeClock())
    rows = unit_rows(64, seed=18)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(300):
                row = rows[(i + n) % 64]
                # Shared partitions, keys of this thread's own (others may evict, never replace them).
                index.add(f"p{i % 3}", f"t{n}-{i % 20}", row, "t", ttl=60)
                found = index.search(f"p{i % 3}", row, k=3, min_similarity=-1.0)
                # The entry just added is found, unless other threads' adds evicted it meanwhile
                # (possible on a busy machine): then the partition is at its cap.
                assert (found and found[0].similarity > 0.999) or index.partition_size(f"p{i % 3}") >= 45
                if i % 5 == 0:
                    index.remove(f"p{(i + 1) % 3}", f"t{n}-{(i + 3) % 20}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(index.partition_size(f"p{i}") <= 50 for i in range(3))


# -- Redis specifics -------------------------------------------------------------------------------


def test_async_api_on_two_event_loops(redis_backend: Backend) -> None:
    index = redis_backend.make()
    rows = unit_rows(4, seed=19)
    index.add("p", "from-sync", rows[0], "s", ttl=60)

    async def run(n: int) -> list[list[str]]:
        await index.aadd("p", f"from-async-{n}", rows[n], f"a{n}", ttl=60)
        await index.aremove("p", "nothing")
        found = await asyncio.gather(
            *(index.asearch("p", rows[i], k=1, min_similarity=0.99) for i in (0, 1, 3))
        )
        return [keys_of(f) for f in found]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert asyncio.run(run(1)) == [["from-sync"], ["from-async-1"], []]
        assert asyncio.run(run(3)) == [["from-sync"], ["from-async-1"], ["from-async-3"]]
        gc.collect()
    assert [str(w.message) for w in caught] == []  # no unclosed connection left behind
    small = unit_rows(1, dim=8, seed=20)[0]

    async def mismatch() -> None:
        with pytest.raises(DimensionMismatchError):
            await index.aadd("p", "x", small, "t", ttl=60)
        with pytest.raises(DimensionMismatchError):
            await index.asearch("p", small, k=1, min_similarity=0.0)
        assert await index.asearch("p", rows[0], k=0, min_similarity=0.0) == []
        await index.aadd("p", "from-sync", rows[0], "gone", ttl=0)
        async with index:
            assert await index.asearch("p", rows[0], k=1, min_similarity=0.99) == []
        await index.aclose()  # idempotent
        with pytest.raises(StoreError, match="closed"):
            await index.asearch("p", rows[0], k=1, min_similarity=0.0)

    asyncio.run(mismatch())
    assert sorted(keys_of(redis_backend.make().search("p", rows[1], k=5, min_similarity=-1.0))) == [
        "from-async-1",
        "from-async-3",
    ]


def test_a_partition_lives_in_one_slot(redis8_cluster: RedisCluster3, prefix: str) -> None:
    index = RedisVectorIndex(redis8_cluster.url, prefix=prefix, timeout=SLOW_OK)
    rows = unit_rows(12, seed=21)
    slots = set()
    try:
        for i, row in enumerate(rows):
            partition = f"partition-{i}"
            index.add(partition, "k", row, "t", ttl=60)
            names = index.keys(partition)
            assert [n.rsplit(":", 1)[1] for n in names] == ["vs", "ex", "ord"]
            assert all(n.startswith(f"{prefix}{{sem:") for n in names)
            (slot,) = {redis8_cluster.nodes[0].command("CLUSTER", "KEYSLOT", n) for n in names}
            owner = redis8_cluster.node_for_slot(int(slot))
            assert all(owner.command("EXISTS", n) == 1 for n in names)
            slots.add(int(slot))
        assert len(slots) == 12
        assert len({redis8_cluster.node_for_slot(s).port for s in slots}) > 1  # spread over the nodes
    finally:
        index.clear()
        index.close()


def test_partition_keys_expire_with_their_longest_entry(redis_backend: Backend) -> None:
    index = redis_backend.make()
    rows = unit_rows(3, seed=22)
    target = redis_backend.target
    assert target is not None  # a Redis backend
    names = index.keys("p")

    def pttls() -> list[int]:
        node = target
        if isinstance(target, RedisCluster3):
            node = target.node_for_slot(int(target.nodes[0].command("CLUSTER", "KEYSLOT", names[0])))
        assert isinstance(node, RedisServer)
        return [int(node.command("PTTL", n)) for n in names]

    index.add("p", "a", rows[0], "a", ttl=30)
    assert all(25_000 < t <= 30_000 for t in pttls())
    index.add("p", "b", rows[1], "b", ttl=5)  # shorter: the keys keep the longer TTL
    assert all(25_000 < t <= 30_000 for t in pttls())
    index.add("p", "c", rows[2], "c", ttl=100)  # longer: extended
    assert all(95_000 < t <= 100_000 for t in pttls())
    index.add("p", "d", rows[2], "d", ttl=None)  # no TTL: the keys persist
    assert pttls() == [-1, -1, -1]
    index.add("p", "e", rows[2], "e", ttl=5)
    assert pttls() == [-1, -1, -1]
    index.remove("p", "d")  # the longest-lived entry is now c again
    assert all(95_000 < t <= 100_000 for t in pttls())
    index.remove("p", "c")
    assert all(25_000 < t <= 30_000 for t in pttls())
    # Time passes, for Redis too: a partition of short-lived entries vanishes, and its entries with it.
    index.add("short", "s", rows[0], "s", ttl=0.3)
    assert keys_of(index.search("short", rows[0], k=1, min_similarity=0.5)) == ["s"]
    redis_backend.clock.now += 0.45
    assert age_keys(target, redis_backend.prefix, 0.45) == 3  # the short partition's vs, ex and ord
    assert index.search("short", rows[0], k=1, min_similarity=-1.0) == []
    remaining = {k.decode() for k in redis_backend.stored_keys()}
    assert remaining == set(names)  # the short partition's keys are gone, p's are not


def test_search_drops_expired_entries_from_redis(redis_backend: Backend) -> None:
    index = redis_backend.make()
    rows = unit_rows(5, seed=23)
    for i, row in enumerate(rows):
        index.add("p", f"k{i}", row, "t", ttl=10 if i < 3 else 100)
    redis_backend.clock.now = T0 + 20
    assert sorted(keys_of(index.search("p", rows[0], k=10, min_similarity=-1.0))) == ["k3", "k4"]
    target = redis_backend.target
    vs = index.keys("p")[0]
    node = target
    if isinstance(target, RedisCluster3):
        node = target.node_for_slot(int(target.nodes[0].command("CLUSTER", "KEYSLOT", vs)))
    assert isinstance(node, RedisServer)
    assert node.command("VCARD", vs) == 2
    assert node.command("ZCARD", index.keys("p")[1]) == 2
    assert node.command("ZCARD", index.keys("p")[2]) == 2


def test_approximate_search_finds_the_nearest_in_a_larger_partition(
    redis8_server: RedisServer, prefix: str
) -> None:
    index = RedisVectorIndex(redis8_server.url, prefix=prefix, timeout=SLOW_OK)
    try:
        rows = unit_rows(500, dim=32, seed=24)
        for i, row in enumerate(rows):
            index.add("big", f"k{i}", row, f"t{i}", ttl=None)
        noise = unit_rows(25, dim=32, seed=25)
        for q in range(25):
            query = unit(rows[q * 7] + 0.2 * noise[q])
            found = index.search("big", query, k=3, min_similarity=-1.0)
            exact = np.argsort(-(rows @ query))[:3]
            assert keys_of(found)[0] == f"k{exact[0]}"
    finally:
        index.clear()
        index.close()


@pytest.mark.parametrize(("quantization", "tolerance"), [("Q8", 0.005), ("BIN", 0.5)])
def test_quantized_partitions(
    redis8_server: RedisServer, prefix: str, quantization: str, tolerance: float
) -> None:
    index = RedisVectorIndex(
        redis8_server.url, prefix=prefix, quantization=quantization.lower(), timeout=SLOW_OK
    )
    exact = RedisVectorIndex(redis8_server.url, prefix=prefix, timeout=SLOW_OK)
    try:
        assert index.quantization == quantization
        rows = unit_rows(30, dim=64, seed=26)
        for i, row in enumerate(rows):
            index.add("q", f"k{i}", row, "t", ttl=60)
        query = rows[4]
        found = index.search("q", query, k=3, min_similarity=-1.0)
        assert found[0].entry_key == "k4"
        assert found[0].similarity == pytest.approx(1.0, abs=tolerance)
        # A partition keeps the quantization it was made with: an exact index may not add to it.
        with pytest.raises(SemanticError, match="quantization"):
            exact.add("q", "other", rows[0], "t", ttl=60)
    finally:
        index.clear()
        index.close()
        exact.close()
    with pytest.raises(ConfigError, match="quantization"):
        RedisVectorIndex(redis8_server.url, quantization="F16")


def test_redis_7_is_refused_with_a_clear_error(redis7_server: RedisServer, prefix: str) -> None:
    index = RedisVectorIndex(redis7_server.url, prefix=prefix, timeout=SLOW_OK)
    row = unit_rows(1, seed=27)[0]
    try:
        for call in (
            lambda: index.search("p", row, k=1, min_similarity=0.0),
            lambda: index.add("p", "k", row, "t", ttl=60),
            lambda: index.remove("p", "k"),
            lambda: asyncio.run(index.asearch("p", row, k=1, min_similarity=0.0)),
        ):
            with pytest.raises(SemanticError, match=r"Redis 8\.0 or later"):
                call()
    finally:
        index.close()


def test_an_unreachable_redis_fails_fast_as_store_errors(prefix: str) -> None:
    port = free_port()
    index = RedisVectorIndex(f"redis://user:s3cret-pass@127.0.0.1:{port}/0", prefix=prefix)
    row = unit_rows(1, seed=28)[0]
    calls: list[Callable[[], object]] = [
        lambda: index.search("p", row, k=1, min_similarity=0.0),
        lambda: index.add("p", "k", row, "t", ttl=60),
        lambda: index.remove("p", "k"),
        index.clear,
        lambda: asyncio.run(index.asearch("p", row, k=1, min_similarity=0.0)),
        lambda: asyncio.run(index.aadd("p", "k", row, "t", ttl=60)),
    ]
    for call in calls:  # how long each takes to fail: benchmarks/store_timeouts.py
        with pytest.raises(StoreError) as caught:
            call()
        assert "s3cret-pass" not in str(caught.value)
        assert f"127.0.0.1:{port}" in str(caught.value)
    assert "s3cret-pass" not in repr(index)
    index.close()
    cluster = RedisVectorIndex(f"redis+cluster://127.0.0.1:{port}", prefix=prefix)
    with pytest.raises(StoreError):
        cluster.search("p", row, k=1, min_similarity=0.0)
    cluster.close()


def test_clear_keeps_other_prefixes_and_exact_entries(redis_backend: Backend) -> None:
    from cachekit.stores.redis import RedisStore

    index = redis_backend.make()
    other_prefix = redis_backend.prefix[:-1] + "-other:"
    assert redis_backend.target is not None  # a Redis backend
    other = RedisVectorIndex(redis_backend.target.url, prefix=other_prefix, timeout=SLOW_OK)
    store = RedisStore(redis_backend.target.url, prefix=redis_backend.prefix, timeout=SLOW_OK)
    row = unit_rows(1, seed=29)[0]
    try:
        index.add("p", "k", row, "t", ttl=60)
        other.add("p", "k", row, "t", ttl=60)
        store.set("exact-key", b"value", ttl=60)
        index.clear()
        assert index.search("p", row, k=1, min_similarity=0.0) == []
        assert keys_of(other.search("p", row, k=1, min_similarity=0.0)) == ["k"]
        assert store.get("exact-key") == b"value"
        # The exact store does not list the index's keys as its entries.
        assert [e.key for e in store.entries()] == ["exact-key"]
    finally:
        other.clear()
        other.close()
        store.close()


def test_url_parameters_reach_the_index(redis8_server: RedisServer, prefix: str) -> None:
    index = RedisVectorIndex(f"{redis8_server.url}?prefix={prefix}&timeout=2", clock=FakeClock())
    try:
        assert index.prefix == prefix
        assert index.keys("p")[0].startswith(prefix + "{sem:")
        assert "RedisVectorIndex('redis://127.0.0.1:" in repr(index)
    finally:
        index.close()


def test_expired_entries_beyond_one_searchs_cleanup_are_never_returned(redis_backend: Backend) -> None:
    index = redis_backend.make(max_entries_per_partition=1000)
    rows = unit_rows(302, seed=30)
    for i, row in enumerate(rows):
        index.add("p", f"k{i}", row, "t", ttl=10 if i < 300 else 100)
    redis_backend.clock.now = T0 + 50
    vs = index.keys("p")[0]
    target = redis_backend.target
    node = target
    if isinstance(target, RedisCluster3):
        node = target.node_for_slot(int(target.nodes[0].command("CLUSTER", "KEYSLOT", vs)))
    assert isinstance(node, RedisServer)
    # One search drops at most 256 expired entries; the others it meets are skipped, not returned.
    assert sorted(keys_of(index.search("p", rows[0], k=50, min_similarity=-1.0))) == ["k300", "k301"]
    assert node.command("VCARD", vs) == 302 - 256
    assert sorted(keys_of(index.search("p", rows[1], k=50, min_similarity=-1.0))) == ["k300", "k301"]
    assert node.command("VCARD", vs) == 2

"""The semantic cache at scale: the memory index's HNSW graph (usearch), Redis 8's one-round-trip search
with expiry by ``FILTER``, and the embedder's thread setting for one text.

Correctness only (speed is ``benchmarks/semantic.py``'s): approximate results are compared with exact
search over the same real embeddings (the bundled all-MiniLM-L6-v2 model, the labelled question pairs
of ``tests/fixtures/pairs-sample.jsonl``), expiry uses an injected clock, and what the Redis search
does in the server is read from the server's own command statistics.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from cachekit.errors import MissingExtraError
from cachekit.semantic import index_memory
from cachekit.semantic.embedders import SentenceTransformerEmbedder
from cachekit.semantic.index_memory import MemoryVectorIndex
from cachekit.semantic.index_redis import RedisVectorIndex
from tests.redis_servers import RedisServer, redis8_binary, redis8_server, server_version

SERVER_FIXTURES = (redis8_server,)
PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "pairs-sample.jsonl"
T0 = 1_700_000_000.0
needs_usearch = pytest.mark.skipif(
    importlib.util.find_spec("usearch") is None, reason="usearch (the 'ann' extra) is not installed"
)


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def questions(embedder: SentenceTransformerEmbedder) -> tuple[Any, Any]:
    """Real embeddings: the stored questions (the first of each pair) and their partners (queries)."""
    rows = [orjson.loads(line) for line in PAIRS.read_bytes().splitlines()]
    stored = embedder.embed([row["a"] for row in rows])
    partners = embedder.embed([row["b"] for row in rows])
    return stored, partners


def filler(n: int, dim: int = 384, seed: int = 5) -> Any:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def exact_best(vectors: Any, queries: Any) -> list[str]:
    """The entry key of each query's exact best match (numpy, not the index under test)."""
    return [f"e{i}" for i in np.argmax(queries @ vectors.T, axis=1)]


def fill(index: Any, vectors: Any, *, ttl: float | None = 3600, partition: str = "p") -> None:
    for i, row in enumerate(vectors):
        index.add(partition, f"e{i}", row, f"question {i}", ttl=ttl, mac=f"mac {i}")


# -- the memory index's graph ----------------------------------------------------------------------


@needs_usearch
def test_memory_graph_finds_what_exact_search_finds_on_real_questions(questions: tuple[Any, Any]) -> None:
    stored, partners = questions
    vectors = np.vstack([stored, filler(3000)])
    approximate = MemoryVectorIndex(exact_below=256)
    exact = MemoryVectorIndex(approximate=False)
    fill(approximate, vectors)
    fill(exact, vectors)
    assert approximate.engine == "usearch"
    assert exact.engine == "numpy"
    best = exact_best(vectors, partners)
    same = 0
    for query, want in zip(partners, best, strict=True):
        found = approximate.search("p", query, k=4, min_similarity=0.0)
        truth = {c.entry_key: c for c in exact.search("p", query, k=50, min_similarity=0.0)}
        same += found[0].entry_key == want
        for candidate in found:  # similarities are exact: the matrix's, not the graph's estimate
            assert candidate.similarity == pytest.approx(truth[candidate.entry_key].similarity, abs=1e-6)
            assert candidate.text == truth[candidate.entry_key].text
            assert candidate.mac == truth[candidate.entry_key].mac
        assert [c.similarity for c in found] == sorted((c.similarity for c in found), reverse=True)
    assert same / len(partners) >= 0.98


@needs_usearch
def test_memory_graph_keeps_expiry_removal_replacement_and_caps() -> None:
    """The same operations on a graph-searched and an exact index give the same answers."""
    clock = FakeClock()
    vectors = filler(600, dim=32, seed=9)
    approximate = MemoryVectorIndex(exact_below=64, max_entries_per_partition=500, clock=clock)
    exact = MemoryVectorIndex(approximate=False, max_entries_per_partition=500, clock=clock)
    replacements = filler(40, dim=32, seed=10)
    rng = np.random.default_rng(3)
    for index in (approximate, exact):
        for i, row in enumerate(vectors):  # past the cap: the oldest 100 go
            index.add("p", f"e{i}", row, f"q{i}", ttl=10.0 if i % 4 == 0 else 100.0)
        for i in range(100, 200, 3):
            index.remove("p", f"e{i}")
        for i in range(200, 240):  # replaced: another vector under the same key
            index.add("p", f"e{i}", replacements[i - 200], f"r{i}", ttl=100.0)
    assert approximate._parts["p"].ann is not None
    clock.now += 20.0  # the ttl=10 entries expire
    for query in vectors[rng.choice(600, 80, replace=False)]:
        got = approximate.search("p", query, k=3, min_similarity=0.2)
        want = exact.search("p", query, k=3, min_similarity=0.2)
        assert [(c.entry_key, c.text) for c in got] == [(c.entry_key, c.text) for c in want]
    assert len(approximate) == len(exact)
    # Shrunk well below the threshold, the partition forgets its graph and is searched exactly.
    for i in range(600):
        approximate.remove("p", f"e{i}" if i % 50 else "none")
    assert approximate._parts["p"].ann is None
    assert {c.entry_key for c in approximate.search("p", vectors[0], k=20, min_similarity=-1.0)} <= {
        f"e{i}" for i in range(0, 600, 50)
    }


def test_memory_index_without_usearch_searches_exactly_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(index_memory, "ann_available", lambda: False)
    monkeypatch.setattr(index_memory, "_warned_exact", [])
    with caplog.at_level(logging.INFO, logger="cachekit.semantic.index"):
        index = MemoryVectorIndex(exact_below=4)
        MemoryVectorIndex(exact_below=4)
    assert index.engine == "numpy"
    said = [r.getMessage() for r in caplog.records if "usearch is not installed" in r.getMessage()]
    assert len(said) == 1
    assert "'ann' extra" in said[0]
    vectors = filler(40, dim=8)
    fill(index, vectors)
    assert index._parts["p"].ann is None
    found = index.search("p", vectors[7], k=1, min_similarity=0.0)
    assert found[0].entry_key == "e7"
    with pytest.raises(MissingExtraError, match=r"cachekit\[ann\]|'ann'|ann"):
        MemoryVectorIndex(approximate=True)


# -- Redis 8: one round trip, expiry by FILTER --------------------------------------------------------


@pytest.fixture
def redis_index(redis8_server: RedisServer) -> Iterator[tuple[RedisVectorIndex, FakeClock, Any]]:
    import redis

    clock = FakeClock()
    prefix = f"scale-{uuid.uuid4().hex[:8]}:"
    index = RedisVectorIndex(redis8_server.url, prefix=prefix, timeout=5.0, clock=clock)
    raw = redis.Redis.from_url(redis8_server.url)
    yield index, clock, raw
    index.clear()
    index.close()
    raw.close()


def commands(raw: Any) -> dict[str, int]:
    return {name.lower(): int(stats["calls"]) for name, stats in raw.info("commandstats").items()}


def test_redis_search_skips_expired_entries_in_the_server_and_reads_nothing_after(
    redis_index: tuple[RedisVectorIndex, FakeClock, Any],
) -> None:
    """300 expired entries nearer the query than 20 live ones (more than a search's cleanup drops):
    the search still returns k live entries, and no per-result read of an expiry set happens."""
    index, clock, raw = redis_index
    query = filler(1, dim=16, seed=1)[0]
    near = query + 0.05 * filler(300, dim=16, seed=2)
    far = query + 0.6 * filler(20, dim=16, seed=3)
    for i, row in enumerate(near):
        index.add("p", f"old{i}", row, f"old {i}", ttl=10, mac="m")
    for i, row in enumerate(far):
        index.add("p", f"live{i}", row, f"live {i}", ttl=1000, mac="m")
    index.search("p", query, k=4, min_similarity=-1.0)  # loads the script, learns about WITHATTRIBS
    clock.now += 60
    raw.config_resetstat()
    found = index.search("p", query, k=4, min_similarity=-1.0)
    assert len(found) == 4
    assert all(c.entry_key.startswith("live") for c in found)
    calls = commands(raw)
    assert calls.get("cmdstat_evalsha") == 1  # one round trip
    assert "cmdstat_eval" not in calls
    assert "cmdstat_zscore" not in calls  # expiry is VSIM's FILTER, not a read per result
    assert calls.get("cmdstat_vsim") == 1
    assert calls.get("cmdstat_vrem") == 256  # the cleanup's share; FILTER skipped the other 44


Fixture = tuple[RedisVectorIndex, FakeClock, Any]


def test_redis_entries_carry_their_expiry_for_the_filter(redis_index: Fixture) -> None:
    index, _, raw = redis_index
    index.add("p", "a", filler(1, dim=8)[0], "question", ttl=12.5, mac="m")
    index.add("p", "b", filler(1, dim=8, seed=2)[0], "question", ttl=None, mac="m")
    vs = index.keys("p")[0]
    elements = raw.execute_command("VRANDMEMBER", vs, 2)
    expiries = sorted(orjson.loads(raw.execute_command("VGETATTR", vs, e))["e"] for e in elements)
    assert expiries == [int((T0 + 12.5) * 1000), 2**53]


def test_redis_search_learns_whether_vsim_returns_attributes(
    redis_index: tuple[RedisVectorIndex, FakeClock, Any], redis8_server: RedisServer
) -> None:
    index, _, _ = redis_index
    assert index.withattribs is None
    assert index.search("p", filler(1, dim=8)[0], k=1, min_similarity=0.0) == []  # empty: tells nothing
    assert index.withattribs is None
    vectors = filler(5, dim=8)
    fill(index, vectors)
    version = server_version(redis8_binary())
    assert version is not None
    for _ in range(2):  # the first search finds out, the second uses what it learned
        found = index.search("p", vectors[3], k=2, min_similarity=0.0)
        assert (found[0].entry_key, found[0].text, found[0].mac) == ("e3", "question 3", "mac 3")
        assert index.withattribs is (version >= (8, 2, 0))


def test_redis_search_finds_what_exact_search_finds_on_real_questions(
    redis_index: tuple[RedisVectorIndex, FakeClock, Any], questions: tuple[Any, Any]
) -> None:
    index, _, _ = redis_index
    stored, partners = questions
    vectors = np.vstack([stored, filler(700)])
    fill(index, vectors)
    best = exact_best(vectors, partners)
    same = sum(
        index.search("p", query, k=4, min_similarity=0.0)[0].entry_key == want
        for query, want in zip(partners, best, strict=True)
    )
    assert same / len(partners) >= 0.98


def test_redis_async_search_skips_expired_entries_too(redis_index: Fixture) -> None:
    index, clock, _ = redis_index
    vectors = filler(300, dim=8)

    async def run() -> list[str]:
        for i, row in enumerate(vectors):
            await index.aadd("p", f"e{i}", row, f"q{i}", ttl=5 if i % 30 else 50, mac="m")
        clock.now += 10
        found = await index.asearch("p", vectors[1], k=20, min_similarity=-1.0)
        return sorted(c.entry_key for c in found)

    assert asyncio.run(run()) == sorted(f"e{i}" for i in range(0, 300, 30))


# -- the embedder's threads for one text --------------------------------------------------------------


def test_one_text_is_embedded_with_the_chosen_threads_and_the_setting_is_restored(
    embedder: SentenceTransformerEmbedder,
) -> None:
    import torch

    chosen = SentenceTransformerEmbedder(cache_size=0, one_text_threads=1)
    model = chosen._load()
    seen: list[int] = []
    encode = model.encode

    def watching(*args: Any, **kwargs: Any) -> Any:
        seen.append(torch.get_num_threads())
        return encode(*args, **kwargs)

    model.encode = watching
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        one = chosen.embed(["What is the capital of France?"])
        assert torch.get_num_threads() == 2  # restored
        chosen.embed(["What is the capital of France?", "And of Spain?"])  # a batch: torch's own
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]
    # The same vector as with torch's setting: the thread count changes the speed, not the result.
    reference = embedder.embed(["What is the capital of France?"])
    assert np.allclose(one, reference, atol=1e-5)


def test_one_text_threads_none_leaves_torch_alone() -> None:
    import torch

    untouched = SentenceTransformerEmbedder(cache_size=0, one_text_threads=None)
    model = untouched._load()
    seen: list[int] = []
    encode = model.encode

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(torch.get_num_threads())
        return encode(*args, **kwargs)

    model.encode = counting
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        untouched.embed(["Is 17 greater than 13?"])
    finally:
        torch.set_num_threads(before)
    assert seen == [2]

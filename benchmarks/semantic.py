"""The semantic cache's costs, side by side in one run: embedding one question per torch thread
setting, and vector lookups at 1k, 10k and 100k entries in one partition, memory index (brute force
and HNSW) and Redis 8 vector sets (the server's default ``EF`` and cachekit's), with the median, the
p95 and the recall of each against exact search.

Lookups exclude the embedding: the query vectors are computed first. Entries are real question
embeddings where there are enough questions (the labelled pairs of ``--pairs``: by default the
development set ``../shared/data/pairs-dev.jsonl`` beside the checkout when it is there, else the 300
pairs of ``tests/fixtures/pairs-sample.jsonl``), topped up with random unit vectors. Queries are the
stored questions' partners (the other question of each pair), as a cache sees them. Recall@1 is the
share of queries whose best match is as similar as the exact search's best match (numpy over the same
vectors; a tie with another entry counts as found).
The aims: a median lookup of 2 ms or less at 100k entries, on Redis 8 and in memory.

    python benchmarks/semantic.py [--sizes 1000,10000,100000] [--queries 300] [--pairs PATH]

The Redis 8 server is ``$CACHEKIT_REDIS8_SERVER`` (or a Redis 8 ``redis-server`` on PATH):
``export CACHEKIT_REDIS8_SERVER=$(bash scripts/_redis.sh redis8)`` finds or unpacks one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.redis_servers

from cachekit.semantic.base import Candidate, VectorIndex
from cachekit.semantic.embedders import SentenceTransformerEmbedder
from cachekit.semantic.index_memory import DEFAULT_ANN_EF, MemoryVectorIndex, ann_available
from cachekit.semantic.index_redis import DEFAULT_EF, RedisVectorIndex
from tests.redis_servers import RedisServer, redis8_binary

DEV_PAIRS = Path(__file__).resolve().parents[2] / "shared" / "data" / "pairs-dev.jsonl"
SAMPLE_PAIRS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "pairs-sample.jsonl"
#: More real questions when the development set is beside the checkout; the repository's sample else.
DEFAULT_PAIRS = DEV_PAIRS if DEV_PAIRS.is_file() else SAMPLE_PAIRS
K = 4


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def pairs(path: Path, limit: int) -> tuple[list[str], list[str]]:
    """Up to ``limit`` (question, partner) pairs."""
    stored: list[str] = []
    partners: list[str] = []
    for line in path.read_bytes().splitlines()[:limit]:
        row = orjson.loads(line)
        stored.append(row["a"])
        partners.append(row["b"])
    return stored, partners


def embedding(texts: list[str]) -> None:
    """Embedding one question per call, for each torch thread setting of a single-text call.

    The settings take turns question by question, so a change in the machine's load (other
    processes) weighs on each alike.
    """
    settings: list[int | None] = [1, 2, None] if torch.get_num_threads() != 1 else [1, None]
    print(f"embedding one question (torch's own setting: {torch.get_num_threads()} threads)")
    embedders = [SentenceTransformerEmbedder(cache_size=0, one_text_threads=t) for t in settings]
    times: list[list[float]] = [[] for _ in settings]
    for embedder in embedders:
        embedder.embed(texts[:8])  # load the model
    for text in texts:
        for embedder, spent in zip(embedders, times, strict=True):
            start = time.perf_counter()
            embedder.embed([text])
            spent.append((time.perf_counter() - start) * 1e3)
    for threads, spent in zip(settings, times, strict=True):
        label = f"one_text_threads={threads}" if threads else "one_text_threads=None (torch's)"
        print(f"  {label:<34} median {statistics.median(spent):6.2f} ms   p95 {pct(spent, 0.95):6.2f} ms")


def exact_best(vectors: Any, queries: Any) -> Any:
    """The similarity of each query's exact best match."""
    return (queries @ vectors.T).max(axis=1)


def lookups(
    index: VectorIndex, partition: str, queries: Any, best: Any
) -> tuple[list[float], float, list[list[Candidate]]]:
    times: list[float] = []
    found: list[list[Candidate]] = []
    for q in queries:
        start = time.perf_counter()
        found.append(index.search(partition, q, k=K, min_similarity=0.0))
        times.append((time.perf_counter() - start) * 1e3)
    right = sum(bool(f) and f[0].similarity >= b - 1e-5 for f, b in zip(found, best, strict=True))
    return times, right / len(queries), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS, help=f"default: {DEFAULT_PAIRS}")
    parser.add_argument("--real", type=int, default=4000, help="real questions stored (default 4000)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    stored, partners = pairs(args.pairs, args.real)
    print(f"{len(stored)} question pairs from {args.pairs}; torch {torch.__version__}")
    embedding(partners[: min(args.queries, 100)])  # two threads on a busy machine: seconds each

    embedder = SentenceTransformerEmbedder()
    real = embedder.embed(stored)
    rng = np.random.default_rng(7)
    biggest = max(sizes)
    filler = rng.standard_normal((max(0, biggest - len(real)), real.shape[1])).astype(np.float32)
    filler /= np.linalg.norm(filler, axis=1, keepdims=True)
    vectors = np.vstack([real, filler])[:biggest]
    queries = embedder.embed(partners[: args.queries])

    print(f"\nusearch installed: {ann_available()}")
    server = RedisServer(redis8_binary()).start()
    try:
        indexes: dict[str, VectorIndex] = {
            "memory, numpy (exact)": MemoryVectorIndex(max_entries_per_partition=biggest, approximate=False),
            f"memory, usearch ef={DEFAULT_ANN_EF}": MemoryVectorIndex(max_entries_per_partition=biggest),
            "redis 8, server's EF": RedisVectorIndex(
                server.url, timeout=5.0, max_entries_per_partition=biggest, ef=None
            ),
            f"redis 8, EF={DEFAULT_EF}": RedisVectorIndex(
                server.url, timeout=5.0, max_entries_per_partition=biggest, ef=DEFAULT_EF
            ),
        }
        print(f"lookup (k={K}, min_similarity=0.0) in one partition, {len(queries)} queries each")
        partition = f"bench-{uuid.uuid4().hex[:8]}"
        filled = 0
        for size in sizes:
            for name, index in indexes.items():
                if name.startswith("redis 8, EF"):
                    continue  # shares the server's partition with the line above
                start = time.perf_counter()
                for i in range(filled, size):
                    index.add(partition, f"entry-{i}", vectors[i], f"question {i}", ttl=3600)
                print(f"  ({name}: {size - filled} entries added in {time.perf_counter() - start:.1f} s)")
            filled = size
            best = exact_best(vectors[:size], queries)
            for name, index in indexes.items():
                times, recall, _ = lookups(index, partition, queries, best)
                print(
                    f"  {size:>7} entries  {name:<24} median {statistics.median(times):7.3f} ms   "
                    f"p95 {pct(times, 0.95):7.3f} ms   recall@1 vs exact {recall:.3f}"
                )
        for index in indexes.values():
            index.clear()
            index.close()
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()

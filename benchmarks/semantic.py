"""The semantic cache's costs: vector lookup at 1k, 10k and 100k entries in one partition (memory index
and Redis 8 vector sets), and the embedding time per request.

Lookups exclude the embedding: the query vectors are computed first. Entries are real question
embeddings where there are enough questions (the labelled pairs of ``--pairs``: by default the
development set ``../shared/data/pairs-dev.jsonl`` beside the checkout when it is there, else the 300
pairs of ``tests/fixtures/pairs-sample.jsonl``), topped up with random unit vectors. Prints medians
and p99s; the aim is a median lookup of 2 ms or less at 100k entries on Redis 8.

    python benchmarks/semantic.py [--sizes 1000,10000,100000] [--queries 300] [--pairs PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.redis_servers

from cachekit.semantic.embedders import SentenceTransformerEmbedder
from cachekit.semantic.index_memory import MemoryVectorIndex
from cachekit.semantic.index_redis import RedisVectorIndex
from tests.redis_servers import RedisServer, redis8_binary

DEV_PAIRS = Path(__file__).resolve().parents[2] / "shared" / "data" / "pairs-dev.jsonl"
SAMPLE_PAIRS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "pairs-sample.jsonl"
#: More real questions when the development set is beside the checkout; the repository's sample else.
DEFAULT_PAIRS = DEV_PAIRS if DEV_PAIRS.is_file() else SAMPLE_PAIRS


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def questions(pairs: Path, limit: int) -> list[str]:
    out: list[str] = []
    for line in pairs.read_bytes().splitlines():
        row = orjson.loads(line)
        out += [row["a"], row["b"]]
        if len(out) >= limit:
            break
    return out[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS, help=f"default: {DEFAULT_PAIRS}")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    embedder = SentenceTransformerEmbedder()
    texts = questions(args.pairs, 2000)
    print(f"{len(texts)} real questions from {args.pairs}")
    embedder.embed(texts[:8])  # load the model
    times = []
    for text in texts[: args.queries]:
        start = time.perf_counter()
        embedder.embed([text + " "])  # a trailing space: never the embedder's own LRU
        times.append((time.perf_counter() - start) * 1e3)
    print(
        f"embedding one question ({embedder.model_id}): median {statistics.median(times):.2f} ms, "
        f"p99 {pct(times, 0.99):.2f} ms over {len(times)}"
    )

    real = embedder.embed(texts)
    rng = np.random.default_rng(7)
    biggest = max(sizes)
    filler = rng.standard_normal((max(0, biggest - len(real)), real.shape[1])).astype(np.float32)
    filler /= np.linalg.norm(filler, axis=1, keepdims=True)
    vectors = np.vstack([real, filler])[:biggest]
    queries = embedder.embed([t + "?" for t in texts[: args.queries]])

    server = RedisServer(redis8_binary()).start()
    try:
        indexes = {
            "memory": MemoryVectorIndex(max_entries_per_partition=biggest),
            "redis 8": RedisVectorIndex(server.url, timeout=5.0, max_entries_per_partition=biggest),
        }
        print(f"\nlookup (k=4, min_similarity=0.0) in one partition, {len(queries)} queries each")
        for size in sizes:
            for name, index in indexes.items():
                partition = f"bench-{uuid.uuid4().hex[:8]}"
                start = time.perf_counter()
                for i in range(size):
                    index.add(partition, f"entry-{i}", vectors[i], texts[i % len(texts)], ttl=3600)
                filled = time.perf_counter() - start
                lookups = []
                for q in queries:
                    t0 = time.perf_counter()
                    found = index.search(partition, q, k=4, min_similarity=0.0)
                    lookups.append((time.perf_counter() - t0) * 1e3)
                    assert found
                print(
                    f"  {size:>7} entries  {name:<8} median {statistics.median(lookups):7.3f} ms   "
                    f"p99 {pct(lookups, 0.99):7.3f} ms   (filled in {filled:.1f} s)"
                )
        for index in indexes.values():
            index.clear()
            index.close()
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()

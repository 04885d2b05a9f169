"""The two bundled all-MiniLM-L6-v2 embedders side by side in one run: the int8 ONNX model on
onnxruntime (the ``semantic`` extra, no torch) and the fp32 model on sentence-transformers (the
``semantic-torch`` extra).

* Latency of embedding one question per call (the semantic cache's lookup path), median and p95, the
  two embedders taking turns question by question so that a change in the machine's load weighs on
  each alike; both on one thread (their defaults).
* Agreement: the cosine between the two embedders' vectors of each text (min, 1st percentile,
  median), which says whether the ONNX path keeps the sentence-transformers calibration.

Texts are the questions of ``--pairs`` (by default the 300 pairs of
``tests/fixtures/pairs-sample.jsonl``), deduplicated.

    python benchmarks/embedders.py [--pairs PATH] [--latency 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cachekit.semantic.base import Embedder
from cachekit.semantic.embedders import OnnxEmbedder, SentenceTransformerEmbedder

SAMPLE_PAIRS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "pairs-sample.jsonl"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def questions(path: Path) -> list[str]:
    """Each pair's two questions, in file order, without repeats."""
    texts: list[str] = []
    for line in path.read_bytes().splitlines():
        if line.strip():
            row = orjson.loads(line)
            texts += [row["a"], row["b"]]
    return list(dict.fromkeys(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, default=SAMPLE_PAIRS, help=f"default: {SAMPLE_PAIRS}")
    parser.add_argument("--latency", type=int, default=300, help="questions embedded one by one")
    args = parser.parse_args()
    texts = questions(args.pairs)
    embedders: dict[str, Embedder] = {
        "onnx (int8, onnxruntime)": OnnxEmbedder(cache_size=0),
        "sentence-transformers (fp32, torch)": SentenceTransformerEmbedder(cache_size=0),
    }
    for embedder in embedders.values():
        embedder.embed(texts[:8])  # load the model
    print(f"embedding one question per call, {min(args.latency, len(texts))} questions, taking turns")
    times: dict[str, list[float]] = {name: [] for name in embedders}
    for text in texts[: args.latency]:
        for name, embedder in embedders.items():
            start = time.perf_counter()
            embedder.embed([text])
            times[name].append((time.perf_counter() - start) * 1e3)
    for name, spent in times.items():
        print(f"  {name:<38} p50 {statistics.median(spent):6.2f} ms   p95 {pct(spent, 0.95):6.2f} ms")
    onnx_p50, st_p50 = (statistics.median(spent) for spent in times.values())
    print(f"  sentence-transformers / onnx p50: {st_p50 / onnx_p50:.2f}x")

    onnx, st = (np.asarray(embedder.embed(texts)) for embedder in embedders.values())
    cosine = (onnx * st).sum(axis=1)
    print(f"agreement over {len(texts)} texts (cosine between the two embedders' vectors of a text)")
    print(
        f"  min {cosine.min():.4f}   p1 {np.percentile(cosine, 1):.4f}   median {np.median(cosine):.4f}"
        f"   mean {cosine.mean():.4f}"
    )


if __name__ == "__main__":
    main()

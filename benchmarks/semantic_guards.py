"""What the semantic cache's word and symbol guards cost per lookup, guard by guard.

Each labelled pair is checked once with cold caches (the per-text analyses are cached, so a pair
seen before costs next to nothing): the two texts' analysis, then every token guard in the order a
matcher runs them. The content-word guard is left out: it embeds words, and its cost is the
embedder's (``benchmarks/semantic.py`` measures embedding). Medians and p95s in microseconds.

    python benchmarks/semantic_guards.py [--pairs PATH] [--limit N]

``--pairs`` defaults to the development set ``../shared/data/pairs-dev.jsonl`` beside the checkout
when it is there, else the 300 pairs of ``tests/fixtures/pairs-sample.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's cachekit

from cachekit.semantic import guards, symbols
from cachekit.semantic.guards import Guard

DEV_PAIRS = Path(__file__).resolve().parents[2] / "shared" / "data" / "pairs-dev.jsonl"
SAMPLE_PAIRS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "pairs-sample.jsonl"
DEFAULT_PAIRS = DEV_PAIRS if DEV_PAIRS.is_file() else SAMPLE_PAIRS

#: Every guard of :func:`cachekit.semantic.guards.default_guards` but the content-word one, in order.
TOKEN_GUARDS: tuple[Guard, ...] = (
    guards.question_guard,
    guards.negation_guard,
    guards.numbers_guard,
    guards.symbols_guard,
    guards.direction_guard,
    guards.order_guard,
    guards.antonym_guard,
    guards.entity_guard,
)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cold() -> None:
    """Forget every text analysed so far."""
    guards.analyze.cache_clear()
    symbols.marks.cache_clear()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS)
    parser.add_argument("--limit", type=int, default=4000)
    args = parser.parse_args()
    rows = [orjson.loads(line) for line in args.pairs.read_bytes().splitlines()[: args.limit]]
    spent: dict[str, list[float]] = {"analysis (both texts)": []}
    spent.update({guard.__name__: [] for guard in TOKEN_GUARDS})  # type: ignore[attr-defined]
    total: list[float] = []
    for row in rows:
        cold()
        start = time.perf_counter_ns()
        guards.analyze(row["a"])
        guards.analyze(row["b"])
        spent["analysis (both texts)"].append((time.perf_counter_ns() - start) / 1e3)
        for guard in TOKEN_GUARDS:
            begin = time.perf_counter_ns()
            guard(row["b"], row["a"])
            spent[guard.__name__].append((time.perf_counter_ns() - begin) / 1e3)  # type: ignore[attr-defined]
        total.append((time.perf_counter_ns() - start) / 1e3)
    print(f"{len(rows)} pairs from {args.pairs.name}, cold caches, microseconds")
    for name, values in [*spent.items(), ("all token guards", total)]:
        print(f"  {name:<24} median {statistics.median(values):8.1f}   p95 {pct(values, 0.95):8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

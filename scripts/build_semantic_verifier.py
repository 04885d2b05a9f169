"""Fit the semantic cache's verifier and its calibration table: cachekit/semantic/verifier-minilm.json.

    python scripts/build_semantic_verifier.py PAIRS-TRAIN.jsonl [--out PATH] [--embedding-cache NPZ]

Deterministic: the same labelled pairs give the same file. It reads labelled pairs in the
``pairs-dev.jsonl`` layout ({"a", "b", "same", "kind", "source"}; the development data's
``pairs-train.jsonl``: Quora Question Pairs as shipped in GPTCache, research use, and the CANNOT
negation dataset, CC BY-SA 4.0), takes a fixed sample of each source (seed 0), and splits it:

* 70 % to fit a logistic regression over :data:`cachekit.semantic.verifier.FEATURES`, on the pairs
  that reach the cosine floor and pass every guard (the verifier only ever sees those);
* 30 %, never fitted on, to calibrate: for each score threshold, the precision and recall on the
  Quora pairs and the false-hit rate per kind of different pair, each over all the held-out pairs
  of that group (a pair the floor or a guard stops is a miss).

Embedding the texts is the slow part (minutes on two cores); ``--embedding-cache`` keeps the
vectors in an ``.npz`` between runs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cachekit.semantic.embedders import default_embedder  # noqa: E402
from cachekit.semantic.guards import ContentWordGuard, default_guards  # noqa: E402
from cachekit.semantic.verifier import FEATURES, features  # noqa: E402

QUORA, CANNOT = "gptcache-qqp", "cannot"
SAMPLE = {QUORA: 4800, CANNOT: 2400}
COSINE_FLOOR = 0.6
DEFAULT_TARGET_PRECISION = 0.85
#: A threshold whose held-out Quora pairs got fewer answers than this is left out of the table.
MIN_HITS = 20
THRESHOLDS = [round(t, 3) for t in [*np.arange(0.05, 0.9, 0.05), *np.arange(0.9, 1.0, 0.01), 0.995]]


def sample(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    random.Random(0).shuffle(rows)
    return [r for source, n in SAMPLE.items() for r in [r for r in rows if r["source"] == source][:n]]


def embed(texts: list[str], cache: Path | None) -> dict[str, np.ndarray]:
    vectors: dict[str, np.ndarray] = {}
    if cache is not None and cache.exists():
        stored = np.load(cache, allow_pickle=False)
        vectors.update(zip(stored["texts"].tolist(), stored["vectors"], strict=True))
    todo = sorted({t for t in texts if t not in vectors}, key=len)
    embedder = default_embedder()
    for start in range(0, len(todo), 64):
        chunk = todo[start : start + 64]
        vectors.update(zip(chunk, np.asarray(embedder.embed(chunk), dtype=np.float32), strict=True))
        print(f"embedded {start + len(chunk)}/{len(todo)}", file=sys.stderr)
    if cache is not None and todo:
        names = list(vectors)
        np.savez(cache, texts=np.array(names), vectors=np.stack([vectors[t] for t in names]))
    return vectors


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> tuple[np.ndarray, float]:
    """L2-regularized logistic regression by Newton's method (a dozen features: exact, fast)."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    reg = np.eye(xb.shape[1]) * l2
    reg[-1, -1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + reg @ w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + reg
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w[:-1], float(w[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pairs", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "cachekit/semantic/verifier-minilm.json")
    parser.add_argument("--embedding-cache", type=Path)
    args = parser.parse_args()

    rows = sample(args.pairs)
    vectors = embed([t for r in rows for t in (r["a"], r["b"])], args.embedding_cache)
    embedder = default_embedder()
    words = ContentWordGuard(embedder)
    hard = [g for g in default_guards(embedder) if not isinstance(g, ContentWordGuard)]
    split = random.Random(1)
    fitting, held = [], []
    for row in rows:
        (fitting if split.random() < 0.7 else held).append(row)

    def passed(row: dict[str, Any]) -> np.ndarray | None:
        """The features of a pair that reaches the floor and passes every guard, else ``None``."""
        cos = float(np.dot(vectors[row["a"]], vectors[row["b"]]))
        if cos < COSINE_FLOOR or any(g(row["b"], row["a"]) for g in hard):
            return None
        return features(row["b"], row["a"], cos, words)

    fit_rows = [(f, r["same"]) for r in fitting if (f := passed(r)) is not None]
    x = np.stack([f for f, _ in fit_rows])
    y = np.array([float(s) for _, s in fit_rows])
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    weights, bias = fit((x - mean) / scale, y)

    def score(f: np.ndarray) -> float:
        return float(1 / (1 + np.exp(-(((f - mean) / scale) @ weights + bias))))

    scored = [(r, None if (f := passed(r)) is None else score(f)) for r in held]
    calibration = []
    for t in THRESHOLDS:
        hits = [(r, s is not None and s >= t) for r, s in scored]
        quora = [(r["same"], hit) for r, hit in hits if r["source"] == QUORA]
        tp = sum(1 for same, hit in quora if same and hit)
        fp = sum(1 for same, hit in quora if not same and hit)
        if tp + fp < MIN_HITS:
            continue  # too few answers served to measure a precision
        different = Counter(r["kind"] for r, _ in hits if not r["same"])
        wrong = Counter(r["kind"] for r, hit in hits if not r["same"] and hit)
        calibration.append(
            {
                "threshold": t,
                "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
                "recall": round(tp / max(1, sum(1 for same, _ in quora if same)), 4),
                "false_hit_rate": round(sum(wrong.values()) / max(1, sum(different.values())), 4),
                "false_hit_by_kind": {
                    k: round(wrong[k] / different[k], 4) for k in sorted(different) if different[k] >= 20
                },
            }
        )
    held_counts = Counter((r["source"], r["same"]) for r in held)
    document = {
        "model": embedder.model_id.split("@", 1)[0],
        "features": list(FEATURES),
        "weights": [round(float(w), 6) for w in weights],
        "bias": round(bias, 6),
        "mean": [round(float(m), 6) for m in mean],
        "scale": [round(float(s), 6) for s in scale],
        "cosine_floor": COSINE_FLOOR,
        "default_target_precision": DEFAULT_TARGET_PRECISION,
        "fitted_on": (
            f"{len(fit_rows)} pairs (of {len(fitting)}) reaching cosine {COSINE_FLOOR} and passing the "
            f"guards, from a fixed sample of {SAMPLE[QUORA]} Quora Question Pairs as shipped in GPTCache "
            f"(Quora's terms: research use) and {SAMPLE[CANNOT]} CANNOT pairs "
            "(github.com/dmlls/cannot-dataset, CC BY-SA 4.0): cachekit's development pairs-train.jsonl"
        ),
        "calibrated_on": (
            f"{len(held)} held-out pairs of the same sample, never fitted on "
            f"({held_counts[(QUORA, True)]} Quora same, {held_counts[(QUORA, False)]} Quora different, "
            f"{held_counts[(CANNOT, True)]} CANNOT same, {held_counts[(CANNOT, False)]} CANNOT different); "
            "precision and recall on the Quora pairs, false-hit rates on every different pair by kind"
        ),
        "calibration": calibration,
    }
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(fit_rows)} pairs fitted, {len(held)} calibrated", file=sys.stderr)
    for row in calibration:
        print(row["threshold"], row["precision"], row["recall"], row["false_hit_by_kind"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

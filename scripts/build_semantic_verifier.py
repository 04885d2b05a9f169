"""Fit the semantic cache's verifier and its calibration: cachekit/semantic/verifier-minilm.json.

    python scripts/build_semantic_verifier.py PAIRS-TRAIN.jsonl [--out PATH] [--embedding-cache NPZ]
    python scripts/build_semantic_verifier.py PAIRS-TRAIN.jsonl --research [--out PATH]

Deterministic: the same inputs give the same file. What it fits on is data whose terms allow
shipping what is derived from it:

* the CANNOT pairs of ``PAIRS-TRAIN.jsonl`` (the development data's ``pairs-train.jsonl``: rows with
  ``"source": "cannot"``; github.com/dmlls/cannot-dataset, CC BY-SA 4.0), a fixed sample;
* the question pairs of the PyPI package ``fow-cache`` with an even number in their id (CC BY 4.0;
  the odd ones are left for measuring), read from the installed package;
* pairs written by ``cachekit.semantic.generated`` (cachekit's own, MIT).

The sample is split (seed 1): 70 % to fit a logistic regression over
:data:`cachekit.semantic.verifier.FEATURES`, on the pairs that reach the cosine floor and pass every
guard (the verifier only ever sees those); of the other 30 %, never fitted on, the natural pairs (not
the generated ones, which are easy) calibrate: for each score
threshold, the pairs served right and wrong and, per kind of different pair, how many were served
(:func:`cachekit.semantic.evaluate.calibrate`), from which the layer reads a precision with its
confidence interval.

``--research`` adds a fixed sample of the Quora Question Pairs of ``PAIRS-TRAIN.jsonl`` (as shipped
in GPTCache; Quora's terms: research use only) and writes ``verifier-research.json`` in the current
directory: a variant for your own measurements, used with
``SemanticConfig(target_precision=..., calibration="verifier-research.json")``. It never ships: the
script refuses to write it into the package, and a test checks that the shipped file records no
research-only source.

Embedding the texts is the slow part (minutes on two cores); ``--embedding-cache`` keeps the
vectors in an ``.npz`` between runs.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cachekit.semantic.embedders import default_embedder  # noqa: E402
from cachekit.semantic.evaluate import EvalReport, Option, Pair, PairResult, calibrate, load_pairs  # noqa: E402
from cachekit.semantic.generated import generate  # noqa: E402
from cachekit.semantic.guards import ContentWordGuard, default_guards  # noqa: E402
from cachekit.semantic.verifier import FEATURES, DataSource, features, weights_digest  # noqa: E402

PACKAGED = ROOT / "cachekit" / "semantic" / "verifier-minilm.json"
QUORA, CANNOT, FOW, GENERATED = "gptcache-qqp", "cannot", "fow-cache", "generated"
#: Each source: its description, its terms, whether they forbid shipping what is derived from it.
SOURCES = {
    CANNOT: (
        "CANNOT negation dataset (github.com/dmlls/cannot-dataset), as in cachekit's pairs-train.jsonl",
        "CC BY-SA 4.0",
        False,
    ),
    FOW: (
        "fow-cache 0.1.0 question pairs (PyPI fow-cache, data/pairs.jsonl, Mabon ap Gwyn), even ids",
        "CC BY 4.0",
        False,
    ),
    GENERATED: (
        "cachekit.semantic.generated, seed 0, 30 same and 30 different pairs per template",
        "cachekit's own (MIT)",
        False,
    ),
    QUORA: (
        "Quora Question Pairs as shipped in GPTCache, as in cachekit's pairs-train.jsonl",
        "research use",
        True,
    ),
}
SAMPLE = {CANNOT: 3000, QUORA: 4800}
COSINE_FLOOR = 0.6
DEFAULT_TARGET_PRECISION = 0.85
#: The licence of the shipped weights: derived from CANNOT, so under its share-alike terms.
LICENCE = (
    "CC BY-SA 4.0: the weights and the calibration are adapted from the CANNOT dataset (CC BY-SA 4.0, "
    "share-alike) and the fow-cache pairs (CC BY 4.0, Mabon ap Gwyn; changed: converted, split, used "
    "to fit and calibrate); this file is licensed CC BY-SA 4.0 "
    "(creativecommons.org/licenses/by-sa/4.0/), apart from cachekit's MIT code"
)


def fow_fits(pair_id: str) -> bool:
    """Whether a fow-cache pair is one to fit and calibrate on: an even number in its id
    ("negation-002", "paraphrase-a004"); the odd ones are left for measuring."""
    return int(re.sub(r"\D", "", pair_id.rsplit("-", 1)[1])) % 2 == 0


def fow_pairs() -> list[Pair]:
    """The fow-cache question pairs with an even number in their id (the odd ones measure)."""
    try:
        import fow_cache  # type: ignore[import-not-found]
    except ImportError:
        raise SystemExit(
            "pip install fow-cache (CC BY 4.0 question pairs): the verifier is fitted on them"
        ) from None
    path = Path(fow_cache.__file__).parent / "data" / "pairs.jsonl"
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if fow_fits(row["id"]):
            pairs.append(Pair(row["a"], row["b"], bool(row["same_answer"]), row["category"], FOW))
    return pairs


def sample(path: Path, research: bool) -> list[Pair]:
    """The fixed sample of every source (seed 0)."""
    rows = [p for p in load_pairs(path) if p.source in SAMPLE and (research or p.source != QUORA)]
    random.Random(0).shuffle(rows)
    chosen = [r for source, n in SAMPLE.items() for r in [r for r in rows if r.source == source][:n]]
    generated = [Pair(p.a, p.b, p.same, p.kind, GENERATED) for p in generate(seed=0, per_template=30)]
    return chosen + fow_pairs() + generated


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


def described(pairs: list[Pair]) -> list[DataSource]:
    counts = Counter(p.source or "" for p in pairs)
    return [
        DataSource(name, SOURCES[name][0], SOURCES[name][1], counts[name], SOURCES[name][2])
        for name in SOURCES
        if counts[name]
    ]


def dump(document: dict[str, Any]) -> str:
    """The JSON text, one calibration row per line (the file stays small enough to read and ship)."""
    rows = document["calibration"]["rows"]
    text = json.dumps({**document, "calibration": {**document["calibration"], "rows": ["@ROWS@"]}}, indent=1)
    lines = ",\n".join("   " + json.dumps(row, separators=(",", ":")) for row in rows)
    return text.replace('   "@ROWS@"', lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "pairs", type=Path, help="pairs-train.jsonl (its CANNOT rows; --research: its Quora rows too)"
    )
    parser.add_argument(
        "--out", type=Path, help="default: the packaged file (--research: ./verifier-research.json)"
    )
    parser.add_argument("--research", action="store_true", help="also fit on Quora pairs (research use only)")
    parser.add_argument("--embedding-cache", type=Path)
    args = parser.parse_args()
    out = args.out or (Path("verifier-research.json") if args.research else PACKAGED)
    if args.research and out.resolve().parent == PACKAGED.parent:
        parser.error("a verifier fitted on research-only data never goes into the package")

    rows = sample(args.pairs, args.research)
    vectors = embed([t for r in rows for t in (r.a, r.b)], args.embedding_cache)
    embedder = default_embedder()
    words = ContentWordGuard(embedder)
    hard = [g for g in default_guards(embedder) if not isinstance(g, ContentWordGuard)]
    split = random.Random(1)
    fitting, held = [], []
    for row in rows:
        (fitting if split.random() < 0.7 else held).append(row)
    # Generated pairs teach the rules but say nothing of natural text: written from templates, they
    # are easy, and calibrating on them overstated precision (a target of 0.85 served CANNOT's
    # development pairs at 0.37). The calibration counts natural pairs only.
    held = [row for row in held if row.source != GENERATED]

    def judged(row: Pair) -> tuple[float, str | None, np.ndarray | None]:
        """The pair's cosine, the first guard's refusal, and its features when it reaches the verifier."""
        cos = float(np.dot(vectors[row.a], vectors[row.b]))
        if cos < COSINE_FLOOR:
            return cos, None, None
        reason = next((r for g in hard if (r := g(row.b, row.a)) is not None), None)
        return cos, reason, None if reason is not None else features(row.b, row.a, cos, words)

    fit_rows = [(f, r.same) for r in fitting if (f := judged(r)[2]) is not None]
    x = np.stack([f for f, _ in fit_rows])
    y = np.array([float(s) for _, s in fit_rows])
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    weights, bias = fit((x - mean) / scale, y)
    model = embedder.model_id.split("@", 1)[0]
    digest = weights_digest(model, weights, bias, mean, scale)

    def score(f: np.ndarray) -> float:
        return float(1 / (1 + np.exp(-(((f - mean) / scale) @ weights + bias))))

    report = EvalReport(threshold=COSINE_FLOOR, guards=True, model_id=embedder.model_id)
    for row in held:
        cos, reason, feats = judged(row)
        options = (
            ()
            if cos < COSINE_FLOOR
            else (Option(cos, reason, None if feats is None else score(feats), row.same),)
        )
        report.results.append(PairResult(row, cos, False, reason, options))
    held_counts = Counter((r.source, r.same) for r in held)
    calibration = calibrate(
        report,
        verifier=digest,
        calibrated_on=(
            f"{len(held)} held-out pairs never fitted on ("
            + ", ".join(
                f"{s}: {held_counts[(s, True)]} same, {held_counts[(s, False)]} different"
                for s in SOURCES
                if held_counts[(s, True)] + held_counts[(s, False)]
            )
            + ")"
        ),
        sources=described(held),
    )
    document: dict[str, Any] = {
        "model": model,
        "features": list(FEATURES),
        "weights": [round(float(w), 6) for w in weights],
        "bias": round(bias, 6),
        "mean": [round(float(m), 6) for m in mean],
        "scale": [round(float(s), 6) for s in scale],
        "cosine_floor": COSINE_FLOOR,
        "default_target_precision": DEFAULT_TARGET_PRECISION,
        "licence": LICENCE
        if not args.research
        else "research use only (fitted on Quora pairs): never to be shipped",
        "fitted_on": [s.to_dict() for s in described(fitting)],
        "fitted_pairs": len(fit_rows),
        "rebuild": "python scripts/build_semantic_verifier.py pairs-train.jsonl"
        + (" --research" if args.research else ""),
        "calibration": calibration.to_dict(),
    }
    out.write_text(dump(document), encoding="utf-8")
    print(f"wrote {out}: {len(fit_rows)} pairs fitted, {len(held)} calibrated", file=sys.stderr)
    for row in calibration.rows:
        low, high = row.precision_interval
        served = row.right + row.wrong
        print(f"{row.threshold:.2f} precision {row.precision:.3f} [{low:.3f}, {high:.3f}]", file=sys.stderr)
        print(f"     recall {row.recall:.3f} served {served}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

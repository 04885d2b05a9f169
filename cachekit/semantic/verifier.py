"""The verifier: a small learned pair classifier that decides, after the guards, whether a candidate's
answer serves the query, and the calibration that turns a precision target into its operating point.

The cosine of two sentence embeddings blurs the one word that matters ("annual plan" / "monthly
plan" 0.91) and punishes harmless rewording. The verifier scores a pair from a dozen signals the
guards already compute: the cosine, the content words only one side has, how well each of them is
matched by a word of the other side (single-word embedding cosines), the overlap and the lengths. It
is a logistic regression (``score = sigmoid(w . features + b)``): thirteen weights, shipped in
``verifier-minilm.json`` next to this module, with

* ``fitted_on``: the data it was fitted on and that data's terms;
* ``calibration``: for a range of score thresholds, the precision, recall and false-hit rates it
  reached on held-out pairs (never used for fitting), per kind of pair.

:func:`operating_point` reads that table: the lowest threshold whose calibrated precision reaches
the user's target (``SemanticConfig(target_precision=0.98)``) or whose false-hit rate stays under a
maximum (``max_false_hit_rate=0.005``), so the setting is a precision, not a raw number.

Attribution: the weights and the calibration table are derived from the CANNOT negation dataset
(github.com/dmlls/cannot-dataset, CC BY-SA 4.0) and from Quora Question Pairs as shipped in GPTCache
(Quora's terms: research use), cachekit's development ``pairs-train.jsonl``; ``fitted_on`` says so in
the file itself.

The weights are rebuilt by ``scripts/build_semantic_verifier.py`` (deterministic, from the labelled
pairs it names); they belong to one embedding model (``model``), and a layer on any other embedder
runs without the verifier (the guards and the cosine threshold decide).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cachekit.errors import ConfigError
from cachekit.semantic.guards import ContentWordGuard, analyze, differing_words

__all__ = [
    "FEATURES",
    "CalibrationRow",
    "Verifier",
    "features",
    "load_verifier",
    "operating_point",
]


#: The signals the verifier weighs, in the order of its weights.
FEATURES = (
    "cosine",
    "cosine_squared",
    "only_words",
    "only_words_gap",
    "unmatched",
    "worst_word_match",
    "mean_word_match",
    "jaccard",
    "shared_words",
    "shorter_words",
    "longer_words",
    "length_ratio",
    "same_words",
)

_WEIGHTS_FILE = Path(__file__).with_name("verifier-minilm.json")


def features(query: str, stored: str, similarity: float, words: ContentWordGuard) -> npt.NDArray[np.float64]:
    """The :data:`FEATURES` of one pair: symmetric in ``query`` and ``stored`` except for the words'
    order; single words are embedded (and cached) by ``words``."""
    a, b = analyze(query), analyze(stored)
    only_a, only_b = differing_words(a, b)
    worst, mean = 1.0, 1.0
    if only_a and only_b:
        left = [a.content[w] for w in sorted(only_a)]
        right = [b.content[w] for w in sorted(only_b)]
        vectors = words.vectors([*left, *right])
        sims = vectors[: len(left)] @ vectors[len(left) :].T
        best = np.concatenate([sims.max(axis=1), sims.max(axis=0)])
        worst, mean = float(best.min()), float(best.mean())
    elif only_a or only_b:
        worst, mean = 0.0, 0.0
    shared = len(a.content.keys() & b.content.keys())
    union = len(a.content.keys() | b.content.keys()) or 1
    short, long = sorted((len(a.content), len(b.content)))
    return np.array(
        [
            similarity,
            similarity * similarity,
            math.log1p(len(only_a) + len(only_b)),
            math.log1p(abs(len(only_a) - len(only_b))),
            float(bool(only_a) != bool(only_b)),
            worst,
            mean,
            shared / union,
            math.log1p(shared),
            math.log1p(short),
            math.log1p(long),
            (short + 1) / (long + 1),
            float(not only_a and not only_b),
        ],
        dtype=np.float64,
    )


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """What one score threshold reached on the held-out calibration pairs."""

    threshold: float
    #: Of the answers served on real user questions (Quora pairs), the share that was right.
    precision: float
    #: Of the real user question pairs one answer serves, the share served.
    recall: float
    #: Of all the pairs needing different answers, the share served (every kind together).
    false_hit_rate: float
    #: The false-hit rate per kind of different pair (negation, antonym, number, ...).
    false_hit_by_kind: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Verifier:
    """The shipped pair classifier (see the module docstring)."""

    #: The embedding model (``model_id`` prefix) the weights were fitted with.
    model: str
    weights: tuple[float, ...]
    bias: float
    #: Per-feature centre and scale applied before the weights.
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    #: The data the weights were fitted on and its terms (shown by ``semantic-eval``).
    fitted_on: str
    #: Where the calibration table comes from.
    calibrated_on: str
    calibration: tuple[CalibrationRow, ...]
    #: The cosine a candidate needs before the guards and the verifier look at it.
    cosine_floor: float
    #: The precision the default operating point aims at.
    default_target_precision: float

    def score(self, feature_row: Sequence[float] | npt.NDArray[np.float64]) -> float:
        """The probability, in [0, 1], that one answer serves both questions of the pair."""
        x = (np.asarray(feature_row, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
        z = float(x @ np.asarray(self.weights)) + self.bias
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def serves(self, model_id: str) -> bool:
        """Whether these weights belong to the embedder whose ``model_id`` this is."""
        return model_id.split("@", 1)[0] == self.model


def operating_point(
    verifier: Verifier, *, target_precision: float | None = None, max_false_hit_rate: float | None = None
) -> float:
    """The lowest score threshold of the calibration table that reaches ``target_precision`` and keeps
    every kind's false-hit rate at or below ``max_false_hit_rate``; with neither, the verifier's own
    default target. A target the table never reaches raises :class:`ConfigError` (say so, rather than
    promise a precision nobody measured)."""
    if target_precision is None and max_false_hit_rate is None:
        target_precision = verifier.default_target_precision
    for row in sorted(verifier.calibration, key=lambda r: r.threshold):
        if target_precision is not None and row.precision < target_precision:
            continue
        worst = max([row.false_hit_rate, *row.false_hit_by_kind.values()])
        if max_false_hit_rate is not None and worst > max_false_hit_rate:
            continue
        return row.threshold
    best = max(row.precision for row in verifier.calibration)
    # Only what was asked, in figures (never Python's None), and nothing about data sets the user
    # does not have: the calibration itself is described in docs/semantic.md.
    asked = " and ".join(
        f"{name}={value:g}"
        for name, value in (
            ("target_precision", target_precision),
            ("max_false_hit_rate", max_false_hit_rate),
        )
        if value is not None
    )
    raise ConfigError(
        f"no calibrated operating point reaches {asked} (the best calibrated precision is {best:.3f}): "
        "ask for less, or set a threshold instead"
    )


def _row(raw: Mapping[str, Any]) -> CalibrationRow:
    return CalibrationRow(
        threshold=float(raw["threshold"]),
        precision=float(raw["precision"]),
        recall=float(raw["recall"]),
        false_hit_rate=float(raw["false_hit_rate"]),
        false_hit_by_kind={str(k): float(v) for k, v in raw["false_hit_by_kind"].items()},
    )


def verifier_from_dict(raw: Mapping[str, Any]) -> Verifier:
    """A :class:`Verifier` from the JSON document the build script writes."""
    if list(raw["features"]) != list(FEATURES):
        raise ConfigError("the verifier's weights are for other features than this cachekit computes")
    return Verifier(
        model=str(raw["model"]),
        weights=tuple(float(w) for w in raw["weights"]),
        bias=float(raw["bias"]),
        mean=tuple(float(m) for m in raw["mean"]),
        scale=tuple(float(s) for s in raw["scale"]),
        fitted_on=str(raw["fitted_on"]),
        calibrated_on=str(raw["calibrated_on"]),
        calibration=tuple(_row(r) for r in raw["calibration"]),
        cosine_floor=float(raw["cosine_floor"]),
        default_target_precision=float(raw["default_target_precision"]),
    )


@lru_cache(maxsize=1)
def load_verifier() -> Verifier:
    """The verifier shipped with cachekit (read once)."""
    with _WEIGHTS_FILE.open(encoding="utf-8") as handle:
        return verifier_from_dict(json.load(handle))

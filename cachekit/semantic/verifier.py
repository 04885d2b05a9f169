"""The verifier: a small learned pair classifier that decides, after the guards, whether a candidate's
answer serves the query, and the calibration that turns a precision target into its operating point.

The cosine of two sentence embeddings blurs the one word that matters ("annual plan" / "monthly
plan" 0.91) and punishes harmless rewording. The verifier scores a pair from a dozen signals the
guards already compute: the cosine, the content words only one side has, how well each of them is
matched by a word of the other side (single-word embedding cosines), the overlap and the lengths. It
is a logistic regression (``score = sigmoid(w . features + b)``): thirteen weights, shipped in
``verifier-minilm.json`` next to this module, with

* ``fitted_on``: the data it was fitted on, each source with its terms (:class:`DataSource`);
* ``licence``, ``rebuild``: the terms of the file itself and the command that rebuilds it;
* ``calibration``: for a range of score thresholds, the pairs served right and wrong on held-out
  pairs never used for fitting, and per kind of different pair how many were served
  (:class:`Calibration`): counts, so that every rate comes with its interval.

:func:`operating_point` reads a calibration: the lowest threshold whose precision reaches the user's
target (``SemanticConfig(target_precision=0.9)``) at the lower end of its 95 % Wilson interval
(:func:`wilson_interval`), or whose false-hit rates stay under a maximum at the upper end of theirs
(``max_false_hit_rate=0.01``). So the setting is a precision measured out of sample with its
uncertainty, not a raw number. The calibration is the shipped one, or one measured on the user's
own labelled pairs (``cachekit semantic-eval --calibrate PAIRS.jsonl --out CAL.json``, loaded with
``SemanticConfig(calibration="CAL.json")``, :func:`load_calibration`): precision depends on the mix
of questions a cache sees, and only the user's own pairs measure that mix. The shipped calibration
counts natural pairs only (generated ones are easy and would overstate precision); its best lower
bound is about 0.6, so a higher target needs the user's own calibration.

Data and terms: the shipped weights and calibration are fitted on data whose terms allow shipping
them: the CANNOT negation dataset (github.com/dmlls/cannot-dataset, CC BY-SA 4.0), the even-numbered
question pairs of the PyPI package ``fow-cache`` (CC BY 4.0, Mabon ap Gwyn) and pairs cachekit
generates (:mod:`cachekit.semantic.generated`). CC BY-SA's share-alike term makes the file, an
adaptation, CC BY-SA 4.0 itself (it says so in ``licence``; cachekit's code stays MIT). Quora
Question Pairs (research use only) are never shipped: ``scripts/build_semantic_verifier.py
--research`` builds a variant fitted on them too, outside the package, for one's own measurements.

The weights belong to one embedding model (``model``); a layer on any other embedder runs without
the verifier (the guards and the cosine threshold decide).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
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
    "CONFIDENCE",
    "FEATURES",
    "Calibration",
    "CalibrationRow",
    "DataSource",
    "Verifier",
    "calibration_from_dict",
    "features",
    "load_calibration",
    "load_verifier",
    "operating_point",
    "verifier_from_dict",
    "weights_digest",
    "wilson_interval",
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


#: The confidence of the intervals cachekit reports and of the bound a precision target must reach.
CONFIDENCE = 0.95
_Z = 1.959963984540054  # the two-sided 95 % normal quantile


def wilson_interval(successes: int, trials: int, *, z: float = _Z) -> tuple[float, float]:
    """The Wilson score interval of a proportion (``successes`` of ``trials``) at confidence
    :data:`CONFIDENCE`: ``(0.0, 1.0)`` when there are no trials. Unlike the normal approximation it
    stays inside [0, 1] and is not zero-width at 0 or 1 of a few trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    centre = p + z * z / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    scale = 1 + z * z / trials
    # At 0 or all successes the bound is exactly 0 or 1 (the formula's rounding would miss it by 1e-17).
    low = 0.0 if successes <= 0 else max(0.0, (centre - spread) / scale)
    high = 1.0 if successes >= trials else min(1.0, (centre + spread) / scale)
    return low, high


@dataclass(frozen=True, slots=True)
class DataSource:
    """Labelled pairs something was fitted or calibrated on, and the terms they come with."""

    name: str
    #: Where the pairs come from (a data set and its publisher, or cachekit's own generator).
    description: str
    #: Their licence or terms of use.
    terms: str
    #: How many pairs of this source were used.
    pairs: int
    #: Terms that forbid shipping what is derived from them (Quora's: research use only).
    research_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (as the verifier and calibration files hold it)."""
        return {
            "name": self.name,
            "description": self.description,
            "terms": self.terms,
            "pairs": self.pairs,
            "research_only": self.research_only,
        }


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """What one score threshold served on the held-out calibration pairs (counts, so that every rate
    comes with its interval)."""

    threshold: float
    #: Pairs served a right answer (labelled same) and a wrong one (labelled different).
    right: int
    wrong: int
    #: Pairs labelled same and different.
    same: int
    different: int
    #: Per kind of different pair: (served, pairs of that kind).
    false_by_kind: Mapping[str, tuple[int, int]]

    @property
    def precision(self) -> float:
        """Of the answers served, the share that was right (1.0 when none was served)."""
        return self.right / (self.right + self.wrong) if self.right + self.wrong else 1.0

    @property
    def precision_interval(self) -> tuple[float, float]:
        """The Wilson interval of :attr:`precision` at :data:`CONFIDENCE`."""
        return wilson_interval(self.right, self.right + self.wrong)

    @property
    def recall(self) -> float:
        """Of the pairs labelled same, the share served."""
        return self.right / self.same if self.same else 1.0

    def false_hit_high(self) -> float:
        """The upper end of the interval of the worst false-hit rate, overall or of any kind."""
        rates = [wilson_interval(self.wrong, self.different)[1]]
        rates += [wilson_interval(served, n)[1] for served, n in self.false_by_kind.values()]
        return max(rates)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (counts; rates are derived when read)."""
        return {
            "threshold": self.threshold,
            "right": self.right,
            "wrong": self.wrong,
            "same": self.same,
            "different": self.different,
            "false_by_kind": {k: list(v) for k, v in sorted(self.false_by_kind.items())},
        }


@dataclass(frozen=True, slots=True)
class Calibration:
    """A verifier's calibration table: what each score threshold served on labelled pairs that were
    never used to fit the verifier (the shipped held-out split, or a user's own pairs)."""

    #: The digest of the verifier weights this table measured (:meth:`Verifier.digest`).
    verifier: str
    #: The pairs it was measured on, in words.
    calibrated_on: str
    sources: tuple[DataSource, ...]
    rows: tuple[CalibrationRow, ...]
    confidence: float = CONFIDENCE

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as ``cachekit semantic-eval --calibrate ... --out`` writes it."""
        return {
            "verifier": self.verifier,
            "calibrated_on": self.calibrated_on,
            "confidence": self.confidence,
            "sources": [source.to_dict() for source in self.sources],
            "rows": [row.to_dict() for row in self.rows],
        }


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
    fitted_on: tuple[DataSource, ...]
    #: The calibration table shipped with the weights (measured on held-out pairs).
    calibration: Calibration
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

    def digest(self) -> str:
        """A digest of what decides the scores (model, features, weights): a calibration names the
        verifier it measured by it."""
        return weights_digest(self.model, self.weights, self.bias, self.mean, self.scale)

    @property
    def calibrated_on(self) -> str:
        """Where the shipped calibration table was measured."""
        return self.calibration.calibrated_on


def weights_digest(
    model: str, weights: Sequence[float], bias: float, mean: Sequence[float], scale: Sequence[float]
) -> str:
    """The digest :meth:`Verifier.digest` computes (also used by the build script before a
    :class:`Verifier` exists)."""

    def rounded(values: Sequence[float]) -> list[float]:
        return [round(float(v), 6) for v in values]

    document = json.dumps(
        [model, list(FEATURES), rounded(weights), round(float(bias), 6), rounded(mean), rounded(scale)],
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(document.encode()).hexdigest()[:16]


def operating_point(
    calibration: Calibration,
    *,
    target_precision: float | None = None,
    max_false_hit_rate: float | None = None,
) -> float:
    """The lowest score threshold of ``calibration`` whose precision reaches ``target_precision``
    with confidence (the lower end of its Wilson interval at :data:`CONFIDENCE`, measured on pairs
    never fitted on) and whose false-hit rates, overall and of every kind, stay at or below
    ``max_false_hit_rate`` at the upper end of theirs. A target no row reaches raises
    :class:`ConfigError`: say so, rather than promise a precision nobody measured."""
    for row in sorted(calibration.rows, key=lambda r: r.threshold):
        if target_precision is not None and row.precision_interval[0] < target_precision:
            continue
        if max_false_hit_rate is not None and row.false_hit_high() > max_false_hit_rate:
            continue
        return row.threshold
    best = max((row.precision_interval[0] for row in calibration.rows), default=0.0)
    # Only what was asked, in figures (never Python's None), and nothing about data sets the user
    # does not have: the shipped calibration itself is described in docs/semantic.md.
    asked = " and ".join(
        f"{name}={value:g}"
        for name, value in (
            ("target_precision", target_precision),
            ("max_false_hit_rate", max_false_hit_rate),
        )
        if value is not None
    )
    raise ConfigError(
        f"no calibrated operating point reaches {asked} with {calibration.confidence:.0%} confidence "
        f"(the best lower bound of precision is {best:.3f}): ask for less, set a threshold instead, or "
        "measure your own labelled pairs with `cachekit semantic-eval --calibrate PAIRS.jsonl --out CAL.json`"
    )


def _source(raw: Mapping[str, Any]) -> DataSource:
    return DataSource(
        name=str(raw["name"]),
        description=str(raw["description"]),
        terms=str(raw["terms"]),
        pairs=int(raw["pairs"]),
        research_only=bool(raw.get("research_only", False)),
    )


def _row(raw: Mapping[str, Any]) -> CalibrationRow:
    return CalibrationRow(
        threshold=float(raw["threshold"]),
        right=int(raw["right"]),
        wrong=int(raw["wrong"]),
        same=int(raw["same"]),
        different=int(raw["different"]),
        false_by_kind={str(k): (int(v[0]), int(v[1])) for k, v in raw["false_by_kind"].items()},
    )


def calibration_from_dict(raw: Mapping[str, Any]) -> Calibration:
    """A :class:`Calibration` from its JSON form (a calibration file, or a verifier file's table)."""
    try:
        return Calibration(
            verifier=str(raw["verifier"]),
            calibrated_on=str(raw["calibrated_on"]),
            sources=tuple(_source(s) for s in raw["sources"]),
            rows=tuple(_row(r) for r in raw["rows"]),
            confidence=float(raw.get("confidence", CONFIDENCE)),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError(f"not a cachekit calibration: {exc!r}") from exc


def verifier_from_dict(raw: Mapping[str, Any]) -> Verifier:
    """A :class:`Verifier` from the JSON document the build script writes."""
    if list(raw["features"]) != list(FEATURES):
        raise ConfigError("the verifier's weights are for other features than this cachekit computes")
    verifier = Verifier(
        model=str(raw["model"]),
        weights=tuple(float(w) for w in raw["weights"]),
        bias=float(raw["bias"]),
        mean=tuple(float(m) for m in raw["mean"]),
        scale=tuple(float(s) for s in raw["scale"]),
        fitted_on=tuple(_source(s) for s in raw["fitted_on"]),
        calibration=calibration_from_dict(raw["calibration"]),
        cosine_floor=float(raw["cosine_floor"]),
        default_target_precision=float(raw["default_target_precision"]),
    )
    if verifier.calibration.verifier != verifier.digest():
        raise ConfigError("the verifier file's calibration measured other weights than it holds")
    return verifier


@lru_cache(maxsize=1)
def load_verifier() -> Verifier:
    """The verifier shipped with cachekit (read once)."""
    with _WEIGHTS_FILE.open(encoding="utf-8") as handle:
        return verifier_from_dict(json.load(handle))


def load_calibration(source: str | os.PathLike[str] | Calibration | Verifier) -> tuple[Verifier, Calibration]:
    """The verifier and the calibration a ``SemanticConfig(calibration=...)`` names.

    ``source`` is a :class:`Calibration`, a :class:`Verifier` (its own table), or the path of a JSON
    file: a calibration of the shipped verifier (what ``cachekit semantic-eval --calibrate ... --out``
    writes) or a whole verifier file (weights and table: what ``scripts/build_semantic_verifier.py``
    writes, such as a research variant built locally). A calibration of other weights than the
    shipped ones is a :class:`ConfigError`.
    """
    if isinstance(source, Verifier):
        return source, source.calibration
    if isinstance(source, Calibration):
        calibration = source
    else:
        try:
            with open(source, encoding="utf-8") as handle:
                raw = json.load(handle)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the calibration {os.fspath(source)!r}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{os.fspath(source)!r} is not a cachekit calibration (a JSON object)")
        try:
            if "weights" in raw:
                verifier = verifier_from_dict(raw)
                return verifier, verifier.calibration
            calibration = calibration_from_dict(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{os.fspath(source)!r} is not a cachekit calibration: {exc!r}") from exc
    shipped = load_verifier()
    if calibration.verifier != shipped.digest():
        raise ConfigError(
            f"the calibration measured verifier {calibration.verifier}, not the one this cachekit ships "
            f"({shipped.digest()}): measure again with `cachekit semantic-eval --calibrate`"
        )
    return shipped, calibration

"""The matcher: which of the stored questions close to a query may answer it.

A candidate must reach the cosine threshold, then pass every guard (:mod:`cachekit.semantic.guards`),
then, where a verifier is set, score at least the operating point (:mod:`cachekit.semantic.verifier`);
the most similar candidate that does wins. Rejections are counted by reason, per match and in total.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cachekit import _fork
from cachekit.errors import ConfigError
from cachekit.semantic.base import Candidate, Embedder
from cachekit.semantic.guards import ContentWordGuard, Guard, default_guards

if TYPE_CHECKING:
    import os

    from cachekit.semantic.verifier import Calibration, Verifier

    #: What ``SemanticConfig(calibration=...)`` accepts (:func:`cachekit.semantic.verifier.load_calibration`).
    CalibrationSource = str | os.PathLike[str] | Calibration | Verifier

__all__ = ["DEFAULT_THRESHOLD", "REASON_VERIFIER", "Examination", "MatchResult", "Matcher", "build_matcher"]

#: The reason counted when the verifier scores a candidate below the operating point.
REASON_VERIFIER = "verifier"

#: The cosine similarity (in [-1, 1], all-MiniLM-L6-v2) a candidate needs before the guards look at it.
#:
#: Chosen from the curve on ``pairs-dev.jsonl`` (4,000 labelled pairs: 984 same, 3,016 different;
#: ``cachekit semantic-eval``), precision / recall with the default guards and without:
#:
#: =========  ===============  ===============
#: threshold  guards on        guards off
#: =========  ===============  ===============
#:   0.60     0.780 / 0.130    0.275 / 0.885
#:   0.70     0.785 / 0.126    0.284 / 0.808
#:   0.76     0.805 / 0.122    0.288 / 0.718
#:   0.78     0.811 / 0.122    0.289 / 0.675
#:   0.80     0.808 / 0.120    0.286 / 0.621
#:   0.84     0.809 / 0.116    0.290 / 0.519
#:   0.90     0.811 / 0.109    0.287 / 0.329
#:   0.94     0.853 / 0.095    0.305 / 0.202
#:   0.98     0.831 / 0.050    0.352 / 0.063
#: =========  ===============  ===============
#:
#: With the guards, precision climbs until 0.78-0.80 and then stays flat (0.81) up to 0.92: the false
#: hits left there are label noise (three pairs of identical sentences labelled "different") and
#: rewrites that no word-level rule sees (passive voice, a negation moved to another clause), which a
#: higher threshold does not remove; recall meanwhile keeps falling (0.120 at 0.80, 0.109 at 0.90,
#: 0.050 at 0.98). So the default is 0.80, the start of the plateau. On the fow-cache pairs (not used to
#: choose) guarded precision is 1.000 at every threshold from 0.60 to 0.98, recall 0.297 at 0.80. Without
#: guards no threshold is safe (precision <= 0.35 on pairs-dev everywhere), hence guards on by default.
DEFAULT_THRESHOLD = 0.80


@dataclass(frozen=True, slots=True)
class MatchResult:
    """The outcome of one :meth:`Matcher.match`."""

    #: The candidate that answers the query, or ``None`` (a miss).
    hit: Candidate | None
    #: Candidates at or above the threshold that a guard rejected, counted by the guard's reason.
    rejected: dict[str, int] = field(default_factory=dict)
    #: The verifier's score of the hit (``None``: no hit, or no verifier).
    score: float | None = None


@dataclass(frozen=True, slots=True)
class Examination:
    """What every guard (and the verifier) says of a query's candidates (:meth:`Matcher.examine`)."""

    #: The most similar candidate that passes every guard and the verifier; when none does, the most
    #: similar one (``None``: no candidate).
    candidate: Candidate | None
    #: Whether ``candidate`` passed every guard and the verifier.
    passed: bool
    #: The reasons of every guard that refused ``candidate`` (``verifier`` for the verifier).
    refused: tuple[str, ...] = ()
    #: The verifier's score of ``candidate`` (``None``: no verifier, or a guard refused it first).
    score: float | None = None

    def serves(self, threshold: float) -> bool:
        """Whether :meth:`Matcher.match` at ``threshold`` serves :attr:`candidate`: it passed, and its
        similarity reaches the threshold (a more similar candidate would have been examined first)."""
        return self.passed and self.candidate is not None and self.candidate.similarity >= threshold


class Matcher:
    """Picks, among a query's candidates, the most similar one that is safe to serve.

    Thread-safe: :meth:`match` keeps no per-call state on the instance, and the running totals of
    rejections by reason (:meth:`stats`) are updated under a lock.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        guards: Sequence[Guard] | None = None,
        verifier: Verifier | None = None,
        min_score: float = 0.5,
    ) -> None:
        """A matcher at ``threshold`` (a cosine in [-1, 1]).

        ``guards=None`` runs :func:`~cachekit.semantic.guards.default_guards` built on ``embedder`` (the
        content-word guard embeds single words with it); pass ``()`` to run none. With a ``verifier``,
        a candidate that passes the guards must also score at least ``min_score`` (in [0, 1]); the
        verifier weighs the content words itself, so the default guards then leave out the
        content-word guard (its all-or-nothing rule is what the verifier replaces).
        """
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"a semantic threshold is a cosine in [-1, 1], not {threshold!r}")
        self.embedder = embedder
        self.threshold = threshold
        self.guards: tuple[Guard, ...] = default_guards(embedder) if guards is None else tuple(guards)
        self.words = next((g for g in self.guards if isinstance(g, ContentWordGuard)), None)
        if verifier is not None and guards is None:
            self.guards = tuple(g for g in self.guards if not isinstance(g, ContentWordGuard))
        self.verifier = verifier
        self.min_score = min_score
        #: The calibration the operating point ``min_score`` was read from (``None``: set by hand).
        self.calibration: Calibration | None = None
        if verifier is not None and self.words is None:
            self.words = ContentWordGuard(embedder)
        self._rejected: Counter[str] = Counter()
        self._lock = _fork.lock(self)

    def match(
        self, query: str, candidates: Sequence[Candidate], *, threshold: float | None = None
    ) -> MatchResult:
        """The best candidate for ``query`` at or above the threshold that passes every guard.

        Candidates are tried from the most similar down; the first guard to object rejects a candidate
        (later guards do not run on it) and its reason is counted. ``threshold`` overrides this
        matcher's for one call (a per-partition or per-request threshold).
        """
        limit = self.threshold if threshold is None else threshold
        rejected: Counter[str] = Counter()
        hit: Candidate | None = None
        score: float | None = None
        for candidate in sorted(candidates, key=lambda c: c.similarity, reverse=True):
            if candidate.similarity < limit:
                break
            reason = self.check(query, candidate.text)
            if reason is None:
                score = self.score(query, candidate)
                if score is None or score >= self.min_score:
                    hit = candidate
                    break
                reason = REASON_VERIFIER
            rejected[reason] += 1
        if rejected:
            with self._lock:
                self._rejected.update(rejected)
        return MatchResult(hit, dict(rejected), score if hit is not None else None)

    def examine(self, query: str, candidates: Sequence[Candidate]) -> Examination:
        """Every guard's verdict on the candidates, from the most similar down, whatever their
        similarity: the first that passes every guard (all of them are asked, not only up to the first
        objection) and the verifier is the one :meth:`match` serves at any threshold up to its
        similarity (:meth:`Examination.serves`). What the shadow mode records; counts nothing.
        """
        first: Examination | None = None
        for candidate in sorted(candidates, key=lambda c: c.similarity, reverse=True):
            refused = tuple(reason for guard in self.guards if (reason := guard(query, candidate.text)))
            score: float | None = None
            if not refused:
                score = self.score(query, candidate)
                if score is None or score >= self.min_score:
                    return Examination(candidate, True, (), score)
                refused = (REASON_VERIFIER,)
            if first is None:
                first = Examination(candidate, False, refused, score)
        return first if first is not None else Examination(None, False)

    def score(self, query: str, candidate: Candidate) -> float | None:
        """The verifier's score of serving ``candidate`` for ``query``; ``None`` without a verifier."""
        if self.verifier is None or self.words is None:
            return None
        from cachekit.semantic.verifier import features

        return self.verifier.score(features(query, candidate.text, candidate.similarity, self.words))

    def check(self, query: str, stored: str) -> str | None:
        """The reason of the first guard that objects to serving ``stored`` for ``query``, or ``None``."""
        for guard in self.guards:
            reason = guard(query, stored)
            if reason is not None:
                return reason
        return None

    def stats(self) -> dict[str, int]:
        """Candidates rejected so far (over every :meth:`match`), by reason."""
        with self._lock:
            return dict(self._rejected)


def build_matcher(
    embedder: Embedder,
    *,
    threshold: float | None = None,
    guards: bool = True,
    verifier: bool = True,
    target_precision: float | None = None,
    max_false_hit_rate: float | None = None,
    calibration: CalibrationSource | None = None,
) -> Matcher:
    """The matcher a semantic layer (or ``semantic-eval``) runs with these settings.

    By default: ``threshold`` (default :data:`DEFAULT_THRESHOLD`) and every guard. With a precision
    target (``target_precision`` / ``max_false_hit_rate``), the guards and the verifier on, where
    cachekit ships a verifier for ``embedder``'s model: the verifier's cosine floor (or
    ``threshold``), every guard but the content-word one, and a verifier score at the operating point
    that the calibration gives for the target (:func:`~cachekit.semantic.verifier.operating_point`):
    the shipped one, or ``calibration`` (a file ``semantic-eval --calibrate`` wrote from your own
    labelled pairs, or a whole verifier file built locally). A target cachekit cannot honour
    (another model, guards or verifier off) is refused, since nothing calibrated it.

    The verifier is not the default because on the development pairs it does not beat the
    content-word guard at the default operating point (docs/semantic.md has the figures); it is what
    makes a stated precision possible.
    """
    from cachekit.semantic.verifier import load_calibration, load_verifier, operating_point

    targeted = target_precision is not None or max_false_hit_rate is not None
    # An embedder may keep another model's calibration (the bundled ONNX MiniLM keeps the
    # sentence-transformers one): ``calibrated_as`` names that model's id.
    calibrated_as = getattr(embedder, "calibrated_as", None)
    ids = [embedder.model_id, *([calibrated_as] if isinstance(calibrated_as, str) else [])]
    if calibration is not None and not targeted:
        raise ConfigError("a calibration is read for a target: set target_precision or max_false_hit_rate")
    if not targeted:
        limit = DEFAULT_THRESHOLD if threshold is None else threshold
        return Matcher(embedder, threshold=limit, guards=None if guards else ())
    chosen, table = load_calibration(calibration if calibration is not None else load_verifier())
    if not (guards and verifier and any(chosen.serves(model_id) for model_id in ids)):
        raise ConfigError(
            "target_precision and max_false_hit_rate need the calibrated verifier, which cachekit "
            f"ships for {chosen.model} with guards and verifier on; set a threshold instead"
        )
    point = operating_point(table, target_precision=target_precision, max_false_hit_rate=max_false_hit_rate)
    limit = chosen.cosine_floor if threshold is None else threshold
    matcher = Matcher(embedder, threshold=limit, verifier=chosen, min_score=point)
    matcher.calibration = table
    return matcher

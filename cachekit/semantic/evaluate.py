"""``cachekit semantic-eval``: how often would the semantic cache serve a wrong answer?

For each labelled pair ``(a, b, same)``: in an empty partition, store ``a`` (with a dummy answer), then
look up ``b`` through a vector index and let the :class:`~cachekit.semantic.matcher.Matcher` decide. A
hit on a pair labelled *same* is a true hit, on a pair labelled *different* a false hit (a wrong answer
served). All texts are embedded up front, in batches.

Two file formats are read (JSON Lines, one pair a line):

* ``pairs-dev.jsonl``: ``{"a", "b", "same": bool, "kind": str, "source": str}``;
* fow-cache's ``pairs.jsonl``: ``{"id", "category", "a", "b", "same_answer": bool, "style"}``
  (``category`` is read as the kind).
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cachekit._progress import Progress, tracked
from cachekit.semantic.base import Candidate, Embedder, Vector, VectorIndex
from cachekit.semantic.guards import ContentWordGuard
from cachekit.semantic.matcher import REASON_VERIFIER, Matcher, build_matcher
from cachekit.semantic.verifier import Calibration, CalibrationRow, DataSource, wilson_interval
from cachekit.stores.keys import probe_key

if TYPE_CHECKING:
    from cachekit.semantic.matcher import CalibrationSource

__all__ = [
    "CALIBRATION_THRESHOLDS",
    "Counts",
    "EvalReport",
    "Option",
    "Pair",
    "PairResult",
    "calibrate",
    "curve",
    "evaluate",
    "load_pairs",
    "render_compare",
    "render_curve",
    "render_text",
]

#: How long an evaluation entry may live in the index if removing it fails (seconds).
_ENTRY_TTL = 600.0
#: Candidates fetched per lookup in index mode (as :class:`~cachekit.semantic.layer.SemanticConfig`).
_INDEX_K = 4
_SCORE_POINTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92, 0.94, 0.96, 0.98, 0.99)
_COSINE_POINTS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.92, 0.94, 0.96, 0.98)


@dataclass(frozen=True, slots=True)
class Pair:
    """One labelled pair: is an answer to ``a`` also a right answer to ``b``?"""

    a: str
    b: str
    #: True where one answer serves both questions.
    same: bool
    #: A label of the kind of pair ("paraphrase", "negation", ...); "" when the file has none.
    kind: str = ""
    #: Where the pair comes from, when the file says.
    source: str | None = None


def _pair_from_record(record: Any, where: str) -> Pair:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a pair is a JSON object, not {type(record).__name__}")
    a, b = record.get("a"), record.get("b")
    if not isinstance(a, str) or not isinstance(b, str):
        raise ValueError(f'{where}: "a" and "b" must be strings')
    same = record.get("same", record.get("same_answer"))
    if not isinstance(same, bool):
        raise ValueError(f'{where}: needs a boolean "same" (or "same_answer")')
    kind = record.get("kind", record.get("category", ""))
    source = record.get("source")
    return Pair(
        a=a,
        b=b,
        same=same,
        kind=kind if isinstance(kind, str) else str(kind),
        source=source if isinstance(source, str) else None,
    )


def load_pairs(path: str | os.PathLike[str]) -> list[Pair]:
    """Read labelled pairs from a JSON Lines file in either format (see the module docstring).

    Blank lines are skipped; a malformed line raises :class:`ValueError` naming its line number.
    """
    pairs: list[Pair] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{os.fspath(path)}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON: {exc.msg}") from exc
            pairs.append(_pair_from_record(record, where))
    return pairs


@dataclass(slots=True)
class Counts:
    """Hit counts over a set of pairs, and the rates derived from them.

    Rates with an empty denominator take the value that claims nothing went wrong: ``precision`` is 1.0
    when nothing was served (no wrong answer was served), ``recall`` is 1.0 when no pair is labelled
    same (none was missed), ``false_hit_rate`` is 0.0 when no pair is labelled different.
    """

    pairs: int = 0
    same: int = 0
    different: int = 0
    true_hits: int = 0
    false_hits: int = 0

    def add(self, same: bool, hit: bool) -> None:
        """Count one pair asked in its own partition: a hit is right exactly when the pair is same."""
        self.count(same, right=hit and same, wrong=hit and not same)

    def count(self, same: bool, *, right: bool, wrong: bool) -> None:
        """Count one query labelled ``same`` (or different) that was served a ``right`` answer, a
        ``wrong`` one, or neither (in an index, a same-labelled query can be served a wrong one)."""
        self.pairs += 1
        if same:
            self.same += 1
        else:
            self.different += 1
        self.true_hits += right
        self.false_hits += wrong

    @property
    def hits(self) -> int:
        """Pairs answered from the cache."""
        return self.true_hits + self.false_hits

    @property
    def precision(self) -> float:
        """``true_hits / (true_hits + false_hits)``: of the answers served, the share that is right."""
        return self.true_hits / self.hits if self.hits else 1.0

    @property
    def recall(self) -> float:
        """``true_hits / same``: of the pairs one answer serves, the share served from the cache."""
        return self.true_hits / self.same if self.same else 1.0

    @property
    def false_hit_rate(self) -> float:
        """``false_hits / different``: of the pairs that need different answers, the share served wrong."""
        return self.false_hits / self.different if self.different else 0.0

    @property
    def precision_interval(self) -> tuple[float, float]:
        """The 95 % Wilson interval of :attr:`precision` (``(0.0, 1.0)`` when nothing was served)."""
        return wilson_interval(self.true_hits, self.hits)

    def to_dict(self) -> dict[str, int | float]:
        """The counts and rates, under the names ``semantic-eval --json`` prints."""
        low, high = self.precision_interval
        return {
            "pairs": self.pairs,
            "same": self.same,
            "different": self.different,
            "true_hits": self.true_hits,
            "false_hits": self.false_hits,
            "precision": self.precision,
            "precision_low": low,
            "precision_high": high,
            "recall": self.recall,
            "false_hit_rate": self.false_hit_rate,
        }


@dataclass(frozen=True, slots=True)
class Option:
    """One stored question a query could be answered with, as the matcher judged it."""

    #: Cosine similarity of the query and the stored question.
    similarity: float
    #: The reason of the guard that rejected it (``None``: every guard passed).
    reason: str | None
    #: The verifier's score (``None``: no verifier, or a guard rejected it first).
    score: float | None
    #: Whether the stored question's answer serves the query (the file's label).
    right: bool


@dataclass(frozen=True, slots=True)
class PairResult:
    """What the cache did with one pair (in index mode: with the pair's ``b`` asked of the index)."""

    pair: Pair
    #: Cosine similarity of ``a`` and ``b``.
    similarity: float
    #: Whether ``b`` was answered from the cache.
    hit: bool
    #: Why not: the reason of the guard (or ``verifier``) that refused the best candidate; ``None`` on a
    #: hit or below the threshold.
    rejected_by: str | None
    #: The stored questions at or above the threshold, most similar first, as judged (for ``--curve``).
    options: tuple[Option, ...] = ()
    #: Whether the hit served a right answer (``False`` on a miss).
    right: bool = False


@dataclass(slots=True)
class EvalReport:
    """The result of :func:`evaluate`: counts overall and per kind, and each pair's outcome."""

    threshold: float
    guards: bool
    model_id: str
    total: Counts = field(default_factory=Counts)
    by_kind: dict[str, Counts] = field(default_factory=dict)
    results: list[PairResult] = field(default_factory=list)
    #: The verifier's operating point (a score in [0, 1]); ``None`` when no verifier ran.
    operating_point: float | None = None
    #: Where the verifier's operating point was calibrated ("" without a verifier).
    calibrated_on: str = ""
    #: ``None``: pair by pair, each in an empty partition; else how many questions shared one index.
    index_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Exactly ``pairs, same, different, true_hits, false_hits, precision, precision_low,
        precision_high, recall, false_hit_rate`` (``precision_low``/``_high``: its 95 % Wilson
        interval) and ``by_kind`` (kind -> the same ten keys), kinds sorted."""
        out: dict[str, Any] = self.total.to_dict()
        out["by_kind"] = {kind: self.by_kind[kind].to_dict() for kind in sorted(self.by_kind)}
        return out

    def settings(self) -> str:
        """The operating point in words, for the table's heading."""
        point = (
            f"threshold {self.threshold:g}, verifier at {self.operating_point:g}"
            if self.operating_point is not None
            else f"threshold {self.threshold:g}"
        )
        mode = "pairwise" if self.index_size is None else f"index of {self.index_size} questions"
        return f"{self.model_id}, {point}, guards {'on' if self.guards else 'off'}, {mode}"


def _default_index() -> VectorIndex | None:
    try:
        from cachekit.semantic.index_memory import MemoryVectorIndex
    except ImportError:  # pragma: no cover - the memory index ships with cachekit
        return None
    return MemoryVectorIndex(max_entries_per_partition=1_000_000)


def _embed_all(
    embedder: Embedder, texts: Sequence[str], batch_size: int, progress: Progress | None
) -> dict[str, Vector]:
    import numpy as np

    unique = list(dict.fromkeys(texts))
    vectors: dict[str, Vector] = {}
    for start in range(0, len(unique), batch_size):
        if progress is not None:
            progress("embedding questions", start, len(unique))
        chunk = unique[start : start + batch_size]
        rows = np.asarray(embedder.embed(chunk), dtype=np.float32)
        vectors.update(zip(chunk, rows, strict=True))
    if progress is not None:
        progress("embedding questions", len(unique), len(unique))
    return vectors


def _judge(
    matcher: Matcher, query: str, candidates: Sequence[Candidate], right: Callable[[str], bool]
) -> tuple[Option, ...]:
    """Every candidate at or above the matcher's threshold, judged as :meth:`Matcher.match` would."""
    options: list[Option] = []
    for candidate in sorted(candidates, key=lambda c: c.similarity, reverse=True):
        if candidate.similarity < matcher.threshold:
            break
        reason = matcher.check(query, candidate.text)
        score = matcher.score(query, candidate) if reason is None else None
        options.append(Option(candidate.similarity, reason, score, right(candidate.text)))
    return tuple(options)


def _served(
    options: Sequence[Option], *, score: float | None, cosine: float
) -> tuple[Option | None, str | None]:
    """The option served at an operating point (a verifier ``score``, or a ``cosine`` threshold
    alone), and the reason the best refused one was refused."""
    refused: str | None = None
    for option in options:
        if option.similarity < cosine:
            break
        if option.reason is not None:
            refused = refused or option.reason
        elif score is not None and option.score is not None and option.score < score:
            refused = refused or REASON_VERIFIER
        else:
            return option, None
    return None, refused


def _labelled(same: bool, _stored: str) -> bool:
    """Pairwise, the one stored question serves the query exactly when the pair is labelled same."""
    return same


def _serves(pairs: Sequence[Pair]) -> Callable[[str, str], bool]:
    """Whether, by the file's labels, the answer to one question serves another (the same text, or a
    pair labelled same in either order). An unlabelled pair counts as not served: conservative."""
    same = {(p.a, p.b) for p in pairs if p.same} | {(p.b, p.a) for p in pairs if p.same}
    return lambda query, stored: query == stored or (query, stored) in same


def evaluate(
    pairs: Iterable[Pair],
    *,
    embedder: Embedder,
    threshold: float | None = None,
    guards: bool = True,
    verifier: bool = True,
    target_precision: float | None = None,
    max_false_hit_rate: float | None = None,
    calibration: CalibrationSource | None = None,
    index: VectorIndex | None = None,
    index_size: int | None = None,
    batch_size: int = 256,
    progress: Progress | None = None,
    matcher: Matcher | None = None,
) -> EvalReport:
    """Store each pair's ``a`` in an empty partition of ``index``, look up ``b``, and count the hits.

    Args:
        pairs: the labelled pairs (see :func:`load_pairs`).
        embedder: embeds the questions (and, for the guards and the verifier, single words).
        threshold: the cosine (in [-1, 1]) a candidate needs (``None``: as the semantic layer).
        guards: run the default guards (``False``: the threshold alone decides).
        verifier: run the shipped verifier where it serves ``embedder`` (as the semantic layer).
        target_precision, max_false_hit_rate, calibration: pick the verifier's operating point, as
            :class:`~cachekit.semantic.layer.SemanticConfig` does.
        index: any :class:`~cachekit.semantic.base.VectorIndex`; one fresh partition per pair, and
            each entry removed after its lookup. ``None``: a new in-memory index (closed afterwards).
        index_size: instead of one partition per pair, store the ``a`` of the first ``index_size``
            pairs in one partition and ask each of their ``b``: a hit is right only when the stored
            question it served is one whose answer serves the query (the same text or a pair
            labelled same), which is how a cache full of questions behaves.
        batch_size: texts per call to ``embedder.embed``.
        progress: called as ``progress(stage, done, total)`` while the questions are embedded
            (``"embedding questions"``), stored (``"storing questions"``) and the pairs looked up
            (``"looking up pairs"``).
        matcher: judge with this matcher instead of one built from the settings above (as
            :func:`calibrate` needs: the verifier scoring every candidate, at operating point 0).
    """
    import numpy as np

    pairs = list(pairs)
    if index_size is not None:
        if index_size < 1:
            raise ValueError(f"index_size must be at least 1, not {index_size}")
        pairs = pairs[:index_size]
    texts = [text for pair in pairs for text in (pair.a, pair.b)]
    vectors = _embed_all(embedder, texts, batch_size, progress)
    if matcher is None:
        matcher = build_matcher(
            embedder,
            threshold=threshold,
            guards=guards,
            verifier=verifier,
            target_precision=target_precision,
            max_false_hit_rate=max_false_hit_rate,
            calibration=calibration,
        )
    close = [(p.b, p.a) for p in pairs if float(np.dot(vectors[p.a], vectors[p.b])) >= matcher.threshold]
    for guard in (*matcher.guards, matcher.words):
        if isinstance(guard, ContentWordGuard):
            guard.prepare(close, batch_size=batch_size)
    report = EvalReport(
        threshold=matcher.threshold,
        guards=bool(matcher.guards),
        model_id=embedder.model_id,
        operating_point=matcher.min_score if matcher.verifier is not None else None,
        calibrated_on=matcher.calibration.calibrated_on if matcher.calibration is not None else "",
        index_size=index_size,
    )
    own_index = index is None
    if index is None:
        index = _default_index()
    try:
        if index_size is None:
            _pairwise(pairs, vectors, matcher=matcher, index=index, report=report, progress=progress)
        else:
            _indexed(pairs, vectors, matcher=matcher, index=index, report=report, progress=progress)
    finally:
        if own_index and index is not None:
            index.close()
    return report


def _count(report: EvalReport, result: PairResult) -> None:
    report.results.append(result)
    for counts in (report.total, report.by_kind.setdefault(result.pair.kind, Counts())):
        counts.count(
            result.pair.same, right=result.hit and result.right, wrong=result.hit and not result.right
        )


def _result(pair: Pair, similarity: float, options: tuple[Option, ...], matcher: Matcher) -> PairResult:
    served, refused = _served(
        options, score=matcher.min_score if matcher.verifier is not None else None, cosine=matcher.threshold
    )
    return PairResult(
        pair, similarity, served is not None, refused, options, served is not None and served.right
    )


def _pairwise(
    pairs: list[Pair],
    vectors: dict[str, Vector],
    *,
    matcher: Matcher,
    index: VectorIndex | None,
    report: EvalReport,
    progress: Progress | None,
) -> None:
    import numpy as np

    run = uuid.uuid4().hex[:12]
    for number, pair in enumerate(tracked(pairs, progress, "looking up pairs")):
        stored, query = vectors[pair.a], vectors[pair.b]
        similarity = float(np.dot(stored, query))
        key = probe_key(f"eval.{run}.{number}")
        if index is not None:
            partition = f"cachekit-eval:{run}:{number}"
            index.add(partition, key, stored, pair.a, ttl=_ENTRY_TTL)
            try:
                candidates = index.search(partition, query, k=1, min_similarity=matcher.threshold)
            finally:
                index.remove(partition, key)
        else:
            candidates = [Candidate(key, similarity, pair.a)] if similarity >= matcher.threshold else []
        options = _judge(matcher, pair.b, candidates, functools.partial(_labelled, pair.same))
        _count(report, _result(pair, similarity, options, matcher))


def _indexed(
    pairs: list[Pair],
    vectors: dict[str, Vector],
    *,
    matcher: Matcher,
    index: VectorIndex | None,
    report: EvalReport,
    progress: Progress | None,
) -> None:
    import numpy as np

    if index is None:  # pragma: no cover - the memory index ships with cachekit
        raise ValueError("--index-size needs a vector index")
    serves = _serves(pairs)
    partition = f"cachekit-eval:{uuid.uuid4().hex[:12]}:index"
    stored = list(dict.fromkeys(p.a for p in pairs))
    try:
        for number, text in enumerate(tracked(stored, progress, "storing questions")):
            index.add(partition, probe_key(f"eval.{number}"), vectors[text], text, ttl=_ENTRY_TTL)
        for pair in tracked(pairs, progress, "looking up pairs"):
            found = index.search(partition, vectors[pair.b], k=_INDEX_K, min_similarity=matcher.threshold)
            options = _judge(matcher, pair.b, found, functools.partial(serves, pair.b))
            similarity = float(np.dot(vectors[pair.a], vectors[pair.b]))
            _count(report, _result(pair, similarity, options, matcher))
    finally:
        for number in range(len(stored)):
            index.remove(partition, probe_key(f"eval.{number}"))


#: The verifier scores a calibration measures (every 0.01 above 0.5, where targets sit).
CALIBRATION_THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 10)) + tuple(
    round(0.5 + 0.01 * i, 2) for i in range(50)
)


def calibrate(
    report: EvalReport,
    *,
    verifier: str,
    calibrated_on: str,
    sources: Sequence[DataSource] = (),
    thresholds: Sequence[float] = CALIBRATION_THRESHOLDS,
) -> Calibration:
    """The calibration table of a pairwise ``report`` judged with the verifier at operating point 0
    (every candidate that passed the guards scored): for each score threshold, the pairs served
    right and wrong, and per kind of different pair how many were served. ``verifier`` is the
    digest of the weights that scored (:meth:`~cachekit.semantic.verifier.Verifier.digest`)."""
    if report.index_size is not None:
        raise ValueError("a calibration is measured pair by pair (no --index-size)")
    rows: list[CalibrationRow] = []
    for threshold in thresholds:
        right = wrong = same = different = 0
        by_kind: dict[str, list[int]] = {}
        for result in report.results:
            served, _ = _served(result.options, score=threshold, cosine=report.threshold)
            hit = served is not None
            if result.pair.same:
                same += 1
                right += hit and served is not None and served.right
                wrong += hit and served is not None and not served.right
                continue
            different += 1
            wrong += hit
            counts = by_kind.setdefault(result.pair.kind or "(none)", [0, 0])
            counts[0] += hit
            counts[1] += 1
        rows.append(
            CalibrationRow(
                threshold=threshold,
                right=right,
                wrong=wrong,
                same=same,
                different=different,
                false_by_kind={k: (v[0], v[1]) for k, v in by_kind.items()},
            )
        )
    return Calibration(
        verifier=verifier, calibrated_on=calibrated_on, sources=tuple(sources), rows=tuple(rows)
    )


def curve(report: EvalReport, points: Sequence[float] | None = None) -> list[tuple[float, Counts]]:
    """Precision and recall at a range of operating points, from the judged options of ``report``:
    verifier score thresholds where the verifier ran, else cosine thresholds from the report's."""
    verified = report.operating_point is not None
    if points is None and report.operating_point is not None:
        points = sorted({*_SCORE_POINTS, report.operating_point})
    elif points is None:
        points = [t for t in _COSINE_POINTS if t >= report.threshold]
    rows: list[tuple[float, Counts]] = []
    for point in points:
        counts = Counts()
        for result in report.results:
            served, _ = _served(
                result.options,
                score=point if verified else None,
                cosine=report.threshold if verified else point,
            )
            counts.count(
                result.pair.same,
                right=served is not None and served.right,
                wrong=served is not None and not served.right,
            )
        rows.append((point, counts))
    return rows


def render_curve(report: EvalReport, rows: Sequence[tuple[float, Counts]]) -> str:
    """The ``--curve`` table: one line per operating point."""
    what = "verifier score" if report.operating_point is not None else "cosine"
    lines = [f"{what:>14}  {'hits':>5}  {'precision':>9}  {'recall':>6}  {'false-hit':>9}"]
    for point, counts in rows:
        marker = (
            " <- operating point"
            if report.operating_point is not None and abs(point - report.operating_point) < 1e-9
            else ""
        )
        precision = _rate(counts.precision, counts.hits)
        recall, false_hits = _rate(counts.recall, counts.same), _rate(counts.false_hit_rate, counts.different)
        lines.append(
            f"{point:>14.3f}  {counts.hits:>5}  {precision:>9}  {recall:>6}  {false_hits:>9}{marker}"
        )
    return "\n".join(lines)


def render_compare(first: EvalReport, second: EvalReport) -> str:
    """Two reports on the same pairs side by side: precision / recall / false-hit per kind."""
    lines = [f"A: {first.settings()}", f"B: {second.settings()}"]
    header = ("kind", "A precision", "A recall", "A false-hit", "B precision", "B recall", "B false-hit")
    rows: list[tuple[str, ...]] = [header]
    kinds = sorted(set(first.by_kind) | set(second.by_kind))
    for name in [*kinds, "all"]:
        cells = [name or "(none)"]
        for report in (first, second):
            c = report.total if name == "all" else report.by_kind.get(name, Counts())
            cells += [
                _rate(c.precision, c.hits),
                _rate(c.recall, c.same),
                _rate(c.false_hit_rate, c.different),
            ]
        rows.append(tuple(cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        lines.append(
            "  ".join(
                [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]
            )
        )
    return "\n".join(lines)


def _rate(value: float, denominator: int) -> str:
    return f"{value:.3f}" if denominator else "-"


def _interval(counts: Counts) -> str:
    low, high = counts.precision_interval
    return f"{low:.3f}-{high:.3f}" if counts.hits else "-"


def render_text(report: EvalReport) -> str:
    """A table for people: one row per kind and a total row; "-" where a rate has no denominator."""
    header = ("kind", "pairs", "same", "diff", "TP", "FP", "precision", "95% interval", "recall", "false-hit")
    rows = [header]
    for name, counts in [*sorted(report.by_kind.items()), ("all", report.total)]:
        rows.append(
            (
                name or "(none)",
                str(counts.pairs),
                str(counts.same),
                str(counts.different),
                str(counts.true_hits),
                str(counts.false_hits),
                _rate(counts.precision, counts.hits),
                _interval(counts),
                _rate(counts.recall, counts.same),
                _rate(counts.false_hit_rate, counts.different),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"semantic-eval: {report.settings()}"]
    for index, row in enumerate(rows):
        if index == len(rows) - 1:
            lines.append("  ".join("-" * w for w in widths))
        cells = [
            row[0].ljust(widths[0]),
            *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)),
        ]
        lines.append("  ".join(cells).rstrip())
    rejected: dict[str, int] = {}
    for result in report.results:
        if result.rejected_by is not None:
            rejected[result.rejected_by] = rejected.get(result.rejected_by, 0) + 1
    if rejected:
        lines.append(
            "rejected by guard: "
            + ", ".join(f"{k} {v}" for k, v in sorted(rejected.items(), key=lambda i: -i[1]))
        )
    return "\n".join(lines)

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

import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachekit._progress import Progress, tracked
from cachekit.semantic.base import Candidate, Embedder, Vector, VectorIndex
from cachekit.semantic.guards import ContentWordGuard
from cachekit.semantic.matcher import Matcher

__all__ = ["Counts", "EvalReport", "Pair", "PairResult", "evaluate", "load_pairs", "render_text"]

#: How long an evaluation entry may live in the index if removing it fails (seconds).
_ENTRY_TTL = 600.0


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
        """Count one pair."""
        self.pairs += 1
        if same:
            self.same += 1
            self.true_hits += hit
        else:
            self.different += 1
            self.false_hits += hit

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

    def to_dict(self) -> dict[str, int | float]:
        """The counts and rates, under the names ``semantic-eval --json`` prints."""
        return {
            "pairs": self.pairs,
            "same": self.same,
            "different": self.different,
            "true_hits": self.true_hits,
            "false_hits": self.false_hits,
            "precision": self.precision,
            "recall": self.recall,
            "false_hit_rate": self.false_hit_rate,
        }


@dataclass(frozen=True, slots=True)
class PairResult:
    """What the cache did with one pair."""

    pair: Pair
    #: Cosine similarity of ``a`` and ``b``.
    similarity: float
    #: Whether ``b`` was answered with ``a``'s entry.
    hit: bool
    #: Why not: the reason of the guard that rejected ``a``; ``None`` on a hit or below the threshold.
    rejected_by: str | None


@dataclass(slots=True)
class EvalReport:
    """The result of :func:`evaluate`: counts overall and per kind, and each pair's outcome."""

    threshold: float
    guards: bool
    model_id: str
    total: Counts = field(default_factory=Counts)
    by_kind: dict[str, Counts] = field(default_factory=dict)
    results: list[PairResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Exactly ``pairs, same, different, true_hits, false_hits, precision, recall,
        false_hit_rate`` and ``by_kind`` (kind -> the same eight keys), kinds sorted."""
        out: dict[str, Any] = self.total.to_dict()
        out["by_kind"] = {kind: self.by_kind[kind].to_dict() for kind in sorted(self.by_kind)}
        return out


def _default_index() -> VectorIndex | None:
    try:
        from cachekit.semantic.index_memory import MemoryVectorIndex
    except ImportError:  # pragma: no cover - the memory index ships with cachekit
        return None
    return MemoryVectorIndex()


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


def evaluate(
    pairs: Iterable[Pair],
    *,
    embedder: Embedder,
    threshold: float,
    guards: bool,
    index: VectorIndex | None = None,
    batch_size: int = 256,
    progress: Progress | None = None,
) -> EvalReport:
    """Store each pair's ``a`` in an empty partition of ``index``, look up ``b``, and count the hits.

    Args:
        pairs: the labelled pairs (see :func:`load_pairs`).
        embedder: embeds the questions (and, for the content-word guard, single words).
        threshold: the cosine (in [-1, 1]) a candidate needs.
        guards: run the default guards (``False``: the threshold alone decides).
        index: any :class:`~cachekit.semantic.base.VectorIndex`; one fresh partition per pair, and
            each entry removed after its lookup. ``None``: a new in-memory index (closed afterwards).
        batch_size: texts per call to ``embedder.embed``.
        progress: called as ``progress(stage, done, total)`` while the questions are embedded
            (``"embedding questions"``) and the pairs looked up (``"looking up pairs"``).
    """
    import numpy as np

    pairs = list(pairs)
    texts = [text for pair in pairs for text in (pair.a, pair.b)]
    vectors = _embed_all(embedder, texts, batch_size, progress)
    matcher = Matcher(embedder, threshold=threshold, guards=None if guards else ())
    close = [(p.b, p.a) for p in pairs if float(np.dot(vectors[p.a], vectors[p.b])) >= threshold]
    for guard in matcher.guards:
        if isinstance(guard, ContentWordGuard):
            guard.prepare(close, batch_size=batch_size)
    report = EvalReport(threshold=threshold, guards=guards, model_id=embedder.model_id)
    own_index = index is None
    if index is None:
        index = _default_index()
    run = uuid.uuid4().hex[:12]
    try:
        for number, pair in enumerate(tracked(pairs, progress, "looking up pairs")):
            stored, query = vectors[pair.a], vectors[pair.b]
            similarity = float(np.dot(stored, query))
            key = f"eval-{number}"
            if index is not None:
                partition = f"cachekit-eval:{run}:{number}"
                index.add(partition, key, stored, pair.a, ttl=_ENTRY_TTL)
                try:
                    candidates = index.search(partition, query, k=1, min_similarity=threshold)
                finally:
                    index.remove(partition, key)
            else:
                candidates = [Candidate(key, similarity, pair.a)] if similarity >= threshold else []
            result = matcher.match(pair.b, candidates)
            hit = result.hit is not None
            report.total.add(pair.same, hit)
            report.by_kind.setdefault(pair.kind, Counts()).add(pair.same, hit)
            rejected_by = next(iter(result.rejected), None)
            report.results.append(PairResult(pair, similarity, hit, rejected_by))
    finally:
        if own_index and index is not None:
            index.close()
    return report


def _rate(value: float, denominator: int) -> str:
    return f"{value:.3f}" if denominator else "-"


def render_text(report: EvalReport) -> str:
    """A table for people: one row per kind and a total row; "-" where a rate has no denominator."""
    header = ("kind", "pairs", "same", "diff", "TP", "FP", "precision", "recall", "false-hit")
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
                _rate(counts.recall, counts.same),
                _rate(counts.false_hit_rate, counts.different),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        f"semantic-eval: {report.model_id}, threshold {report.threshold:g}, "
        f"guards {'on' if report.guards else 'off'}"
    ]
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

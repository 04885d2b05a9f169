"""Shadow records of the semantic cache, and what they say about it: precision, recall, and the
threshold that would reach a target precision on the user's own traffic.

With ``SemanticConfig(mode="shadow")`` every eligible request still goes upstream; the semantic layer
looks for a stored question as it would to serve one, and the fresh answer then judges the stored
answer it would have served (:mod:`cachekit.pipeline.semantic`). One :class:`ShadowRecord` per such
request goes to the cost ledger (:meth:`cachekit.cost.ledger.Ledger.record_shadow`), beside the
calls: hashes, scores, verdicts, the partition id, the model and the time, never a prompt or an
answer.

Each record holds one *judged candidate*: the most similar stored question that passes every guard
(and the verifier, where one runs), searched down to :data:`SHADOW_FLOOR`; when none passes, the most
similar one, marked refused. At a cosine threshold ``t`` the layer serves the judged candidate exactly
when it passed and its similarity is at least ``t`` (a more similar candidate would have been judged
instead), so one record tells what every threshold would have done with that request:

* served and judged the same answer: a right hit; served and judged different: a wrong hit;
* not served, judged the same: a right answer the layer missed (recall's denominator counts it);
* not served, judged different, or no candidate at all: rightly not served.

:func:`summarize` computes, per partition and over all of them, the precision and recall at the
threshold each request ran under, the precision's 95 % Wilson interval, and the lowest threshold whose
interval's lower bound reaches the target precision (:func:`threshold_for`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "SHADOW_FLOOR",
    "Judge",
    "ShadowRecord",
    "ShadowSummary",
    "ThresholdChoice",
    "summarize",
    "threshold_for",
    "wilson",
]

#: The lowest cosine a shadow lookup searches down to: candidates under it are not judged, so the
#: threshold the report suggests is never below it.
SHADOW_FLOOR = 0.5
#: z of the two-sided 95 % interval.
_Z95 = 1.959963984540054

Judge = Literal["exact", "custom"]


@dataclass(frozen=True, slots=True)
class ShadowRecord:
    """What the semantic layer would have done with one request in shadow mode (no prompt, no answer).

    ``time`` is seconds since the epoch; ``partition`` the semantic partition id (an HMAC, opaque);
    ``candidate`` a digest of the stored entry judged (``None``: the partition held no candidate at
    or above :data:`SHADOW_FLOOR`).
    """

    time: float
    model: str
    partition: str
    #: The threshold in force for this request (the layer's, or the request's own).
    threshold: float
    candidate: str | None = None
    #: The judged candidate's cosine similarity to the question.
    similarity: float | None = None
    #: Every guard (and the verifier, where one runs) accepted the judged candidate.
    passed: bool = False
    #: The layer would have served it: passed, and similarity at or above ``threshold``.
    would_serve: bool = False
    #: The guards that refused it, by reason (``negation``, ``numbers``, ..., ``verifier``).
    refused: tuple[str, ...] = ()
    #: The verifier's score of the pair (``None``: no verifier).
    score: float | None = None
    #: How the answers were compared: ``exact`` (their normalized content) or ``custom`` (the
    #: user's ``shadow_judge``).
    judge: Judge = "exact"
    #: Whether the stored answer serves this request as the fresh one does; ``None`` when nothing was
    #: judged (no candidate, or the judge failed).
    verdict: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-ready dict, the inverse of :meth:`from_dict`."""
        return {
            "time": self.time,
            "model": self.model,
            "partition": self.partition,
            "threshold": self.threshold,
            "candidate": self.candidate,
            "similarity": self.similarity,
            "passed": self.passed,
            "would_serve": self.would_serve,
            "refused": list(self.refused),
            "score": self.score,
            "judge": self.judge,
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShadowRecord:
        """Rebuild a record from :meth:`to_dict` output."""
        judge = data.get("judge", "exact")
        if judge not in ("exact", "custom"):
            raise ValueError(f"unknown shadow judge {judge!r}")
        similarity, score, verdict = data.get("similarity"), data.get("score"), data.get("verdict")
        return cls(
            time=float(data["time"]),
            model=str(data["model"]),
            partition=str(data["partition"]),
            threshold=float(data["threshold"]),
            candidate=None if data.get("candidate") is None else str(data["candidate"]),
            similarity=None if similarity is None else float(similarity),
            passed=bool(data.get("passed", False)),
            would_serve=bool(data.get("would_serve", False)),
            refused=tuple(str(r) for r in data.get("refused") or ()),
            score=None if score is None else float(score),
            judge=judge,
            verdict=None if verdict is None else bool(verdict),
        )


def wilson(right: int, total: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a share ``right / total`` (95 % by default); ``(0, 1)`` when
    ``total`` is 0 (nothing is known)."""
    if total <= 0:
        return 0.0, 1.0
    p = right / total
    z2 = z * z
    denominator = 1 + z2 / total
    centre = (p + z2 / (2 * total)) / denominator
    margin = z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total)) / denominator
    return max(0.0, centre - margin), min(1.0, centre + margin)


@dataclass(frozen=True, slots=True)
class ThresholdChoice:
    """The lowest threshold whose precision's lower bound reaches a target, and what it gives."""

    threshold: float
    served: int
    right: int
    precision: float
    interval: tuple[float, float]
    #: Of the judged requests whose candidate gave the same answer, the share served at ``threshold``.
    recall: float | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "threshold": self.threshold,
            "served": self.served,
            "right": self.right,
            "precision": self.precision,
            "interval": list(self.interval),
            "recall": self.recall,
        }


@dataclass(frozen=True, slots=True)
class ShadowSummary:
    """What the semantic layer would have done on one partition's traffic (or on all of it)."""

    #: The partition id (``None``: every partition together) and the models seen in it.
    partition: str | None
    models: tuple[str, ...]
    #: Shadow records: eligible requests that went upstream while the layer only watched.
    requests: int
    #: Of those, the ones with a candidate that was judged.
    judged: int
    #: Would-be hits at the threshold each request ran under, and how many were right.
    served: int
    right: int
    #: Judged requests whose candidate gave the same answer but was not served (a guard, the
    #: threshold or the verifier refused it).
    missed: int
    #: The target precision the suggested threshold is chosen for.
    target: float
    #: The lowest threshold reaching the target (``None``: none does on this traffic).
    suggested: ThresholdChoice | None = None
    #: The threshold(s) the requests ran under.
    thresholds: tuple[float, ...] = field(default_factory=tuple)

    @property
    def precision(self) -> float | None:
        """Right would-be hits over would-be hits (``None``: none)."""
        return self.right / self.served if self.served else None

    @property
    def interval(self) -> tuple[float, float]:
        """The precision's 95 % Wilson interval."""
        return wilson(self.right, self.served)

    @property
    def recall(self) -> float | None:
        """Right would-be hits over the requests a stored answer would have served right
        (``None``: none)."""
        reachable = self.right + self.missed
        return self.right / reachable if reachable else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "partition": self.partition,
            "models": list(self.models),
            "requests": self.requests,
            "judged": self.judged,
            "served": self.served,
            "right": self.right,
            "missed": self.missed,
            "precision": self.precision,
            "interval": list(self.interval),
            "recall": self.recall,
            "thresholds": list(self.thresholds),
            "target_precision": self.target,
            "suggested": None if self.suggested is None else self.suggested.to_dict(),
        }


def threshold_for(records: Sequence[ShadowRecord], target: float) -> ThresholdChoice | None:
    """The lowest cosine threshold at which the judged would-be hits' precision has a 95 % Wilson
    lower bound of at least ``target``, or ``None`` when no threshold reaches it on these records.

    Only candidates that passed every guard can be served; at threshold ``t`` those with similarity
    ``>= t`` are (see the module docstring). The lowest such threshold serves the most.
    """
    if not 0 < target <= 1:
        raise ValueError(f"a target precision is a share in (0, 1], not {target!r}")
    judged = [r for r in records if r.verdict is not None and r.similarity is not None]
    reachable = sum(1 for r in judged if r.verdict)
    passed = sorted((r for r in judged if r.passed), key=lambda r: r.similarity or 0.0, reverse=True)
    best: ThresholdChoice | None = None
    served = right = 0
    # From the highest similarity down: each distinct similarity is a threshold serving every passed
    # candidate at or above it. The last one that reaches the target is the lowest.
    for i, record in enumerate(passed):
        served += 1
        right += bool(record.verdict)
        similarity = record.similarity or 0.0
        if i + 1 < len(passed) and passed[i + 1].similarity == similarity:
            continue  # ties: a threshold serves all of them or none
        interval = wilson(right, served)
        if interval[0] >= target:
            best = ThresholdChoice(
                threshold=similarity,
                served=served,
                right=right,
                precision=right / served,
                interval=interval,
                recall=right / reachable if reachable else None,
            )
    return best


def _summary(partition: str | None, records: Sequence[ShadowRecord], target: float) -> ShadowSummary:
    judged = [r for r in records if r.verdict is not None]
    served = [r for r in judged if r.would_serve]
    return ShadowSummary(
        partition=partition,
        models=tuple(sorted({r.model for r in records})),
        requests=len(records),
        judged=len(judged),
        served=len(served),
        right=sum(1 for r in served if r.verdict),
        missed=sum(1 for r in judged if r.verdict and not r.would_serve),
        target=target,
        suggested=threshold_for(records, target),
        thresholds=tuple(sorted({r.threshold for r in records})),
    )


def summarize(
    records: Iterable[ShadowRecord], target: float = 0.95
) -> tuple[list[ShadowSummary], ShadowSummary]:
    """One :class:`ShadowSummary` per partition (sorted by partition id) and one over them all."""
    if not 0 < target <= 1:
        raise ValueError(f"a target precision is a share in (0, 1], not {target!r}")
    records = list(records)
    by_partition: dict[str, list[ShadowRecord]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record)
    parts = [_summary(p, rs, target) for p, rs in sorted(by_partition.items())]
    return parts, _summary(None, records, target)

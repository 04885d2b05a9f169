"""``cachekit.semantic.evaluate``: the arithmetic of the report, both file formats, any vector index.

Runs the real all-MiniLM-L6-v2 (bundled, offline). The tiny pairs file is hand-written; its expected
counts are worked out by hand below.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np  # the semantic extra is part of the test install (scripts/test)
import pytest

from cachekit.semantic.base import Candidate, Embedder
from cachekit.semantic.embedders import default_embedder
from cachekit.semantic.evaluate import Counts, Pair, evaluate, load_pairs, render_text
from cachekit.semantic.matcher import DEFAULT_THRESHOLD

PAIRS_DEV = Path(__file__).resolve().parents[1] / "fixtures" / "pairs-sample.jsonl"  # see fixtures/README.md
KEYS = ["pairs", "same", "different", "true_hits", "false_hits", "precision", "recall", "false_hit_rate"]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The real bundled all-MiniLM-L6-v2 (shared by the process; loads once)."""
    return default_embedder()


# (a, b, same, kind) and what happens at threshold 0.8 (cosines measured with all-MiniLM-L6-v2):
TINY = [
    # identical: cosine 1.0, every guard passes -> a true hit, guards on or off
    ("How do I descale my kettle?", "How do I descale my kettle?", True, "paraphrase"),
    # case and punctuation only: 0.996 -> a true hit, guards on or off
    ("How do I descale my kettle?", "how do i descale my kettle", True, "paraphrase"),
    # labelled same but unrelated: 0.09, below the threshold -> a miss either way
    ("What is the boiling point of olive oil?", "How do I fix a squeaky hinge?", True, "paraphrase"),
    # 0.97: a false hit without guards, rejected (negation) with them
    ("Does the tram run at night?", "Does the tram not run at night?", False, "negation"),
    # 0.91: a false hit without guards, rejected (numbers) with them
    ("Can I bring 2 guests to the gala?", "Can I bring 5 guests to the gala?", False, "number"),
    # 0.95: a false hit without guards, rejected (antonym) with them
    ("Is the cafe open on holidays?", "Is the cafe closed on holidays?", False, "antonym"),
    # 0.13: a miss either way
    ("How tall is the lighthouse?", "What is a good soup recipe?", False, "other"),
]


def write_dev_format(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for a, b, same, kind in TINY:
            handle.write(json.dumps({"a": a, "b": b, "same": same, "kind": kind, "source": "hand"}) + "\n")
        handle.write("\n")  # a blank line is skipped
    return path


def write_fow_format(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for number, (a, b, same, kind) in enumerate(TINY):
            record: dict[str, Any] = {"id": f"{kind}-{number:03}", "category": kind, "a": a, "b": b}
            record |= {"same_answer": same, "style": "minimal"}
            handle.write(json.dumps(record) + "\n")
    return path


def counts(
    pairs: int, same: int, true_hits: int, false_hits: int, p: float, r: float, f: float
) -> dict[str, Any]:
    return {
        "pairs": pairs,
        "same": same,
        "different": pairs - same,
        "true_hits": true_hits,
        "false_hits": false_hits,
        "precision": p,
        "recall": r,
        "false_hit_rate": f,
    }


WITH_GUARDS = {
    **counts(7, 3, 2, 0, 1.0, 2 / 3, 0.0),
    "by_kind": {
        "antonym": counts(1, 0, 0, 0, 1.0, 1.0, 0.0),
        "negation": counts(1, 0, 0, 0, 1.0, 1.0, 0.0),
        "number": counts(1, 0, 0, 0, 1.0, 1.0, 0.0),
        "other": counts(1, 0, 0, 0, 1.0, 1.0, 0.0),
        "paraphrase": counts(3, 3, 2, 0, 1.0, 2 / 3, 0.0),
    },
}
WITHOUT_GUARDS = {
    **counts(7, 3, 2, 3, 2 / 5, 2 / 3, 3 / 4),
    "by_kind": {
        "antonym": counts(1, 0, 0, 1, 0.0, 1.0, 1.0),
        "negation": counts(1, 0, 0, 1, 0.0, 1.0, 1.0),
        "number": counts(1, 0, 0, 1, 0.0, 1.0, 1.0),
        "other": counts(1, 0, 0, 0, 1.0, 1.0, 0.0),
        "paraphrase": counts(3, 3, 2, 0, 1.0, 2 / 3, 0.0),
    },
}


def assert_report(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal keys (in order) and values, floats compared with pytest.approx, nested by_kind too."""
    assert list(actual) == list(expected)
    for key, value in expected.items():
        if isinstance(value, dict):
            assert_report(actual[key], value)
        else:
            assert actual[key] == pytest.approx(value), key


@pytest.mark.parametrize("writer", [write_dev_format, write_fow_format])
def test_load_pairs_reads_both_formats(tmp_path: Path, writer: Any) -> None:
    pairs = load_pairs(writer(tmp_path / "pairs.jsonl"))
    assert [(p.a, p.b, p.same, p.kind) for p in pairs] == TINY


def test_load_pairs_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": "x", "b": "y", "same": true}\n{"a": "x", "b": "y"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: .*same"):
        load_pairs(path)
    path.write_text('{"a": "x", "b": "y", "same": true}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not JSON"):
        load_pairs(path)


@pytest.mark.parametrize("writer", [write_dev_format, write_fow_format])
@pytest.mark.parametrize(("guards", "expected"), [(True, WITH_GUARDS), (False, WITHOUT_GUARDS)])
def test_report_arithmetic_on_a_tiny_file(
    embedder: Embedder, tmp_path: Path, writer: Any, guards: bool, expected: dict[str, Any]
) -> None:
    report = evaluate(
        load_pairs(writer(tmp_path / "p.jsonl")), embedder=embedder, threshold=0.8, guards=guards
    )
    assert_report(report.to_dict(), expected)
    assert list(report.to_dict()) == [*KEYS, "by_kind"]
    assert all(list(kind) == KEYS for kind in report.to_dict()["by_kind"].values())
    reasons = {r.pair.kind: r.rejected_by for r in report.results if r.rejected_by}
    assert reasons == ({"negation": "negation", "number": "numbers", "antonym": "antonym"} if guards else {})


def test_counts_rates_and_empty_denominators() -> None:
    c = Counts()
    assert (c.precision, c.recall, c.false_hit_rate) == (1.0, 1.0, 0.0)
    for same, hit in [(True, True), (True, False), (False, True), (False, False), (False, False)]:
        c.add(same, hit)
    assert c.to_dict() == counts(5, 2, 1, 1, 0.5, 0.5, 1 / 3)


class RecordingIndex:
    """A dict-backed VectorIndex that records its calls (for checking how evaluate uses an index)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], tuple[Any, str]] = {}
        self.partitions: list[str] = []
        self.min_similarities: set[float] = set()

    def add(
        self, partition: str, entry_key: str, vector: Any, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        assert not any(p == partition for p, _ in self.entries), "the partition must start empty"
        self.partitions.append(partition)
        self.entries[(partition, entry_key)] = (vector, text)

    def search(self, partition: str, vector: Any, *, k: int, min_similarity: float) -> list[Candidate]:
        self.min_similarities.add(min_similarity)
        found = [
            Candidate(key, float(np.dot(stored, vector)), text)
            for (p, key), (stored, text) in self.entries.items()
            if p == partition
        ]
        found = [c for c in found if c.similarity >= min_similarity]
        return sorted(found, key=lambda c: -c.similarity)[:k]

    def remove(self, partition: str, entry_key: str) -> None:
        self.entries.pop((partition, entry_key), None)

    def clear(self) -> None:
        self.entries.clear()

    def close(self) -> None:
        pass


def test_evaluate_uses_any_index_one_fresh_partition_per_pair(embedder: Embedder, tmp_path: Path) -> None:
    index = RecordingIndex()
    pairs = load_pairs(write_dev_format(tmp_path / "p.jsonl"))
    report = evaluate(pairs, embedder=embedder, threshold=0.8, guards=False, index=index)
    assert_report(report.to_dict(), WITHOUT_GUARDS)
    assert len(index.partitions) == len(set(index.partitions)) == len(pairs)
    assert index.entries == {}  # every entry removed after its lookup
    assert index.min_similarities == {0.8}


def test_render_text_is_a_table(embedder: Embedder, tmp_path: Path) -> None:
    report = evaluate(
        load_pairs(write_dev_format(tmp_path / "p.jsonl")), embedder=embedder, threshold=0.8, guards=True
    )
    text = render_text(report)
    lines = text.splitlines()
    assert "threshold 0.8" in lines[0]
    assert "guards on" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:] if line and not line.startswith("-")}
    assert rows["all"][1:7] == ["7", "3", "4", "2", "0", "1.000"]
    assert rows["negation"][-3:] == ["-", "-", "0.000"]  # no hits, no same pairs: no precision, recall
    assert "rejected by guard:" in lines[-1]


def test_guards_raise_precision_on_pairs_dev(embedder: Embedder) -> None:
    with PAIRS_DEV.open(encoding="utf-8") as handle:
        head = "".join(itertools.islice(handle, 300))
    pairs = [Pair(r["a"], r["b"], r["same"], r["kind"]) for r in map(json.loads, head.splitlines())]
    guarded = evaluate(pairs, embedder=embedder, threshold=DEFAULT_THRESHOLD, guards=True)
    bare = evaluate(pairs, embedder=embedder, threshold=DEFAULT_THRESHOLD, guards=False)
    assert guarded.total.hits > 0
    assert guarded.total.precision > bare.total.precision
    assert guarded.total.false_hit_rate < bare.total.false_hit_rate

"""Precision as a setting: structure-aware refusals, the shipped verifier and its calibration, and the
``semantic-eval`` tools that measure them (index mode, curve, comparison), with the real MiniLM model.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

import cachekit
from cachekit.cli import main
from cachekit.errors import ConfigError
from cachekit.semantic import SemanticConfig, SemanticLayer
from cachekit.semantic.embedders import default_embedder
from cachekit.semantic.evaluate import Pair, curve, evaluate
from cachekit.semantic.verifier import FEATURES
from tests.conftest import Harness
from tests.redis_servers import redis8_server  # noqa: F401 - the session fixture

pytestmark = pytest.mark.slow

WEIGHTS = Path(cachekit.__file__).parent / "semantic" / "verifier-minilm.json"

#: Pairs whose words are (nearly) the same but whose answers differ: the roles, the place of a
#: negation, or a compound's opposite part changed. Each with the guard that must refuse it.
STRUCTURE = [
    ("What is 10 minus 3?", "What is 3 minus 10?", "order"),
    ("Is 17 greater than 13?", "Is 13 greater than 17?", "order"),
    ("Did the dog bite the man?", "Did the man bite the dog?", "order"),
    ("Does Alice owe Bob money?", "Does Bob owe Alice money?", "order"),
    ("The report does not say the drug is safe.", "The report says the drug is not safe.", "negation"),
    ("Can I not pay and still use it?", "Can I pay and still not use it?", "negation"),
    (
        "How do I convert a string to uppercase in Python?",
        "How do I convert a string to lowercase in Python?",
        "antonym",
    ),
    ("What is the latitude of Paris?", "What is the longitude of Paris?", "antonym"),
    ("Is the upstream branch ahead?", "Is the downstream branch ahead?", "antonym"),
]


def openai_sdk(harness: Harness, semantic: Any = True) -> Any:
    return harness.sdk(
        "openai", cache=cachekit.CacheConfig(store=harness.store, ledger=False, semantic=semantic)
    )


def ask(sdk: Any, question: str) -> Any:
    return sdk.run(
        sdk.client.chat.completions.with_raw_response.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": question}]
        )
    )


@pytest.mark.parametrize(("stored", "query", "reason"), STRUCTURE)
def test_structure_changes_are_refused_and_say_why(
    harness: Harness, stored: str, query: str, reason: str
) -> None:
    sdk = openai_sdk(harness, SemanticConfig(threshold=0.5))  # low: the guard, not the cosine, refuses
    ask(sdk, stored)
    answer = ask(sdk, query)
    assert answer.headers["x-cachekit-cache"] == "miss"
    assert reason in answer.headers["x-cachekit-semantic-refused"].split(", ")
    layer = cachekit.clients.cache_of(sdk.client).pipeline.semantic
    assert layer is not None
    assert layer.stats.rejected[reason] >= 1


@pytest.mark.parametrize(
    ("stored", "query"),
    [
        (
            "What is the difference between match fixing and spot fixing?",
            "What is the difference between spot fixing and match fixing?",
        ),
        ("Which is better, Python or Java?", "Which is better, Java or Python?"),
        ("Is Python vs Java faster?", "Is Java vs Python faster?"),
        (
            "Can I get unemployment benefits if I quit my job?",
            "If I quit my job, can I get unemployment benefits?",
        ),
    ],
)
def test_symmetric_relations_and_moved_clauses_pass_the_order_guard(stored: str, query: str) -> None:
    from cachekit.semantic.guards import order_guard

    assert order_guard(query, stored) is None


@pytest.mark.parametrize("semantic", [True, SemanticConfig(target_precision=0.8)])
def test_a_paraphrase_is_still_served(harness: Harness, semantic: Any) -> None:
    sdk = openai_sdk(harness, semantic)
    ask(sdk, "How do I reset my account password?")
    answer = ask(sdk, "How can I reset the password of my account?")
    assert answer.headers["x-cachekit-cache"] == "semantic"


def shipped() -> dict[str, Any]:
    return json.loads(WEIGHTS.read_text(encoding="utf-8"))


def test_the_shipped_verifier_records_its_data_terms_and_calibration() -> None:
    document = shipped()
    assert document["features"] == list(FEATURES)
    assert len(document["weights"]) == len(FEATURES)
    assert "research use" in document["fitted_on"]
    assert "CC BY-SA 4.0" in document["fitted_on"]
    assert "never fitted on" in document["calibrated_on"]
    thresholds = [row["threshold"] for row in document["calibration"]]
    assert thresholds == sorted(thresholds)
    assert len(thresholds) >= 5


@pytest.mark.parametrize("target", [0.75, 0.8, 0.85])
def test_target_precision_picks_the_lowest_calibrated_point_that_reaches_it(target: float) -> None:
    expected = min(row["threshold"] for row in shipped()["calibration"] if row["precision"] >= target)
    layer = SemanticLayer(SemanticConfig(target_precision=target))
    try:
        assert layer.matcher.verifier is not None
        assert layer.matcher.min_score == expected
        assert layer.matcher.threshold == shipped()["cosine_floor"]
    finally:
        layer.close()


def test_max_false_hit_rate_bounds_every_kind() -> None:
    rows = shipped()["calibration"]
    expected = min(
        r["threshold"] for r in rows if max([r["false_hit_rate"], *r["false_hit_by_kind"].values()]) <= 0.01
    )
    layer = SemanticLayer(SemanticConfig(max_false_hit_rate=0.01))
    try:
        assert layer.matcher.min_score == expected
    finally:
        layer.close()


def test_a_precision_nobody_measured_is_refused() -> None:
    best = max(row["precision"] for row in shipped()["calibration"])
    with pytest.raises(ConfigError, match="no calibrated operating point"):
        SemanticConfig(target_precision=min(1.0, best + 0.001) if best < 1.0 else 1.0, max_false_hit_rate=0.0)
    with pytest.raises(ConfigError, match="target_precision"):
        SemanticConfig(target_precision=1.5)


INDEX_PAIRS = [
    Pair(
        "How do I reset my account password?",
        "How can I reset the password of my account?",
        True,
        "paraphrase",
    ),
    Pair(
        "What is the capital city of Australia?",
        "Which city is the capital of Australia?",
        True,
        "paraphrase",
    ),
    Pair(
        "How do I cancel my monthly subscription?",
        "How do I cancel my annual subscription?",
        False,
        "antonym",
    ),
    Pair("How do I delete my account?", "How do I remove my account permanently?", True, "paraphrase"),
]


def test_index_mode_stores_every_question_in_one_partition_and_judges_the_served_one() -> None:
    embedder = default_embedder()
    report = evaluate(INDEX_PAIRS, embedder=embedder, index_size=4, verifier=False, threshold=0.5)
    assert report.index_size == 4
    assert report.total.pairs == 4
    # Each query sees every stored question: the candidates of one lookup are other pairs' questions too.
    assert any(len(r.options) > 1 for r in report.results)
    for result in report.results:
        if result.hit:
            served = next(o for o in result.options if o.reason is None)
            assert result.right == served.right
    assert report.total.true_hits + report.total.false_hits == sum(r.hit for r in report.results)


def test_curve_is_monotone_in_hits_and_matches_the_report_at_its_point() -> None:
    embedder = default_embedder()
    report = evaluate(INDEX_PAIRS, embedder=embedder, target_precision=0.8)
    assert report.operating_point is not None
    rows = curve(report)
    hits = [counts.hits for _, counts in rows]
    assert hits == sorted(hits, reverse=True)
    at_point = dict(rows).get(report.operating_point) or curve(report, [report.operating_point])[0][1]
    assert (at_point.true_hits, at_point.false_hits) == (report.total.true_hits, report.total.false_hits)


def test_semantic_eval_cli_index_curve_and_compare(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join(json.dumps({"a": p.a, "b": p.b, "same": p.same, "kind": p.kind}) + "\n" for p in INDEX_PAIRS)
    )
    out = io.StringIO()
    code = main(
        [
            "semantic-eval",
            str(path),
            "--index-size",
            "3",
            "--target-precision",
            "0.8",
            "--curve",
            "--compare",
            "threshold=0.9 no-verifier",
        ],
        out=out,
    )
    text = out.getvalue()
    assert code == 0, text
    assert "index of 3 questions" in text
    assert "verifier score" in text
    assert "<- operating point" in text
    assert "A: " in text
    assert "B: " in text
    assert "threshold 0.9" in text
    out = io.StringIO()
    assert main(["semantic-eval", str(path), "--json", "--compare", "no-guards"], out=out) == 0
    document = json.loads(out.getvalue())
    assert set(document) == {"a", "b"}
    assert document["a"]["pairs"] == document["b"]["pairs"] == 4
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["semantic-eval", str(path), "--compare", "bogus=1"], out=out) == 2
    assert "--compare" in err.getvalue()


def test_without_a_target_the_layer_runs_the_threshold_and_every_guard() -> None:
    from cachekit.semantic.guards import ContentWordGuard
    from cachekit.semantic.matcher import DEFAULT_THRESHOLD

    layer = SemanticLayer(SemanticConfig())
    try:
        assert layer.matcher.verifier is None
        assert layer.matcher.threshold == DEFAULT_THRESHOLD
        assert any(isinstance(g, ContentWordGuard) for g in layer.matcher.guards)
    finally:
        layer.close()
    assert WEIGHTS.stat().st_size < 16_000  # small enough to ship in the package
    with pytest.raises(ConfigError, match="guards and the verifier"):
        SemanticConfig(target_precision=0.8, verifier=False)


class OtherModel:
    """An embedder of another model: the shipped verifier does not belong to it."""

    model_id = "st:other-model@0000"
    dimension = 3

    def embed(self, texts: Any) -> Any:
        import numpy as np

        return np.ones((len(texts), 3), dtype=np.float32) / np.sqrt(3)


def test_another_embedder_runs_threshold_and_guards_and_refuses_a_precision_target() -> None:
    from cachekit.semantic.guards import ContentWordGuard
    from cachekit.semantic.matcher import DEFAULT_THRESHOLD, build_matcher

    matcher = build_matcher(OtherModel())
    assert matcher.verifier is None
    assert matcher.threshold == DEFAULT_THRESHOLD
    assert any(isinstance(g, ContentWordGuard) for g in matcher.guards)
    with pytest.raises(ConfigError, match="calibrated verifier"):
        build_matcher(OtherModel(), target_precision=0.8)


def test_structure_refusals_and_a_precision_target_on_a_redis8_index(
    harness: Harness, request: pytest.FixtureRequest
) -> None:
    from cachekit.semantic.index_redis import RedisVectorIndex

    server = request.getfixturevalue("redis8_server")
    index = RedisVectorIndex(server.url, prefix=f"prec-{uuid.uuid4().hex[:8]}:")
    try:
        sdk = openai_sdk(harness, SemanticConfig(index=index, target_precision=0.8))
        ask(sdk, "What is 10 minus 3?")
        swapped = ask(sdk, "What is 3 minus 10?")
        assert swapped.headers["x-cachekit-cache"] == "miss"
        assert "order" in swapped.headers["x-cachekit-semantic-refused"]
        ask(sdk, "How do I reset my account password?")
        assert (
            ask(sdk, "How can I reset the password of my account?").headers["x-cachekit-cache"] == "semantic"
        )
    finally:
        index.close()

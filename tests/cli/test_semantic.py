"""``cachekit semantic-eval``: the exact JSON shape, the counts of a hand-made file, and the same verdicts
from the memory index and a real Redis 8 index."""

from __future__ import annotations

import contextlib
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from cachekit import cli
from tests.redis_servers import RedisServer, redis8_server  # noqa: F401
from tests.semantic.test_eval import KEYS as COUNT_KEYS

pytestmark = pytest.mark.slow

#: A report's fields, then its counts per kind (the fields of one count: tests/semantic/test_eval.py).
KEYS = [*COUNT_KEYS, "by_kind"]

# Written for this test (not taken from any evaluation file).
PAIRS = [
    {
        "a": "How do I reset my account password?",
        "b": "How can I reset my account password?",
        "same": True,
        "kind": "paraphrase",
    },
    {
        "a": "What time does the museum open on Sundays?",
        "b": "When does the museum open on Sundays?",
        "same": True,
        "kind": "paraphrase",
    },
    {
        "a": "Is the parking garage open at night?",
        "b": "Is the parking garage not open at night?",
        "same": False,
        "kind": "negation",
    },
    {
        "a": "How much is a ticket for 2 adults?",
        "b": "How much is a ticket for 3 adults?",
        "same": False,
        "kind": "number",
    },
    {
        "a": "Does the hotel in Lisbon have a pool?",
        "b": "Does the hotel in Madrid have a pool?",
        "same": False,
        "kind": "entity",
    },
]


def run(*argv: str) -> tuple[int, str]:
    """``cachekit ARGV``: the status, and stdout (or stderr, where an error goes, when it failed)."""
    out, err = StringIO(), StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(list(argv), out=out)
    return code, out.getvalue() if code == 0 else err.getvalue()


@pytest.fixture
def pairs_file(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    return path


def test_json_has_exactly_the_documented_fields(pairs_file: Path) -> None:
    code, text = run("semantic-eval", str(pairs_file), "--json")
    assert code == 0
    report: dict[str, Any] = json.loads(text)
    assert list(report) == [*KEYS, "verifier", "operating_point", "adversarial_pairs"]
    # No verifier without a precision target; 3 of the 5 pairs are near-misses made to fool a cache.
    assert (report["verifier"], report["operating_point"], report["adversarial_pairs"]) == (False, None, 3)
    assert (report["pairs"], report["same"], report["different"]) == (5, 2, 3)
    assert report["true_hits"] + report["false_hits"] <= 5
    assert set(report["by_kind"]) == {"paraphrase", "negation", "number", "entity"}
    for counts in report["by_kind"].values():
        assert list(counts) == [k for k in KEYS if k != "by_kind"]
    # The guards catch all three near misses; the paraphrases are served.
    assert report["false_hits"] == 0
    assert report["true_hits"] == 2
    assert report["recall"] == 1.0


def test_without_guards_the_threshold_alone_lets_near_misses_through(pairs_file: Path) -> None:
    code, text = run("semantic-eval", str(pairs_file), "--json", "--no-guards", "--threshold", "0.8")
    assert code == 0
    report = json.loads(text)
    assert report["false_hits"] >= 2  # negation and number pairs score above 0.8 with MiniLM
    assert report["precision"] < 1.0


def test_the_redis_index_gives_the_same_verdicts(pairs_file: Path, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis8_server")
    code, memory = run("semantic-eval", str(pairs_file), "--json")
    assert code == 0
    code, redis = run(
        "semantic-eval", str(pairs_file), "--json", "--index", "redis", "--redis-url", server.url
    )
    assert code == 0
    assert json.loads(redis) == json.loads(memory)


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    code, text = run("semantic-eval", str(missing))
    assert code == 2
    assert "nope.jsonl" in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "x"}\n')
    code, text = run("semantic-eval", str(bad))
    assert code == 2
    code, text = run("semantic-eval", str(missing), "--index", "redis")
    assert code == 2
    assert "--redis-url" in text

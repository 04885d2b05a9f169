"""What ``cachekit semantic-eval`` prints: ``null`` in JSON where a figure is undefined (never a
made-up 1.0), never Python's ``None``, whether the verifier ran, when the sample is an adversarial
one, and no data set the user does not have.

Runs the real bundled all-MiniLM-L6-v2 on hand-written pairs and on the repository's CANNOT sample.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from cachekit import cli

pytestmark = pytest.mark.slow  # the embedding model loads once for the module

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PARAPHRASES = [
    {"a": "How do I reset my account password?", "b": "How can I reset my account password?", "same": True},
    {
        "a": "When does the museum open on Sundays?",
        "b": "What time does the museum open on Sundays?",
        "same": True,
    },
    {
        "a": "Is the cafe open on holidays?",
        "b": "Is the cafe not open on holidays?",
        "same": False,
        "kind": "negation",
    },
]
#: Pairs that need different answers only: nothing is labelled same (recall has no denominator) and,
#: with the guards on, nothing is served (precision has none either).
DIFFERENT = [
    {"a": "How tall is the lighthouse?", "b": "What is a good soup recipe?", "same": False, "kind": "other"},
    {
        "a": "Can I bring 2 guests to the gala?",
        "b": "Can I bring 5 guests to the gala?",
        "same": False,
        "kind": "other",
    },
]


def write(path: Path, pairs: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    return str(path)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(["semantic-eval", *argv], out=out)
    return status, out.getvalue(), err.getvalue()


def test_json_says_null_where_nothing_was_measured(tmp_path: Path) -> None:
    status, out, _ = run(write(tmp_path / "different.jsonl", DIFFERENT), "--json")
    assert status == 0
    document = json.loads(out)
    assert (document["true_hits"], document["false_hits"], document["same"]) == (0, 0, 0)
    assert document["precision"] is None  # nothing served: no precision to speak of, not 1.0
    assert document["recall"] is None  # nothing labelled same
    assert document["false_hit_rate"] == 0.0  # two different pairs, neither served: measured
    assert document["by_kind"]["other"]["precision"] is None
    assert (document["verifier"], document["operating_point"]) == (False, None)


def test_the_table_says_whether_the_verifier_ran_and_never_none(tmp_path: Path) -> None:
    pairs = write(tmp_path / "pairs.jsonl", PARAPHRASES)
    status, out, _ = run(pairs)
    assert status == 0
    assert "verifier: off (it runs with --target-precision or --max-false-hit-rate)" in out
    assert "None" not in out
    assert "adversarial" not in out  # one near-miss in three pairs: an ordinary sample
    status, out, _ = run(pairs, "--no-verifier")
    assert "verifier: off (--no-verifier)" in out
    status, out, _ = run(pairs, "--target-precision", "0.8")
    assert status == 0
    assert "verifier: on, at score " in out
    assert "None" not in out
    assert "calibrated on" not in out  # the calibration's data sets are not the user's


def test_an_unreachable_target_names_only_what_was_asked(tmp_path: Path) -> None:
    status, out, err = run(write(tmp_path / "pairs.jsonl", PARAPHRASES), "--target-precision", "0.999")
    assert status == 2
    assert out == ""
    assert "target_precision=0.999" in err
    assert "best calibrated precision is" in err
    for word in ("None", "max_false_hit_rate", "Quora", "CANNOT", "held-out"):
        assert word not in err


def test_an_adversarial_sample_is_named_as_one(tmp_path: Path) -> None:
    lines = (FIXTURES / "pairs-sample.jsonl").read_text().splitlines()[:40]
    sample = tmp_path / "sample.jsonl"
    sample.write_text("\n".join(lines) + "\n")
    kinds = [json.loads(line)["kind"] for line in lines]
    near_misses = sum(kind in ("negation", "antonym") for kind in kinds)
    assert near_misses * 2 >= len(lines)
    status, out, _ = run(str(sample))
    assert status == 0
    (line,) = [line for line in out.splitlines() if line.startswith("adversarial sample: ")]
    assert line.startswith(f"adversarial sample: {near_misses} of {len(lines)} pairs are near-misses")
    assert "stress test" in line
    status, out, _ = run(str(sample), "--json")
    assert json.loads(out)["adversarial_pairs"] == near_misses

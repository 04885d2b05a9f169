"""Calibration that says what it knows (issue 30 item 3) and the verifier's data terms (item 4).

A precision target picks the lowest verifier score whose precision, measured on pairs never used to
fit the verifier, reaches the target at the lower end of its 95 % Wilson interval; the calibration is
the shipped one or one measured on the user's own labelled pairs (``semantic-eval --calibrate``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import cachekit
from cachekit.cli import main
from cachekit.errors import ConfigError
from cachekit.semantic import SemanticConfig, SemanticLayer
from cachekit.semantic.evaluate import Counts
from cachekit.semantic.generated import generate
from cachekit.semantic.verifier import (
    Calibration,
    CalibrationRow,
    load_calibration,
    load_verifier,
    operating_point,
    wilson_interval,
)

WEIGHTS = Path(cachekit.__file__).parent / "semantic" / "verifier-minilm.json"


def test_wilson_interval_matches_the_formula_and_stays_in_range() -> None:
    low, high = wilson_interval(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)  # the textbook values at 95 %
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(20, 20)
    assert 0.83 < low < 0.84  # 20 of 20 is not a promise of 1.0
    assert high == 1.0
    for n in (1, 5, 50):
        for k in range(n + 1):
            low, high = wilson_interval(k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0


def row(threshold: float, right: int, wrong: int, negation: tuple[int, int] = (0, 100)) -> CalibrationRow:
    return CalibrationRow(threshold, right, wrong, 200, 300, {"negation": negation})


def table(*rows: CalibrationRow) -> Calibration:
    return Calibration(verifier="sha256:test", calibrated_on="a test table", sources=(), rows=rows)


def test_the_operating_point_needs_the_lower_bound_not_the_point_estimate() -> None:
    calibration = table(
        row(0.5, 90, 10),  # 0.90 measured, but of 100: the lower bound is 0.826
        row(0.6, 19, 1),  # 0.95 of 20: lower bound 0.764
        row(0.7, 460, 20),  # 0.958 of 480: lower bound 0.936
        row(0.8, 300, 3),
    )
    assert calibration.rows[0].precision >= 0.9
    assert operating_point(calibration, target_precision=0.9) == 0.7
    assert operating_point(calibration, target_precision=0.8) == 0.5
    with pytest.raises(ConfigError, match="no calibrated operating point"):
        operating_point(calibration, target_precision=0.99)


def test_a_false_hit_bound_needs_the_upper_end_of_every_kind() -> None:
    calibration = table(row(0.5, 90, 1, (0, 20)), row(0.6, 80, 5, (0, 900)))
    # Overall 1 of 300 different pairs served at 0.5 (upper bound 1.9 %) would do, but 0 of 20
    # negations served is an upper bound of 16 %; 0 of 900 of 0.4 %.
    assert calibration.rows[0].false_hit_high() > 0.05
    assert operating_point(calibration, max_false_hit_rate=0.05) == 0.6


def test_counts_report_the_interval_of_their_precision() -> None:
    counts = Counts()
    for _ in range(8):
        counts.add(True, True)
    counts.add(False, True)
    counts.add(False, True)
    document = counts.to_dict()
    assert (round(document["precision_low"], 3), round(document["precision_high"], 3)) == (0.490, 0.943)


def shipped() -> dict[str, object]:
    document = json.loads(WEIGHTS.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def test_the_shipped_verifier_records_shippable_data_terms_and_how_to_rebuild_it() -> None:
    document = shipped()
    fitted = document["fitted_on"]
    sources = document["calibration"]["sources"]  # type: ignore[index]
    assert isinstance(fitted, list)
    assert fitted
    for source in [*fitted, *sources]:
        assert source["research_only"] is False, source
        assert "research" not in source["terms"].lower(), source
        assert "quora" not in source["description"].lower(), source
        assert source["pairs"] > 0
    assert {s["name"] for s in fitted} <= {"cannot", "fow-cache", "generated"}
    assert "CC BY-SA 4.0" in str(document["licence"])
    assert "scripts/build_semantic_verifier.py" in str(document["rebuild"])
    assert "--research" not in str(document["rebuild"])
    verifier = load_verifier()
    assert verifier.calibration.verifier == verifier.digest()  # the table measured these weights
    assert "never fitted on" in verifier.calibrated_on


def test_the_research_variant_is_never_written_into_the_package() -> None:
    import subprocess
    import sys

    script = Path(cachekit.__file__).parents[1] / "scripts" / "build_semantic_verifier.py"
    result = subprocess.run(
        [sys.executable, str(script), "pairs.jsonl", "--research", "--out", str(WEIGHTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "never goes into the package" in result.stderr


@pytest.mark.slow
def test_semantic_eval_calibrates_on_the_users_pairs_and_the_config_loads_it(tmp_path: Path) -> None:
    pairs = tmp_path / "mine.jsonl"
    rows = generate(seed=3, per_template=2)
    pairs.write_text(
        "".join(json.dumps({"a": p.a, "b": p.b, "same": p.same, "kind": p.kind}) + "\n" for p in rows)
    )
    out = io.StringIO()
    written = tmp_path / "cal.json"
    assert main(["semantic-eval", "--calibrate", str(pairs), "--out", str(written)], out=out) == 0, (
        out.getvalue()
    )
    assert "operating point" in out.getvalue()
    verifier, calibration = load_calibration(written)
    assert verifier == load_verifier()
    assert calibration.rows[0].same + calibration.rows[0].different == len(rows)
    assert "mine.jsonl" in calibration.calibrated_on
    reachable = max(r.precision_interval[0] for r in calibration.rows)
    target = round(reachable - 0.01, 2)
    expected = operating_point(calibration, target_precision=target)
    layer = SemanticLayer(SemanticConfig(target_precision=target, calibration=str(written)))
    try:
        assert layer.matcher.min_score == expected
        assert layer.matcher.calibration == calibration
    finally:
        layer.close()
    with pytest.raises(ConfigError, match="no calibrated operating point"):
        SemanticConfig(target_precision=min(1.0, reachable + 0.02), calibration=str(written))
    # A calibration of other weights than the shipped ones is refused.
    other = json.loads(written.read_text())
    other["verifier"] = "sha256:0000000000000000"
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(ConfigError, match="measured verifier"):
        SemanticConfig(target_precision=0.5, calibration=str(tmp_path / "other.json"))
    with pytest.raises(ConfigError, match="set target_precision"):
        SemanticConfig(calibration=str(written))
    # semantic-eval reads the same calibration, and prints precision with its interval.
    out = io.StringIO()
    code = main(
        ["semantic-eval", str(pairs), "--target-precision", str(target), "--calibration", str(written)],
        out=out,
    )
    assert code == 0, out.getvalue()
    assert "95% interval" in out.getvalue()
    assert "mine.jsonl" in out.getvalue()
    out = io.StringIO()
    assert main(["semantic-eval", str(pairs), "--json"], out=out) == 0
    document = json.loads(out.getvalue())
    assert document["precision_low"] <= document["precision"] <= document["precision_high"]

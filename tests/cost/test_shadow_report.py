"""The shadow section of ``cachekit report`` on a known set of shadow records, against figures worked
out by hand (not by the code under test): counts, precision, recall, the 95 % Wilson interval and the
threshold suggested for a target precision.

Wilson bounds below were computed from the textbook form
``(s + z²/2)/(n + z²) ± z/(n + z²)·sqrt(s·f/n + z²/4)`` with z = 1.96, rounded to 4 places:
3/4 -> [0.3006, 0.9544], 1/1 -> 0.2065, 2/2 -> 0.3424, 2/3 -> 0.2077, 4/5 -> [0.3755, 0.9638],
4/6 -> 0.3000, 0/1 -> [0, 0.7935], 3/5 -> [0.2307, 0.8824], 2/4 -> 0.1500, 4/7 -> 0.2505.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cachekit.cli import main
from cachekit.cost import JSONLSink, SQLiteSink
from cachekit.cost.shadow import ShadowRecord, summarize, threshold_for, wilson

A, B = "a" * 64, "b" * 64


def rec(
    partition: str, similarity: float | None, passed: bool, verdict: bool | None, **kw: object
) -> ShadowRecord:
    """One record at threshold 0.8: served when it passed and its similarity reaches 0.8."""
    return ShadowRecord(
        time=1_700_000_000.0,
        model="gpt-4.1-mini",
        partition=partition,
        threshold=0.8,
        candidate=None if similarity is None else f"c{similarity}",
        similarity=similarity,
        passed=passed,
        would_serve=passed and similarity is not None and similarity >= 0.8,
        verdict=verdict,
        **kw,  # type: ignore[arg-type]
    )


RECORDS = [
    # Partition A: 4 would-be hits (3 right), one right answer under the threshold (missed), a
    # candidate the negation guard rightly refused, a wrong one under the threshold, no candidate.
    rec(A, 0.95, True, True),
    rec(A, 0.90, True, True),
    rec(A, 0.85, True, False),
    rec(A, 0.82, True, True),
    rec(A, 0.75, True, True),
    rec(A, 0.88, False, False, refused=("negation",)),
    rec(A, 0.70, True, False),
    rec(A, None, False, None),
    # Partition B: a wrong would-be hit, and a right answer the numbers guard refused (missed).
    rec(B, 0.90, True, False),
    rec(B, 0.60, False, True, refused=("numbers",)),
]


def test_the_figures_per_partition_and_in_total() -> None:
    parts, total = summarize(RECORDS, target=0.35)
    a, b = parts
    assert (a.partition, a.requests, a.judged, a.served, a.right, a.missed) == (A, 8, 7, 4, 3, 1)
    assert a.precision == 0.75
    assert a.recall == 0.75
    assert a.interval == pytest.approx((0.3006, 0.9544), abs=1e-4)
    # Lowering the threshold in A: 0.95 -> 1/1 (0.2065), 0.90 -> 2/2 (0.3424), 0.85 -> 2/3 (0.2077),
    # 0.82 -> 3/4 (0.3006), 0.75 -> 4/5 (0.3755), 0.70 -> 4/6 (0.3000): 0.75 is the lowest >= 0.35.
    assert a.suggested is not None
    assert (a.suggested.threshold, a.suggested.served, a.suggested.right) == (0.75, 5, 4)
    assert a.suggested.interval == pytest.approx((0.3755, 0.9638), abs=1e-4)
    assert a.suggested.recall == 1.0  # all 4 right answers in A are served at 0.75
    assert (b.requests, b.judged, b.served, b.right, b.missed) == (2, 2, 1, 0, 1)
    assert b.precision == 0.0
    assert b.recall == 0.0
    assert b.interval == pytest.approx((0.0, 0.7935), abs=1e-4)
    assert b.suggested is None  # 0/1 never reaches 0.35
    assert (total.requests, total.judged, total.served, total.right, total.missed) == (10, 9, 5, 3, 2)
    assert total.precision == 0.6
    assert total.recall == 0.6
    assert total.interval == pytest.approx((0.2307, 0.8824), abs=1e-4)
    # Over both: 0.95 -> 1/1, 0.90 (a tie: both or neither) -> 2/3, 0.85 -> 2/4 (0.1500),
    # 0.82 -> 3/5, 0.75 -> 4/6, 0.70 -> 4/7 (0.2505): none reaches 0.35 ...
    assert total.suggested is None
    # ... and 0.70 is the lowest that reaches 0.2, where 4 of the 5 right answers are served.
    choice = threshold_for(RECORDS, 0.2)
    assert choice is not None
    assert (choice.threshold, choice.served, choice.right, choice.recall) == (0.70, 7, 4, 0.8)


def test_wilson_matches_the_textbook_form() -> None:
    assert wilson(3, 4) == pytest.approx((0.3006, 0.9544), abs=1e-4)
    assert wilson(4, 7)[0] == pytest.approx(0.2505, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("suffix", [".jsonl", ".sqlite3"])
def test_cachekit_report_shows_the_hand_worked_figures(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"ledger{suffix}"
    sink = JSONLSink(path) if suffix == ".jsonl" else SQLiteSink(path)
    sink.write_shadow(RECORDS)
    sink.close()
    out = _Out()
    assert main(["report", "--ledger", str(path), "--json", "--target-precision", "0.35"], out=out) == 0
    shadow = json.loads(out.text)["shadow"]
    assert shadow["target_precision"] == 0.35
    a, b = shadow["partitions"]
    assert (a["partition"], a["served"], a["right"], a["precision"], a["recall"]) == (A, 4, 3, 0.75, 0.75)
    assert a["interval"] == pytest.approx([0.3006, 0.9544], abs=1e-4)
    assert a["suggested"]["threshold"] == 0.75
    assert (b["partition"], b["served"], b["right"], b["suggested"]) == (B, 1, 0, None)
    assert (shadow["total"]["served"], shadow["total"]["right"], shadow["total"]["recall"]) == (5, 3, 0.6)
    text = _Out()
    assert main(["report", "--ledger", str(path), "--target-precision", "0.35"], out=text) == 0
    [row_a] = [line for line in text.text.splitlines() if line.startswith(A[:12])]
    assert "3/4" in row_a
    assert "0.750" in row_a
    assert "[0.301, 0.954]" in row_a
    assert "0.7500 (4/5" in row_a
    [row_b] = [line for line in text.text.splitlines() if line.startswith(B[:12])]
    assert "0/1" in row_b
    assert "none reaches it" in row_b


def test_a_bad_target_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ledger.jsonl"
    JSONLSink(path).write_shadow(RECORDS)
    out = _Out()
    with pytest.raises(SystemExit) as stop:  # a usage error, as argparse reports one
        main(["report", "--ledger", str(path), "--target-precision", "1.5"], out=out)
    assert stop.value.code == 2
    assert "--target-precision" in capsys.readouterr().err
    assert out.text == ""


class _Out(io.StringIO):
    """What a command printed on its standard output."""

    @property
    def text(self) -> str:
        return self.getvalue()

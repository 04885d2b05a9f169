"""The property tests' budget (tests/fuzzing.py): new examples on every run, a failure says how to run
it again, and CI draws more of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import fuzzing
from tests.fuzzing import fuzz

ROOT = Path(__file__).resolve().parents[2]


def test_each_run_draws_new_examples() -> None:
    drawn: list[bytes] = []

    @fuzz(10)
    @given(st.binary(min_size=16, max_size=16))
    def record(value: bytes) -> None:
        drawn.append(value)

    record()
    first = set(drawn)
    drawn.clear()
    record()
    assert len(first) >= 10
    assert set(drawn) != first  # a fixed seed (derandomize) would draw the very same ones


def test_a_failure_prints_the_line_that_reproduces_it() -> None:
    @fuzz(50)
    @given(st.integers())
    def small(value: int) -> None:
        assert value < 3

    with pytest.raises(AssertionError) as caught:
        small()
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "small(\n    value=3,\n)" in notes  # the falsifying case, shrunk
    assert re.search(r"@reproduce_failure\('[^']+', b'[^']+'\)", notes)


def test_the_budget_scales_with_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fuzz(30).max_examples == 30 * fuzzing.SCALE
    monkeypatch.setenv("CACHEKIT_FUZZ_SCALE", "4")
    assert fuzzing._scale() == 4
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("CACHEKIT_FUZZ_SCALE", bad)
        with pytest.raises(ValueError, match="CACHEKIT_FUZZ_SCALE must be a whole number"):
            fuzzing._scale()


def test_ci_draws_twice_the_examples() -> None:
    # CI runs .ci/run, which runs the README's test command: that command sets the budget, before pytest.
    assert "exec bash scripts/test" in (ROOT / ".ci" / "run").read_text()
    script = (ROOT / "scripts" / "test").read_text()
    assert "export CACHEKIT_FUZZ_SCALE=${CACHEKIT_FUZZ_SCALE:-2}" in script
    assert script.index("export CACHEKIT_FUZZ_SCALE") < script.index('step "pytest"')

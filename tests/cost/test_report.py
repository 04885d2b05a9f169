"""Reports: the terminal table, JSON, the PNG plot, --since parsing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from cachekit.cost import Ledger, MemorySink, SQLiteSink, UsageRecord, parse_since, plot, render_report
from cachekit.cost.ledger import CallRecord
from cachekit.cost.report import aggregate_totals, render_table
from cachekit.errors import MissingExtraError

DAY = 86_400.0
T0 = 1_780_000_000.0  # 2026-05-28 UTC


def sample_ledger() -> Ledger:
    ledger = Ledger([MemorySink()])
    cached = UsageRecord(1_000, 10_000, 0, 50_000, 500)  # Sonnet 4.5: $0.063, $0.1905 without caching
    plain = UsageRecord(2_000, 0, 0, 0, 100)
    for day in range(3):
        t = T0 + day * DAY
        ledger.record_call("anthropic", "claude-sonnet-4-5", cached, tenant="acme", site="chat", time=t)
        ledger.record_call(
            "anthropic", "claude-sonnet-4-5", cached, outcome="exact_hit", tenant="acme", time=t + 1
        )
        ledger.record_call("openai", "gpt-4o-mini", plain, tenant="globex", site="search", time=t + 2)
    ledger.record_call("openai", "gpt-unknown", plain, tenant="globex", time=T0 + 3)
    return ledger


@pytest.mark.parametrize("by", ["model", "tenant", "site", "day"])
def test_table_renders(by: str) -> None:
    with sample_ledger() as ledger:
        text = render_report(ledger, by=by)
    assert by in text
    assert "total" in text
    assert "* 1 call(s) could not be priced" in text
    if by == "model":
        assert "claude-sonnet-4-5" in text
        assert "gpt-unknown" in text
        # Sonnet: 3 misses at $0.063 + 3 hits at $0 = $0.189; without caching 6 x $0.1905 = $1.143.
        assert "$0.1890" in text
        assert "$1.1430" in text
        assert "n/a*" in text  # gpt-unknown: no figure, not $0
        assert "150,000" in text  # cache reads of the 3 upstream calls only; hits bill no tokens
    if by == "day":
        assert "2026-05-28" in text
        assert "2026-05-30" in text


def test_plain_table_columns_line_up() -> None:
    with sample_ledger() as ledger:
        text = render_report(ledger, by="tenant")
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["tenant", "calls"]
    assert len({len(line) for line in lines[:2]}) == 1  # header and rule have the same width


def test_json_report() -> None:
    with sample_ledger() as ledger:
        doc = orjson.loads(render_report(ledger, by="tenant,model", as_json=True))
    assert doc["by"] == ["tenant", "model"]
    groups = {(g["group"]["tenant"], g["group"]["model"]): g for g in doc["groups"]}
    acme = groups[("acme", "claude-sonnet-4-5")]
    assert acme["calls"] == 6
    assert acme["outcomes"] == {"exact_hit": 3, "prompt_cache": 3}
    assert acme["cost_usd"] == pytest.approx(0.189)
    assert acme["saving_usd"] == pytest.approx(1.143 - 0.189)
    assert doc["total"]["calls"] == 10
    assert doc["total"]["unpriced_calls"] == 1


def test_report_from_a_sqlite_file_with_since(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with sample_ledger() as source, Ledger([SQLiteSink(path)]) as ledger:
        for record in source.records():
            ledger.record(record)
    doc = orjson.loads(render_report(path, by="day", as_json=True, since=T0 + DAY))
    assert [g["group"]["day"] for g in doc["groups"]] == ["2026-05-29", "2026-05-30"]
    assert render_report(tmp_path / "missing.sqlite3").startswith("model")


def test_parse_since() -> None:
    assert parse_since("7d", now=1_000_000.0) == 1_000_000.0 - 7 * DAY
    assert parse_since("90m", now=10_000.0) == 10_000.0 - 5_400
    assert parse_since("2026-05-29") == T0 + DAY - (T0 % DAY)
    assert parse_since("1970-01-01T01:00:00+01:00") == 0.0
    with pytest.raises(ValueError, match="--since"):
        parse_since("last tuesday")


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots" / "cost.png"
    with sample_ledger() as ledger:
        render_report(ledger, plot_path=out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    assert (width, height) == (900, 450)
    assert len(data) > 10_000


def test_plot_with_no_priced_calls(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert plot([], tmp_path / "empty.png").stat().st_size > 1_000


def test_plot_without_matplotlib_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from cachekit.cost import plot\n"
        "from cachekit.errors import MissingExtraError\n"
        "try:\n"
        f"    plot([], {str(tmp_path / 'x.png')!r})\n"
        "except MissingExtraError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'cachekit-llm[report]'" in out
    assert issubclass(MissingExtraError, ImportError)


def test_grand_total_of_nothing() -> None:
    total = aggregate_totals([])
    assert total.calls == 0
    assert total.cost_usd == 0.0
    assert "total" in render_table([], "model")


def test_records_with_unknown_usage_are_counted_separately() -> None:
    unknown = CallRecord(
        T0, "openai", "gpt-4o", None, None, "miss", UsageRecord.unknown("no usage"), None, None, None
    )
    text = render_report([unknown], by="model")
    assert "1 call(s) had no usable usage object" in text


# -- why did it miss: each record's prefix_change, counted ----------------------------------------

#: The calls table as cachekit wrote it before ``prefix_change`` existed.
_OLD_CALLS = """CREATE TABLE calls (
    id INTEGER PRIMARY KEY, time REAL NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
    tenant TEXT, site TEXT, outcome TEXT NOT NULL, uncached_input INTEGER, cache_write_5m INTEGER,
    cache_write_1h INTEGER, cache_read INTEGER, output INTEGER, reasoning INTEGER,
    usage_known INTEGER NOT NULL, problems TEXT, cost REAL, cost_without_caching REAL, saving REAL
)"""


def _old_ledger(path: Path) -> None:
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute(_OLD_CALLS)
        conn.execute(
            "INSERT INTO calls (time, provider, model, outcome, uncached_input, output, usage_known) "
            "VALUES (?, 'anthropic', 'claude-sonnet-4-5', 'miss', 100, 10, 1)",
            (T0,),
        )
    conn.close()


def test_the_report_counts_why_prefixes_changed_in_the_table_and_json() -> None:
    usage = UsageRecord(1_000, 0, 0, 0, 10)
    ledger = Ledger([MemorySink()])
    for change in (
        "system_changed; at=system",
        "system_changed; at=system",
        "tools_reordered; at=tools.0",
        None,
    ):
        ledger.record_call("anthropic", "claude-sonnet-4-5", usage, time=T0, prefix_change=change)
    with ledger:
        text = render_report(ledger)
        doc = orjson.loads(render_report(ledger, as_json=True))
    section = text[text.index("Why conversations' cached prefixes stopped matching") :].splitlines()
    assert section[1:] == ["  system_changed; at=system    2 calls", "  tools_reordered; at=tools.0  1 call"]
    assert doc["prefix_changes"] == [
        {"change": "system_changed; at=system", "calls": 2},
        {"change": "tools_reordered; at=tools.0", "calls": 1},
    ]


def test_a_ledger_written_before_prefix_change_reads_and_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    _old_ledger(path)
    before = path.read_bytes()
    text = render_report(path)  # read-only: the old file is read as it is, nothing added
    assert "claude-sonnet-4-5" in text
    assert "Why conversations" not in text
    assert path.read_bytes() == before
    # A writer brings it up to date: the column is added, old rows read as without a change.
    with Ledger([SQLiteSink(path)]) as ledger:
        ledger.record_call(
            "anthropic", "claude-sonnet-4-5", UsageRecord(1, 0, 0, 0, 1), time=T0 + 1, prefix_change="x; at=y"
        )
    with Ledger([SQLiteSink(path)]) as reread:
        assert [r.prefix_change for r in reread.records()] == [None, "x; at=y"]

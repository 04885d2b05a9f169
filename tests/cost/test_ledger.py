"""The ledger: records, hits, totals, sinks (memory, SQLite, JSONL), batching, budgets, hot-path cost."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from cachekit.cost import (
    Budget,
    BudgetAlert,
    CallRecord,
    JSONLSink,
    Ledger,
    MemorySink,
    SQLiteSink,
    UsageRecord,
    aggregate,
    default_prices,
    make_record,
    normalize,
)
from cachekit.cost.report import load_records
from cachekit.errors import ConfigError

SONNET_USAGE = UsageRecord(1_000, 10_000, 0, 50_000, 500)  # $0.063 with caching, $0.1905 without


def memory_ledger(**kwargs: Any) -> Ledger:
    return Ledger([MemorySink()], **kwargs)


# -- records -------------------------------------------------------------------------------------------


def test_upstream_call_record() -> None:
    record = make_record(
        default_prices(), "anthropic", "claude-sonnet-4-5", SONNET_USAGE, tenant="t1", site="chat"
    )
    assert record.outcome == "prompt_cache"  # it read the prompt cache
    assert record.cost == pytest.approx(0.063)
    assert record.cost_without_caching == pytest.approx(0.1905)
    assert record.saving == pytest.approx(0.1275)


@pytest.mark.parametrize("outcome", ["exact_hit", "semantic_hit"])
def test_response_cache_hit_records_the_avoided_cost(outcome: Any) -> None:
    # The stored response's usage, priced as a full-price call (no prompt caching), is what the hit saved.
    record = make_record(default_prices(), "anthropic", "claude-sonnet-4-5", SONNET_USAGE, outcome=outcome)
    assert record.cost == 0.0
    assert record.cost_without_caching == pytest.approx(0.1905)
    assert record.saving == pytest.approx(0.1905)


def test_miss_without_cache_reads() -> None:
    usage = UsageRecord(2_000, 0, 0, 0, 100)
    record = make_record(default_prices(), "openai", "gpt-4o", usage)
    assert record.outcome == "miss"
    assert record.saving == pytest.approx(0.0)


def test_unknown_model_is_unpriced_not_zero() -> None:
    record = make_record(default_prices(), "openai", "gpt-nonexistent", SONNET_USAGE)
    assert record.cost is None
    assert record.cost_without_caching is None
    assert record.saving is None
    hit = make_record(default_prices(), "openai", "gpt-nonexistent", SONNET_USAGE, outcome="exact_hit")
    assert hit.cost == 0.0
    assert hit.saving is None


def test_record_round_trips_through_a_dict() -> None:
    record = make_record(
        default_prices(), "anthropic", "claude-sonnet-4-5", SONNET_USAGE, tenant="t", time=12.5
    )
    assert CallRecord.from_dict(record.to_dict()) == record


# -- totals over a replayed trace ---------------------------------------------------------------------


def trace(n: int = 400, seed: int = 7) -> list[tuple[str, str, str, dict[str, Any], str, str, str]]:
    """A deterministic mix of providers, models, outcomes, tenants and sites, with some unknown models."""
    rng = random.Random(seed)
    calls = []
    for i in range(n):
        kind = rng.choice(["anthropic", "openai", "responses", "unknown", "bad"])
        read = rng.choice([0, 0, 1024, 4096])
        body: dict[str, Any]
        if kind == "anthropic":
            body = {
                "usage": {
                    "input_tokens": rng.randint(1, 3000),
                    "cache_creation_input_tokens": rng.choice([0, 2048]),
                    "cache_read_input_tokens": read,
                    "output_tokens": rng.randint(1, 800),
                }
            }
            call = ("anthropic", "anthropic_messages", "claude-sonnet-4-5-20250929", body)
        elif kind in ("openai", "unknown", "bad"):
            prompt = read + rng.randint(1, 3000)
            usage: dict[str, Any] = {
                "prompt_tokens": prompt,
                "completion_tokens": rng.randint(1, 800),
                "prompt_tokens_details": {"cached_tokens": read},
            }
            if kind == "bad":
                usage["completion_tokens"] = -1
            body = {"usage": usage}
            model = "gpt-4o-mini" if kind != "unknown" else "gpt-mystery"
            call = ("openai", "openai_chat", model, body)
        else:
            body = {
                "usage": {
                    "input_tokens": read + rng.randint(1, 3000),
                    "input_tokens_details": {"cached_tokens": read},
                    "output_tokens": rng.randint(1, 800),
                }
            }
            call = ("openai", "openai_responses", "gpt-4.1", body)
        outcome = rng.choice(["miss", "miss", "exact_hit", "semantic_hit", "bypass", "auto"])
        calls.append((*call, outcome, rng.choice(["acme", "globex", "initech"]), f"site-{i % 3}"))
    return calls


def replay(
    ledger: Ledger, calls: list[tuple[str, str, str, dict[str, Any], str, str, str]]
) -> list[CallRecord]:
    out = []
    for i, (provider, dialect, model, body, outcome, tenant, site) in enumerate(calls):
        out.append(
            ledger.record_body(
                provider,
                dialect,
                model,
                body,
                outcome=None if outcome == "auto" else outcome,  # type: ignore[arg-type]
                tenant=tenant,
                site=site,
                time=1_780_000_000 + i * 900.0,  # 15 minutes apart, several days
            )
        )
    return out


def test_totals_equal_the_sum_of_the_records() -> None:
    with memory_ledger() as ledger:
        records = replay(ledger, trace())
        for group_by in [(), ("model",), ("tenant",), ("site",), ("day",), ("tenant", "model"), ("outcome",)]:
            rows = ledger.totals(group_by=group_by)
            assert sum(r.calls for r in rows) == len(records)
            priced = [r for r in records if r.cost is not None]
            assert sum(r.cost_usd for r in rows) == pytest.approx(sum(r.cost for r in priced if r.cost))
            both = [r for r in records if r.cost_without_caching is not None and r.saving is not None]
            assert sum(r.cost_without_caching_usd for r in rows) == pytest.approx(
                sum(r.cost_without_caching or 0.0 for r in both)
            )
            assert sum(r.saving_usd for r in rows) == pytest.approx(sum(r.saving or 0.0 for r in both))
            unpriced = [r for r in records if r.cost is None or r.cost_without_caching is None]
            assert sum(r.unpriced_calls for r in rows) == len(unpriced) > 0
            billed = [r for r in records if r.usage.known and r.outcome not in ("exact_hit", "semantic_hit")]
            assert sum(r.tokens["cache_read"] for r in rows) == sum(r.usage.cache_read or 0 for r in billed)
            assert sum(r.unknown_usage_calls for r in rows) == sum(not r.usage.known for r in records) > 0
        # Each group sums its own records.
        for row in ledger.totals(group_by=("tenant", "model")):
            mine = [
                r
                for r in records
                if r.tenant == row.group["tenant"] and r.model == row.group["model"] and r.cost is not None
            ]
            assert row.cost_usd == pytest.approx(sum(r.cost or 0.0 for r in mine))


def test_totals_since_and_bad_group() -> None:
    with memory_ledger() as ledger:
        records = replay(ledger, trace(40))
        cut = records[20].time
        assert sum(r.calls for r in ledger.totals((), since=cut)) == 20
        with pytest.raises(ValueError, match="cannot group by 'colour'"):
            ledger.totals(("colour",))


def test_group_by_day_uses_utc_dates() -> None:
    records = [
        make_record(default_prices(), "openai", "gpt-4o", SONNET_USAGE, time=t)
        for t in (0.0, 86_399.0, 86_400.0)
    ]
    rows = aggregate(records, ("day",))
    assert [(r.group["day"], r.calls) for r in rows] == [("1970-01-01", 2), ("1970-01-02", 1)]


# -- SQLite ----------------------------------------------------------------------------------------------


def test_sqlite_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger([SQLiteSink(path)]) as ledger:
        written = replay(ledger, trace(50))
    with Ledger([SQLiteSink(path)]) as reopened:
        assert reopened.records() == written
        more = reopened.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, time=2_000_000_000.0)
    sink = SQLiteSink(path)
    try:
        assert sink.read() == [*written, more]
    finally:
        sink.close()
    assert sink.read(since=2_000_000_000.0) == [more]  # reading still works after close


def test_batching_thread_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(
        [SQLiteSink(path)], batch_size=37, max_pending=64, flush_interval=0.01, overflow_timeout=30
    )
    usage = UsageRecord(100, 0, 0, 0, 10)

    def worker(n: int) -> None:
        for i in range(125):
            ledger.record_call("openai", "gpt-4o", usage, tenant=f"thread-{n}", site=str(i))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.close()
    assert ledger.stats.dropped == 0
    assert ledger.stats.write_errors == 0
    records = load_records(path)
    assert len(records) == 1000
    assert {(r.tenant, r.site) for r in records} == {
        (f"thread-{n}", str(i)) for n in range(8) for i in range(125)
    }


def test_flush_makes_records_visible_without_closing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger([SQLiteSink(path)], flush_interval=60) as ledger:
        ledger.record_call("openai", "gpt-4o", SONNET_USAGE)
        ledger.flush()
        assert len(load_records(path)) == 1


def test_default_sink_is_sqlite_under_cachekit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEKIT_HOME", str(tmp_path / "home"))
    with Ledger() as ledger:
        ledger.record_call("openai", "gpt-4o", SONNET_USAGE)
    assert len(load_records(tmp_path / "home" / "ledger.sqlite3")) == 1


def test_records_are_flushed_at_interpreter_exit(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    code = (
        "from cachekit.cost import Ledger, SQLiteSink, UsageRecord\n"
        f"ledger = Ledger([SQLiteSink({str(path)!r})], flush_interval=3600)\n"
        "for _ in range(10):\n"
        "    ledger.record_call('openai', 'gpt-4o', UsageRecord(1, 0, 0, 0, 1))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert len(load_records(path)) == 10


# -- JSONL -----------------------------------------------------------------------------------------------


def test_jsonl_sink_round_trip_and_corrupt_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger([JSONLSink(path)]) as ledger:
        written = replay(ledger, trace(20))
    with path.open("ab") as fh:
        fh.write(b"{not json\n")
    with caplog.at_level(logging.WARNING, logger="cachekit.cost"):
        assert JSONLSink(path).read() == written
    assert "corrupt ledger line 21" in caplog.text


def test_several_sinks_get_every_record(tmp_path: Path) -> None:
    memory = MemorySink()
    with Ledger([memory, JSONLSink(tmp_path / "l.jsonl"), SQLiteSink(tmp_path / "l.sqlite3")]) as ledger:
        replay(ledger, trace(30))
    assert memory.read() == JSONLSink(tmp_path / "l.jsonl").read() == load_records(tmp_path / "l.sqlite3")


# -- failures never reach the caller ------------------------------------------------------------------


class BrokenSink:
    synchronous = False

    def write(self, records: Any) -> None:
        raise OSError("disk full")

    def read(self, since: float | None = None) -> list[CallRecord]:
        return []

    def close(self) -> None:
        pass


def test_a_failing_sink_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    memory = MemorySink()
    with caplog.at_level(logging.WARNING, logger="cachekit.cost"), Ledger([memory, BrokenSink()]) as ledger:
        ledger.record_call("openai", "gpt-4o", SONNET_USAGE)
        ledger.flush()
    assert ledger.stats.write_errors == 1
    assert len(memory.read()) == 1
    assert "BrokenSink failed to write" in caplog.text


def test_recording_after_close_is_dropped_not_raised() -> None:
    ledger = memory_ledger()
    ledger.close()
    ledger.record_call("openai", "gpt-4o", SONNET_USAGE)
    assert ledger.stats.dropped == 1


# A hang guard, not a bound: the ledger used to wait a second per record on a full queue (200 s here).
@pytest.mark.timeout(60)
def test_a_full_queue_drops_at_once_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    writing, gate = threading.Event(), threading.Event()

    class StuckSink(BrokenSink):
        def write(self, records: Any) -> None:
            writing.set()
            gate.wait()

    ledger = Ledger([StuckSink()], max_pending=4, batch_size=1, flush_interval=0.01)
    try:
        with caplog.at_level(logging.WARNING, logger="cachekit.cost"):
            ledger.record_call("openai", "gpt-4o", SONNET_USAGE)
            writing.wait()  # the writer holds that record, stuck in the sink: nothing makes room
            for _ in range(4 + 200):
                ledger.record_call("openai", "gpt-4o", SONNET_USAGE)
            assert ledger.stats.dropped == 200
            full = [r for r in caplog.records if "write queue is full" in r.getMessage()]
            assert len(full) == 1  # once, not per record
    finally:
        gate.set()
    with caplog.at_level(logging.WARNING, logger="cachekit.cost"):
        ledger.close()
    assert "writer caught up; 200 records dropped" in caplog.text


def test_a_full_queue_waits_only_as_long_as_allowed() -> None:
    gate = threading.Event()

    class SlowSink(BrokenSink):
        def write(self, records: Any) -> None:
            gate.wait(10)

    ledger = Ledger([SlowSink()], max_pending=2, batch_size=1, flush_interval=0.01, overflow_timeout=0.05)
    try:
        for _ in range(10):
            ledger.record_call("openai", "gpt-4o", SONNET_USAGE)
        assert ledger.stats.dropped > 0
    finally:
        gate.set()
        ledger.close()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_overflow_timeout_must_be_a_finite_wait(bad: float) -> None:
    with pytest.raises(ConfigError, match="overflow_timeout"):
        Ledger([MemorySink()], overflow_timeout=bad)


# -- budgets ---------------------------------------------------------------------------------------------


def test_budget_callback_fires_once_when_passed() -> None:
    alerts: list[BudgetAlert] = []
    budget = Budget(tenant="acme", limit_usd=0.15, callback=alerts.append)
    with memory_ledger(budgets=[budget]) as ledger:
        ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, tenant="acme")  # $0.063
        ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, tenant="globex")  # not acme
        ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, tenant="acme")  # $0.126
        assert alerts == []
        third = ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, tenant="acme")  # $0.189
        ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, tenant="acme")
    assert len(alerts) == 1
    assert alerts[0].budget is budget
    assert alerts[0].spent_usd == pytest.approx(0.189)
    assert alerts[0].record == third


def test_budget_by_site_and_failing_callback(caplog: pytest.LogCaptureFixture) -> None:
    def boom(alert: BudgetAlert) -> None:
        raise RuntimeError("pager down")

    budget = Budget(site="search", limit_usd=0.05, callback=boom)
    with caplog.at_level(logging.WARNING, logger="cachekit.cost"), memory_ledger(budgets=[budget]) as ledger:
        ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, site="search")
    assert "budget callback failed" in caplog.text


def test_hits_do_not_spend_budget() -> None:
    alerts: list[BudgetAlert] = []
    with memory_ledger(budgets=[Budget(limit_usd=0.0, callback=alerts.append)]) as ledger:
        ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE, outcome="exact_hit")
        assert alerts == []
        ledger.record_call("anthropic", "claude-sonnet-4-5", SONNET_USAGE)
    assert len(alerts) == 1


# -- hot path --------------------------------------------------------------------------------------------


def test_recording_does_not_wait_for_the_sink() -> None:
    """The request path only enqueues: calls are recorded while the sink is stuck in a write (what a
    call costs on the request path, median and p99, is printed by benchmarks/ledger.py)."""
    writing, release = threading.Event(), threading.Event()
    released: list[bool] = []
    written: list[CallRecord] = []

    class HeldSink(BrokenSink):
        def write(self, records: Any) -> None:
            writing.set()
            released.append(release.wait(30))  # False if a recording call had to wait for this write
            written.extend(records)

    usage = normalize("anthropic", "anthropic_messages", {"input_tokens": 1000, "output_tokens": 100})
    with Ledger([HeldSink()], batch_size=1) as ledger:
        ledger.record_call("anthropic", "claude-sonnet-4-5-20250929", usage, tenant="t", site="s")
        assert writing.wait(30)
        for _ in range(50):  # all of them while the sink is held
            ledger.record_call("anthropic", "claude-sonnet-4-5-20250929", usage, tenant="t", site="s")
        release.set()
    assert set(released) == {True}
    assert len(written) == 51

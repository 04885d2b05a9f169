"""The cost ledger wired into the request pipeline: every call recorded, streams like documents,
hits as avoided cost, totals equal to the sum of records, and ``cachekit report``."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

import cachekit
from cachekit.cli import main
from cachekit.cost import JSONLSink, Ledger, MemorySink
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client
from tests.requests import CHAT_URL, anthropic_messages, chat_question, openai_chat

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces-sample.jsonl"  # see fixtures/README.md


def _client(kind: str, ledger: Ledger, upstream: FakeUpstream | None = None, **config: Any) -> Any:
    return sdk_client(
        kind,
        transport=upstream or FakeUpstream(),
        api_key="k",
        cache=cachekit.CacheConfig(store=MemoryStore(), ledger=ledger, **config),
    )


def _fields(record: Any) -> tuple[Any, ...]:
    return (record.provider, record.model, record.outcome, record.usage, record.cost, record.saving)


def test_streamed_and_plain_calls_make_the_same_record() -> None:
    sink = MemorySink()
    ledger = Ledger([sink])
    plain, streamed = _client("anthropic", ledger), _client("anthropic", ledger)
    plain.messages.create(**anthropic_messages())
    with streamed.messages.stream(**anthropic_messages()) as s:
        s.get_final_message()
    first, second = sink.read()
    assert first.usage.known
    assert first.cost is not None
    assert first.cost > 0
    assert _fields(first) == _fields(second)

    sink2 = MemorySink()
    ledger2 = Ledger([sink2])
    a, b = _client("openai", ledger2), _client("openai", ledger2)
    a.chat.completions.create(**openai_chat())
    for _ in b.chat.completions.create(**openai_chat(), stream=True, stream_options={"include_usage": True}):
        pass
    r1, r2 = sink2.read()
    assert _fields(r1) == _fields(r2)


def test_a_hit_records_the_cost_it_avoided() -> None:
    sink = MemorySink()
    client = _client("anthropic", Ledger([sink]))
    client.messages.create(**anthropic_messages())
    client.messages.create(**anthropic_messages())
    miss, hit = sink.read()
    assert (miss.outcome, hit.outcome) == ("miss", "exact_hit")
    assert hit.cost == 0.0
    assert hit.saving == pytest.approx(miss.cost_without_caching)
    assert hit.usage == miss.usage


def test_tenant_and_call_site_are_recorded() -> None:
    sink = MemorySink()
    client = _client("openai", Ledger([sink]))

    @cachekit.cached(tenant="acme", site="faq-bot")
    def ask() -> None:
        client.chat.completions.create(**openai_chat())

    ask()
    [record] = sink.read()
    assert (record.tenant, record.site) == ("acme", "faq-bot")


def test_totals_over_a_replayed_trace_equal_the_sum_of_records(tmp_path: Path) -> None:
    sink = MemorySink()
    ledger = Ledger([sink, JSONLSink(tmp_path / "calls.jsonl")])
    client = _client("anthropic", ledger)
    conversations = [orjson.loads(line) for line in TRACES.read_bytes().splitlines()[:3]]
    requests = 0
    for conversation in conversations:
        messages = conversation["messages"]
        for k, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=512,
                system=conversation["system"],
                tools=conversation["tools"],
                messages=messages[:k],
            )
            requests += 1
    ledger.flush()
    records = sink.read()
    assert len(records) == requests > 10
    [total] = ledger.totals(group_by=("model",))
    assert total.calls == requests
    assert total.cost_usd == pytest.approx(sum(r.cost for r in records if r.cost is not None))
    assert total.cost_without_caching_usd == pytest.approx(
        sum(r.cost_without_caching for r in records if r.cost_without_caching is not None)
    )

    out = io.StringIO()
    png = tmp_path / "cost.png"
    status = main(
        ["report", "--ledger", str(tmp_path / "calls.jsonl"), "--json", "--plot", str(png)], out=out
    )
    assert status == 0
    report = json.loads(out.getvalue().split("\nwrote ")[0])
    assert report["groups"][0]["calls"] == report["total"]["calls"] == requests
    assert png.stat().st_size > 5_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_table_renders(tmp_path: Path) -> None:
    sink = JSONLSink(tmp_path / "calls.jsonl")
    ledger = Ledger([sink])
    client = _client("openai", ledger)
    client.chat.completions.create(**openai_chat())
    ledger.close()
    out = io.StringIO()
    assert main(["report", "--ledger", str(tmp_path / "calls.jsonl"), "--by", "model"], out=out) == 0
    assert "gpt-4.1-mini" in out.getvalue()


def test_a_failing_ledger_never_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Ledger):
        def record_body(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("ledger down")

    client = _client("openai", Broken([MemorySink()]))
    assert client.chat.completions.create(**openai_chat()).object == "chat.completion"
    assert any("ledger" in r.getMessage() for r in caplog.records)


class Down(MemoryStore):
    def get(self, key: str) -> bytes | None:
        raise cachekit.StoreUnavailableError("down")

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        raise cachekit.StoreUnavailableError("down")


class NoSecret(MemoryStore):
    @property
    def secret(self) -> bytes:
        raise cachekit.StoreUnavailableError("down")


@pytest.mark.parametrize("store", [Down, NoSecret])
@pytest.mark.parametrize("stream", [False, True])
def test_paid_calls_reach_the_ledger_while_the_store_is_down(store: type[MemoryStore], stream: bool) -> None:
    """Every paid call is recorded while the store is down or has no secret (found in review: it
    failed before its fix)."""
    sink = MemorySink()
    ledger = Ledger([sink])
    config = cachekit.CacheConfig(store=store(), ledger=ledger)
    with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config)) as client:
        for i in range(6):
            response = client.post(CHAT_URL, json=chat_question(f"q{i}", stream))
            assert response.status_code == 200
            response.read()
    ledger.flush()
    records = ledger.records()
    assert len(records) == 6
    assert all(r.usage.known for r in records)
    ledger.close()

"""Prices from genai-prices: today's models of every provider, prices at the call's date and hour, the
options a response reports (service tier, fast mode, US-only inference), the bundled table as the
fallback, usage shapes that split by modality, and ``cachekit prices MODEL``.

Every expected figure is the provider's documented price (the page is quoted above it), multiplied by
hand; none is read back from the code under test.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
from importlib import metadata, util
from typing import Any

import httpx2
import orjson
import pytest

import cachekit
from cachekit.cli import main
from cachekit.cost import Ledger, MemorySink, PriceTable, UsageRecord, default_prices, normalize
from cachekit.cost.ledger import make_record
from cachekit.stores import MemoryStore
from tests.conftest import Harness
from tests.requests import anthropic_messages, openai_chat

GENAI_VERSION = metadata.version("genai-prices") if util.find_spec("genai_prices") else None
pytestmark = pytest.mark.skipif(GENAI_VERSION is None, reason="genai-prices is not installed")

MILLION = 1_000_000
# Below every prompt-length tier (GPT-5.6 Sol bills long context above 272K input tokens).
TENTH = 100_000
UTC = dt.timezone.utc
# A Thursday: DeepSeek's peak hours apply on weekdays only.
THURSDAY = dt.datetime(2026, 12, 3, tzinfo=UTC)


def one_million_each(provider: str, model: str, *, at: dt.datetime = THURSDAY) -> float | None:
    """The price of 1M input plus 1M output tokens (input price + output price per MTok), measured on
    100K of each so that no prompt-length tier applies."""
    usage = UsageRecord(TENTH, 0, 0, 0, TENTH)
    cost = default_prices().price(provider, model, usage, at=at).total_usd
    return None if cost is None else cost * 10


# -- today's models of every provider price to a number ------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "input_usd", "output_usd"),
    [
        # https://platform.claude.com/docs/en/about-claude/pricing (Claude Sonnet 5.5: $2 / $10; Claude
        # Opus 5.5: $4 / $20, also on https://platform.claude.com/docs/zh-CN/models/opus-5-5/overview)
        ("anthropic", "claude-sonnet-5-5", 2.0, 10.0),
        ("anthropic", "claude-opus-5-5-20261015", 4.0, 20.0),
        # https://developers.openai.com/api/docs/changelog: GPT-5.6 Sol at $4 input / $20 output from
        # 2026-08-21 (input down 20% from $5, output down 33% from $30)
        ("openai", "gpt-5.6-sol", 4.0, 20.0),
        # https://ai.google.dev/gemini-api/docs/generate-content/latest-model: "$2 per 1M input tokens,
        # $10 per 1M output tokens until 2026-11-30 (then $4 / $20)"
        ("gemini", "gemini-4-argon", 4.0, 20.0),
        # https://api-docs.deepseek.com/quick_start/pricing: deepseek-v4-pro off-peak $0.66 input (cache
        # miss) / $1.98 output; 12:00 UTC is outside the peak hours 01:00-04:00 and 06:00-10:00 UTC
        ("deepseek", "deepseek-v4-pro", 0.66, 1.98),
        # https://platform.kimi.ai/docs/pricing/chat-k3: kimi-k3 $3 input, $15 output
        ("kimi", "kimi-k3", 3.0, 15.0),
        # https://docs.z.ai/guides/overview/pricing: GLM-5.3 $1.4 input, $4.4 output
        ("glm", "glm-5.3", 1.4, 4.4),
        # https://docs.x.ai/developers/models/grok-4.7: $2 input, $6 output below 200K tokens
        ("xai", "grok-4.7", 2.0, 6.0),
        # https://qwencloud.com/models/qwen4-max (Model Studio, international): $1.50 input, $4.50 output
        ("bailian", "qwen4-max", 1.5, 4.5),
    ],
)
def test_todays_models_price_to_the_documented_number(
    provider: str, model: str, input_usd: float, output_usd: float
) -> None:
    noon = THURSDAY.replace(hour=12)
    assert one_million_each(provider, model, at=noon) == pytest.approx(input_usd + output_usd)


def test_every_current_text_model_of_the_database_prices_to_a_number() -> None:
    # Every model genai-prices lists (and does not mark deprecated) for the providers cachekit routes,
    # under cachekit's provider names, prices a call to a positive number.
    from genai_prices.data import providers

    names = {"anthropic": "anthropic", "openai": "openai", "google": "gemini", "deepseek": "deepseek"}
    names.update({"moonshotai": "kimi", "zai": "glm", "x-ai": "xai"})
    usage = UsageRecord(1_000, 0, 0, 0, 1_000)
    priced = 0
    for provider in providers:
        if provider.id not in names:
            continue
        for model in provider.models:
            prices = model.prices if not isinstance(model.prices, list) else model.prices[-1].prices
            if model.deprecated or (prices.input_mtok is None and prices.output_mtok is None):
                continue  # not sold by the token
            if not model.is_match(model.id):
                continue  # an id that is a name pattern (ft:gpt-4o matches ft:gpt-4o:org:...)
            cost = default_prices().price(names[provider.id], model.id, usage, at=THURSDAY)
            assert cost.total_usd is not None, (provider.id, model.id, cost.problem)
            assert cost.total_usd > 0, (provider.id, model.id)
            priced += 1
    assert priced > 150


def test_a_model_not_sold_by_the_token_has_no_token_price() -> None:
    # tts-1 is priced per character: a token count has no price there, and is never priced as 0.
    cost = default_prices().price("openai", "tts-1", UsageRecord(1_000, 0, 0, 0, 0), at=THURSDAY)
    assert cost.total_usd is None


# -- a call recorded on a given date prices with that date's rates -------------------------------------


def test_a_call_keeps_the_price_of_its_date() -> None:
    # https://developers.openai.com/api/docs/changelog: GPT-5.6 Sol went from $5 / $30 to $4 / $20 on
    # 2026-08-21. A record made on 2026-08-01 keeps the old price, one made on 2026-09-01 the new one.
    usage = UsageRecord(TENTH, 0, 0, 0, TENTH)
    before = make_record(default_prices(), "openai", "gpt-5.6-sol", usage, time=_epoch(2026, 8, 1))
    after = make_record(default_prices(), "openai", "gpt-5.6-sol", usage, time=_epoch(2026, 9, 1))
    assert before.cost == pytest.approx((5.0 + 30.0) / 10)
    assert after.cost == pytest.approx((4.0 + 20.0) / 10)
    # https://ai.google.dev/gemini-api/docs/generate-content/latest-model: Gemini 4 Argon $2 / $10
    # through 2026-11-30, $4 / $20 after.
    assert one_million_each("gemini", "gemini-4-argon", at=dt.datetime(2026, 11, 30, 23, tzinfo=UTC)) == (
        pytest.approx(2.0 + 10.0)
    )
    assert one_million_each("gemini", "gemini-4-argon", at=dt.datetime(2026, 12, 1, 1, tzinfo=UTC)) == (
        pytest.approx(4.0 + 20.0)
    )


def test_deepseek_peak_and_off_peak_hours() -> None:
    # https://api-docs.deepseek.com/quick_start/pricing: deepseek-v4-pro per 1M tokens, cache hit
    # $0.022 off-peak / $0.044 peak, cache miss $0.66 / $1.32, output $1.98 / $3.96; "Peak hours are
    # 01:00 - 04:00 and 06:00 - 10:00 UTC".
    body = {
        "model": "deepseek-v4-pro",
        "usage": {
            "prompt_tokens": 1_500_000,
            "completion_tokens": 1_000_000,
            "prompt_cache_hit_tokens": 1_000_000,
            "prompt_cache_miss_tokens": 500_000,
        },
    }
    ledger = Ledger([MemorySink()])
    peak = ledger.record_body("deepseek", "openai_chat", "deepseek-v4-pro", body, time=_epoch(2026, 12, 3, 2))
    off = ledger.record_body("deepseek", "openai_chat", "deepseek-v4-pro", body, time=_epoch(2026, 12, 3, 12))
    ledger.close()
    # peak: 1.0 x 0.044 + 0.5 x 1.32 + 1.0 x 3.96 = 0.044 + 0.66 + 3.96 = 4.664
    assert peak.cost == pytest.approx(4.664)
    # off-peak: 1.0 x 0.022 + 0.5 x 0.66 + 1.0 x 1.98 = 0.022 + 0.33 + 1.98 = 2.332
    assert off.cost == pytest.approx(2.332)


def test_deepseek_weekends_are_priced_at_the_weekday_peak() -> None:
    # DeepSeek bills weekends off-peak all day (https://api-docs.deepseek.com/zh-cn/quick_start/pricing:
    # peak hours are Monday to Friday); genai-prices has no day-of-week condition, so a Saturday 02:00 UTC
    # call is priced at the peak $1.32 input (an upper bound), as docs/cost.md says.
    saturday = dt.datetime(2026, 12, 5, 2, tzinfo=UTC)
    assert one_million_each("deepseek", "deepseek-v4-pro", at=saturday) == pytest.approx(1.32 + 3.96)


def _epoch(year: int, month: int, day: int, hour: int = 12) -> float:
    return dt.datetime(year, month, day, hour, tzinfo=UTC).timestamp()


# -- options the response reports ----------------------------------------------------------------------


def test_openai_service_tier_reported_by_the_response() -> None:
    # https://openai.com/api-fast-mode/: GPT-5.6 Sol in Fast mode (service_tier "priority" or "fast"):
    # $8.00 input, $0.80 cached input, $40.00 output per 1M tokens (short context).
    body = {"model": "gpt-5.6-sol", "service_tier": "priority", "usage": _openai_usage()}
    ledger = Ledger([MemorySink()])
    record = ledger.record_body("openai", "openai_chat", "gpt-5.6-sol", body, time=THURSDAY.timestamp())
    ledger.close()
    # 50K uncached x $8 + 50K cached x $0.80 + 100K output x $40 = 0.4 + 0.04 + 4
    assert record.cost == pytest.approx(4.44)


def _openai_usage() -> dict[str, Any]:
    return {
        "prompt_tokens": TENTH,
        "completion_tokens": TENTH,
        "prompt_tokens_details": {"cached_tokens": TENTH // 2},
    }


def test_anthropic_fast_mode_and_us_only_inference() -> None:
    # https://platform.claude.com/docs/en/about-claude/pricing#fast-mode-pricing: Claude Opus 5.5 in fast
    # mode (speed "fast") is $8 input / $40 output per MTok.
    fast = {"input_tokens": MILLION, "output_tokens": MILLION, "speed": "fast"}
    ledger = Ledger([MemorySink()])
    when = THURSDAY.timestamp()
    record = ledger.record_body(
        "anthropic", "anthropic_messages", "claude-opus-5-5", {"usage": fast}, time=when
    )
    assert record.cost == pytest.approx(8.0 + 40.0)
    # https://support.claude.com/en/articles/15422948-enable-us-only-inference-for-your-organization:
    # "billed at 1.1x standard API rates for Claude Opus 4.6, Claude Sonnet 4.6, and later models";
    # https://platform.claude.com/docs/en/about-claude/pricing: Opus 4.6 is $5 input / $25 output.
    body = {"model": "claude-opus-4-6", "usage": {**fast, "speed": None, "inference_geo": "us"}}
    record = ledger.record_body("anthropic", "anthropic_messages", "claude-opus-4-6", body, time=when)
    ledger.close()
    assert record.cost == pytest.approx((5.0 + 25.0) * 1.1)


def test_an_anthropic_batch_result_is_priced_at_the_batch_price() -> None:
    # https://platform.claude.com/docs/en/build-with-claude/batch-processing#pricing: "50% of standard
    # API prices"; Claude Opus 5.5 is $4 / $20 (pricing page above), so $2 / $10 in a batch.
    body = {"usage": {"input_tokens": MILLION, "output_tokens": MILLION, "service_tier": "batch"}}
    ledger = Ledger([MemorySink()])
    record = ledger.record_body(
        "anthropic", "anthropic_messages", "claude-opus-5-5", body, time=THURSDAY.timestamp()
    )
    ledger.close()
    assert record.cost == pytest.approx(2.0 + 10.0)
    # The bundled table (without genai-prices) applies its row's batch multiplier, 0.5, the same way.
    table = PriceTable.load(use_genai=False)
    usage = UsageRecord(MILLION, 0, 0, 0, MILLION)
    cost = table.price("anthropic", "claude-opus-5-5", usage, context={"processing": "batch"})
    assert cost.total_usd == pytest.approx(2.0 + 10.0)
    assert cost.unpriced == ()


def test_an_option_no_price_data_covers_is_listed() -> None:
    # Anthropic's priority tier has no price in genai-prices: priced as standard, and said so.
    usage = UsageRecord(MILLION, 0, 0, 0, 0)
    cost = default_prices().price(
        "anthropic", "claude-opus-5-5", usage, at=THURSDAY, context={"service_tier": "priority"}
    )
    assert cost.total_usd == pytest.approx(4.0)  # the standard $4 input price (pricing page above)
    assert cost.unpriced == ("service_tier=priority",)


def test_the_sdks_record_what_the_response_reports(harness: Harness) -> None:
    # Through the real OpenAI SDK (sync and async): the service tier in the answer prices the call.
    sink = MemorySink()
    ledger = Ledger([sink])
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-5.6-sol",
        "service_tier": "priority",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
        "usage": {**_openai_usage(), "total_tokens": 2 * TENTH},
    }
    harness.upstream.respond_next(200, orjson.dumps(body))
    sdk = harness.sdk("openai", cache=cachekit.CacheConfig(store=MemoryStore(), ledger=ledger))
    answer = sdk.call("chat.completions.create", **{**openai_chat(), "model": "gpt-5.6-sol"})
    assert answer.service_tier == "priority"
    ledger.flush()
    (record,) = sink.read()
    ledger.close()
    # Fast mode page quoted above: 50K x $8 + 50K x $0.80 + 100K x $40
    assert record.cost == pytest.approx(4.44)


def test_a_streamed_answer_is_priced_with_its_service_tier(harness: Harness) -> None:
    # The same answer streamed (its chunks carry service_tier, the last one the usage): same price.
    sink = MemorySink()
    ledger = Ledger([sink])
    head = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.6-sol"}
    head["service_tier"] = "priority"
    delta = {"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}
    stop = {"index": 0, "delta": {}, "finish_reason": "stop"}
    chunks = [
        {**head, "choices": [delta]},
        {**head, "choices": [stop]},
        {**head, "choices": [], "usage": {**_openai_usage(), "total_tokens": 2 * TENTH}},
    ]
    sse = b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"
    harness.upstream.respond_next(200, sse, "text/event-stream")
    sdk = harness.sdk("openai", cache=cachekit.CacheConfig(store=MemoryStore(), ledger=ledger))
    request = {**openai_chat(), "model": "gpt-5.6-sol", "stream": True}
    stream = sdk.call("chat.completions.create", **request, stream_options={"include_usage": True})
    if harness.mode == "async":

        async def drain() -> None:
            async for _ in stream:
                pass

        sdk.run(drain())
    else:
        for _ in stream:
            pass
    ledger.flush()
    (record,) = sink.read()
    ledger.close()
    # Fast mode page quoted above: 50K x $8 + 50K x $0.80 + 100K x $40
    assert record.cost == pytest.approx(4.44)


# -- the bundled table is the fallback ----------------------------------------------------------------


def test_without_genai_prices_the_bundled_table_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cachekit.cost.genai._module", lambda: None)
    cost = PriceTable.load().price("anthropic", "claude-opus-5-5", UsageRecord(MILLION, 0, 0, 0, MILLION))
    # https://platform.claude.com/docs/zh-CN/models/opus-5-5/overview: $4 / $20 (the bundled row)
    assert cost.total_usd == pytest.approx(24.0)
    assert cost.source is not None
    assert "cachekit/cost/prices.json" in cost.source
    assert "cachekit-llm[prices]" in cost.source


def test_your_rows_win_over_genai_prices() -> None:
    table = PriceTable.load(
        overrides=[{"provider": "openai", "model": "gpt-5.6-sol", "input": 1, "output": 2}]
    )
    cost = table.price("openai", "gpt-5.6-sol", UsageRecord(MILLION, 0, 0, 0, MILLION), at=THURSDAY)
    assert cost.total_usd == pytest.approx(3.0)
    assert cost.source == "your price rows"


def test_genai_prices_is_the_source_where_it_has_the_model() -> None:
    cost = default_prices().price("anthropic", "claude-opus-5-5", UsageRecord(1, 0, 0, 0, 1), at=THURSDAY)
    assert cost.source == f"genai-prices {GENAI_VERSION}"


# -- usage shapes -------------------------------------------------------------------------------------


def test_cache_write_details_split_by_modality_keep_the_record_known() -> None:
    # Responses API: input_tokens_details.cache_write_tokens, with cache_write_tokens_details split by
    # modality (text_tokens / image_tokens), as cached_tokens_details is.
    usage = normalize(
        "openai",
        "openai_responses",
        {
            "input_tokens": TENTH,
            "output_tokens": 0,
            "input_tokens_details": {
                "cached_tokens": 0,
                "cache_write_tokens": 40_000,
                "cache_write_tokens_details": {"text_tokens": 30_000, "image_tokens": 10_000},
            },
        },
    )
    assert usage.known, usage.problems
    assert (usage.uncached_input, usage.cache_write_5m, usage.cache_write_1h) == (60_000, 40_000, 0)
    # https://developers.openai.com/api/docs/guides/prompt-caching: "For GPT-5.6 models and later model
    # families, cache writes cost 1.25x the uncached input token rate"; Sol input is $4 (changelog):
    # 60K x $4 + 40K x $5 = 0.24 + 0.2
    cost = default_prices().price("openai", "gpt-5.6-sol", usage, at=THURSDAY)
    assert cost.total_usd == pytest.approx(0.44)


def test_chat_cache_write_details_split_by_retention() -> None:
    usage = normalize(
        "openai",
        "openai_chat",
        {
            "prompt_tokens": 1_000,
            "completion_tokens": 1,
            "prompt_tokens_details": {
                "cache_write_tokens": 700,
                "cache_write_tokens_details": {"ttl_30m_tokens": 300, "ttl_12h_tokens": 400},
            },
        },
    )
    assert (usage.known, usage.uncached_input, usage.cache_write_5m, usage.cache_write_1h) == (
        True,
        300,
        300,
        400,
    )


def test_kimi_cache_writes_are_read_and_priced() -> None:
    # https://forum.moonshot.ai/t/context-caching-upgrade-5-min-1-hour-ttl-options/613: "Cache Write is
    # now billed as a separate item"; https://platform.kimi.ai/docs/pricing/chat-k3: kimi-k3 $3 input,
    # $0.30 cache hit, $3 cache write (5m), $15 output per 1M tokens.
    usage = normalize(
        "kimi",
        "openai_chat",
        {
            "prompt_tokens": 3 * MILLION,
            "completion_tokens": MILLION,
            "prompt_tokens_details": {"cached_tokens": MILLION, "cache_write_tokens": MILLION},
        },
    )
    assert (usage.uncached_input, usage.cache_write_5m, usage.cache_read) == (MILLION, MILLION, MILLION)
    # 1M x $3 + 1M x $3 + 1M x $0.30 + 1M x $15
    assert default_prices().price("kimi", "kimi-k3", usage, at=THURSDAY).total_usd == pytest.approx(21.3)


def test_xai_reasoning_left_out_of_completion_tokens_bills_as_output() -> None:
    # xAI's completion_tokens leave reasoning out (genai-prices' xAI extractor adds
    # completion_tokens_details.reasoning_tokens to the output; the response's own total_tokens
    # counts them). https://docs.x.ai/developers/models/grok-4.7: $2 input, $6 output per MTok.
    body = {
        "prompt_tokens": TENTH,
        "completion_tokens": 10_000,
        "total_tokens": TENTH + 10_000 + 40_000,
        "completion_tokens_details": {"reasoning_tokens": 40_000},
    }
    usage = normalize("xai", "openai_chat", body)
    assert (usage.output, usage.reasoning) == (50_000, 40_000)
    # 100K x $2 + 50K x $6 = 0.2 + 0.3
    assert default_prices().price("xai", "grok-4.7", usage, at=THURSDAY).total_usd == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("provider", "genai_id", "flavor", "dialect", "usage"),
    [
        (
            "anthropic",
            "anthropic",
            "default",
            "anthropic_messages",
            {
                "input_tokens": 100,
                "cache_creation_input_tokens": 300,
                "cache_read_input_tokens": 400,
                "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
                "output_tokens": 50,
            },
        ),
        (
            "openai",
            "openai",
            "responses",
            "openai_responses",
            {
                "input_tokens": 1_000,
                "output_tokens": 50,
                "input_tokens_details": {
                    "cached_tokens": 400,
                    "cache_write_tokens": 300,
                    "cache_write_tokens_details": {"text_tokens": 200, "image_tokens": 100},
                },
            },
        ),
        (
            "kimi",
            "moonshotai",
            "chat",
            "openai_chat",
            {
                "prompt_tokens": 1_000,
                "completion_tokens": 50,
                "prompt_tokens_details": {
                    "cached_tokens": 400,
                    "cache_write_tokens": 300,
                    "cache_write_tokens_details": {"text_tokens": 300},
                },
            },
        ),
        (
            "xai",
            "x-ai",
            "chat",
            "openai_chat",
            {
                "prompt_tokens": 1_000,
                "completion_tokens": 50,
                "total_tokens": 1_080,
                "prompt_tokens_details": {"cached_tokens": 400},
                "completion_tokens_details": {"reasoning_tokens": 30},
            },
        ),
    ],
)
def test_usage_agrees_with_genai_prices_extractors(
    provider: str, genai_id: str, flavor: str, dialect: str, usage: dict[str, Any]
) -> None:
    # genai-prices' own usage extraction for the providers it covers reads the same token counts as
    # cachekit's normalizer (which also splits writes by TTL and flags inconsistent counts).
    from genai_prices import extract_usage

    theirs = extract_usage({"usage": usage}, provider_id=genai_id, api_flavor=flavor).usage
    ours = normalize(provider, dialect, usage)
    assert (ours.input_total, ours.cache_read, ours.cache_write, ours.output) == (
        theirs.input_tokens,
        theirs.cache_read_tokens,
        theirs.cache_write_tokens,
        theirs.output_tokens,
    )


# -- cachekit prices MODEL ----------------------------------------------------------------------------


def test_cli_shows_the_price_and_its_source() -> None:
    out = io.StringIO()
    assert main(["prices", "gpt-5.6-sol", "--at", "2026-08-01"], out=out) == 0
    text = out.getvalue()
    # the changelog quoted above: $5 / $30 before 2026-08-21
    assert "input $5 " in text
    assert "output $30" in text
    assert f"source: genai-prices {GENAI_VERSION}" in text

    out = io.StringIO()
    assert main(["prices", "claude-opus-4-6", "--option", "inference_geo=us"], out=out) == 0
    assert "x1.1" in out.getvalue()  # the support article quoted above

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["prices", "no-such-model-anywhere"], out=out) == 1
    assert out.getvalue() == ""
    assert "no price for 'no-such-model-anywhere'" in err.getvalue()


def test_cli_fetches_new_price_data_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    fetches: list[float] = []
    monkeypatch.setattr(
        "cachekit.cost.genai.update_from_network", lambda timeout=30.0: fetches.append(timeout)
    )
    assert main(["prices", "kimi-k3"], out=io.StringIO()) == 0
    assert fetches == []
    assert main(["prices", "kimi-k3", "--update"], out=io.StringIO()) == 0
    assert fetches == [30.0]


def test_pricing_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("network access while pricing")

    monkeypatch.setattr(httpx2.Client, "send", refuse)
    monkeypatch.setattr(httpx2, "get", refuse)
    assert one_million_each("openai", "gpt-5.6-sol") == pytest.approx(24.0)  # changelog above
    assert main(["prices", "kimi-k3"], out=io.StringIO()) == 0


def test_anthropic_request_through_the_sdk_is_priced_by_genai(harness: Harness) -> None:
    sink = MemorySink()
    ledger = Ledger([sink])
    sdk = harness.sdk("anthropic", cache=cachekit.CacheConfig(store=MemoryStore(), ledger=ledger))
    sdk.call("messages.create", **{**anthropic_messages(), "model": "claude-sonnet-5-5"})
    ledger.flush()
    (record,) = sink.read()
    ledger.close()
    # FakeUpstream's usage is an estimate; Claude Sonnet 5.5 is $2 / $10 (pricing page above).
    u = record.usage
    assert u.uncached_input is not None
    assert u.output is not None
    assert record.cost == pytest.approx((u.uncached_input * 2.0 + u.output * 10.0) / MILLION)


@pytest.mark.parametrize(
    ("provider", "model"),
    [("anthropic", "claude-haiku-5-5"), ("openai", "gpt-5.6-sol"), ("openai", "o3"), ("xai", "grok-4.7")],
)
def test_the_arithmetic_is_genai_prices_own(provider: str, model: str) -> None:
    # cachekit prices from genai-prices' resolved rates without its (slower) calc_price: both agree on
    # every token kind, below and above the prompt-length tiers.
    from genai_prices import Usage, calc_price

    for usage in (UsageRecord(1_000, 2_000, 3_000, 4_000, 500), UsageRecord(150_000, 90_000, 0, 60_000, 10)):
        input_total = usage.input_total
        assert input_total is not None
        reference = calc_price(
            Usage(
                input_tokens=input_total,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=(usage.cache_write_5m or 0) + (usage.cache_write_1h or 0),
                cache_write_1h_tokens=usage.cache_write_1h,
                output_tokens=usage.output,
            ),
            model,
            provider_id={"xai": "x-ai"}.get(provider, provider),
            genai_request_timestamp=THURSDAY,
        )
        cost = default_prices().price(provider, model, usage, at=THURSDAY)
        assert cost.total_usd == pytest.approx(float(reference.total_price), rel=1e-12)

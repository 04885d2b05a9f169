"""Usage normalization per provider, priced against hand-computed figures.

Each payload is in the shape the provider documents (the doc sentence is quoted above it). Providers
whose prices are not in the bundled table (DeepSeek, Kimi, GLM, Bailian, xAI, Gemini) are priced with
the made-up TEST_PRICES rows below, so the arithmetic is checked without claiming real prices.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachekit.cost import PriceTable, UsageRecord, normalize, usage_of_body

# Made-up prices (USD per million tokens) for providers the bundled table leaves out; only the
# arithmetic is under test here.
TEST_PRICES = [
    {
        "provider": "deepseek",
        "model": "deepseek-v4-flash",
        "input": 0.14,
        "cache_read": 0.0028,
        "output": 0.28,
    },
    {"provider": "kimi", "model": "kimi-test", "input": 1.0, "cache_read": 0.25, "output": 4.0},
    {"provider": "glm", "model": "glm-test", "input": 0.5, "cache_read": 0.1, "output": 2.0},
    {
        "provider": "bailian",
        "model": "qwen-test",
        "input": 2.0,
        "cache_write_5m": 2.5,
        "cache_read": 0.2,
        "output": 8.0,
    },
    {"provider": "xai", "model": "grok-test", "input": 3.0, "cache_read": 0.75, "output": 15.0},
    {"provider": "gemini", "model": "gemini-test", "input": 1.25, "cache_read": 0.125, "output": 10.0},
    {
        "provider": "openai",
        "model": "gpt-test-writes",
        "input": 5.0,
        "cache_write_5m": 6.25,
        "cache_write_1h": 10.0,
        "cache_read": 0.5,
        "output": 30.0,
    },
]


@pytest.fixture(scope="module")
def table() -> PriceTable:
    return PriceTable.load(overrides=TEST_PRICES)


def rec(*counts: int | None, reasoning: int | None = None) -> UsageRecord:
    uncached, w5, w1, read, output = counts
    return UsageRecord(uncached, w5, w1, read, output, reasoning)


# -- Anthropic ------------------------------------------------------------------------------------------


# https://docs.anthropic.com/en/docs/about-claude/pricing -- "usage object in the API response:
# input_tokens, cache_creation_input_tokens (if using prompt caching), cache_read_input_tokens (if using
# prompt caching)". input_tokens excludes the cache reads and writes (the anthropic SDK's Usage type:
# cache_creation "Breakdown of cached tokens by TTL").
ANTHROPIC_BASIC = {
    "input_tokens": 1_000,
    "cache_creation_input_tokens": 10_000,
    "cache_read_input_tokens": 50_000,
    "output_tokens": 500,
}


def test_anthropic_sonnet_4_5_issue_example(table: PriceTable) -> None:
    usage = normalize("anthropic", "anthropic_messages", ANTHROPIC_BASIC)
    # No cache_creation split: every write is a 5-minute write.
    assert usage == rec(1_000, 10_000, 0, 50_000, 500)
    cost = table.price("anthropic", "claude-sonnet-4-5-20250929", usage)
    # Sonnet 4.5: $3 input, $3.75 5m write, $0.30 read, $15 output per MTok.
    #   1,000 x 3 + 10,000 x 3.75 + 50,000 x 0.30 + 500 x 15
    #   = 3,000 + 37,500 + 15,000 + 7,500 = 63,000 micro-dollars = $0.063
    # Without caching all 61,000 input tokens at $3: 183,000 + 7,500 = 190,500 = $0.1905
    assert cost.total_usd == pytest.approx(0.063)
    assert cost.no_cache_usd == pytest.approx(0.1905)
    assert cost.saving_usd == pytest.approx(0.1275)
    assert cost.model == "claude-sonnet-4-5"


def test_anthropic_ttl_split_and_thinking(table: PriceTable) -> None:
    usage = normalize(
        "anthropic",
        "anthropic_messages",
        {
            **ANTHROPIC_BASIC,
            "cache_creation": {"ephemeral_5m_input_tokens": 4_000, "ephemeral_1h_input_tokens": 6_000},
            "output_tokens_details": {"thinking_tokens": 120},
        },
    )
    assert usage == rec(1_000, 4_000, 6_000, 50_000, 500, reasoning=120)
    # 1,000 x 3 + 4,000 x 3.75 + 6,000 x 6 + 50,000 x 0.30 + 500 x 15
    # = 3,000 + 15,000 + 36,000 + 15,000 + 7,500 = 76,500 micro-dollars
    assert table.price("anthropic", "claude-sonnet-4-5", usage).total_usd == pytest.approx(0.0765)


def test_anthropic_sonnet_4_5_long_context(table: PriceTable) -> None:
    # Over 200K input tokens (reads and writes included) every token bills at $6 / $22.50, read $0.60.
    usage = normalize(
        "anthropic",
        "anthropic_messages",
        {"input_tokens": 60_000, "cache_read_input_tokens": 150_000, "output_tokens": 1_000},
    )
    cost = table.price("anthropic", "claude-sonnet-4-5", usage)
    # 60,000 x 6 + 150,000 x 0.60 + 1,000 x 22.50 = 360,000 + 90,000 + 22,500 = 472,500 -> $0.4725
    # Without caching: 210,000 x 6 + 22,500 = 1,282,500 -> $1.2825
    assert cost.long_context
    assert cost.total_usd == pytest.approx(0.4725)
    assert cost.no_cache_usd == pytest.approx(1.2825)


def test_haiku_5_5_prompt_length_tier(table: PriceTable) -> None:
    at = normalize("anthropic", "anthropic_messages", {"input_tokens": 100_000, "output_tokens": 0})
    over = normalize("anthropic", "anthropic_messages", {"input_tokens": 100_001, "output_tokens": 0})
    # 100,000 x $0.10 = $0.01; 100,001 x $0.50 = $0.0500005
    assert table.price("anthropic", "claude-haiku-5-5", at).total_usd == pytest.approx(0.01)
    assert table.price("anthropic", "claude-haiku-5-5", over).total_usd == pytest.approx(0.0500005)


def test_anthropic_dialect_served_by_deepseek_normalizes_the_same() -> None:
    # DeepSeek and Kimi also serve the Anthropic Messages API; the usage shape is Anthropic's.
    assert normalize("deepseek", "anthropic_messages", ANTHROPIC_BASIC) == normalize(
        "anthropic", "anthropic_messages", ANTHROPIC_BASIC
    )


# -- OpenAI Chat Completions -----------------------------------------------------------------------------


# https://platform.openai.com/docs/guides/prompt-caching -- requests report a "cached_tokens field of the
# usage.prompt_tokens_details chat completions object indicating how many of the prompt tokens were a
# cache hit"; prompt_tokens includes them.
OPENAI_CHAT = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920},
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def test_openai_chat_gpt_4o(table: PriceTable) -> None:
    usage = normalize("openai", "openai_chat", OPENAI_CHAT)
    assert usage == rec(86, 0, 0, 1920, 300, reasoning=0)
    cost = table.price("openai", "gpt-4o-2024-08-06", usage)
    # gpt-4o: $2.50 input, $1.25 cached, $10 output.
    #   86 x 2.50 + 1,920 x 1.25 + 300 x 10 = 215 + 2,400 + 3,000 = 5,615 -> $0.005615
    # Without caching: 2,006 x 2.50 + 3,000 = 8,015 -> $0.008015
    assert cost.total_usd == pytest.approx(0.005615)
    assert cost.no_cache_usd == pytest.approx(0.008015)
    assert cost.model == "gpt-4o"


def test_openai_chat_reasoning_is_part_of_output(table: PriceTable) -> None:
    # completion_tokens_details.reasoning_tokens: "Tokens generated by the model for reasoning" (SDK type).
    usage = normalize(
        "openai",
        "openai_chat",
        {
            "prompt_tokens": 1000,
            "completion_tokens": 500,
            "completion_tokens_details": {"reasoning_tokens": 200},
        },
    )
    assert usage.output == 500
    assert usage.reasoning == 200
    # gpt-5-mini: 1,000 x 0.25 + 500 x 2 = 250 + 1,000 = 1,250 -> $0.00125
    assert table.price("openai", "gpt-5-mini", usage).total_usd == pytest.approx(0.00125)


def test_openai_chat_cache_write_tokens(table: PriceTable) -> None:
    # openai SDK, PromptTokensDetails.cache_write_tokens: "The unadjusted number of prompt tokens written
    # to cache." Written and cached tokens are both inside prompt_tokens.
    usage = normalize(
        "openai",
        "openai_chat",
        {
            "prompt_tokens": 10_000,
            "completion_tokens": 100,
            "prompt_tokens_details": {"cached_tokens": 4_000, "cache_write_tokens": 5_000},
        },
    )
    assert usage == rec(1_000, 5_000, 0, 4_000, 100)
    # Test prices: 1,000 x 5 + 5,000 x 6.25 + 4,000 x 0.50 + 100 x 30
    #   = 5,000 + 31,250 + 2,000 + 3,000 = 41,250 -> $0.04125
    assert table.price("openai", "gpt-test-writes", usage).total_usd == pytest.approx(0.04125)


# -- OpenAI Responses ------------------------------------------------------------------------------------


# openai SDK, ResponseUsage.input_tokens_details.cached_tokens: "The number of tokens that were retrieved
# from the cache"; cache_write_tokens: "The number of input tokens that were written to the cache";
# cache_write_tokens_details splits them by ttl_30m_tokens / ttl_12h_tokens. input_tokens includes both.
OPENAI_RESPONSES = {
    "input_tokens": 12_033,
    "input_tokens_details": {"cached_tokens": 11_904},
    "output_tokens": 44,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 12_077,
}


def test_openai_responses_gpt_4_1(table: PriceTable) -> None:
    usage = normalize("openai", "openai_responses", OPENAI_RESPONSES)
    assert usage == rec(129, 0, 0, 11_904, 44, reasoning=0)
    cost = table.price("openai", "gpt-4.1-2025-04-14", usage)
    # gpt-4.1: $2 input, $0.50 cached, $8 output.
    #   129 x 2 + 11,904 x 0.50 + 44 x 8 = 258 + 5,952 + 352 = 6,562 -> $0.006562
    # Without caching: 12,033 x 2 + 352 = 24,418 -> $0.024418
    assert cost.total_usd == pytest.approx(0.006562)
    assert cost.no_cache_usd == pytest.approx(0.024418)


def test_openai_responses_write_retention_split(table: PriceTable) -> None:
    usage = normalize(
        "openai",
        "openai_responses",
        {
            "input_tokens": 10_000,
            "input_tokens_details": {
                "cached_tokens": 2_000,
                "cache_write_tokens": 7_000,
                "cache_write_tokens_details": {"ttl_30m_tokens": 3_000, "ttl_12h_tokens": 4_000},
            },
            "output_tokens": 10,
        },
    )
    assert usage == rec(1_000, 3_000, 4_000, 2_000, 10)
    # 1,000 x 5 + 3,000 x 6.25 + 4,000 x 10 + 2,000 x 0.5 + 10 x 30
    # = 5,000 + 18,750 + 40,000 + 1,000 + 300 = 65,050 -> $0.06505
    assert table.price("openai", "gpt-test-writes", usage).total_usd == pytest.approx(0.06505)


def test_responses_completed_event_and_plain_body_give_the_same_record() -> None:
    body = {"id": "resp_1", "object": "response", "usage": OPENAI_RESPONSES}
    event = {"type": "response.completed", "response": body}
    assert usage_of_body("openai", "openai_responses", body) == usage_of_body(
        "openai", "openai_responses", event
    )


# -- OpenAI-compatible providers ---------------------------------------------------------------------------


def test_deepseek_hit_and_miss(table: PriceTable) -> None:
    # https://api-docs.deepseek.com/guides/kv_cache -- "If subsequent requests have overlapping prefixes
    # with previous requests, the overlapping part will only be fetched from the cache, which counts as a
    # 'cache hit.'" The usage object reports prompt_cache_hit_tokens and prompt_cache_miss_tokens, which
    # add up to prompt_tokens.
    usage = normalize(
        "deepseek",
        "openai_chat",
        {
            "prompt_tokens": 10_000,
            "completion_tokens": 1_000,
            "total_tokens": 11_000,
            "prompt_cache_hit_tokens": 8_000,
            "prompt_cache_miss_tokens": 2_000,
        },
    )
    assert usage == rec(2_000, 0, 0, 8_000, 1_000)
    cost = table.price("deepseek", "deepseek-v4-flash", usage)
    # Test prices: 2,000 x 0.14 + 8,000 x 0.0028 + 1,000 x 0.28 = 280 + 22.4 + 280 = 582.4 -> $0.0005824
    # Without caching: 10,000 x 0.14 + 280 = 1,680 -> $0.00168
    assert cost.total_usd == pytest.approx(0.0005824)
    assert cost.no_cache_usd == pytest.approx(0.00168)


def test_deepseek_hit_plus_miss_must_match_prompt_tokens() -> None:
    usage = normalize(
        "deepseek",
        "openai_chat",
        {
            "prompt_tokens": 10_000,
            "completion_tokens": 1,
            "prompt_cache_hit_tokens": 8_000,
            "prompt_cache_miss_tokens": 3_000,
        },
    )
    assert not usage.known
    assert usage.uncached_input is None
    assert usage.cache_read is None
    assert "prompt_cache_hit_tokens + prompt_cache_miss_tokens != prompt_tokens" in usage.problems


def test_kimi_top_level_cached_tokens(table: PriceTable) -> None:
    # Moonshot's explicit context-cache API (moonshot-v1) reports a top-level usage.cached_tokens; the K2
    # models use prompt_tokens_details.cached_tokens (both handled, see the openclaw change that fixed
    # issue #7073: "adds cached_tokens (top-level) for moonshot-v1 explicit caching API"). The Moonshot
    # page itself could not be retrieved; prompt_tokens includes the cached tokens, as in OpenAI's API.
    top_level = {
        "prompt_tokens": 5_000,
        "completion_tokens": 200,
        "total_tokens": 5_200,
        "cached_tokens": 4_096,
    }
    nested = {**top_level, "prompt_tokens_details": {"cached_tokens": 4_096}}
    del nested["cached_tokens"]
    usage = normalize("kimi", "openai_chat", top_level)
    assert usage == rec(904, 0, 0, 4_096, 200)
    assert normalize("kimi", "openai_chat", nested) == usage
    # Test prices: 904 x 1 + 4,096 x 0.25 + 200 x 4 = 904 + 1,024 + 800 = 2,728 -> $0.002728
    assert table.price("kimi", "kimi-test", usage).total_usd == pytest.approx(0.002728)


def test_glm_cached_tokens(table: PriceTable) -> None:
    # https://docs.z.ai/guides/capabilities/cache -- "Transparent Billing: Detailed display of cached
    # token counts in response field usage.prompt_tokens_details.cached_tokens"
    usage = normalize(
        "glm",
        "openai_chat",
        {"prompt_tokens": 3_000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 2_048}},
    )
    assert usage == rec(952, 0, 0, 2_048, 100)
    # Test prices: 952 x 0.5 + 2,048 x 0.1 + 100 x 2 = 476 + 204.8 + 200 = 880.8 -> $0.0008808
    assert table.price("glm", "glm-test", usage).total_usd == pytest.approx(0.0008808)


def test_bailian_explicit_cache_creation(table: PriceTable) -> None:
    # https://www.alibabacloud.com/help/en/model-studio/context-cache -- "Tokens used to create the cache
    # are billed at 125% of the standard input token price, while subsequent cache hits are billed at
    # only 10% of that price." The OpenAI-compatible usage carries cached_tokens plus, for explicit
    # cache, cache_creation_input_tokens and the cache_creation split inside prompt_tokens_details.
    usage = normalize(
        "bailian",
        "openai_chat",
        {
            "prompt_tokens": 3_019,
            "completion_tokens": 104,
            "total_tokens": 3_123,
            "prompt_tokens_details": {
                "cached_tokens": 0,
                "cache_creation": {"ephemeral_5m_input_tokens": 3_015},
                "cache_creation_input_tokens": 3_015,
                "cache_type": "ephemeral",
            },
        },
    )
    assert usage == rec(4, 3_015, 0, 0, 104)
    # Test prices: 4 x 2 + 3,015 x 2.5 + 104 x 8 = 8 + 7,537.5 + 832 = 8,377.5 -> $0.0083775
    # Without caching: 3,019 x 2 + 832 = 6,870 -> $0.00687 (the write premium makes this call dearer)
    cost = table.price("bailian", "qwen-test", usage)
    assert cost.total_usd == pytest.approx(0.0083775)
    assert cost.saving_usd == pytest.approx(0.00687 - 0.0083775)
    # A top-level cache_creation_input_tokens (no split) is read the same way.
    flat = {"prompt_tokens": 3_019, "completion_tokens": 104, "cache_creation_input_tokens": 3_015}
    assert normalize("bailian", "openai_chat", flat) == usage


def test_xai_cached_tokens(table: PriceTable) -> None:
    # https://docs.x.ai/developers/advanced-api-usage/prompt-caching/usage-and-pricing -- "Cached tokens
    # appear in usage.prompt_tokens_details.cached_tokens" (the page's own example below).
    usage = normalize(
        "xai",
        "openai_chat",
        {
            "prompt_tokens": 125,
            "completion_tokens": 48,
            "total_tokens": 173,
            "prompt_tokens_details": {
                "text_tokens": 125,
                "audio_tokens": 0,
                "image_tokens": 0,
                "cached_tokens": 98,
            },
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
    )
    assert usage == rec(27, 0, 0, 98, 48, reasoning=0)
    # Test prices: 27 x 3 + 98 x 0.75 + 48 x 15 = 81 + 73.5 + 720 = 874.5 -> $0.0008745
    assert table.price("xai", "grok-test", usage).total_usd == pytest.approx(0.0008745)


def test_gemini_openai_endpoint_counts_thinking_as_output(table: PriceTable) -> None:
    # https://discuss.ai.google.dev/t/question-with-usage-in-openai-compatibility/98760 -- "usage: {
    # completion_tokens: 102, prompt_tokens: 758, total_tokens: 1725 }" and the Google reply: "All tokens
    # are processed in a query are included in total token that include input, output and thinking."
    usage = normalize(
        "gemini",
        "openai_chat",
        {"completion_tokens": 102, "prompt_tokens": 758, "total_tokens": 1725},
    )
    # output = 1,725 - 758 = 967, of which 865 thinking.
    assert usage == rec(758, 0, 0, 0, 967, reasoning=865)
    # Test prices: 758 x 1.25 + 967 x 10 = 947.5 + 9,670 = 10,617.5 -> $0.0106175
    assert table.price("gemini", "gemini-test", usage).total_usd == pytest.approx(0.0106175)
    # With cached tokens reported the OpenAI way.
    cached = normalize(
        "gemini",
        "openai_chat",
        {
            "completion_tokens": 10,
            "prompt_tokens": 5_000,
            "total_tokens": 5_010,
            "prompt_tokens_details": {"cached_tokens": 4_000},
        },
    )
    assert cached == rec(1_000, 0, 0, 4_000, 10)


# -- missing, unknown and bad usage ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "usage"),
    [
        ("anthropic_messages", None),
        ("anthropic_messages", {}),
        ("openai_chat", {"foo": 1}),
        ("openai_responses", {"prompt_tokens": 10, "completion_tokens": 2}),
        ("anthropic_count_tokens", {"input_tokens": 10}),
        ("openai_chat", [1, 2]),
    ],
)
def test_missing_or_unrecognised_usage_is_unknown_not_zero(
    dialect: str, usage: Any, table: PriceTable
) -> None:
    record = normalize("openai", dialect, usage)
    assert not record.known
    assert record.problems
    assert record.uncached_input is None
    assert record.output is None
    cost = table.price("openai", "gpt-4o", record)
    assert cost.total_usd is None
    assert cost.no_cache_usd is None
    assert cost.saving_usd is None


def test_body_without_usage_is_unknown() -> None:
    record = usage_of_body("anthropic", "anthropic_messages", {"id": "msg_1", "content": []})
    assert not record.known
    assert record.problems == ("anthropic: no usage object in the response body",)


@pytest.mark.parametrize(
    ("usage", "problem", "field"),
    [
        (
            {**ANTHROPIC_BASIC, "cache_read_input_tokens": -5},
            "negative cache_read_input_tokens",
            "cache_read",
        ),
        ({**ANTHROPIC_BASIC, "output_tokens": 12.5}, "non-integer output_tokens", "output"),
        ({**ANTHROPIC_BASIC, "output_tokens": "500"}, "non-integer output_tokens", "output"),
        ({**ANTHROPIC_BASIC, "input_tokens": True}, "non-integer input_tokens", "uncached_input"),
        (
            {**ANTHROPIC_BASIC, "cache_creation_input_tokens": -1},
            "negative cache_creation_input_tokens",
            "cache_write_5m",
        ),
        ({"output_tokens": 3}, "missing input_tokens", "uncached_input"),
    ],
)
def test_bad_token_counts_are_flagged_not_summed(
    usage: dict[str, Any], problem: str, field: str, table: PriceTable
) -> None:
    record = normalize("anthropic", "anthropic_messages", usage)
    assert problem in record.problems
    assert getattr(record, field) is None
    assert not record.known
    assert table.price("anthropic", "claude-sonnet-4-5", record).total_usd is None


def test_bad_openai_counts_poison_the_derived_uncached_count() -> None:
    record = normalize(
        "openai",
        "openai_chat",
        {"prompt_tokens": 100, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": -3}},
    )
    assert record.problems == ("negative prompt_tokens_details.cached_tokens",)
    assert record.cache_read is None
    assert record.uncached_input is None
    assert not record.known


def test_cached_tokens_exceeding_prompt_tokens_is_inconsistent() -> None:
    record = normalize(
        "openai",
        "openai_chat",
        {"prompt_tokens": 100, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 101}},
    )
    assert not record.known
    assert "cached and written tokens exceed prompt_tokens" in record.problems


def test_anthropic_split_that_does_not_add_up_is_flagged() -> None:
    record = normalize(
        "anthropic",
        "anthropic_messages",
        {
            **ANTHROPIC_BASIC,
            "cache_creation": {"ephemeral_5m_input_tokens": 1, "ephemeral_1h_input_tokens": 2},
        },
    )
    assert not record.known
    assert record.cache_write_5m is None
    assert record.cache_write_1h is None


def test_bad_reasoning_count_is_flagged_but_the_record_stays_known() -> None:
    record = normalize(
        "openai",
        "openai_chat",
        {"prompt_tokens": 10, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": -1}},
    )
    assert record.known
    assert record.reasoning is None
    assert record.problems == ("negative completion_tokens_details.reasoning_tokens",)


def test_null_cache_fields_mean_no_caching() -> None:
    # The anthropic SDK types these as Optional; null is "not used", not unknown.
    record = normalize(
        "anthropic",
        "anthropic_messages",
        {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": None,
        },
    )
    assert record == rec(5, 0, 0, 0, 1)


def test_record_round_trips_through_a_dict() -> None:
    record = normalize("anthropic", "anthropic_messages", {**ANTHROPIC_BASIC, "output_tokens": -1})
    assert UsageRecord.from_dict(record.to_dict()) == record


def test_unknown_model_is_none_and_warns_once(table: PriceTable, caplog: pytest.LogCaptureFixture) -> None:
    usage = normalize("anthropic", "anthropic_messages", ANTHROPIC_BASIC)
    with caplog.at_level(logging.WARNING, logger="cachekit.cost"):
        first = table.price("anthropic", "claude-imaginary-9", usage)
        second = table.price("anthropic", "claude-imaginary-9", usage)
    assert first.total_usd is None
    assert first.no_cache_usd is None
    assert first.saving_usd is None
    assert second.total_usd is None
    warnings = [r for r in caplog.records if "claude-imaginary-9" in r.getMessage()]
    assert len(warnings) == 1


counts = st.integers(min_value=0, max_value=2_000_000)
HAIKU_TABLE = PriceTable.load()


@given(uncached=counts, w5=counts, w1=counts, read=counts, output=counts)
def test_anthropic_pricing_matches_the_formula(
    uncached: int, w5: int, w1: int, read: int, output: int
) -> None:
    usage = normalize(
        "anthropic",
        "anthropic_messages",
        {
            "input_tokens": uncached,
            "cache_creation_input_tokens": w5 + w1,
            "cache_creation": {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1},
            "cache_read_input_tokens": read,
            "output_tokens": output,
        },
    )
    assert usage == rec(uncached, w5, w1, read, output)
    cost = HAIKU_TABLE.price("anthropic", "claude-haiku-4-5", usage)  # $1 / 1.25 / 2 / 0.10 / $5, no tiers
    expected = (uncached * 1 + w5 * 1.25 + w1 * 2 + read * 0.1 + output * 5) / 1e6
    assert cost.total_usd == pytest.approx(expected)
    assert cost.no_cache_usd == pytest.approx(((uncached + w5 + w1 + read) * 1 + output * 5) / 1e6)


@given(prompt=counts, cached=counts, written=counts, output=counts)
def test_openai_input_splits_add_back_up(prompt: int, cached: int, written: int, output: int) -> None:
    usage = normalize(
        "openai",
        "openai_chat",
        {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        },
    )
    if cached + written <= prompt:
        assert usage.known
        assert usage.input_total == prompt
    else:
        assert not usage.known
        assert usage.uncached_input is None

"""The providers' prompt-caching rules as billing: the rules table, the clock, and both rule sets.

Every rule is quoted from the provider's documentation (URL in the comment). Expected usage numbers
are written out by hand from those rules, never computed by the code under test.

Anthropic: https://platform.claude.com/docs/en/build-with-claude/prompt-caching
OpenAI: https://developers.openai.com/api/docs/guides/prompt-caching and the OpenAI cookbook
"Prompt Caching 201" (github.com/openai/openai-cookbook examples/Prompt_Caching_201.ipynb)
Bailian: https://www.alibabacloud.com/help/en/model-studio/user-guide/context-cache
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachekit.errors import ConfigError
from cachekit.local.accounting import (
    AnthropicCache,
    AnthropicUsage,
    OpenAICache,
    OpenAIUsage,
    RequestRefusedError,
    Segment,
    Ttl,
)
from cachekit.local.clock import DEFAULT_CLOCK, ManualClock
from cachekit.providers.cache_rules import (
    CacheRulesError,
    CacheRulesTable,
    UnknownProviderError,
    cache_rules,
    default_cache_rules,
)

ORG = b"org-1"
SONNET = "claude-sonnet-4-5"  # minimum 1,024 tokens
OPUS5 = "claude-opus-5"  # minimum 512 tokens


def block(label: str, tokens: int, marker: Any = None, section: Any = "messages", **kw: Any) -> Segment:
    """A segment whose canonical bytes are its label (same label, same block)."""
    return Segment(section, label.encode(), tokens, marker, **kw)


def usage(read: int, written_5m: int, written_1h: int, plain: int) -> AnthropicUsage:
    return AnthropicUsage(
        input_tokens=plain,
        cache_creation_input_tokens=written_5m + written_1h,
        cache_read_input_tokens=read,
        ephemeral_5m_input_tokens=written_5m,
        ephemeral_1h_input_tokens=written_1h,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def cache(clock: ManualClock) -> AnthropicCache:
    return AnthropicCache(clock=clock)


def conversation(blocks: int, *, breakpoints: tuple[int, ...], tokens: int = 200) -> list[Segment]:
    """Message blocks b1..bN of ``tokens`` each, with 5m breakpoints on the given (1-based) blocks."""
    return [
        block(f"b{n}", tokens, "5m" if n in breakpoints else None, where=f"messages.{n}")
        for n in range(1, blocks + 1)
    ]


# --------------------------------------------------------------------------------------------------
# The rules table (cachekit/providers/cache_rules.json)


def test_every_bundled_row_names_its_source_and_date() -> None:
    rows = list(default_cache_rules())
    assert {r.provider for r in rows} == {"anthropic", "openai", "bailian"}
    for row in rows:
        assert row.source.startswith("https://"), row
        assert row.checked in ("2026-12-02", "2026-12-03"), row  # the dates the rules were read
        assert row.context_window_source is None or row.context_window_source.startswith("https://")


@pytest.mark.parametrize(
    ("model", "minimum", "window"),
    [
        # "512 tokens for Claude Fable 5.1, Claude Mythos 5.1, Claude Opus 5.5, Claude Opus 5, Claude Sonnet
        # 5.5, Claude Fable 5, Claude Mythos 5, and Claude Haiku 5.5"
        ("claude-opus-5-5", 512, 1_000_000),
        ("claude-opus-5", 512, 1_000_000),
        ("claude-sonnet-5-5", 512, 1_000_000),
        ("claude-haiku-5-5", 512, 1_000_000),
        # "2,048 tokens for Claude Mythos Preview and Claude Opus 4.7"
        ("claude-opus-4-7", 2048, 1_000_000),
        # "4,096 tokens for Claude Opus 4.6 and Claude Opus 4.5"; "Context window: 200K tokens" (Opus 4.5)
        ("claude-opus-4-6", 4096, 1_000_000),
        ("claude-opus-4-5-20251101", 4096, 200_000),
        # "1,024 tokens for Claude Opus 4.8, Claude Sonnet 5, Claude Sonnet 4.6, Claude Sonnet 4.5,
        # Claude Opus 4.1 ..., Claude Opus 4 ..., and Claude Sonnet 4"
        ("claude-opus-4-8", 1024, 1_000_000),
        ("claude-sonnet-5", 1024, 1_000_000),
        ("claude-sonnet-4-6", 1024, 1_000_000),
        ("claude-sonnet-4-5-20250929", 1024, 200_000),
        ("claude-opus-4-1-20250805", 1024, 200_000),
        ("claude-opus-4-20250514", 1024, 200_000),
        ("claude-sonnet-4-0", 1024, 200_000),
        # "4,096 tokens for Claude Haiku 4.5"
        ("claude-haiku-4-5-20251001", 4096, 200_000),
        # Earlier edition: "2048 tokens for Claude Haiku 3.5 and Claude Haiku 3", "1024 tokens for ... Claude
        # Sonnet 3.7, Claude Sonnet 3.5 and Claude Opus 3"
        ("claude-3-5-haiku-20241022", 2048, 200_000),
        ("claude-3-haiku-20240307", 2048, 200_000),
        ("claude-3-7-sonnet-20250219", 1024, 200_000),
        ("claude-3-opus-20240229", 1024, 200_000),
    ],
)
def test_anthropic_minimums_and_windows(model: str, minimum: int, window: int) -> None:
    rules = cache_rules("anthropic", model)
    assert (rules.min_cacheable_tokens, rules.context_window) == (minimum, window)
    # "You can define up to 4 cache breakpoints"; "The system checks at most 20 positions per breakpoint"
    assert (rules.mode, rules.max_breakpoints, rules.lookback_positions) == ("explicit", 4, 20)
    assert dict(rules.ttl_seconds) == {"5m": 300.0, "1h": 3600.0}


def test_longest_prefix_wins_on_separator_boundaries() -> None:
    assert cache_rules("anthropic", "claude-sonnet-5-5").prefix == "claude-sonnet-5-5"
    assert cache_rules("anthropic", "claude-sonnet-5").prefix == "claude-sonnet-5"
    assert cache_rules("anthropic", "CLAUDE-OPUS-4-5").prefix == "claude-opus-4-5"
    # A version dot is not a separator: gpt-5.5 is not a gpt-5 snapshot, so it gets the default row.
    assert cache_rules("openai", "gpt-5-mini-2025-08-07").prefix == "gpt-5"
    assert cache_rules("openai", "gpt-5.5").prefix == ""
    assert cache_rules("anthropic", "claude-unknown-9").prefix == ""


def test_openai_and_bailian_rows() -> None:
    gpt = cache_rules("openai", "gpt-4o-mini")
    # "Caching is enabled automatically for prompts that are 1024 tokens or longer"; hits "in increments
    # of 128 tokens"; prompt_cache_retention "in_memory" | "24h"
    assert (gpt.mode, gpt.min_cacheable_tokens, gpt.increment_tokens) == ("automatic", 1024, 128)
    assert dict(gpt.ttl_seconds) == {"in_memory": 300.0, "24h": 86_400.0}
    assert gpt.context_window == 128_000
    assert cache_rules("openai", "gpt-4.1-nano").context_window == 1_047_576  # "1,047,576 context window"
    qwen = cache_rules("bailian", "qwen3-max")
    # "A single request supports a maximum of four cache markers"; "searches backward up to 20 content
    # blocks"; "A cache block must contain at least 1024 tokens"; "5 minutes (resets on hit)"
    assert (qwen.max_breakpoints, qwen.lookback_positions, qwen.min_cacheable_tokens) == (4, 20, 1024)
    assert dict(qwen.ttl_seconds) == {"5m": 300.0}
    assert not qwen.automatic_caching
    # Qwen4: "Use automatic caching or cache breakpoints ... set the cache time-to-live to 5 minutes or
    # 1 hour"
    qwen4 = cache_rules("bailian", "qwen4-max")
    assert qwen4.automatic_caching
    assert dict(qwen4.ttl_seconds) == {"5m": 300.0, "1h": 3600.0}
    assert qwen4.min_cacheable_tokens == 1024  # inherited from the provider's default row


def test_unknown_provider_is_a_clear_error() -> None:
    with pytest.raises(UnknownProviderError, match=r"'acme'.*known: anthropic, bailian, openai"):
        cache_rules("acme", "m")
    with pytest.raises(UnknownProviderError):
        AnthropicCache(provider="acme")


def test_lookups_are_cached() -> None:
    assert cache_rules("anthropic", "claude-opus-4-5") is cache_rules("anthropic", "claude-opus-4-5")


GOOD_DEFAULT: dict[str, Any] = {
    "provider": "acme",
    "prefix": "",
    "mode": "explicit",
    "min_cacheable_tokens": 1024,
    "max_breakpoints": 4,
    "lookback_positions": 20,
    "tool_runs_one_position": False,
    "automatic_caching": False,
    "ttl_seconds": {"5m": 300},
    "context_window": None,
    "source": "https://example.com/caching",
    "checked": "2026-12-01",
}


def write_rules(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "rules.json"
    path.write_bytes(orjson.dumps({"schema": 1, "rules": rows}))
    return path


def test_a_custom_table_inherits_from_its_default_row(tmp_path: Path) -> None:
    family = {
        "provider": "acme",
        "prefix": "acme-2",
        "min_cacheable_tokens": 64,
        "source": "https://e.com/2",
        "checked": "2026-11-30",
    }
    table = CacheRulesTable.load(write_rules(tmp_path, [GOOD_DEFAULT, family]))
    rules = table.lookup("acme", "acme-2-large")
    assert (rules.min_cacheable_tokens, rules.max_breakpoints, rules.source) == (64, 4, "https://e.com/2")
    assert table.lookup("acme", "acme-20").prefix == ""  # "acme-2" continues with "0", not a separator


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{**GOOD_DEFAULT, "min_cacheable_tokens": 0}], r"row 0 \('acme' ''\): field 'min_cacheable_tokens'"),
        ([{**GOOD_DEFAULT, "ttl": 5}], r"row 0 .*field 'ttl' is not a cache-rules field"),
        ([{**GOOD_DEFAULT, "checked": "2026-13-01"}], r"field 'checked'"),
        ([{**GOOD_DEFAULT, "source": "docs"}], r"field 'source'"),
        ([{**GOOD_DEFAULT, "mode": "magic"}], r"field 'mode'"),
        ([{**GOOD_DEFAULT, "increment_tokens": 128}], r"field 'increment_tokens' applies to automatic"),
        ([{**GOOD_DEFAULT, "ttl_seconds": {"5m": -1}}], r"field 'ttl_seconds.5m'"),
        ([{**GOOD_DEFAULT, "ttl_seconds": {"2h": 7200}}], r"field 'ttl_seconds.2h'"),
        (
            [{**GOOD_DEFAULT, "prefix": "acme-1"}],
            r"row 0 \('acme' 'acme-1'\): field 'provider' has no default row",
        ),
        (
            [GOOD_DEFAULT, {**GOOD_DEFAULT, "prefix": "a"}, {**GOOD_DEFAULT, "prefix": "a"}],
            r"row 2 .*repeats",
        ),
        ([GOOD_DEFAULT, GOOD_DEFAULT], r"row 1 .*second default row"),
        ([GOOD_DEFAULT, "not a row"], r"row 1: must be an object"),
    ],
)
def test_a_malformed_table_names_the_row(tmp_path: Path, rows: list[Any], message: str) -> None:
    with pytest.raises(CacheRulesError, match=message) as caught:
        CacheRulesTable.load(write_rules(tmp_path, rows))
    assert isinstance(caught.value, ConfigError)


def test_unreadable_or_invalid_json_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CacheRulesError, match=r"bad\.json: invalid JSON"):
        CacheRulesTable.load(bad)
    with pytest.raises(CacheRulesError, match="cannot read"):
        CacheRulesTable.load(tmp_path / "missing.json")
    bad.write_text('{"rules": {}}')
    with pytest.raises(CacheRulesError, match="'rules' list"):
        CacheRulesTable.load(bad)


# --------------------------------------------------------------------------------------------------
# The clock


def test_manual_clock_moves_only_forward() -> None:
    clock = ManualClock(10.0)
    assert clock() == 10.0
    assert clock.advance(2.5) == 12.5
    assert clock() == 12.5
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="finite"):
        clock.advance(float("nan"))
    assert clock() == 12.5
    assert DEFAULT_CLOCK is time.monotonic


# --------------------------------------------------------------------------------------------------
# Anthropic: reads, writes and the usage fields


def test_large_context_example_writes_then_reads(cache: AnthropicCache) -> None:
    # The docs' first example: the system prompt (the whole book) is cached, the user message is not.
    # {"cache_creation_input_tokens":188086,"cache_read_input_tokens":0,"input_tokens":21,...}
    # {"cache_creation_input_tokens":0,"cache_read_input_tokens":188086,"input_tokens":21,...}
    prompt = [
        block("instructions", 86, section="system"),
        block("pride and prejudice", 188_000, "5m", section="system"),
        block("Analyze the major themes", 21),
    ]
    first = cache.account(model="claude-opus-4-1", partition=ORG, segments=prompt)
    assert first == usage(read=0, written_5m=188_086, written_1h=0, plain=21)
    second = cache.account(model="claude-opus-4-1", partition=ORG, segments=prompt)
    assert second == usage(read=188_086, written_5m=0, written_1h=0, plain=21)
    assert second.fields() == {
        "input_tokens": 21,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 188_086,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    }
    assert second.total_input_tokens == 188_107


def test_input_tokens_are_what_follows_the_last_breakpoint(cache: AnthropicCache) -> None:
    # "input_tokens: Number of input tokens which were not read from or used to create a cache (that is,
    # tokens after the last cache breakpoint)."
    prompt = [block("doc", 3000, "5m", section="system"), block("q1", 40), block("q2", 60)]
    assert cache.account(model=SONNET, partition=ORG, segments=prompt) == usage(0, 3000, 0, 100)


def test_lookback_example_from_the_docs(clock: ManualClock) -> None:
    # "Turn 1: 10 blocks, breakpoint on block 10. ... The system writes an entry at block 10.
    #  Turn 2: 15 blocks, breakpoint on block 15. ... Cache hit at block 10; the system processes only
    #  blocks 11 through 15 fresh and writes a new entry at block 15.
    #  Turn 3: 35 blocks, breakpoint on block 35. The system checks 20 positions (blocks 35 through 16) and
    #  finds nothing. The turn-2 entry at block 15 is one position outside the window, so there is no cache
    #  hit. Adding a second breakpoint at block 15 starts a second lookback window there, which finds the
    #  turn-2 entry."
    for second_breakpoint in (False, True):
        cache = AnthropicCache(clock=clock)
        turn1 = cache.account(model=SONNET, partition=ORG, segments=conversation(10, breakpoints=(10,)))
        assert turn1 == usage(read=0, written_5m=2000, written_1h=0, plain=0)
        turn2 = cache.account(model=SONNET, partition=ORG, segments=conversation(15, breakpoints=(15,)))
        assert turn2 == usage(read=2000, written_5m=1000, written_1h=0, plain=0)
        marks = (15, 35) if second_breakpoint else (35,)
        turn3 = cache.account(model=SONNET, partition=ORG, segments=conversation(35, breakpoints=marks))
        if second_breakpoint:
            assert turn3 == usage(read=3000, written_5m=4000, written_1h=0, plain=0)
        else:
            assert turn3 == usage(read=0, written_5m=7000, written_1h=0, plain=0)


def test_the_breakpoint_itself_is_the_first_of_twenty_positions(cache: AnthropicCache) -> None:
    cache.account(model=SONNET, partition=ORG, segments=conversation(10, breakpoints=(10,)))
    # Block 10 is the 20th position counting back from block 29 (29, 28, ..., 10): a hit.
    hit = cache.account(model=SONNET, partition=ORG, segments=conversation(29, breakpoints=(29,)))
    assert hit.cache_read_input_tokens == 2000


def test_a_breakpoint_on_a_varying_block_never_reads(cache: AnthropicCache) -> None:
    # "The lookback walks through blocks 5, 4, 3, 2, and 1, but the system never wrote an entry at any of
    # those positions. No cache hit. You pay for a fresh cache write on every request and never get a read."
    static = [block(f"context {n}", 400, section="system") for n in range(1, 6)]
    for stamp in ("10:00", "10:01", "10:02"):
        result = cache.account(
            model=SONNET, partition=ORG, segments=[*static, block(f"time {stamp}", 50, "5m")]
        )
        assert result == usage(read=0, written_5m=2050, written_1h=0, plain=0)
    # "Move cache_control to block 5, the last block that stays the same across requests, and every subsequent
    # request reads the cached prefix."
    fixed = [*static[:4], block("context 5", 400, "5m", section="system")]
    cache.account(model=SONNET, partition=ORG, segments=[*fixed, block("time 10:03", 50)])
    assert cache.account(model=SONNET, partition=ORG, segments=[*fixed, block("time 10:04", 50)]) == usage(
        2000, 0, 0, 50
    )


def test_parallel_tool_calls_count_as_one_position(clock: ManualClock) -> None:
    # "On the Claude API, a run of consecutive tool_use blocks counts as one position, and so does a run of
    # consecutive tool_result blocks, so a turn with many parallel tool calls doesn't push the previous
    # request's entry out of the window on its own."
    turn1 = [block("system", 2000, section="system"), block("question", 100, "5m", block_type="text")]
    calls = [block(f"call {n}", 10, block_type="tool_use") for n in range(25)]
    results = [block(f"result {n}", 10, block_type="tool_result") for n in range(24)]
    last = block("result 24", 10, "5m", block_type="tool_result")
    turn2 = [*turn1[:1], block("question", 100, block_type="text"), *calls, *results, last]
    anthropic = AnthropicCache(clock=clock)
    anthropic.account(model=SONNET, partition=ORG, segments=turn1)
    assert anthropic.account(model=SONNET, partition=ORG, segments=turn2) == usage(2100, 500, 0, 0)
    # Bailian: "System searches backward up to 20 content blocks": every block is a position there.
    bailian = AnthropicCache(provider="bailian", clock=clock)
    bailian.account(model="qwen3-max", partition=ORG, segments=turn1)
    assert bailian.account(model="qwen3-max", partition=ORG, segments=turn2) == usage(0, 2600, 0, 0)


def test_below_the_minimum_nothing_is_written_and_nothing_fails(cache: AnthropicCache) -> None:
    # "Shorter prompts cannot be cached, even if marked with cache_control. Any requests to cache fewer than
    # this number of tokens will be processed without caching, and no error is returned."
    short = [block("system", 1023, "5m", section="system"), block("q", 7)]
    for _ in range(2):
        assert cache.account(model=SONNET, partition=ORG, segments=short) == usage(0, 0, 0, 1030)
    exact = [block("system", 1024, "5m", section="system"), block("q", 7)]
    assert cache.account(model=SONNET, partition=ORG, segments=exact) == usage(0, 1024, 0, 7)
    # The minimum is per model: 1,023 tokens cache on Claude Opus 5 ("512 tokens for ... Claude Opus 5").
    assert cache.account(model=OPUS5, partition=ORG, segments=short) == usage(0, 1023, 0, 7)


# --------------------------------------------------------------------------------------------------
# Anthropic: lifetimes


def test_an_expired_entry_is_a_miss(cache: AnthropicCache, clock: ManualClock) -> None:
    # "By default, the cache has a 5-minute lifetime." Measured "from the start of the request".
    prompt = [block("doc", 2000, "5m", section="system"), block("q", 10)]
    cache.account(model=SONNET, partition=ORG, segments=prompt)
    clock.advance(300)
    assert cache.account(model=SONNET, partition=ORG, segments=prompt) == usage(0, 2000, 0, 10)
    clock.advance(299.9)
    assert cache.account(model=SONNET, partition=ORG, segments=prompt) == usage(2000, 0, 0, 10)


def test_a_hit_refreshes_the_lifetime(cache: AnthropicCache, clock: ManualClock) -> None:
    # "The cache is refreshed for no additional cost each time the cached content is used."
    prompt = [block("doc", 2000, "5m", section="system"), block("q", 10)]
    cache.account(model=SONNET, partition=ORG, segments=prompt)
    for _ in range(5):  # 25 minutes in all, never 5 idle
        clock.advance(240)
        assert cache.account(model=SONNET, partition=ORG, segments=prompt).cache_read_input_tokens == 2000


def test_one_hour_entries_outlive_five_minute_ones(cache: AnthropicCache, clock: ManualClock) -> None:
    long = [block("doc A", 2000, "1h", section="system"), block("q", 10)]
    short = [block("doc B", 2000, "5m", section="system"), block("q", 10)]
    assert cache.account(model=SONNET, partition=ORG, segments=long) == usage(0, 0, 2000, 10)
    cache.account(model=SONNET, partition=ORG, segments=short)
    clock.advance(3000)
    assert cache.account(model=SONNET, partition=ORG, segments=long) == usage(2000, 0, 0, 10)
    assert cache.account(model=SONNET, partition=ORG, segments=short) == usage(0, 2000, 0, 10)
    clock.advance(3600)  # the hit at 3000 refreshed it to 6600; now 6600: gone
    assert cache.account(model=SONNET, partition=ORG, segments=long).cache_read_input_tokens == 0


def test_mixed_ttls_follow_the_docs_formula(cache: AnthropicCache) -> None:
    # "A: The token count at the highest cache hit ... B: The token count at the highest 1-hour cache_control
    # block after A ... C: The token count at the last cache_control block. You'll be charged for: Cache read
    # tokens for A. 1-hour cache write tokens for (B - A). 5-minute cache write tokens for (C - B)."
    # The docs' 1-hour output: input_tokens 2048, cache_read 1800, cache_creation 248 = 5m 148 + 1h 100.
    shared = block("shared", 1800, "1h", section="system")
    cache.account(model=SONNET, partition=ORG, segments=[shared])
    prompt = [
        shared,
        block("tools guide", 100, "1h", section="system"),
        block("context", 148, "5m"),
        block("q", 2048),
    ]
    result = cache.account(model=SONNET, partition=ORG, segments=prompt)
    assert result.fields() == {
        "input_tokens": 2048,
        "cache_creation_input_tokens": 248,
        "cache_read_input_tokens": 1800,
        "cache_creation": {"ephemeral_5m_input_tokens": 148, "ephemeral_1h_input_tokens": 100},
    }


def test_mixed_ttls_with_no_hit(cache: AnthropicCache) -> None:
    # With no hit A = 0: the tools (1h) stretch and the system (5m) stretch are written separately.
    prompt = [
        block("tool", 2000, "1h", section="tools", where="tools.0"),
        block("system", 1500, "5m", section="system", where="system.0"),
        block("q", 50),
    ]
    assert cache.account(model=SONNET, partition=ORG, segments=prompt) == usage(0, 1500, 2000, 50)
    changed = [prompt[0], block("system v2", 1500, "5m", section="system"), block("q", 50)]
    assert cache.account(model=SONNET, partition=ORG, segments=changed) == usage(2000, 1500, 0, 50)


# --------------------------------------------------------------------------------------------------
# Anthropic: refused requests change nothing


def test_one_hour_after_five_minutes_is_refused(cache: AnthropicCache) -> None:
    # "Cache entries with longer TTL must appear before shorter TTLs"; the API's message (github.com/
    # cnighswonger/claude-code-cache-fix/issues/44): "messages.0.content.4.cache_control.ttl: a ttl='1h'
    # cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed
    # in the following order: `tools`, `system`, `messages`."
    prompt = [
        block("tool", 2000, "5m", section="tools", where="tools.0"),
        block("late", 2000, "1h", where="messages.0.content.4"),
    ]
    with pytest.raises(RequestRefusedError) as caught:
        cache.account(model=SONNET, partition=ORG, segments=prompt)
    assert str(caught.value) == (
        "messages.0.content.4.cache_control.ttl: a ttl='1h' cache_control block must not come after a "
        "ttl='5m' cache_control block. Note that blocks are processed in the following order: "
        "`tools`, `system`, `messages`."
    )


def test_five_markers_are_refused_without_any_state_change(cache: AnthropicCache, clock: ManualClock) -> None:
    # "You can define up to 4 cache breakpoints"; the API: "A maximum of 4 blocks with cache_control may be
    # provided. Found 5." (github.com/tghamm/Anthropic.SDK/issues/50, continuedev/continue#6937)
    old = block("old", 2000, "5m", section="system")
    cache.account(model=SONNET, partition=ORG, segments=[old])
    clock.advance(200)
    five = [old, *(block(f"new {n}", 500, "5m") for n in range(4))]
    with pytest.raises(RequestRefusedError) as caught:
        cache.account(model=SONNET, partition=ORG, segments=five)
    assert str(caught.value) == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    # Nothing was refreshed (the old entry still dies at 300) and nothing written (the new breakpoints miss).
    clock.advance(101)
    four = [old, *(block(f"new {n}", 500, "5m") for n in range(3))]
    assert cache.account(model=SONNET, partition=ORG, segments=four) == usage(0, 3500, 0, 0)


def test_markers_on_ineligible_blocks_are_refused(cache: AnthropicCache) -> None:
    # "Thinking blocks cannot be cached directly with cache_control"; the API: "messages.13.content.0.thinking
    # .cache_control: Extra inputs are not permitted" (github.com/Wei-Shaw/sub2api/issues/225)
    thinking = block(
        "thought", 3000, "5m", eligible=False, where="messages.13.content.0", block_type="thinking"
    )
    with pytest.raises(RequestRefusedError) as caught:
        cache.account(model=SONNET, partition=ORG, segments=[thinking])
    assert str(caught.value) == "messages.13.content.0.thinking.cache_control: Extra inputs are not permitted"
    # "Empty text blocks cannot be cached"; the API: "cache_control cannot be set for empty text blocks"
    # (github.com/anthropics/claude-code/issues/54013)
    empty = block("", 0, "5m", eligible=False, where="messages.2.content.1", block_type="text")
    with pytest.raises(RequestRefusedError, match=r"^cache_control cannot be set for empty text blocks$"):
        cache.account(model=SONNET, partition=ORG, segments=[block("doc", 2000, section="system"), empty])


def test_too_long_a_prompt_is_refused(cache: AnthropicCache) -> None:
    # The API: "prompt is too long: 208656 tokens > 200000 maximum" (github.com/sojohnnysaid/project-guide/
    # issues/2); Claude Haiku 4.5 "Context window: 200K tokens".
    with pytest.raises(RequestRefusedError, match=r"^prompt is too long: 200001 tokens > 200000 maximum$"):
        cache.account(model="claude-haiku-4-5", partition=ORG, segments=[block("x", 200_001)])
    assert (
        cache.account(model="claude-haiku-4-5", partition=ORG, segments=[block("x", 200_000)]).input_tokens
        == 200_000
    )


def test_bailian_refuses_what_it_does_not_document(clock: ManualClock) -> None:
    bailian = AnthropicCache(provider="bailian", clock=clock)
    with pytest.raises(
        RequestRefusedError, match=r"messages\.0\.cache_control\.ttl: must be one of '5m', got '1h'"
    ):
        bailian.account(
            model="qwen3-max", partition=ORG, segments=[block("doc", 2000, "1h", where="messages.0")]
        )
    with pytest.raises(RequestRefusedError, match="top-level cache_control is not supported"):
        bailian.account(model="qwen3-max", partition=ORG, segments=[block("doc", 2000)], automatic="5m")
    # Qwen4 adds the 1-hour TTL and automatic caching.
    assert bailian.account(
        model="qwen4-plus", partition=ORG, segments=[block("doc", 2000)], automatic="1h"
    ) == usage(0, 0, 2000, 0)


def test_segments_out_of_prefix_order_are_a_caller_error(cache: AnthropicCache) -> None:
    with pytest.raises(ValueError, match="order") as caught:
        cache.account(
            model=SONNET, partition=ORG, segments=[block("m", 10), block("s", 10, section="system")]
        )
    assert not isinstance(caught.value, RequestRefusedError)
    with pytest.raises(ValueError, match="tokens"):
        cache.account(model=SONNET, partition=ORG, segments=[block("m", -1)])


# --------------------------------------------------------------------------------------------------
# Anthropic: automatic caching


def test_automatic_caching_moves_with_the_conversation(cache: AnthropicCache) -> None:
    # "With automatic caching, the cache point moves forward automatically as conversations grow. Each new
    # request caches everything up to the last cacheable block, and previous content is read from cache."
    system = block("You are a helpful assistant", 1500, section="system")
    turns = [block("My name is Alex", 20), block("Nice to meet you", 30), block("What do I work on?", 10)]
    first = cache.account(model=SONNET, partition=ORG, segments=[system, turns[0]], automatic="5m")
    assert first == usage(0, 1520, 0, 0)
    second = cache.account(model=SONNET, partition=ORG, segments=[system, *turns], automatic="5m")
    assert second == usage(1520, 40, 0, 0)


def test_automatic_uses_a_slot_and_is_a_no_op_on_a_same_ttl_marker(cache: AnthropicCache) -> None:
    # "the automatic cache breakpoint uses one of the 4 available breakpoint slots"; "If 4 explicit
    # block-level breakpoints already exist, the API returns a 400 error"; "If the last block already has an
    # explicit cache_control with the same TTL, automatic caching is a no-op."
    four = [block(f"s{n}", 600, "5m", section="system") for n in range(4)]
    with pytest.raises(
        RequestRefusedError, match=r"^A maximum of 4 blocks with cache_control may be provided\. Found 5\.$"
    ):
        cache.account(model=SONNET, partition=ORG, segments=[*four, block("q", 10)], automatic="5m")
    assert cache.account(model=SONNET, partition=ORG, segments=four, automatic="5m") == usage(0, 2400, 0, 0)


def test_automatic_with_a_different_ttl_on_the_last_block_is_refused(cache: AnthropicCache) -> None:
    # "If the last block has an explicit cache_control with a different TTL, the API returns a 400 error."
    prompt = [block("doc", 2000, section="system"), block("q", 10, "5m", where="messages.0.content.0")]
    with pytest.raises(
        RequestRefusedError, match=r"^messages\.0\.content\.0\.cache_control\.ttl: the top-level"
    ):
        cache.account(model=SONNET, partition=ORG, segments=prompt, automatic="1h")


def test_automatic_walks_back_past_ineligible_blocks(cache: AnthropicCache) -> None:
    # "If the last block is not eligible as an automatic cache breakpoint target, the system silently walks
    # backward to find the nearest eligible block. If none is found, caching is skipped."
    prompt = [
        block("doc", 2000, section="system"),
        block("thought", 30, eligible=False, block_type="thinking"),
    ]
    assert cache.account(model=SONNET, partition=ORG, segments=prompt, automatic="5m") == usage(
        0, 2000, 0, 30
    )
    only_thinking = [block("thought", 3000, eligible=False, block_type="thinking")]
    assert cache.account(model=SONNET, partition=ORG, segments=only_thinking, automatic="5m") == usage(
        0, 0, 0, 3000
    )


# --------------------------------------------------------------------------------------------------
# Anthropic: isolation and invalidation


def test_caches_never_cross_partitions_or_models(cache: AnthropicCache) -> None:
    # "Caches are isolated between organizations. Different organizations never share caches, even if they
    # use identical prompts."
    prompt = [block("doc", 5000, "5m", section="system"), block("q", 10)]
    cache.account(model=SONNET, partition=ORG, segments=prompt)
    assert cache.account(model=SONNET, partition=b"org-2", segments=prompt).cache_read_input_tokens == 0
    assert (
        cache.account(model="claude-sonnet-4-6", partition=ORG, segments=prompt).cache_read_input_tokens == 0
    )
    assert cache.account(model=SONNET, partition=ORG, segments=prompt).cache_read_input_tokens == 5000


def test_tool_choice_invalidates_messages_but_not_tools_or_system(cache: AnthropicCache) -> None:
    # What invalidates the cache: "Tool choice | ✓ | ✓ | ✘ | Changes to tool_choice parameter only affect
    # message blocks"; "Tool definitions | ✘ | ✘ | ✘ | ... invalidates the entire cache".
    tools = block("get_weather", 1200, "5m", section="tools")
    system = block("instructions", 800, "5m", section="system")
    history = block("long history", 3000, "5m")
    prompt = [tools, system, history, block("q", 10)]
    cache.account(model=SONNET, partition=ORG, segments=prompt, context=b'{"tool_choice":"auto"}')
    same = cache.account(model=SONNET, partition=ORG, segments=prompt, context=b'{"tool_choice":"auto"}')
    assert same == usage(5000, 0, 0, 10)
    other = cache.account(model=SONNET, partition=ORG, segments=prompt, context=b'{"tool_choice":"any"}')
    assert other == usage(2000, 3000, 0, 10)
    new_tools = [block("get_weather v2", 1200, "5m", section="tools"), system, history, block("q", 10)]
    assert cache.account(
        model=SONNET, partition=ORG, segments=new_tools, context=b'{"tool_choice":"any"}'
    ) == usage(0, 5000, 0, 10)


def test_least_recently_used_entries_go_first(clock: ManualClock) -> None:
    cache = AnthropicCache(clock=clock, capacity_tokens=7000)

    def doc(name: str) -> list[Segment]:
        return [block(name, 3000, "5m", section="system")]

    cache.account(model=SONNET, partition=ORG, segments=doc("A"))
    cache.account(model=SONNET, partition=ORG, segments=doc("B"))
    assert (
        cache.account(model=SONNET, partition=ORG, segments=doc("A")).cache_read_input_tokens == 3000
    )  # A used
    cache.account(model=SONNET, partition=ORG, segments=doc("C"))  # 9000 > 7000: B, least recently used, goes
    assert cache.stored_tokens == 6000
    assert cache.account(model=SONNET, partition=ORG, segments=doc("A")).cache_read_input_tokens == 3000
    assert cache.account(model=SONNET, partition=ORG, segments=doc("C")).cache_read_input_tokens == 3000
    assert cache.account(model=SONNET, partition=ORG, segments=doc("B")).cache_read_input_tokens == 0


# --------------------------------------------------------------------------------------------------
# Anthropic: the usage identity, as a property


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[Segment], str | None, float]:
    """A random prompt (few distinct contents, so prefixes repeat), an automatic marker and a wait."""
    order = ["tools", "system", "messages"]
    sections = sorted(draw(st.lists(st.sampled_from(order), min_size=1, max_size=30)), key=order.index)
    segs = []
    for section in sections:
        marker: Ttl | None = draw(st.sampled_from([None, None, None, None, None, None, "1h", "5m"]))
        segs.append(
            Segment(
                section,  # type: ignore[arg-type]
                draw(st.sampled_from([b"a", b"b", b"c"])),
                draw(st.integers(0, 400)),
                marker,
                eligible=marker is not None or draw(st.integers(0, 4)) > 0,
                block_type=draw(st.sampled_from(["", "text", "tool_use", "tool_result"])),
            )
        )
    return segs, draw(st.sampled_from([None, "5m", "1h"])), draw(st.floats(0, 400))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(requests(), min_size=1, max_size=6))
def test_read_plus_written_plus_input_is_the_whole_prompt(
    batch: list[tuple[list[Segment], str | None, float]],
) -> None:
    # "total_input_tokens = cache_read_input_tokens + cache_creation_input_tokens + input_tokens"
    clock = ManualClock()
    cache = AnthropicCache(clock=clock, capacity_tokens=3000)
    for segs, automatic, wait in batch:
        clock.advance(wait)
        # Each prompt twice, then with its last block dropped: the later sends read what the first wrote.
        for prompt in (segs, segs, segs[:-1]):
            try:
                result = cache.account(model=OPUS5, partition=ORG, segments=prompt, automatic=automatic)  # type: ignore[arg-type]
            except RequestRefusedError:
                break
            total = sum(s.tokens for s in prompt)
            assert (
                result.cache_read_input_tokens + result.cache_creation_input_tokens + result.input_tokens
                == total
            )
            assert min(result.fields()["cache_creation"].values()) >= 0
            assert (
                min(result.input_tokens, result.cache_read_input_tokens, result.cache_creation_input_tokens)
                >= 0
            )


# --------------------------------------------------------------------------------------------------
# OpenAI: automatic caching


@pytest.fixture
def openai(clock: ManualClock) -> OpenAICache:
    return OpenAICache(clock=clock)


def ids(count: int, start: int = 0) -> list[int]:
    return list(range(start, start + count))


@pytest.mark.parametrize(
    ("length", "cached"),
    # "Caching is enabled automatically for prompts that are 1024 tokens or longer"; "cache hits occurring in
    # increments of 128 tokens": 1023 never caches; 1151 reads 1024; 1152 = 1024 + 128 reads all.
    [(1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (1279, 1152), (2006, 1920)],
)
def test_openai_minimum_and_increments(openai: OpenAICache, length: int, cached: int) -> None:
    assert openai.account(model="gpt-4o", partition=ORG, tokens=ids(length)) == OpenAIUsage(length, 0)
    assert openai.account(model="gpt-4o", partition=ORG, tokens=ids(length)) == OpenAIUsage(length, cached)


def test_openai_reads_the_longest_shared_prefix(openai: OpenAICache) -> None:
    # "Cache hits are only possible for exact prefix matches within a prompt."
    openai.account(model="gpt-4.1", partition=ORG, tokens=ids(3000))
    other = [*ids(1500), *ids(1500, start=100_000)]
    # 1,500 shared tokens: the longest 1024 + 128k within them is 1408.
    assert openai.account(model="gpt-4.1", partition=ORG, tokens=other).cached_tokens == 1408
    assert openai.account(model="gpt-4.1", partition=ORG, tokens=[7, *ids(2999)]).cached_tokens == 0


def test_openai_in_memory_retention_is_five_idle_minutes(openai: OpenAICache, clock: ManualClock) -> None:
    # In-memory: caches are "typically" cleared "within 5 to 10 minutes of inactivity" (modelled as 5).
    prompt = ids(2048)
    openai.account(model="gpt-5", partition=ORG, tokens=prompt)
    clock.advance(299)
    assert openai.account(model="gpt-5", partition=ORG, tokens=prompt).cached_tokens == 2048  # refreshed
    clock.advance(299)
    assert openai.account(model="gpt-5", partition=ORG, tokens=prompt).cached_tokens == 2048
    clock.advance(300)
    assert openai.account(model="gpt-5", partition=ORG, tokens=prompt).cached_tokens == 0


def test_openai_24h_retention(openai: OpenAICache, clock: ManualClock) -> None:
    # prompt_cache_retention="24h": "keeps cached prefixes active for longer, up to a maximum of 24 hours".
    prompt = ids(1024)
    openai.account(model="gpt-5", partition=ORG, tokens=prompt, retention="24h")
    clock.advance(2 * 3600)
    assert openai.account(model="gpt-5", partition=ORG, tokens=prompt).cached_tokens == 1024
    clock.advance(86_400)
    assert openai.account(model="gpt-5", partition=ORG, tokens=prompt).cached_tokens == 0
    with pytest.raises(RequestRefusedError, match="prompt_cache_retention"):
        openai.account(model="gpt-5", partition=ORG, tokens=prompt, retention="1h")  # type: ignore[arg-type]


def test_openai_cache_key_and_partition_separate_caches(openai: OpenAICache) -> None:
    # "When you provide a prompt_cache_key, it is combined with that hash": another key is another cache.
    prompt = ids(1500)
    openai.account(model="gpt-5", partition=ORG, tokens=prompt, cache_key="user-1")
    assert openai.account(model="gpt-5", partition=ORG, tokens=prompt, cache_key="user-2").cached_tokens == 0
    assert openai.account(model="gpt-5", partition=ORG, tokens=prompt).cached_tokens == 0
    assert (
        openai.account(model="gpt-5", partition=b"org-2", tokens=prompt, cache_key="user-1").cached_tokens
        == 0
    )
    assert (
        openai.account(model="gpt-5-mini", partition=ORG, tokens=prompt, cache_key="user-1").cached_tokens
        == 0
    )
    assert (
        openai.account(model="gpt-5", partition=ORG, tokens=prompt, cache_key="user-1").cached_tokens == 1408
    )


def test_openai_lru_capacity(clock: ManualClock) -> None:
    cache = OpenAICache(clock=clock, capacity_tokens=2100)
    cache.account(model="gpt-5", partition=ORG, tokens=ids(1024))
    cache.account(model="gpt-5", partition=ORG, tokens=ids(1024, start=50_000))
    assert cache.account(model="gpt-5", partition=ORG, tokens=ids(1024)).cached_tokens == 1024
    cache.account(model="gpt-5", partition=ORG, tokens=ids(1024, start=90_000))  # evicts the 50_000 prompt
    assert cache.stored_tokens == 2048
    assert cache.account(model="gpt-5", partition=ORG, tokens=ids(1024)).cached_tokens == 1024
    assert cache.account(model="gpt-5", partition=ORG, tokens=ids(1024, start=50_000)).cached_tokens == 0


def test_openai_refuses_a_prompt_longer_than_the_context_window(openai: OpenAICache) -> None:
    # "This model's maximum context length is 128000 tokens. However, your messages resulted in 204308 tokens.
    # Please reduce the length of the messages." (github.com/webtimemachine/wtm2/issues/579)
    with pytest.raises(RequestRefusedError) as caught:
        openai.account(model="gpt-4o", partition=ORG, tokens=[1] * 128_001)
    assert str(caught.value) == (
        "This model's maximum context length is 128000 tokens. However, your messages resulted in "
        "128001 tokens. Please reduce the length of the messages."
    )
    assert openai.stored_tokens == 0

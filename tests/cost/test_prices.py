"""The price table: the bundled data file, name resolution, overrides, and malformed files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pytest

from cachekit.cost import PriceTable, PriceTableError, UsageRecord, default_prices
from cachekit.cost.prices import ModelPrice, Rates
from cachekit.errors import ConfigError

ROW: dict[str, Any] = {
    "provider": "acme",
    "model": "acme-1",
    "input": 1.0,
    "cache_write_5m": 1.25,
    "cache_write_1h": 2.0,
    "cache_read": 0.1,
    "output": 5.0,
    "source": "https://example.com/pricing",
    "checked": "2026-12-01",
}


def write(tmp_path: Path, rows: Any) -> Path:
    path = tmp_path / "prices.json"
    path.write_bytes(orjson.dumps({"models": rows}, option=orjson.OPT_INDENT_2))
    return path


def usage(uncached: int = 0, w5: int = 0, w1: int = 0, read: int = 0, output: int = 0) -> UsageRecord:
    return UsageRecord(uncached, w5, w1, read, output)


# -- the bundled table --------------------------------------------------------------------------------


def test_bundled_rows_are_dated_and_sourced() -> None:
    table = default_prices()
    assert len(table) >= 15
    for row in table:
        assert row.source is not None, row.model
        assert row.source.startswith("https://"), row.model
        assert row.checked is not None
        assert dt.date.fromisoformat(row.checked) <= dt.date(2026, 12, 31)


def test_bundled_table_covers_the_required_models() -> None:
    table = default_prices()
    for provider, model in [
        ("anthropic", "claude-opus-4-5"),
        ("anthropic", "claude-sonnet-4-5"),
        ("anthropic", "claude-haiku-4-5"),
        ("openai", "gpt-4.1"),
        ("openai", "gpt-4.1-mini"),
        ("openai", "gpt-4o"),
        ("openai", "gpt-4o-mini"),
        ("openai", "gpt-5-mini"),
    ]:
        assert table.lookup(provider, model) is not None, model


def test_anthropic_cache_multipliers() -> None:
    # Anthropic's docs: 5m write = 1.25x input, 1h write = 2x, read = 0.1x. Opus 5.5 (read 0.05x) is the
    # one documented exception in the table.
    for row in default_prices():
        if row.provider != "anthropic":
            continue
        for rates in filter(None, (row.rates, row.long_context)):
            assert rates.cache_write_5m == pytest.approx(1.25 * rates.input), row.model
            assert rates.cache_write_1h == pytest.approx(2 * rates.input), row.model
            expected = 0.05 if row.model == "claude-opus-5-5" else 0.1
            assert rates.cache_read == pytest.approx(expected * rates.input), row.model


# -- name resolution ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "name", "row"),
    [
        ("anthropic", "claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("anthropic", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic", "Claude-Sonnet-4-5", "claude-sonnet-4-5"),
        ("anthropic", "claude-sonnet-4-0", "claude-sonnet-4"),
        ("anthropic", "claude-opus-4-20250514", "claude-opus-4"),
        ("anthropic", "claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("openai", "gpt-4o-2024-08-06", "gpt-4o"),
        ("openai", "gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("openai", "gpt-5-nano-2025-08-07", "gpt-5-nano"),
        ("OpenAI", "gpt-4o", "gpt-4o"),
    ],
)
def test_names_resolve(provider: str, name: str, row: str) -> None:
    found = default_prices().lookup(provider, name)
    assert found is not None
    assert found.model == row


@pytest.mark.parametrize(
    ("provider", "name"),
    [
        ("anthropic", "claude-sonnet-4-5-extra"),  # no family guessing
        ("anthropic", "gpt-4o"),  # wrong provider
        ("openai", "gpt-4o-mini-mega"),
        ("deepseek", "deepseek-chat"),  # retired 2026-07-24 and left out of the table
        ("127.0.0.1:8000", "claude-sonnet-4-5"),  # an unknown host is not guessed to be Anthropic
    ],
)
def test_names_that_do_not_resolve(provider: str, name: str) -> None:
    assert default_prices().lookup(provider, name) is None


# -- pricing rules ------------------------------------------------------------------------------------


def test_batch_multiplier() -> None:
    table = default_prices()
    cost = table.price("anthropic", "claude-sonnet-4-5", usage(uncached=100_000, output=100_000), batch=True)
    # (100,000 x $3 + 100,000 x $15) x 0.5 = (0.30 + 1.50) x 0.5 = $0.90
    assert cost.total_usd == pytest.approx(0.9)
    assert table.price("anthropic", "claude-sonnet-4-5", usage(uncached=100_000), batch=False).total_usd == (
        pytest.approx(0.3)
    )


def test_tier_without_a_price_is_unknown_not_zero(tmp_path: Path) -> None:
    table = PriceTable.load(write(tmp_path, [{**ROW, "cache_write_1h": None}]))
    assert table.price("acme", "acme-1", usage(uncached=10, w1=5)).total_usd is None
    assert table.price("acme", "acme-1", usage(uncached=10, w5=5)).total_usd == pytest.approx(
        (10 * 1.0 + 5 * 1.25) / 1e6
    )


def test_zero_tokens_of_an_unpriced_tier_are_fine(tmp_path: Path) -> None:
    table = PriceTable.load(write(tmp_path, [{**ROW, "cache_read": None}]))
    assert table.price("acme", "acme-1", usage(uncached=1_000_000)).total_usd == pytest.approx(1.0)


# -- overrides -----------------------------------------------------------------------------------------


def test_overrides_merge_field_by_field() -> None:
    table = PriceTable.load(overrides=[{"provider": "openai", "model": "gpt-4o", "input": 2.0}])
    row = table.lookup("openai", "gpt-4o")
    assert row is not None
    assert row.rates.input == 2.0
    assert row.rates.output == 10.0  # kept from the bundled row
    assert row.source is not None  # so is the provenance


def test_overrides_add_models_and_accept_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, [{"provider": "mine", "model": "m-1", "input": 1, "output": 2}])
    table = PriceTable.load(overrides=path)
    assert table.lookup("mine", "m-1") is not None
    assert table.lookup("anthropic", "claude-sonnet-4-5") is not None


def test_override_can_remove_a_long_context_rule() -> None:
    table = PriceTable.load(
        overrides=[{"provider": "anthropic", "model": "claude-sonnet-4-5", "long_context": None}]
    )
    row = table.lookup("anthropic", "claude-sonnet-4-5")
    assert row is not None
    assert row.long_context is None


def test_override_of_a_new_model_needs_input_and_output() -> None:
    with pytest.raises(PriceTableError, match=r"row 0 \(model 'x-1'\): field 'output' is required"):
        PriceTable.load(overrides={"models": [{"provider": "x", "model": "x-1", "input": 1.0}]})


# -- malformed files -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"input": -1}, r"row 1 \(model 'acme-2'\): field 'input' must be a non-negative number"),
        ({"output": "5"}, r"row 1 \(model 'acme-2'\): field 'output' must be a non-negative number"),
        ({"cache_read": True}, r"row 1 \(model 'acme-2'\): field 'cache_read' must be a non-negative number"),
        ({"ouput": 5}, r"row 1 \(model 'acme-2'\): field 'ouput' is not a price-table field"),
        ({"source": "example.com"}, r"row 1 \(model 'acme-2'\): field 'source' must be the http\(s\) URL"),
        ({"checked": "2026-13-01"}, r"row 1 \(model 'acme-2'\): field 'checked' must be the date"),
        ({"checked": None}, r"row 1 \(model 'acme-2'\): field 'checked' must be the date"),
        ({"batch_multiplier": 2}, r"row 1 \(model 'acme-2'\): field 'batch_multiplier' must be a number in"),
        (
            {"long_context": {"threshold_tokens": 0, "input": 1, "output": 1}},
            r"row 1 \(model 'acme-2'\): field 'long_context.threshold_tokens' must be a positive integer",
        ),
        (
            {"long_context": {"threshold_tokens": 10, "input": 1}},
            r"row 1 \(model 'acme-2'\): field 'long_context.output' is required",
        ),
        ({"model": ""}, r"row 1 \(model ''\): field 'model' must be a non-empty string"),
        ({"aliases": "acme-two"}, r"row 1 \(model 'acme-2'\): field 'aliases' must be a list"),
    ],
)
def test_malformed_rows_are_rejected_naming_row_and_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = write(tmp_path, [ROW, {**ROW, "model": "acme-2", **change}])
    with pytest.raises(PriceTableError, match=message) as info:
        PriceTable.load(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{\n  "models": [\n    {"provider": "a",}\n  ]\n}\n')
    with pytest.raises(PriceTableError, match=r"invalid JSON at line 3 column"):
        PriceTable.load(path)


def test_duplicate_rows_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(
        PriceTableError, match=r"row 1 \(model 'acme-1'\): field 'model' repeats an earlier row"
    ):
        PriceTable.load(write(tmp_path, [ROW, ROW]))


def test_non_object_rows_and_missing_models_list(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match=r"row 0: must be an object"):
        PriceTable.load(write(tmp_path, [["acme"]]))
    path = tmp_path / "bare.json"
    path.write_text('{"rows": []}')
    with pytest.raises(PriceTableError, match="no 'models' list"):
        PriceTable.load(path)


def test_alias_collisions_are_rejected() -> None:
    rates = Rates(1.0, None, None, None, 1.0)
    with pytest.raises(PriceTableError, match="names both"):
        PriceTable([ModelPrice("p", "a", rates, aliases=("b",)), ModelPrice("p", "b", rates)])

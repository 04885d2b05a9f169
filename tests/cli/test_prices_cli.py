"""``cachekit prices``: ``--at`` reads what ``report --since`` reads (one parser), a date before the
model existed says so, and the source links are each shown once, none localized for another language.

Real parts: the bundled price table and the installed genai-prices data.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re

import pytest

from cachekit import cli
from cachekit.cost import genai
from cachekit.cost.prices import QUOTE_PROVIDERS, PriceTable, find_quote, format_quote
from cachekit.cost.report import parse_since


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(["prices", *argv], out=out)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("when", ["7d", "12h", "30m", "2w", "2026-05-01", "2026-05-01T12:30:00"])
def test_at_takes_what_report_since_takes(when: str) -> None:
    before = dt.datetime.now(dt.timezone.utc)
    status, out, err = run("gpt-4o", "--at", when)
    assert (status, err) == (0, "")
    shown = dt.datetime.strptime(out.split(" at ", 1)[1][:16], "%Y-%m-%d %H:%M").replace(
        tzinfo=dt.timezone.utc
    )
    expected = dt.datetime.fromtimestamp(parse_since(when), dt.timezone.utc)
    assert abs(shown - expected) <= dt.timedelta(minutes=1) + (dt.datetime.now(dt.timezone.utc) - before)


def test_the_same_words_are_refused_the_same_way() -> None:
    status, _, err = run("gpt-4o", "--at", "last tuesday")
    assert status == 2
    with pytest.raises(ValueError, match="--at takes") as refused:
        parse_since("last tuesday", option="--at")
    assert str(refused.value) in err


@pytest.mark.parametrize(
    ("model", "released", "how"),
    [
        ("claude-sonnet-4-5", "2025-09-29", "the released date of its price row"),
        ("gpt-4o-2024-08-06", "2024-08-06", "the date in its name"),
    ],
)
def test_a_date_before_the_model_existed_says_so(model: str, released: str, how: str) -> None:
    day = dt.date.fromisoformat(released)
    status, out, err = run(model, "--at", (day - dt.timedelta(days=1)).isoformat())
    assert status == 1, how
    assert out == ""
    assert f"{model} was released on {released}" in err
    assert f"--at {released} or later" in err
    status, out, _ = run(model, "--at", released)
    assert status == 0
    assert out.startswith(f"{'anthropic' if 'claude' in model else 'openai'} ")


def test_links_of_the_bundled_table_are_shown_once_in_english() -> None:
    table = PriceTable.load(use_genai=False)
    for row in table:
        quote = find_quote(row.model, row.provider, table=table)
        assert quote is not None
        text = format_quote(quote, dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc))
        links = re.findall(r"https?://\S+", text)
        assert row.source is not None  # every bundled row names its source
        assert links == [row.source.replace("/zh-CN/", "/en/")], text  # once: not in the source line too
        assert "/zh-" not in text


def _links_of(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("  http")]


@pytest.mark.skipif(not genai.available(), reason="genai-prices is part of the test install")
def test_links_from_genai_prices_are_unique_and_not_localized_for_another_language() -> None:
    for provider in QUOTE_PROVIDERS:
        for model in sorted(genai.model_ids([provider]))[:5]:
            quote = find_quote(model, provider)
            if quote is None:
                continue
            links = _links_of(format_quote(quote, dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)))
            keys = [link.split("#")[0].rstrip("/").lower() for link in links]
            assert len(keys) == len(set(keys)), links
            assert not [
                link for link in links if re.search(r"/(zh|ja|ko|de|fr|es|pt|it|ru)(-[a-z]+)?/", link, re.I)
            ]


def test_a_localized_or_repeated_link_is_shown_once_in_english() -> None:
    from cachekit.cost.prices import PriceQuote, Rates

    quote = PriceQuote(
        "anthropic",
        "claude-x",
        Rates(1.0, None, None, None, 2.0),
        "somewhere",
        (
            "https://platform.claude.com/docs/zh-CN/models/x/overview",
            "https://platform.claude.com/docs/en/models/x/overview/",
            "https://example.com/pricing#api",
            "https://example.com/pricing",
        ),
    )
    links = _links_of(format_quote(quote, dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)))
    assert links == [
        "https://platform.claude.com/docs/en/models/x/overview",
        "https://example.com/pricing#api",
    ]

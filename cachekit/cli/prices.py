"""``cachekit prices``: the prices cachekit uses for a model, and where they come from."""

from __future__ import annotations

import argparse
import logging
from typing import Any, TextIO

from cachekit.cli import _common
from cachekit.cli._common import say

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``prices`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_prices(commands)


def _prices(args: argparse.Namespace, out: TextIO) -> int:
    import datetime as dt

    from cachekit.cost import genai
    from cachekit.cost.prices import close_models, find_quote, format_quote, release_date
    from cachekit.cost.report import parse_since

    provider = _provider(args.provider)
    # The same values as `report --since`: 7d (a week ago), 12h, or an ISO date.
    stamp = parse_since(args.at, option="--at") if args.at else None
    at = (
        dt.datetime.now(dt.timezone.utc)
        if stamp is None
        else dt.datetime.fromtimestamp(stamp, dt.timezone.utc)
    )
    given = args.option or []
    bad = [option for option in given if "=" not in option]
    if bad:
        raise _common.UsageError(f"--option takes KEY=VALUE (service_tier=flex), got {bad[0]!r}")
    options = dict(option.split("=", 1) for option in given)
    if args.update:  # the only network access: asked for explicitly
        _update(genai)
    quote = find_quote(args.model, provider, at=at, context=options)
    if quote is None:
        close = close_models(args.model, provider)
        hint = f"did you mean {', '.join(close)}?" if close else "check the name as sent to the API"
        where = f" of {provider}" if provider else ""
        raise _common.CommandFailed(
            f"no price for {args.model!r}{where}: {hint} (a model cachekit does not know takes a row of "
            "your own: PriceTable.load(overrides=...))"
        )
    released = release_date(args.model, quote.provider)
    if released is not None and at.date() < released:
        raise _common.CommandFailed(
            f"{args.model} was released on {released:%Y-%m-%d}, after {at:%Y-%m-%d}: it had no price then "
            f"(ask --at {released:%Y-%m-%d} or later)"
        )
    out.write(format_quote(quote, at))
    return 0


def _provider(name: str | None) -> str | None:
    """``--provider``, lowercased, if cachekit prices its models; a name it does not know is an error."""
    from cachekit.cost.prices import QUOTE_PROVIDERS, default_prices

    if name is None:
        return None
    known = dict.fromkeys([*QUOTE_PROVIDERS, *(row.provider for row in default_prices())])
    if name.strip().lower() not in known:
        raise _common.UsageError(f"unknown provider {name!r}: use one of {', '.join(known)}")
    return name.strip().lower()


def _update(genai: Any) -> None:
    """Fetch the newest genai-prices data; a network that does not answer is one line, not a traceback."""
    if not genai.available():
        raise _common.CommandFailed(f"--update needs genai-prices: {genai.missing_reason()}")
    # Its background thread logs the failure too, and may do so after the wait below has returned:
    # a handler for the rest of this process keeps that record off stderr (the line below says it).
    quiet = logging.getLogger("genai-prices")
    if not any(isinstance(handler, logging.NullHandler) for handler in quiet.handlers):
        quiet.addHandler(logging.NullHandler())
    say("prices", "fetching the newest genai-prices data (up to 30 s) ...")
    try:
        genai.update_from_network()
    except Exception as exc:  # httpx's, ssl's and the OS's errors alike: the network did not answer
        reason = str(exc).strip() or type(exc).__name__
        raise _common.CommandFailed(
            f"--update could not fetch the newest prices ({reason}); without --update, the prices that "
            "shipped with genai-prices are used"
        ) from None


def _add_prices(commands: Any) -> None:
    prices = commands.add_parser(
        "prices",
        help="the prices cachekit uses for a model, and their source",
        description=(
            "The rates cachekit prices a model's calls at (USD per million tokens, by kind of token), at a "
            "moment and with the options a response reports, and where they come from."
        ),
        epilog="""examples:
  cachekit prices claude-sonnet-4-5
  cachekit prices gpt-4o --at 2025-01-01
  cachekit prices gpt-5 --option service_tier=flex
  cachekit prices deepseek-chat --provider deepseek --update   # the newest price data (network)""",
    )
    prices.add_argument("model", help="the model name, as sent to the API")
    prices.add_argument(
        "--provider",
        help="anthropic, openai, gemini, deepseek, kimi, glm, xai, bailian (default: the first that has it)",
    )
    prices.add_argument(
        "--at",
        help="the prices in force then: 7d, 12h, 30m ago, or an ISO date or time, UTC (default: now)",
    )
    prices.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="an option the response reports, repeatable: service_tier=flex, speed=fast, inference_geo=us "
        "(default: none, standard prices)",
    )
    prices.add_argument("--update", action="store_true", help="fetch the newest genai-prices data first")
    prices.set_defaults(run=_prices)

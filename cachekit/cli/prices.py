"""``cachekit prices``: the prices cachekit uses for a model, and where they come from."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``prices`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_prices(commands)


def _prices(args: argparse.Namespace, out: TextIO) -> int:
    import datetime as dt

    from cachekit.cost import genai
    from cachekit.cost.prices import find_quote, format_quote

    try:
        at = dt.datetime.fromisoformat(args.at) if args.at else dt.datetime.now(dt.timezone.utc)
        given = args.option or []
        if any("=" not in option for option in given):
            raise ValueError(f"--option takes KEY=VALUE, got {given!r}")
        options = dict(option.split("=", 1) for option in given)
        if args.update:  # the only network access: asked for explicitly
            genai.update_from_network()
    except (ValueError, RuntimeError, OSError) as exc:
        out.write(f"cachekit prices: {exc}\n")
        return 2
    at = at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)
    quote = find_quote(args.model, args.provider, at=at, context=options)
    if quote is None:
        out.write(
            f"cachekit prices: no price for {args.model!r}; add a row with PriceTable.load(overrides=...)\n"
        )
        return 1
    out.write(format_quote(quote, at.astimezone(dt.timezone.utc)))
    return 0


def _add_prices(commands: Any) -> None:
    prices = commands.add_parser("prices", help="the prices cachekit uses for a model, and their source")
    prices.add_argument("model", help="the model name, as sent to the API")
    prices.add_argument(
        "--provider",
        help="anthropic, openai, gemini, deepseek, kimi, glm, xai, bailian (default: the first that has it)",
    )
    prices.add_argument("--at", help="the prices in force then: an ISO date or time, UTC (default: now)")
    prices.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="an option the response reports, repeatable: service_tier=flex, speed=fast, inference_geo=us "
        "(default: none, standard prices)",
    )
    prices.add_argument("--update", action="store_true", help="fetch the newest genai-prices data first")
    prices.set_defaults(run=_prices)

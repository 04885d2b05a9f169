"""``cachekit replay``: what each cache-breakpoint policy costs on recorded agent conversations
(:mod:`cachekit.replay` does the replay)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, TextIO

from cachekit._progress import ProgressPrinter
from cachekit.cli import _common
from cachekit.cli._common import at_least, between, input_file, say

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``replay`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_replay(commands)


def _replay(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.replay import POLICIES, Conversation, Gaps, TraceError, read_traces, replay, requests_of

    gaps = Gaps.parse(args.gaps) if args.gaps is not None else Gaps("fixed", args.gap_seconds)
    path = input_file(args.traces, "a JSON Lines file of conversations (Anthropic layout)")
    openai = _replay_openai(args)  # a --prices file is read, and refused, before the traces
    conversations: list[Conversation] = []
    skipped: list[TraceError] = []
    for item in read_traces(path, limit=args.limit):
        if isinstance(item, TraceError):
            skipped.append(item)
        else:
            conversations.append(item)
    lines = len(conversations) + len(skipped)
    if not conversations:
        why = f": {skipped[0]}" if skipped else ""
        raise _common.UsageError(
            f"{args.traces} holds no conversation to replay ({lines} line{'s' if lines != 1 else ''}{why}); "
            "give one conversation "
            'per line, {"system", "tools", "messages"}'
        )
    if not any(requests_of(conversation, args.model) for conversation in conversations):
        raise _common.UsageError(
            f"{args.traces}: its {len(conversations)} conversation(s) hold no request to replay (a request "
            "is what comes before an assistant turn)"
        )
    if skipped:  # counted in one line, not printed one by one
        say(
            "replay",
            f"skipped {len(skipped)} of {lines} lines that are not conversations (first: {skipped[0]})",
        )
    with ProgressPrinter(sys.stderr, "cachekit replay") as progress:
        results = replay(
            conversations,
            provider=args.provider,
            model=args.model,
            policies=args.policy or POLICIES,
            gaps=gaps,
            seed=args.seed,
            progress=progress,
            **openai,
        )
    for result in results:  # a policy's refused requests: one line each policy, with the first
        if result.errors:
            refused = len(result.errors)
            say("replay", f"{result.policy}: {refused} request(s) refused (first: {result.errors[0]})")
    if args.json:
        for result in results:
            out.write(json.dumps(result.to_json()) + "\n")
        return 0
    out.write(
        f"{len(conversations)} conversations, {results[0].requests} requests, "
        f"{args.provider} {args.model}, gaps {gaps.label()} s, seed {args.seed} (input side only)\n\n"
    )
    header = f"{'policy':<16}{'read':>11}{'written':>11}{'uncached':>11}{'cost $':>11}{'no cache $':>12}"
    out.write(header + f"{'bound $':>10}{'efficiency':>12}\n")
    for result in results:
        efficiency = result.savings_efficiency
        out.write(
            f"{result.policy:<16}{result.cache_read_tokens:>11,}{result.cache_write_tokens:>11,}"
            f"{result.uncached_tokens:>11,}{result.cost_usd:>11.4f}{result.cost_no_cache_usd:>12.4f}"
            f"{result.cost_lower_bound_usd:>10.4f}"
            f"{'-' if efficiency is None else f'{efficiency:.3f}':>12}\n"
        )
    return 0


def _replay_openai(args: argparse.Namespace) -> dict[str, Any]:
    """The OpenAI layout and a price file, when given (``--layout``, ``--prices``)."""
    from cachekit.cost.prices import PriceTable

    extra: dict[str, Any] = {"layout": args.layout} if args.provider != "anthropic" else {}
    if args.prices is not None:
        extra["prices"] = PriceTable.load(overrides=input_file(args.prices, "a JSON file of price rows"))
    return extra


def _add_replay(commands: Any) -> None:
    from cachekit.replay import POLICIES

    replay = commands.add_parser(
        "replay",
        help="cost of each cache-breakpoint policy on recorded agent conversations",
        epilog="""examples:
  cachekit replay traces.jsonl                          # every policy, Anthropic's rules
  cachekit replay traces.jsonl --policy last --policy cachekit --gaps lognormal:60:4
  cachekit replay traces.jsonl --provider openai --layout responses --json""",
        description=(
            "Replays each conversation (request k = system, tools and the messages before assistant turn "
            "k) through cachekit and the local backend's billing, once per policy: none, system (a marker "
            "after the system prompt), last (a marker on the last message), auto (top-level automatic "
            "caching), system+last and system+last-1h (what LiteLLM's and LangChain's defaults send), "
            "auto-1h, cachekit (the planner), oracle-ttl (the planner's markers, each lifetime chosen "
            "knowing when the next request comes)."
        ),
    )
    replay.add_argument("traces", metavar="TRACES.jsonl", help="one conversation per line (Anthropic layout)")
    replay.add_argument(
        "--provider",
        choices=("anthropic", "openai", "bailian"),
        default="anthropic",
        help="the API the traces are replayed through (default: %(default)s)",
    )
    replay.add_argument(
        "--layout",
        choices=("chat", "responses"),
        default="chat",
        help="--provider openai: Chat Completions or Responses requests (default: %(default)s)",
    )
    replay.add_argument(
        "--prices",
        metavar="JSON",
        help="a file of price rows merged over the bundled table (default: the bundled table alone)",
    )
    replay.add_argument(
        "--model", default="claude-sonnet-4-5", help="prices and cache rules (default: %(default)s)"
    )
    replay.add_argument(
        "--policy",
        action="append",
        choices=(*POLICIES, "implicit"),
        help="a policy to replay (repeatable; default: all; openai: none, implicit, last, cachekit)",
    )
    replay.add_argument(
        "--gap-seconds",
        type=between(0.0, math.inf),
        default=5.0,
        help="seconds between requests (default: %(default)g)",
    )
    replay.add_argument(
        "--gaps",
        metavar="SPEC",
        help="think times drawn per request: fixed:S, uniform:LOW:HIGH, lognormal:MEDIAN:SPREAD, or "
        "trace[:S] (each conversation's gap_seconds) (default: fixed, --gap-seconds)",
    )
    replay.add_argument("--seed", type=int, default=0, help="seed of the drawn gaps (default: %(default)s)")
    replay.add_argument(
        "--limit", type=at_least(1), metavar="N", help="only the first N conversations (default: all)"
    )
    replay.add_argument("--json", action="store_true", help="one JSON object per policy")
    replay.set_defaults(run=_replay)

"""The ``cachekit`` command line.

``cachekit demo`` shows the exact response cache answering repeated requests offline, through the real
``anthropic`` SDK, against an in-process stand-in for the provider (no network, no API key).
``cachekit report`` prints what calls cost, with and without caching, from the cost ledger.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from cachekit._version import __version__

__all__ = ["main"]

_QUESTION = "What is the capital of France? Answer in one word."
_TOOLS_A = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"], "type": "string"}},
            "required": ["city"],
        },
    }
]
# The same tool with its schema's keys in another order, as a different code path might build it.
_TOOLS_B = [
    {
        "input_schema": {
            "required": ["city"],
            "properties": {"unit": {"type": "string", "enum": ["c", "f"]}, "city": {"type": "string"}},
            "type": "object",
        },
        "description": "Current weather for a city.",
        "name": "get_weather",
    }
]


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    try:
        import anthropic  # noqa: F401  (checked here to give the install hint before anything runs)
        import httpx2
    except ImportError:
        out.write("cachekit demo needs the anthropic SDK: pip install 'cachekit[anthropic]'\n")
        return 2
    import cachekit
    from cachekit.testing import FakeUpstream

    upstream = FakeUpstream(latency=args.latency)
    client = cachekit.Anthropic(
        api_key="demo-key-1",
        base_url="https://api.anthropic.com",
        http_client=httpx2.Client(transport=upstream),
        cache="memory://",
        max_retries=0,
    )
    out.write(f"cachekit {__version__} demo: the exact response cache, offline\n")
    out.write(
        f"upstream: an in-process stand-in for api.anthropic.com ({args.latency * 1000:.0f} ms a call); "
        "no network, no API key\n\n"
    )

    def ask(label: str, sdk: Any, tools: list[dict[str, Any]], question: str, **extra: Any) -> None:
        before = upstream.calls
        start = time.perf_counter()
        raw = sdk.messages.with_raw_response.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            tools=tools,
            messages=[{"role": "user", "content": question}],
            **extra,
        )
        elapsed = (time.perf_counter() - start) * 1000
        message = raw.parse()
        outcome = raw.headers.get("x-cachekit-cache", "-")
        called = "called" if upstream.calls > before else "not called"
        out.write(f"  {label:<44} {outcome:<7} {elapsed:8.1f} ms  upstream {called:<10}  id={message.id}\n")

    ask("1. a question", client, _TOOLS_A, _QUESTION)
    ask("2. the same question again", client, _TOOLS_A, _QUESTION)
    ask("3. same, tool schema keys in another order", client, _TOOLS_B, _QUESTION)
    ask("4. a different question", client, _TOOLS_A, "And of Italy?")
    ask(
        "5. the first question, x-cachekit: bypass",
        client,
        _TOOLS_A,
        _QUESTION,
        extra_headers={"x-cachekit": "bypass"},
    )
    other_key = client.with_options(api_key="demo-key-2")
    ask("6. the first question with another API key", other_key, _TOOLS_A, _QUESTION)

    stats = cachekit.cache_of(client).stats
    out.write(
        f"\nupstream calls: {upstream.calls} for 6 requests; cache hits {stats.hits}, misses {stats.misses}, "
        f"bypasses {stats.bypasses}\n"
        "2 and 3 were answered locally with the stored response (same message id): 3 differs only in\n"
        "JSON key order, which cachekit canonicalizes. 6 misses because entries are partitioned by an\n"
        "HMAC of the API key: two keys never share answers.\n"
    )
    client.close()
    return 0


def _report(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.cost.report import render_report

    try:
        text = render_report(
            args.ledger, by=args.by, since=args.since, as_json=args.json, plot_path=args.plot
        )
    except (ValueError, FileNotFoundError) as exc:
        out.write(f"cachekit report: {exc}\n")
        return 2
    out.write(text if text.endswith("\n") else text + "\n")
    if args.plot:
        out.write(f"wrote {args.plot}\n")
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cachekit", description="Caching middleware for hosted LLM APIs.")
    parser.add_argument("--version", action="version", version=f"cachekit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="show the exact response cache answering repeats, offline")
    demo.add_argument(
        "--latency",
        type=float,
        default=0.3,
        help="seconds the stand-in upstream takes per call (default 0.3)",
    )
    demo.set_defaults(run=_demo)
    report = commands.add_parser("report", help="cost with and without caching, from the cost ledger")
    report.add_argument("--since", help="only calls since then: 7d, 12h, 30m, or an ISO date")
    report.add_argument(
        "--by",
        default="model",
        help="group by model, tenant, site, day, provider or outcome (comma-separated)",
    )
    report.add_argument("--json", action="store_true", help="print JSON instead of a table")
    report.add_argument("--plot", metavar="PNG", help="also write a chart of cost with and without caching")
    report.add_argument(
        "--ledger", metavar="PATH", help="a ledger file (default: $CACHEKIT_HOME/ledger.sqlite3)"
    )
    report.set_defaults(run=_report)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``cachekit`` command; returns the exit status."""
    args = _build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace, TextIO], int] = args.run
    return run(args, out or sys.stdout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

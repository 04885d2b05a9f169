"""``cachekit demo``: every layer at work, offline, on the local backend; what cachekit saves.

The demo itself (the conversation, the runs with and without cachekit, the table and the chart) is
:mod:`cachekit.cli.demo_run`, imported when the command runs: the other commands never load the local
backend.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from cachekit.cli._common import output_file

__all__ = ["register"]

_EXAMPLES = """examples:
  cachekit demo                              # SmolLM2 on this machine (converted once, about 0.5 GB)
  cachekit demo --engine scripted            # canned answers: no model, seconds
  cachekit demo --engine scripted --no-semantic --no-chart   # and no torch: needs only the SDK
  cachekit demo --provider openai --chart openai.png"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_demo(commands)


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    # Checked before the work: a chart that cannot be written would be found after minutes of it.
    chart = None if args.no_chart else output_file(args.chart, "--chart", ".png")

    from cachekit.cli.demo_run import run_demo  # the local backend and the SDKs: only for this command

    run_demo(engine=args.engine, provider=args.provider, chart=chart, out=out, semantic=not args.no_semantic)
    return 0


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="every layer at work, offline, on a local model: what cachekit saves",
        description=(
            "Sends a support-agent conversation with tools and a batch of customer questions twice, through "
            "the plain SDK and through cachekit, to the local backend (SmolLM2-135M-Instruct, converted on "
            "first use; or the scripted engine), and prints tokens, breakpoints, hits and cost."
        ),
        epilog=_EXAMPLES,
    )
    demo.add_argument(
        "--engine",
        choices=("transformers", "scripted"),
        default="transformers",
        help="transformers: SmolLM2 on CPU or GPU; scripted: canned answers, no model (default: %(default)s)",
    )
    demo.add_argument(
        "--provider",
        choices=("anthropic", "openai"),
        default="anthropic",
        help="the SDK and API the conversation goes through (default: %(default)s)",
    )
    demo.add_argument(
        "--chart",
        default="cachekit-demo.png",
        metavar="PNG",
        help="where to write the chart (default: %(default)s)",
    )
    demo.add_argument("--no-chart", action="store_true", help="do not write a chart")
    demo.add_argument(
        "--no-semantic",
        action="store_true",
        help="leave the semantic cache off: no embedding model to load, and no torch to install",
    )
    demo.set_defaults(run=_demo)

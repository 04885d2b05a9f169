"""The ``cachekit`` command line.

``cachekit demo`` shows every layer at work offline on the local backend (SmolLM2), through the official
SDKs with and without cachekit, with what each layer saves (no network, no API key).
``cachekit report`` prints what calls cost, with and without caching, from the cost ledger.
``cachekit stats``, ``cachekit purge`` and ``cachekit health`` are the operator's tools for a store.
``cachekit semantic-eval PAIRS.jsonl`` measures the semantic cache's precision and recall on labelled pairs.
``cachekit serve`` runs the offline local backend: the providers' HTTP APIs on a local engine.
``cachekit proxy`` gives every layer to any client, in any language, that points its base URL at it.
``cachekit replay TRACES.jsonl`` compares cache-breakpoint policies on recorded agent conversations.
``cachekit diff A.json B.json`` shows where two requests' prompt prefixes diverge, and why.
``cachekit lint REQUEST.json ...`` names volatile content in the cached prefix of requests.
``cachekit prices MODEL`` shows the prices cachekit uses for a model, and where they come from.

Each command group is one module of this package whose ``register(commands)`` adds its commands to the
parser: :mod:`~cachekit.cli.demo`, :mod:`~cachekit.cli.report` (report, stats),
:mod:`~cachekit.cli.store` (purge, health), :mod:`~cachekit.cli.semantic` (semantic-eval),
:mod:`~cachekit.cli.serve`, :mod:`~cachekit.cli.proxy`, :mod:`~cachekit.cli.prices`,
:mod:`~cachekit.cli.replay` and :mod:`~cachekit.cli.prefix` (diff, lint). A command imports what it
runs only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from cachekit._version import __version__
from cachekit.cli import demo, prefix, prices, proxy, replay, report, semantic, serve, store

__all__ = ["main"]

#: Each command group's ``register``, in the order ``cachekit --help`` lists the commands.
_GROUPS = (demo, report, store, semantic, serve, proxy, prices, replay, prefix)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cachekit", description="Caching middleware for hosted LLM APIs.")
    parser.add_argument("--version", action="version", version=f"cachekit {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, help="the command to run (each has --help)"
    )
    for group in _GROUPS:
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``cachekit`` command; returns the exit status."""
    args = _build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace, TextIO], int] = args.run
    return run(args, out or sys.stdout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

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
What every command shares (its parser, range-checked argument types, the checks of the files it
reads and writes, the errors it raises) is :mod:`cachekit.cli._common`; :func:`main` turns whatever
stops a command into one line on stderr and the documented exit status (docs/cli.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from cachekit._version import __version__
from cachekit.cli import _common, demo, prefix, prices, proxy, replay, report, semantic, serve, store
from cachekit.cli._common import Formatter, Parser, say
from cachekit.errors import CachekitError, MissingExtraError

__all__ = ["main"]

logger = logging.getLogger("cachekit.cli")

#: Each command group's ``register``, in the order ``cachekit --help`` lists the commands.
_GROUPS = (demo, report, store, semantic, serve, proxy, prices, replay, prefix)

_EXIT_STATUSES = (
    "exit status: 0 success; 1 the command ran and failed, or its answer is no (an unhealthy store, "
    "requests that diverge, a missing extra); 2 the command line cannot be used as given (an unknown "
    "option, a value out of range, an input file that is missing, empty or of another kind)."
)


def _build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="cachekit",
        description="Caching middleware for hosted LLM APIs.",
        epilog=_EXIT_STATUSES,
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"cachekit {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, help="the command to run (each has --help)", parser_class=Parser
    )
    for group in _GROUPS:
        group.register(commands)
    for command in commands.choices.values():
        command.formatter_class = Formatter
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``cachekit`` command; returns the exit status.

    ``cachekit`` alone prints the help on stderr and returns 2, as for any other usage error (a
    command is required); ``cachekit --help`` prints it on stdout and exits 0. A usage error raises
    :class:`SystemExit` (2), as argparse does. Whatever else stops a command is printed as one line on
    stderr, ``cachekit COMMAND: what, and the fix``, and returned as the status (docs/cli.md).
    """
    parser = _build_parser()
    arguments = sys.argv[1:] if argv is None else list(argv)
    if not arguments:
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(arguments)
    return _run(args, out if out is not None else sys.stdout)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the command; turn what stops it into one line on stderr and an exit status."""
    run: Callable[[argparse.Namespace, TextIO], int] = args.run
    command: str = args.command
    try:
        status = run(args, out)
        out.flush()  # a closed pipe shows here, while it can still be handled
        return status
    except BrokenPipeError:
        # The reader went away (`cachekit ... | head -1`): nothing to tell it, no traceback.
        _discard_stdout(out)
        return 1
    except KeyboardInterrupt:
        say(command, "interrupted")
        return 130
    except _common.CommandError as exc:
        say(command, str(exc))
        return exc.status
    except MissingExtraError as exc:  # the fix is an install, not another command line
        say(command, str(exc))
        return 1
    except ValueError as exc:  # ConfigError and every malformed input: the command line must change
        logger.debug("cachekit %s: bad input", command, exc_info=True)
        say(command, str(exc))
        return 2
    except (CachekitError, OSError) as exc:
        logger.debug("cachekit %s failed", command, exc_info=True)
        say(command, _os_message(exc) if isinstance(exc, OSError) else str(exc))
        return 1


def _os_message(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


def _discard_stdout(out: TextIO) -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered for the
    closed pipe does not fail too (Python's documented recipe for SIGPIPE)."""
    if out is not sys.stdout:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind it: nothing will be flushed to a pipe
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

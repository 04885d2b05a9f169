"""``cachekit diff`` and ``cachekit lint``: the prefix tools on the command line.

``register(commands)`` adds both to the ``cachekit`` parser's subcommands. Exit status: 0 when there
is nothing to report, 1 when the requests diverge or lint has findings, 2 on bad input (the message
names the file), a ``--dialect`` the requests are visibly not written in included.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, TextIO

from cachekit.cli import _common
from cachekit.cli._common import input_file, quiet

__all__ = ["register"]

_DIALECTS = ("anthropic_messages", "openai_chat", "openai_responses")
_SHOWN = 80  # characters of a finding's match shown by `cachekit lint`


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``diff`` and ``lint`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    diff = commands.add_parser(
        "diff",
        help="where two requests' prompt prefixes diverge (block, token, character)",
        description="The first position where B stops sharing A's cached prefix, and why.",
        epilog="""examples:
  cachekit diff monday.json tuesday.json          # request bodies, or recorded calls holding them
  cachekit diff a.json b.json --json""",
    )
    diff.add_argument("a", metavar="A.json", help="a request body, or a recorded call holding one")
    diff.add_argument("b", metavar="B.json", help="the later request")
    diff.add_argument(
        "--dialect", choices=_DIALECTS, help="the API dialect (default: guessed from the bodies)"
    )
    diff.add_argument("--json", action="store_true", help="print the divergence as JSON (null when none)")
    diff.set_defaults(run=_diff)
    lint = commands.add_parser(
        "lint",
        help="volatile content in the cached prefix, and changes between calls",
        description="Lints the files in order, as successive calls of one conversation.",
        epilog="""examples:
  cachekit lint request.json
  cachekit lint call-1.json call-2.json call-3.json --json
  cachekit lint request.json --pattern 'session [0-9a-f]{8}'""",
    )
    lint.add_argument("requests", metavar="REQUEST.json", nargs="+", help="request bodies or recorded calls")
    lint.add_argument("--dialect", choices=_DIALECTS, help="the API dialect (default: guessed per file)")
    lint.add_argument("--json", action="store_true", help="print the findings as JSON")
    lint.add_argument(
        "--pattern",
        metavar="REGEX",
        action="append",
        help="also report matches of this regular expression (repeatable; default: the built-in checks only)",
    )
    lint.set_defaults(run=_lint)


def _load(path: str) -> dict[str, Any]:
    """The request body in ``path``, or a :class:`_common.UsageError` naming the file and what is wrong."""
    from cachekit.shape.diff import load_request

    try:
        return load_request(input_file(path, "a JSON request body, or a recorded call holding one"))
    except ValueError as error:
        raise _common.UsageError(str(error)) from None


def _diff(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.shape.diff import diff_requests

    a, b = _load(args.a), _load(args.b)
    divergence = diff_requests(a, b, dialect=args.dialect)
    if args.json:
        out.write(
            json.dumps(None if divergence is None else dataclasses.asdict(divergence), ensure_ascii=False)
        )
        out.write("\n")
    elif divergence is None:
        out.write("no divergence: B reads all of A's prefix\n")
    else:
        out.write(
            f"reason:  {divergence.reason}\n"
            f"block:   {divergence.block if divergence.block is not None else '-'}"
            f" (A: {divergence.where_a or '-'}, B: {divergence.where_b or '-'})\n"
            f"token:   {divergence.token} ({divergence.common_tokens} in the whole blocks before it)\n"
            f"char:    {divergence.char if divergence.char is not None else '-'}\n"
            f"detail:  {divergence.detail}\n"
            f"A:       {json.dumps(divergence.text_a, ensure_ascii=False)}\n"
            f"B:       {json.dumps(divergence.text_b, ensure_ascii=False)}\n"
        )
    return 0 if divergence is None else 1


def _shown(match: str | None) -> str:
    if match is None:
        return ""
    text = match if len(match) <= _SHOWN else match[: _SHOWN - 3] + "..."
    return f" {json.dumps(text, ensure_ascii=False)}"


def _lint(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.shape.diff import check_dialect, guess_dialect
    from cachekit.shape.lint import PrefixLinter

    bodies = [(path, _load(path)) for path in args.requests]
    if args.dialect is not None:
        for path, body in bodies:
            try:
                check_dialect(args.dialect, body)
            except ValueError as error:
                raise _common.UsageError(f"{path}: {error}") from None
    linter = PrefixLinter(patterns=args.pattern or ())  # a bad --pattern: ConfigError, exit 2
    rows: list[dict[str, Any]] = []
    with quiet("cachekit.lint"):
        for path, body in bodies:
            dialect = args.dialect or guess_dialect(body)
            # One conversation id for every file: they are linted as successive calls of one conversation.
            for finding in linter.check(dialect, body, conversation=b"cachekit lint"):
                rows.append({"file": path, **dataclasses.asdict(finding)})
    if args.json:
        out.write(json.dumps(rows, ensure_ascii=False, indent=2) + "\n")
    else:
        for row in rows:
            place = f"block {row['block']}" if row["block"] is not None else "request"
            char = f", char {row['offset']}" if row["offset"] is not None else ""
            out.write(
                f"{row['file']}: {row['code']} at {row['where']} ({place}{char}){_shown(row['match'])}\n"
                f"    fix: {row['fix']}\n"
            )
        files = len(bodies)
        out.write(
            f"{len(rows)} finding{'s' if len(rows) != 1 else ''} in {files} file{'s' if files != 1 else ''}\n"
        )
    return 1 if rows else 0

"""``cachekit diff`` and ``cachekit lint``: the prefix tools on the command line.

``register(commands)`` adds both to the ``cachekit`` parser's subcommands. Exit status: 0 when there
is nothing to report, 1 when the requests diverge or lint has findings, 2 on bad input (the message
names the file).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from cachekit.errors import ConfigError, MissingExtraError

__all__ = ["register"]

_DIALECTS = ("anthropic_messages", "openai_chat", "openai_responses")
_SHOWN = 80  # characters of a finding's match shown by `cachekit lint`


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``diff`` and ``lint`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    diff = commands.add_parser(
        "diff",
        help="where two requests' prompt prefixes diverge (block, token, character)",
        description="The first position where B stops sharing A's cached prefix, and why.",
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


def _load(path: str, out: TextIO, command: str) -> dict[str, Any] | None:
    from cachekit.shape.diff import load_request

    try:
        return load_request(path)
    except ValueError as error:
        out.write(f"cachekit {command}: {error}\n")
        return None


def _diff(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.shape.diff import diff_requests

    a = _load(args.a, out, "diff")
    b = _load(args.b, out, "diff") if a is not None else None
    if a is None or b is None:
        return 2
    try:
        divergence = diff_requests(a, b, dialect=args.dialect)
    except MissingExtraError as error:
        out.write(f"cachekit diff: {error}\n")
        return 2
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


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Keep a logger's warnings off stderr while the command prints the same findings to ``out``
    (Python prints records that no handler takes); handlers the user configured still get them."""
    target = logging.getLogger(name)
    handler = logging.NullHandler()
    target.addHandler(handler)
    try:
        yield
    finally:
        target.removeHandler(handler)


def _shown(match: str | None) -> str:
    if match is None:
        return ""
    text = match if len(match) <= _SHOWN else match[: _SHOWN - 3] + "..."
    return f" {json.dumps(text, ensure_ascii=False)}"


def _lint(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.shape.diff import guess_dialect
    from cachekit.shape.lint import PrefixLinter

    bodies = []
    for path in args.requests:
        body = _load(path, out, "lint")
        if body is None:
            return 2
        bodies.append((path, body))
    try:
        linter = PrefixLinter(patterns=args.pattern or ())
    except ConfigError as error:
        out.write(f"cachekit lint: {error}\n")
        return 2
    rows: list[dict[str, Any]] = []
    with _quiet("cachekit.lint"):
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

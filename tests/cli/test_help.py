"""``cachekit`` alone prints the help (on stderr, status 2: a command is required, as argparse treats a
missing required argument); ``cachekit --help`` prints it on stdout, status 0. Every command has a
description and examples (its epilog), and every example is a command line its parser accepts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cachekit import cli

ROOT = Path(__file__).resolve().parents[2]


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_cachekit_alone_prints_the_help_and_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cachekit"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: cachekit ")
    for name in commands():
        assert f"\n    {name} " in result.stderr  # each command, with its one-line help
    assert "exit status: 0 success; 1 " in " ".join(result.stderr.split())


def test_cachekit_help_is_on_stdout_and_exits_0() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cachekit", "--help"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0
    assert result.stderr == ""
    assert result.stdout.startswith("usage: cachekit ")


def test_main_without_arguments_returns_2_with_the_help_on_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main([], out=out) == 2
    assert out.getvalue() == ""
    assert err.getvalue().startswith("usage: cachekit ")


@pytest.mark.parametrize("name", list(commands()))
def test_every_command_has_a_description_and_examples_that_parse(name: str) -> None:
    parser = commands()[name]
    assert parser.description, f"cachekit {name} has no description"
    assert parser.epilog, f"cachekit {name} has no examples"
    lines = parser.epilog.splitlines()
    assert lines[0] == "examples:"
    examples = [line.split("  #")[0].strip() for line in lines[1:]]
    assert examples, f"cachekit {name} has no example"
    for example in examples:
        words = shlex.split(example)
        assert words[:2] == ["cachekit", name], example
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                cli._build_parser().parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"the example {example!r} does not parse: {err.getvalue()}")
    # The examples are printed as written, one per line, under the options.
    printed = parser.format_help()
    assert printed.rstrip().endswith(lines[-1].rstrip()), printed
    for line in lines[1:]:
        assert f"\n{line}\n" in printed + "\n", line

"""What every command of ``cachekit`` shares: its parser and help layout, the errors a command raises
for :func:`cachekit.cli.main` to print, argument types that check ranges, and the checks of the files
a command reads and writes, made before any work starts.

Exit statuses (docs/cli.md): 0 success; 1 the command ran and failed, or its answer is no; 2 the
command line cannot be used as given (``argparse``'s status for a usage error).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

__all__ = [
    "CommandError",
    "CommandFailed",
    "Formatter",
    "Parser",
    "UsageError",
    "at_least",
    "between",
    "input_file",
    "missing",
    "output_file",
    "port",
    "quiet",
    "say",
]


class CommandError(Exception):
    """A command cannot go on: :func:`cachekit.cli.main` prints the message as one line on stderr,
    after ``cachekit COMMAND:``, and exits with :attr:`status`."""

    status = 1


class CommandFailed(CommandError):
    """The command ran and failed, or its answer is no (exit 1)."""

    status = 1


class UsageError(CommandError):
    """The command line cannot be used as given: an option, or a file it names (exit 2)."""

    status = 2


class Formatter(argparse.HelpFormatter):
    """argparse's layout, except that a text with line breaks (an epilog of examples) is kept as
    written instead of being filled into one paragraph."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "\n".join(indent + line if line else line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


class Parser(argparse.ArgumentParser):
    """``cachekit``'s parser: a usage error is one line on stderr that names the problem and where
    the help is, and exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line and exit 2 (argparse prints its whole usage otherwise)."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


# -- argument types: each checks its range, and argparse names the option in the error -------------


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: any free port)."""
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port: use 0 to 65535 (0: any free port)")
    return value


def at_least(low: int) -> Callable[[str], int]:
    """An integer no smaller than ``low``."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is too small: use {low} or more")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def between(
    low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], float]:
    """A finite number in ``[low, high]`` (an open end excludes its bound; ``high`` may be infinite)."""
    if math.isinf(high):
        shown = f"{'above' if low_open else 'of at least'} {low:g}"
    else:
        shown = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        inside = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high
        )
        if not math.isfinite(value) or not inside:
            raise argparse.ArgumentTypeError(f"{text} is out of range: use a number {shown}")
        return value

    parse.__name__ = f"number {shown}"
    return parse


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


# -- files, checked before the work -----------------------------------------------------------------


def input_file(path: str, what: str) -> Path:
    """``path`` as a file to read, or a :class:`UsageError` naming it and ``what`` it should be."""
    where = Path(path)
    if not where.exists():
        raise UsageError(f"{path}: no such file (give the path of {what})")
    if where.is_dir():
        raise UsageError(f"{path} is a directory (give the path of {what})")
    if not os.access(where, os.R_OK):
        raise UsageError(f"{path}: permission denied (make it readable, or give another copy of {what})")
    return where


def output_file(path: str, option: str, suffix: str) -> Path:
    """``path`` as a file this command will write at its end, checked now, before the work: it names
    a ``suffix`` file, and its folder exists (or can be made) and takes a new file. Nothing is left
    behind by the check."""
    where = Path(path)
    if where.suffix.lower() != suffix:
        raise UsageError(f"{option} {path}: the file is a {suffix[1:].upper()}; name a {suffix} file")
    if where.is_dir():
        raise UsageError(f"{option} {path} is a directory; name a {suffix} file")
    folder = where.parent
    while not folder.exists():  # the nearest folder that exists: the rest is made when writing
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: {folder} is a file, not a folder; name a {suffix} file elsewhere")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass  # a real write test: permission bits say nothing to root, nor of a read-only mount
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(
            f"{option} {path}: cannot write in {folder} ({reason}); name a {suffix} file elsewhere"
        ) from None
    return where


def missing(module: str) -> bool:
    """Whether ``module`` cannot be imported (``None`` in ``sys.modules``, as a test that blocks it
    leaves it, counts as missing)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None, or a module without a spec
        return True


@contextmanager
def quiet(name: str) -> Iterator[None]:
    """Keep a logger's records off stderr while the command says the same in its own words (Python
    prints records that no handler takes); handlers the user configured still get them."""
    target = logging.getLogger(name)
    handler = logging.NullHandler()
    target.addHandler(handler)
    try:
        yield
    finally:
        target.removeHandler(handler)


def say(command: str | None, message: str) -> None:
    """Print ``message`` as one line on stderr, after ``cachekit COMMAND:``."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    sys.stderr.write(f"cachekit{' ' + command if command else ''}: {line}\n")
    sys.stderr.flush()

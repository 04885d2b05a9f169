"""How the command line shows figures: money, counts, tables, colour. One look for every command.

``cachekit report`` (:mod:`cachekit.cost.report`), ``cachekit stats`` and the demo format their
figures here, so a dollar amount, a token count or a table reads the same in each:

* money: :func:`usd` (``$0.0123``, ``-$0.0016``, ``$1,234.57``) for people, :func:`usd_json` (USD
  rounded to :data:`MONEY_DECIMALS` places) for JSON;
* tables: :func:`table`, plain text with a rule under the header, numbers right-aligned under the
  end of their header, fitted to a width (optional columns left out and named in a note, then label
  cells shortened): never a line longer than the terminal, where the figures can fit at all;
* colour: :func:`colour_on` (a terminal, and ``NO_COLOR`` unset or empty) and :func:`paint`.

Nothing here imports the rest of cachekit.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

__all__ = [
    "MONEY_DECIMALS",
    "Column",
    "colour_on",
    "count",
    "paint",
    "share",
    "table",
    "terminal_width",
    "usd",
    "usd_json",
]

#: Decimal places of USD amounts in JSON output: a millionth of a dollar. Enough for any total (a
#: bill shows cents) and free of binary noise such as ``0.30000000000000004``.
MONEY_DECIMALS = 6

_GAP = "  "
_ELLIPSIS = "…"
_MIN_LABEL = 8  # a shortened label cell keeps at least this many characters
_STYLES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def usd(value: float) -> str:
    """Dollars for people: 4 decimals under $100, cents above, the sign before the ``$``."""
    sign = "-" if value < 0 and round(abs(value), 4) > 0 else ""
    magnitude = abs(value)
    return f"{sign}${magnitude:,.4f}" if magnitude < 100 else f"{sign}${magnitude:,.2f}"


def usd_json(value: float | None) -> float | None:
    """Dollars for JSON: rounded to :data:`MONEY_DECIMALS` places (``None`` stays ``None``)."""
    if value is None:
        return None
    rounded = round(value, MONEY_DECIMALS)
    return rounded + 0.0  # -0.0 -> 0.0: no "-0.0" in a document


def count(value: int) -> str:
    """A count with thousands separators."""
    return f"{value:,}"


def share(part: float, whole: float) -> str:
    """``part`` of ``whole`` as a whole percent (``-`` when ``whole`` is 0: no share to speak of)."""
    return f"{part / whole:.0%}" if whole else "-"


def terminal_width(stream: TextIO) -> int | None:
    """The width to fit text to on ``stream``: its terminal's columns, ``$COLUMNS`` when set, or
    ``None`` (a file or a pipe: no limit, so nothing is left out of what is saved)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdecimal() and int(columns) > 0:
        return int(columns)
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return shutil.get_terminal_size().columns
    return None


def colour_on(stream: TextIO) -> bool:
    """Whether to colour what goes to ``stream``: only on a terminal, and never with ``NO_COLOR`` set
    to anything but the empty string (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


def paint(text: str, style: str, on: bool) -> str:
    """``text`` in ``style`` (``bold``, ``dim``, ``red``, ``green``, ``yellow``, ``cyan``) when
    ``on``; pad before painting, since the escape codes take no columns on screen."""
    if not on or not text:
        return text
    return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"


@dataclass(frozen=True, slots=True)
class Column:
    """One column of :func:`table`.

    ``label`` columns (names: a model, a tenant) are left-aligned and may be shortened with an
    ellipsis to fit; the others are figures, right-aligned. An ``optional`` column may be left out
    to fit, the rightmost first (the note under the table names it).
    """

    header: str
    label: bool = False
    optional: bool = False

    @property
    def align(self) -> Literal["<", ">"]:
        """``<`` for a label column, ``>`` for a figure."""
        return "<" if self.label else ">"


def table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    footer: Sequence[str] | None = None,
    width: int | None = None,
) -> str:
    """Rows under a header and a rule (and a rule and ``footer``), each cell under its column's header.

    With ``width``, no line is longer: optional columns are left out first (rightmost first) and named
    in a last line, then label cells are shortened with an ellipsis. Trailing spaces are trimmed.
    """
    keep = list(range(len(columns)))
    grid = [[c.header for c in columns], *(list(r) for r in rows)]
    if footer is not None:
        grid.append(list(footer))
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    left_out: list[str] = []
    if width is not None:
        # Names stay whole as long as they can (a cut name may match two rows): optional columns go
        # first, rightmost first; only then are label cells shortened.
        optional = [i for i in keep if columns[i].optional]
        while _span(widths, keep) > width and optional:
            dropped = optional.pop()
            keep.remove(dropped)
            left_out.insert(0, columns[dropped].header)
        widths = _shorten_labels(columns, widths, width, keep)

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i in keep:
            cell = cells[i]
            if len(cell) > widths[i]:
                cell = cell[: max(0, widths[i] - 1)] + _ELLIPSIS
            parts.append(f"{cell:{columns[i].align}{widths[i]}}")
        return _GAP.join(parts).rstrip()

    rule = _GAP.join("-" * widths[i] for i in keep)
    lines = [line([c.header for c in columns]), rule, *(line(r) for r in rows)]
    if footer is not None:
        lines += [rule, line(footer)]
    if left_out:
        note = f"(left out to fit {width} columns: {', '.join(left_out)})"
        lines.append(note if width is None or len(note) <= width else note[: width - 1] + _ELLIPSIS)
    return "\n".join(lines)


def _span(widths: Sequence[int], keep: Sequence[int]) -> int:
    return sum(widths[i] for i in keep) + len(_GAP) * (len(keep) - 1)


def _shorten_labels(
    columns: Sequence[Column], widths: Sequence[int], width: int, keep: Sequence[int] | None = None
) -> list[int]:
    """``widths`` with the widest label column cut, one character at a time, until the kept columns
    fit ``width`` or every label is down to its floor (its header, or :data:`_MIN_LABEL`)."""
    kept = list(range(len(columns))) if keep is None else list(keep)
    out = list(widths)
    floors = {i: max(len(columns[i].header), _MIN_LABEL) for i in kept if columns[i].label}
    while _span(out, kept) > width:
        wide = [i for i in floors if out[i] > floors[i]]
        if not wide:
            break
        widest = max(wide, key=lambda i: out[i])
        out[widest] -= 1
    return out

"""A Griffe extension: read cachekit's reStructuredText-flavoured docstrings as Markdown.

cachekit's docstrings use Google-style sections with a few reStructuredText habits that Markdown
would print literally. Before mkdocstrings renders them, this extension rewrites:

* Sphinx cross-reference roles (``:class:`Cache```, ``:meth:`~Pipeline.exchange```, ``:mod:`...```)
  into optional autorefs links: the name is resolved in the docstring's own scope, the link goes to
  the object's page when the reference documents it, and a name it does not document is plain code
  (never a broken link, never a warning);
* ``text::`` literal-block markers into ``text:`` (the indented block after it is already a code
  block in Markdown), and a ``::`` line alone into nothing;
* simple tables (``====  ====`` borders) into Markdown tables.

It also keeps griffe from warning about the arguments a class documents for its ``__new__`` when it
has no ``__init__`` (griffe reads only ``__init__`` as a class's signature).

Only the docstrings' text changes; the source files are untouched.
"""

from __future__ import annotations

import re
from typing import Any

try:
    import griffe
except ImportError:  # without the docs extra the converter still works (its tests need no griffe)
    griffe = None

__all__ = ["RstDocstrings", "rst_to_markdown"]

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
_BORDER = re.compile(r"^( *)=+(?: +=+)+ *$")


def _identifier(name: str, scope: Any) -> str:
    """The full dotted path of ``name`` as written in a docstring of ``scope`` (best effort)."""
    name = name.lstrip(".")
    if scope is None or name.startswith("cachekit."):
        return name
    head, _, rest = name.partition(".")
    try:
        resolved = scope.resolve(head)
    except Exception:  # griffe's NameResolutionError, or a scope that cannot resolve
        return name
    return f"{resolved}.{rest}" if rest else resolved


def _roles(text: str, scope: Any) -> str:
    def link(match: re.Match[str]) -> str:
        short, name = match.group(1) == "~", match.group(2).strip()
        title = name.rsplit(".", 1)[-1] if short else name.lstrip(".")
        return (
            f'<autoref identifier="{_identifier(name, scope)}" optional>'
            f"<code>{title.replace('<', '&lt;')}</code></autoref>"
        )

    return _ROLE.sub(link, text)


def _cells(line: str, starts: list[int]) -> list[str]:
    padded = line.ljust(starts[-1] + 1)
    bounds = [*starts[1:], len(padded)]
    return [padded[start:end].strip() for start, end in zip(starts, bounds, strict=True)]


def _table(lines: list[str], indent: int) -> list[str]:
    """A simple table (border, header, border, rows, border) as Markdown; multi-line rows joined."""
    border = lines[0]
    starts = [m.start() for m in re.finditer(r"=+", border)]
    rows: list[list[str]] = []
    separators = 0
    header: list[str] | None = None
    for line in lines[1:]:
        if _BORDER.match(line):
            separators += 1
            if separators == 1 and rows:
                header, rows = rows[0], []
            continue
        if not line.strip():
            continue
        cells = _cells(line, starts)
        if rows and not cells[0]:  # a continuation line: the first column is blank
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    if header is None:  # no header row: the first row serves
        header, rows = (rows[0], rows[1:]) if rows else ([""] * len(starts), [])
    pad = " " * indent

    def row(cells: list[str]) -> str:
        return pad + "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [row(header), pad + "|" + "---|" * len(starts), *(row(r) for r in rows)]


def rst_to_markdown(text: str, scope: Any = None) -> str:
    """``text`` (a docstring) with roles, literal-block markers and simple tables made Markdown."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        border = _BORDER.match(line)
        if border:
            # A table is a border, a header, a border, rows and a closing border: three borders.
            end, seen = i + 1, 1
            while end < len(lines) and seen < 3:
                if _BORDER.match(lines[end]):
                    seen += 1
                end += 1
            if seen == 3:
                out.extend(_table(lines[i:end], len(border.group(1))))
                i = end
                continue
        stripped = line.rstrip()
        if stripped.strip() == "::":
            line = ""
        elif stripped.endswith("::") and not stripped.endswith(":::"):
            line = stripped[:-1]
        out.append(line)
        i += 1
    return _roles("\n".join(out), scope)


def _convert(obj: Any, seen: set[int]) -> None:
    if id(obj) in seen or obj.is_alias:
        return
    seen.add(id(obj))
    docstring = obj.docstring
    if docstring is not None:
        converted = rst_to_markdown(docstring.value, obj)
        if converted != docstring.value:
            docstring.value = converted
            docstring.__dict__.pop("parsed", None)  # parsed lazily: drop a stale parse
        if obj.is_class and "__new__" in obj.members and "__init__" not in obj.members:
            # The class documents the arguments of its __new__ (EncryptedStore returns the subclass
            # that fits the store), which griffe does not take as the class's signature.
            docstring.parser_options = {
                **docstring.parser_options,
                "warn_unknown_params": False,
                "warn_missing_types": False,
            }
    for member in obj.members.values():
        _convert(member, seen)


class RstDocstrings(griffe.Extension if griffe is not None else object):  # type: ignore[misc]
    """Rewrite every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        """Convert the docstrings of ``pkg`` and everything in it."""
        _convert(pkg, set())

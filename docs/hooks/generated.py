"""MkDocs hook: the parts of the docs that are generated from cachekit itself, at build time.

A page asks for a generated part with an HTML comment on a line of its own (invisible wherever the
Markdown is read unrendered), and the hook replaces it before MkDocs renders the page:

* ``<!-- cachekit:providers -->`` — the provider table (hosts, APIs, answer-changing headers) from
  :data:`cachekit.providers.PROVIDERS`;
* ``<!-- cachekit:cache-rules NAME -->`` — a provider's prompt-caching rules, one row per model family,
  each with its source and the date it was read, from ``cachekit/providers/cache_rules.json``;
* ``<!-- cachekit:prices NAME -->`` — a provider's prices with sources and dates, from
  ``cachekit/cost/prices.json``;
* ``<!-- cachekit:usage NAME -->`` — the usage fields cachekit reads for a provider (the table in
  :mod:`cachekit.cost.usage`'s docstring) and an example normalized by :func:`cachekit.cost.normalize`
  itself;
* ``<!-- cachekit:correctness DIALECT -->`` — what may be answered from cache: every row of the
  classification table (:data:`cachekit.providers.state.FIELDS`) for one API dialect;
* ``<!-- cachekit:cli -->`` / ``<!-- cachekit:cli COMMAND -->`` — ``cachekit [COMMAND] --help``;
  ``<!-- cachekit:cli-sections -->`` — a section with the help of every subcommand there is.

The data files are read through cachekit's own loaders (so inherited fields and validation are the
library's), and the examples are computed by the library: the pages cannot drift from the code. An
unknown marker or provider is a warning, which ``mkdocs build --strict`` turns into a failure.

Every page commits the generated text, so that it reads complete in the repository too (there is no
hosted site): the marker opens a block that ``<!-- /cachekit:KIND -->`` closes, and the text between
them is what the generator printed. ``scripts/gen-docs`` (``python docs/hooks/generated.py``) rewrites
every block under ``docs/`` from the code, and turns a bare marker into a block (``--check``: exit 1,
naming the stale pages, instead of writing); ``tests/meta/test_docs.py`` fails while a page holds a
bare marker or a block that differs from what the generator prints, so a change to the data files or
the command line is committed with its docs. The site build regenerates each block like a marker, so
the site shows the same text. The generated text is plain Markdown (no MkDocs-only syntax): it is
read on the code host as it is.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.cachekit")

_MARKER = re.compile(r"^<!-- cachekit:([a-z-]+)(?: ([A-Za-z0-9_.-]+))? -->$", re.MULTILINE)
# A committed block: the marker, the generated text, and a closing marker of the same kind. The text
# may hold no other marker line: a bare marker before a block never swallows the text up to that
# block's end.
_BLOCK = re.compile(
    r"^(<!-- cachekit:([a-z-]+)(?: ([A-Za-z0-9_.-]+))? -->)\n"
    r"(?:(?!<!-- /?cachekit:)[^\n]*\n)*?"
    r"^(<!-- /cachekit:\2 -->)$",
    re.MULTILINE,
)
#: The command that rewrites the committed blocks (what a stale page's message tells to run).
COMMAND = "scripts/gen-docs"
#: The width the command line's help is laid out in (a terminal's width would make the text vary).
HELP_WIDTH = 100

#: Which rows of the usage table in cachekit.cost.usage's docstring describe each provider.
USAGE_ROWS: dict[str, tuple[str, ...]] = {
    "anthropic": ("Anthropic Messages",),
    "openai": ("OpenAI Chat Completions", "OpenAI Responses"),
    "deepseek": ("DeepSeek (chat)", "Anthropic Messages"),
    "kimi": ("Kimi / Moonshot (chat)", "Anthropic Messages"),
    "glm": ("OpenAI Chat Completions",),
    "bailian": ("Bailian / DashScope (chat)",),
    "gemini": ("Gemini (OpenAI endpoint)", "OpenAI Chat Completions"),
    "xai": ("OpenAI Chat Completions",),
    "azure": ("OpenAI Chat Completions", "OpenAI Responses"),
}

#: Illustrative usage objects in each provider's shape (the numbers are made up; the normalized
#: record shown beside each is computed by cachekit.cost.normalize at build time).
USAGE_EXAMPLES: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "anthropic": (
        (
            "anthropic_messages",
            {
                "input_tokens": 12,
                "cache_creation_input_tokens": 1800,
                "cache_read_input_tokens": 5400,
                "cache_creation": {"ephemeral_5m_input_tokens": 1800, "ephemeral_1h_input_tokens": 0},
                "output_tokens": 250,
            },
        ),
    ),
    "openai": (
        (
            "openai_chat",
            {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920},
                "completion_tokens_details": {"reasoning_tokens": 128},
            },
        ),
        (
            "openai_responses",
            {
                "input_tokens": 2006,
                "input_tokens_details": {"cached_tokens": 1920},
                "output_tokens": 300,
                "output_tokens_details": {"reasoning_tokens": 128},
                "total_tokens": 2306,
            },
        ),
    ),
    "deepseek": (
        (
            "openai_chat",
            {
                "prompt_tokens": 2006,
                "prompt_cache_hit_tokens": 1920,
                "prompt_cache_miss_tokens": 86,
                "completion_tokens": 300,
                "total_tokens": 2306,
            },
        ),
    ),
    "kimi": (
        (
            "openai_chat",
            {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306, "cached_tokens": 1920},
        ),
    ),
    "glm": (
        (
            "openai_chat",
            {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920},
            },
        ),
    ),
    "bailian": (
        (
            "openai_chat",
            {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {
                    "cached_tokens": 0,
                    "cache_creation_input_tokens": 1990,
                    "cache_creation": {"ephemeral_5m_input_tokens": 1990},
                },
            },
        ),
    ),
    "gemini": (
        (
            "openai_chat",
            {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2706},
        ),
    ),
    "xai": (
        (
            "openai_chat",
            {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920},
                "completion_tokens_details": {"reasoning_tokens": 128},
            },
        ),
    ),
    "azure": (
        (
            "openai_chat",
            {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 400},
            },
        ),
    ),
}


def _cell(value: object) -> str:
    if value is None:
        return "—"
    text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _source(url: str | None, date: str | None) -> str:
    if not url:
        return _cell(date)
    host = re.sub(r"^https?://", "", url).split("/", 1)[0]
    return f"[{host}]({url}), {date}" if date else f"[{host}]({url})"


def providers_table(_: str | None = None) -> str:
    """The provider table: routing, answer-changing headers, which data rows exist, and whether Chat
    streams are asked for their usage (``Provider.stream_usage``)."""
    from cachekit.cost import default_prices, genai
    from cachekit.providers import PROVIDERS
    from cachekit.providers.cache_rules import default_cache_rules

    ruled = set(default_cache_rules().providers)
    priced = {row.provider for row in default_prices()}
    priced.update(p.name for p in PROVIDERS if genai.pricing_pages(p.name) is not None)
    rows = [
        [
            f"`{p.name}`",
            ", ".join(f"`{h}`" for h in p.hosts),
            ", ".join(f"`{d}`" for d in sorted(p.dialects)),
            ", ".join(f"`{h}`" for h in p.key_headers),
            "yes" if p.name in ruled else "no",
            "yes" if p.name in priced else "no",
            "yes" if p.stream_usage else "no",
        ]
        for p in PROVIDERS
    ]
    header = [
        "provider",
        "hosts",
        "APIs (dialects)",
        "headers in the key",
        "cache rules",
        "prices",
        "stream usage",
    ]
    return _table(header, rows)


def cache_rules_table(provider: str | None) -> str:
    """One provider's prompt-caching rules, a row per model family, with source and date."""
    from cachekit.providers import PROVIDERS
    from cachekit.providers.cache_rules import default_cache_rules

    table = default_cache_rules()
    name = _known(provider, set(table.providers) | _provider_names(), "cache-rules")
    rows = sorted(
        (r for r in table if r.provider == name), key=lambda r: _file_order().get((name, r.prefix), 0)
    )
    follows = next((p.rules_as for p in PROVIDERS if p.name == name and p.rules_as), None)
    if not rows and follows is not None:
        return (
            f"cachekit's rules table (`cachekit/providers/cache_rules.json`) has no row for `{name}`: its "
            f"requests are planned by `{follows}`'s rows, model by model (see that provider's table)."
        )
    if not rows:
        return (
            f"cachekit's rules table (`cachekit/providers/cache_rules.json`) has no row for `{name}`, so "
            "cachekit places no `cache_control` breakpoints and sets no `prompt_cache_key` on its "
            "requests. They still go upstream as canonical bytes, so a prefix cache on the provider's "
            "side sees the same prompt the same way every time."
        )
    body = []
    for r in rows:
        ttls = ", ".join(f"`{k}` {_duration(v)}" for k, v in r.ttl_seconds.items())
        explicit = r.mode == "explicit"
        body.append(
            [
                f"`{r.prefix}`" if r.prefix else "*(default)*",
                r.mode + (" (and later versions no row names)" if r.later_versions else ""),
                _cell(r.min_cacheable_tokens),
                _cell(r.max_breakpoints) if explicit else _cell(r.increment_tokens) + " (step)",
                _cell(r.lookback_positions) if explicit else "—",
                ("yes" if r.automatic_caching else "no") if explicit else "—",
                ttls,
                _cell(r.context_window),
                _source(r.source, r.checked),
            ]
        )
    header = [
        "model family",
        "mode",
        "min tokens",
        "max markers / hit step",
        "lookback",
        "top-level marker",
        "TTLs",
        "context window",
        "source, checked",
    ]
    notes = {}
    for r in rows:
        if r.note and r.note not in notes.values():
            notes[r.prefix or "(default)"] = r.note
    text = _table(header, body)
    if notes:
        text += "\n\nWhat the rows quote (`cache_rules.json` notes):\n\n"
        text += "\n".join(f"* **{k}**: {_cell(v)}" for k, v in notes.items())
    return text


def _file_order() -> dict[tuple[str, str], int]:
    """The position of each (provider, prefix) row in the bundled rules file: the authors' order."""
    from importlib import resources

    data = json.loads(resources.files("cachekit.providers").joinpath("cache_rules.json").read_bytes())
    return {(row.get("provider"), row.get("prefix")): i for i, row in enumerate(data.get("rules", []))}


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def prices_table(provider: str | None) -> str:
    """One provider's prices (USD per million tokens) with source and date."""
    from cachekit.cost import default_prices, genai

    table = default_prices()
    name = _known(provider, _provider_names(), "prices")
    rows = [r for r in table if r.provider == name]
    pages = genai.pricing_pages(name)
    lead = ""
    if pages is not None:
        lead = (
            "Priced by [genai-prices](cost.md#where-prices-come-from), at each call's date, from "
            + ", ".join(f"<{url}>" for url in pages)
            + "; `cachekit prices MODEL` shows a model's prices and their source."
            + (" The bundled rows below price what it lacks, or every call without it.\n\n" if rows else "")
        )
    if not rows:
        return lead or (
            f"cachekit's price table (`cachekit/cost/prices.json`) has no row for `{name}`: its calls "
            "are recorded in the ledger with their token counts and no cost (never as 0). To price "
            "them, load a table with your own rows, `PriceTable.load(overrides=[...])`, and give it to "
            "the ledger: `CacheConfig(ledger=Ledger(prices=...))`."
        )
    body = []
    for r in rows:
        rates = r.rates
        long = ""
        if r.long_context is not None and r.long_context_threshold is not None:
            lc = r.long_context
            long = f"above {r.long_context_threshold:,} input tokens: {lc.input:g} / {lc.output:g}"
        model = f"`{r.model}`" + "".join(f", `{a}`" for a in r.aliases)
        body.append(
            [
                model,
                f"{rates.input:g}",
                _price(rates.cache_write_5m),
                _price(rates.cache_write_1h),
                _price(rates.cache_read),
                f"{rates.output:g}",
                long or "—",
                _cell(r.batch_multiplier),
                _source(r.source, r.checked),
            ]
        )
    header = [
        "model",
        "input",
        "cache write (standard)",
        "cache write (long)",
        "cache read",
        "output",
        "long context (input / output)",
        "batch multiplier",
        "source, checked",
    ]
    return lead + "USD per million tokens.\n\n" + _table(header, body)


def _price(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def usage_rows() -> dict[str, str]:
    """The rows of the table in :mod:`cachekit.cost.usage`'s docstring, by their first column."""
    from cachekit.cost import usage

    lines = (usage.__doc__ or "").split("\n")
    borders = [i for i, line in enumerate(lines) if re.fullmatch(r"=+ +=+ *", line)]
    if len(borders) < 3:
        raise ValueError("cachekit.cost.usage's docstring no longer has its usage table")
    width = lines[borders[0]].index(" ")
    start = width + len(lines[borders[0]][width:]) - len(lines[borders[0]][width:].lstrip())
    rows: dict[str, str] = {}
    label = ""
    for line in lines[borders[1] + 1 : borders[2]]:
        if line[:width].strip():
            label = line[:width].strip()
            rows[label] = line[start:].strip()
        elif label:
            rows[label] += " " + line[start:].strip()
    return rows


def usage_section(provider: str | None) -> str:
    """What cachekit reads from a provider's ``usage`` object, and an example normalized by it."""
    from cachekit.cost import normalize

    name = _known(provider, set(USAGE_ROWS), "usage")
    table = usage_rows()
    parts = []
    for label in USAGE_ROWS[name]:
        if label not in table:
            raise ValueError(f"no row {label!r} in cachekit.cost.usage's table (rows: {sorted(table)})")
        parts.append(f"* **{label}**: {table[label]}")
    for dialect, usage in USAGE_EXAMPLES[name]:
        record = normalize(name, dialect, usage)
        counts = ", ".join(
            f"`{field}` {getattr(record, field)}"
            for field in ("uncached_input", "cache_write_5m", "cache_write_1h", "cache_read", "output")
        )
        if record.reasoning is not None:
            counts += f" (`reasoning` {record.reasoning} of it)"
        parts.append(
            f"\nExample ({dialect}, illustrative numbers): this `usage`\n\n"
            f"```json\n{json.dumps(usage)}\n```\n\nnormalizes to {counts}."
        )
    return "\n".join(parts)


#: What each class means for the cache, as the correctness tables say it.
CORRECTNESS_CLASSES = {
    "key": "in the key",
    "live": "**live**: bypass",
    "state": "**state**: bypass",
    "neutral": "neutral",
}


def correctness_table(dialect: str | None) -> str:
    """Every row of the classification table for one dialect: the inputs, their class, when a live or
    state input applies, the bypass reason, and why (``anthropic_count_tokens``: its live and state
    rows, and the rows that are its own)."""
    from cachekit.providers.state import FIELDS

    dialects = {d for row in FIELDS for d in row.dialects}
    name = _known(dialect, dialects, "correctness")
    rows = [row for row in FIELDS if name in row.dialects]
    if name == "anthropic_count_tokens":
        rows = [row for row in rows if row.reason is not None or row.dialects == (name,)]
    body = []
    for row in rows:
        inputs = "<br>".join(_cell(f"`{part}`") for part in _alternatives(row.pattern))
        kind = CORRECTNESS_CLASSES[row.kind]
        if row.kind == "neutral":
            kind += ", kept in the key" if row.keyed else ", left out of the key"
        when = row.condition or ("when set" if row.reason is not None else "—")
        why = _cell(row.why)
        if row.provider:
            why += f" *({_cell(row.provider)})*"
        body.append([inputs, kind, when, f"`{row.reason}`" if row.reason else "—", why])
    return _table(["input (path)", "class", "when", "bypass reason", "why"], body)


def _alternatives(pattern: str) -> list[str]:
    from cachekit.providers.state import alternatives

    return alternatives(pattern)


def _cli_parser() -> argparse.ArgumentParser:
    """The ``cachekit`` command line's parser, laid out :data:`HELP_WIDTH` columns wide, never in color."""
    from cachekit.cli import _build_parser
    from cachekit.cli._common import Formatter

    parser = _build_parser()
    layout = functools.partial(Formatter, width=HELP_WIDTH)  # the command's own layout (examples kept)
    for each in (parser, *_subparsers(parser).values()):
        each.formatter_class = layout
        if hasattr(each, "color"):  # Python 3.14 colors help on a terminal
            each.color = False
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise ValueError("cachekit's command line has no subcommands")


def cli_help(command: str | None) -> str:
    """``cachekit [command] --help``, as the command line prints it (:data:`HELP_WIDTH` columns)."""
    parser = _cli_parser()
    if command is not None:
        commands = _subparsers(parser)
        if command not in commands:
            raise ValueError(f"cachekit has no command {command!r} (commands: {', '.join(commands)})")
        parser = commands[command]
    text = parser.format_help().rstrip()
    return f"```text\n$ cachekit {command + ' ' if command else ''}--help\n{text}\n```"


def cli_commands() -> list[str]:
    """The subcommands ``cachekit --help`` lists, in its order."""
    return list(_subparsers(_cli_parser()))


def cli_sections(_: str | None = None) -> str:
    """A section per subcommand: its help, as the command line prints it."""
    return "\n\n".join(f"## {command}\n\n{cli_help(command)}" for command in cli_commands())


def _provider_names() -> set[str]:
    from cachekit.providers import PROVIDERS

    return {p.name for p in PROVIDERS}


def _known(provider: str | None, names: set[str], marker: str) -> str:
    if not provider or provider not in names:
        raise ValueError(f"cachekit:{marker} needs a provider name, one of {sorted(names)}; got {provider!r}")
    return provider


GENERATORS: dict[str, Callable[[str | None], str]] = {
    "providers": providers_table,
    "cache-rules": cache_rules_table,
    "prices": prices_table,
    "usage": usage_section,
    "correctness": correctness_table,
    "cli": cli_help,
    "cli-sections": cli_sections,
}


def _generate(kind: str, argument: str | None, where: str) -> str | None:
    """What a marker asks for; ``None`` (after a warning) when it cannot be generated."""
    generator = GENERATORS.get(kind)
    if generator is None:
        log.warning("%s: unknown marker cachekit:%s (known: %s)", where, kind, ", ".join(GENERATORS))
        return None
    try:
        return generator(argument)
    except Exception as exc:
        log.warning("%s: cachekit:%s %s: %s", where, kind, argument or "", exc)
        return None


def expand(markdown: str, where: str = "a page") -> str:
    """``markdown`` with every ``<!-- cachekit:... -->`` marker (and committed block) replaced by what
    it asks for, generated now."""

    def block(match: re.Match[str]) -> str:
        text = _generate(match.group(2), match.group(3), where)
        return match.group(0) if text is None else text

    def marker(match: re.Match[str]) -> str:
        text = _generate(match.group(1), match.group(2), where)
        return match.group(0) if text is None else text

    return _MARKER.sub(marker, _BLOCK.sub(block, markdown))


def refresh(markdown: str, where: str = "a page") -> str:
    """``markdown`` with the text of each committed block generated again (markers kept), and each bare
    marker made a block of its text."""

    def block(match: re.Match[str]) -> str:
        text = _generate(match.group(2), match.group(3), where)
        return match.group(0) if text is None else f"{match.group(1)}\n{text}\n{match.group(4)}"

    def marker(match: re.Match[str]) -> str:
        text = _generate(match.group(1), match.group(2), where)
        return (
            match.group(0)
            if text is None
            else f"{match.group(0)}\n{text}\n<!-- /cachekit:{match.group(1)} -->"
        )

    # Blocks first; then the markers outside any block (a block's own opening marker is not bare).
    parts = []
    last = 0
    for match in _BLOCK.finditer(markdown):
        parts.append(_MARKER.sub(marker, markdown[last : match.start()]))
        parts.append(block(match))
        last = match.end()
    parts.append(_MARKER.sub(marker, markdown[last:]))
    return "".join(parts)


def bare_markers(markdown: str) -> list[str]:
    """The markers of ``markdown`` that open no committed block (their text is missing in the file)."""
    outside = _BLOCK.sub("", markdown)
    return [match.group(0) for match in _MARKER.finditer(outside)]


def on_page_markdown(markdown: str, *, page: Any, **kwargs: Any) -> str:
    """MkDocs event: expand the page's markers."""
    return expand(markdown, page.file.src_uri)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the committed blocks of the docs pages from the code (``--check``: only report)."""
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Regenerate the docs' committed generated text."
    )
    parser.add_argument("pages", nargs="*", type=Path, help="pages to refresh (default: every docs page)")
    parser.add_argument("--check", action="store_true", help="exit 1 naming stale pages; write nothing")
    args = parser.parse_args(argv)
    docs = Path(__file__).resolve().parents[1]
    pages = args.pages or sorted(p for p in docs.glob("**/*.md") if "hooks" not in p.parts)
    stale = []
    for page in pages:
        text = page.read_text()
        fresh = refresh(text, str(page))
        if fresh != text:
            stale.append(str(page))
            if not args.check:
                page.write_text(fresh)
    verb = f"stale (run {COMMAND})" if args.check else "rewritten"
    for page in stale:
        print(f"{page}: {verb}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    # The checkout's own cachekit, whatever the environment has installed.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    logging.basicConfig(format="%(message)s")
    sys.exit(main())

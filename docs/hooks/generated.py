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
* ``<!-- cachekit:cli -->`` / ``<!-- cachekit:cli COMMAND -->`` — ``cachekit [COMMAND] --help``;
  ``<!-- cachekit:cli-sections -->`` — a section with the help of every subcommand there is.

The data files are read through cachekit's own loaders (so inherited fields and validation are the
library's), and the examples are computed by the library: the pages cannot drift from the code. An
unknown marker or provider is a warning, which ``mkdocs build --strict`` turns into a failure.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("mkdocs.hooks.cachekit")

_MARKER = re.compile(r"^<!-- cachekit:([a-z-]+)(?: ([A-Za-z0-9_.-]+))? -->$", re.MULTILINE)

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
    """The provider table: routing, answer-changing headers, and which data rows exist."""
    from cachekit.cost import default_prices
    from cachekit.providers import PROVIDERS
    from cachekit.providers.cache_rules import default_cache_rules

    ruled = set(default_cache_rules().providers)
    priced = {row.provider for row in default_prices()}
    rows = [
        [
            f"`{p.name}`",
            ", ".join(f"`{h}`" for h in p.hosts),
            ", ".join(f"`{d}`" for d in sorted(p.dialects)),
            ", ".join(f"`{h}`" for h in p.key_headers),
            "yes" if p.name in ruled else "no",
            "yes" if p.name in priced else "no",
        ]
        for p in PROVIDERS
    ]
    header = ["provider", "hosts", "APIs (dialects)", "headers in the key", "cache rules", "prices"]
    return _table(header, rows)


def cache_rules_table(provider: str | None) -> str:
    """One provider's prompt-caching rules, a row per model family, with source and date."""
    from cachekit.providers.cache_rules import default_cache_rules

    table = default_cache_rules()
    name = _known(provider, set(table.providers) | _provider_names(), "cache-rules")
    rows = sorted(
        (r for r in table if r.provider == name), key=lambda r: _file_order().get((name, r.prefix), 0)
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
                r.mode,
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
        text += '\n\n??? quote "What the rows quote (`cache_rules.json` notes)"\n\n'
        text += "\n".join(f"    * **{k}**: {_cell(v)}" for k, v in notes.items())
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
    from cachekit.cost import default_prices

    table = default_prices()
    name = _known(provider, _provider_names(), "prices")
    rows = [r for r in table if r.provider == name]
    if not rows:
        return (
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
    return "USD per million tokens.\n\n" + _table(header, body)


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


def cli_help(command: str | None) -> str:
    """``cachekit [command] --help``, as the installed command line prints it."""
    argv = [sys.executable, "-m", "cachekit", *([command] if command else []), "--help"]
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=120)
    if result.returncode != 0:
        raise ValueError(f"{' '.join(argv[2:])} failed: {result.stderr.strip()}")
    return f"```text\n$ cachekit {command + ' ' if command else ''}--help\n{result.stdout.rstrip()}\n```"


def cli_commands() -> list[str]:
    """The subcommands ``cachekit --help`` lists, in its order."""
    usage = cli_help(None)
    found = re.search(r"\{([a-z-]+(?:,[a-z-]+)*)\}", usage)
    if found is None:
        raise ValueError("cachekit --help lists no subcommands")
    return found.group(1).split(",")


def cli_sections(_: str | None = None) -> str:
    """A section per subcommand: its help, as the installed command line prints it."""
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
    "cli": cli_help,
    "cli-sections": cli_sections,
}


def expand(markdown: str, where: str = "a page") -> str:
    """``markdown`` with every ``<!-- cachekit:... -->`` marker replaced by what it asks for."""

    def replace(match: re.Match[str]) -> str:
        kind, argument = match.group(1), match.group(2)
        generator = GENERATORS.get(kind)
        if generator is None:
            log.warning("%s: unknown marker cachekit:%s (known: %s)", where, kind, ", ".join(GENERATORS))
            return match.group(0)
        try:
            return generator(argument)
        except Exception as exc:
            log.warning("%s: cachekit:%s %s: %s", where, kind, argument or "", exc)
            return match.group(0)

    return _MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, *, page: Any, **kwargs: Any) -> str:
    """MkDocs event: expand the page's markers."""
    return expand(markdown, page.file.src_uri)

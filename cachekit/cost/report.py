"""Cost reports: a terminal table, JSON, and a plot of cost with and without caching over time.

:func:`render_report` is what ``cachekit report [--since] [--by model|tenant|site|day] [--json]
[--plot out.png]`` calls. The table uses ``rich`` when it is installed and plain text otherwise; the
plot needs ``matplotlib`` (both come with the ``report`` extra).

A call that could not be priced (unknown model or usage) is not summed as zero: the table marks the
sums it is missing from with ``*`` and says how many calls that is.
"""

from __future__ import annotations

import datetime as _dt
import io
import re
import time as _time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from cachekit.cost.ledger import (
    GROUP_FIELDS,
    CallRecord,
    JSONLSink,
    Ledger,
    SQLiteSink,
    Totals,
    aggregate,
    default_ledger_path,
)
from cachekit.errors import MissingExtraError

__all__ = [
    "aggregate_totals",
    "load_records",
    "parse_since",
    "plot",
    "render_json",
    "render_report",
    "render_table",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, *, now: float | None = None) -> float:
    """Epoch seconds for a ``--since`` value: a duration ago (``30m``, ``24h``, ``7d``, ``2w``) or an
    ISO date / datetime (UTC when no zone is given)."""
    match = _DURATION.match(text)
    if match:
        return (_time.time() if now is None else now) - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        moment = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--since must be a duration like 7d or 24h, or an ISO date; got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.timestamp()


def load_records(path: str | Path | None = None, since: float | None = None) -> list[CallRecord]:
    """Read a ledger file (SQLite by default, ``.jsonl`` as JSON lines) without writing to it."""
    path = Path(path) if path is not None else default_ledger_path()
    if path.suffix == ".jsonl":
        return JSONLSink(path).read(since)
    if not path.exists():
        return []
    sink = SQLiteSink(path)
    try:
        return sink.read(since)
    finally:
        sink.close()


def _by(by: str | Sequence[str]) -> tuple[str, ...]:
    names = tuple(p.strip() for p in by.split(",")) if isinstance(by, str) else tuple(by)
    for name in names:
        if name not in GROUP_FIELDS:
            raise ValueError(f"cannot group by {name!r}; choose from {', '.join(GROUP_FIELDS)}")
    return names


def _usd(value: float) -> str:
    return f"${value:,.4f}" if abs(value) < 100 else f"${value:,.2f}"


def _tokens(value: int) -> str:
    return f"{value:,}"


_HEADERS = ("calls", "hits", "input", "cache write", "cache read", "output", "cost", "without cache", "saved")
# Token columns are billed tokens (upstream calls); "hits" are calls answered by a local cache.


def _cells(row: Totals) -> list[str]:
    mark = "*" if row.unpriced_calls else ""
    hits = row.outcomes.get("exact_hit", 0) + row.outcomes.get("semantic_hit", 0)
    saved = _usd(row.saving_usd)
    if row.cost_without_caching_usd > 0:
        saved += f" ({row.saving_usd / row.cost_without_caching_usd:.0%})"
    money = [_usd(row.cost_usd) + mark, _usd(row.cost_without_caching_usd) + mark, saved + mark]
    if row.calls and row.unpriced_calls == row.calls:
        money = ["n/a*"] * 3
    return [
        str(row.calls),
        str(hits),
        _tokens(row.tokens["uncached_input"]),
        _tokens(row.tokens["cache_write_5m"] + row.tokens["cache_write_1h"]),
        _tokens(row.tokens["cache_read"]),
        _tokens(row.tokens["output"]),
        *money,
    ]


def _footnote(total: Totals) -> str:
    notes = []
    if total.unpriced_calls:
        notes.append(
            f"* {total.unpriced_calls} call(s) could not be priced (unknown model or usage); "
            "they are not in the sums"
        )
    if total.unknown_usage_calls:
        notes.append(
            f"{total.unknown_usage_calls} call(s) had no usable usage object; their tokens are not counted"
        )
    return "\n".join(notes)


def _label(value: str | None) -> str:
    return "-" if value is None else value


def _rich_available() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def render_table(
    rows: Sequence[Totals], by: str | Sequence[str], *, use_rich: bool | None = None, width: int = 140
) -> str:
    """The report table as text: one line per group and a total line (``rich`` when available)."""
    names = _by(by)
    total = aggregate_totals(rows)
    headers = [*names, *_HEADERS]
    body = [[_label(r.group.get(n)) for n in names] + _cells(r) for r in rows]
    footer = ["total"] + [""] * (len(names) - 1) + _cells(total) if names else _cells(total)
    if use_rich is None:
        use_rich = _rich_available()
    if use_rich:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="cachekit cost report", show_footer=True)
        for i, header in enumerate(headers):
            table.add_column(header, footer=footer[i], justify="left" if i < len(names) else "right")
        for line in body:
            table.add_row(*line)
        buffer = io.StringIO()
        Console(file=buffer, width=width, color_system=None, force_terminal=False).print(table)
        text = buffer.getvalue().rstrip("\n")
    else:
        grid = [headers, *body, footer]
        widths = [max(len(line[i]) for line in grid) for i in range(len(headers))]

        def fmt(line: Sequence[str]) -> str:
            return "  ".join(
                cell.ljust(w) if i < len(names) else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()

        rule = "  ".join("-" * w for w in widths)
        text = "\n".join([fmt(headers), rule, *(fmt(line) for line in body), rule, fmt(footer)])
    note = _footnote(total)
    return text + ("\n" + note if note else "")


def aggregate_totals(rows: Iterable[Totals]) -> Totals:
    """Combine grouped totals into one grand total."""
    rows = list(rows)
    tokens: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for row in rows:
        for k, v in row.tokens.items():
            tokens[k] = tokens.get(k, 0) + v
        for k, v in row.outcomes.items():
            outcomes[k] = outcomes.get(k, 0) + v
    for name in ("uncached_input", "cache_write_5m", "cache_write_1h", "cache_read", "output"):
        tokens.setdefault(name, 0)
    return Totals(
        group={},
        calls=sum(r.calls for r in rows),
        tokens=tokens,
        cost_usd=sum(r.cost_usd for r in rows),
        cost_without_caching_usd=sum(r.cost_without_caching_usd for r in rows),
        saving_usd=sum(r.saving_usd for r in rows),
        unpriced_calls=sum(r.unpriced_calls for r in rows),
        unknown_usage_calls=sum(r.unknown_usage_calls for r in rows),
        outcomes=dict(sorted(outcomes.items())),
    )


def render_json(rows: Sequence[Totals], by: str | Sequence[str], *, since: float | None = None) -> str:
    """The report as JSON: the grouping, each group's totals and the grand total."""
    doc: dict[str, Any] = {
        "by": list(_by(by)),
        "since": since,
        "groups": [r.to_dict() for r in rows],
        "total": aggregate_totals(rows).to_dict(),
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()


def plot(
    records: Iterable[CallRecord], path: str | Path, *, title: str = "LLM cost with and without caching"
) -> Path:
    """Write a PNG of cumulative cost, with caching and without, over time. Needs ``matplotlib``.

    Only records priced both ways are drawn. Raises :class:`~cachekit.errors.MissingExtraError` naming
    the ``report`` extra when matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib", "report", "Plotting the cost report") from None
    priced = sorted(
        (r for r in records if r.cost is not None and r.cost_without_caching is not None),
        key=lambda r: r.time,
    )
    # matplotlib converts datetimes itself; its stubs only admit arrays, hence Any.
    times: Any = [_dt.datetime.fromtimestamp(r.time, _dt.timezone.utc) for r in priced]
    with_cache: list[float] = []
    without: list[float] = []
    a = b = 0.0
    for r in priced:
        a += r.cost or 0.0
        b += r.cost_without_caching or 0.0
        with_cache.append(a)
        without.append(b)
    figure = Figure(figsize=(9, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    if priced:
        ax.step(times, without, where="post", label="without caching", color="#c0504d")
        ax.step(times, with_cache, where="post", label="with caching", color="#4f81bd")
        ax.fill_between(times, with_cache, without, step="post", alpha=0.15, color="#9bbb59", label="saved")
        ax.legend(loc="upper left")
    else:
        ax.text(0.5, 0.5, "no priced calls", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("cumulative cost (USD)")
    ax.grid(True, alpha=0.3)
    figure.autofmt_xdate()
    figure.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png")
    return out


def render_report(
    source: Ledger | Iterable[CallRecord] | str | Path | None = None,
    *,
    by: str | Sequence[str] = "model",
    since: float | str | None = None,
    as_json: bool = False,
    plot_path: str | Path | None = None,
    use_rich: bool | None = None,
) -> str:
    """Render the cost report of a ledger, a list of records, or a ledger file (the default SQLite one).

    ``by`` is any of ``model``, ``tenant``, ``site``, ``day`` (or ``provider``, ``outcome``, ``hour``;
    comma-separate several); ``since`` is epoch seconds or a ``--since`` string (see
    :func:`parse_since`). With ``plot_path`` a PNG is written too (see :func:`plot`).
    """
    since_ts = parse_since(since) if isinstance(since, str) else since
    if isinstance(source, Ledger):
        records = source.records(since_ts)
    elif source is None or isinstance(source, (str, Path)):
        records = load_records(source, since_ts)
    else:
        records = [r for r in source if since_ts is None or r.time >= since_ts]
    names = _by(by)
    rows = aggregate(records, names)
    if plot_path is not None:
        plot(records, plot_path)
    changes = prefix_changes(records)
    if as_json:
        doc = orjson.loads(render_json(rows, names, since=since_ts))
        doc["prefix_changes"] = [{"change": change, "calls": count} for change, count in changes]
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
    table = render_table(rows, names, use_rich=use_rich)
    return table if not changes else table.rstrip("\n") + "\n\n" + render_prefix_changes(changes)


def prefix_changes(records: Iterable[CallRecord]) -> list[tuple[str, int]]:
    """Why conversations' prompt-cache prefixes stopped matching their previous call (each record's
    ``prefix_change``: the first change and where), with how many calls each, most first."""
    counts: dict[str, int] = {}
    for record in records:
        if record.prefix_change:
            counts[record.prefix_change] = counts.get(record.prefix_change, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def render_prefix_changes(changes: Sequence[tuple[str, int]]) -> str:
    """The "why did it miss?" section of the report: each first change of a conversation's prefix."""
    width = max(len(change) for change, _ in changes)
    lines = ["Why conversations' cached prefixes stopped matching (first change since the previous call):"]
    lines += [
        f"  {change.ljust(width)}  {count} call{'s' if count != 1 else ''}" for change, count in changes
    ]
    return "\n".join(lines) + "\n"

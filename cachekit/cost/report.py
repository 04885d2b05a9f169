"""Cost reports: a terminal table, JSON, and a plot of cost with and without caching over time.

:func:`render_report` is what ``cachekit report [--since] [--by model|tenant|site|day] [--json]
[--plot out.png]`` calls. The table is plain text in the look every command shares
(:mod:`cachekit._format`), fitted to a width when one is given; JSON money is rounded to
:data:`~cachekit._format.MONEY_DECIMALS` places. The plot needs ``matplotlib`` (the ``report`` extra).

A call that could not be priced (unknown model or usage) is not summed as zero: the table marks the
sums it is missing from with ``*`` and says how many calls that is.

When the ledger holds shadow records of the semantic cache (``SemanticConfig(mode="shadow")``), the
report adds what the semantic layer would have done on that traffic (:func:`render_shadow`): per
partition and in total, its precision with a 95 % Wilson interval, its recall, and the lowest
threshold whose interval's lower bound reaches the target precision (:mod:`cachekit.cost.shadow`).
"""

from __future__ import annotations

import datetime as _dt
import re
import time as _time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from cachekit._format import Column, count, table, usd, usd_json
from cachekit.cost.ledger import (
    GROUP_FIELDS,
    CallRecord,
    Ledger,
    LedgerContents,
    Totals,
    aggregate,
    default_ledger_path,
    read_ledger,
)
from cachekit.cost.shadow import ShadowRecord, ShadowSummary, summarize
from cachekit.errors import MissingExtraError

__all__ = [
    "DEFAULT_TARGET_PRECISION",
    "aggregate_totals",
    "load_records",
    "parse_by",
    "parse_since",
    "plot",
    "render_json",
    "render_report",
    "render_shadow",
    "render_table",
]

#: The precision the shadow section's suggested threshold is chosen for, unless told otherwise.
DEFAULT_TARGET_PRECISION = 0.95

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, *, now: float | None = None, option: str = "--since") -> float:
    """Epoch seconds for a ``--since`` value: a duration ago (``30m``, ``24h``, ``7d``, ``2w``) or an
    ISO date / datetime (UTC when no zone is given). ``option`` names the option in the error
    (``cachekit prices --at`` reads the same values)."""
    match = _DURATION.match(text)
    if match:
        return (_time.time() if now is None else now) - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        moment = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{option} takes a duration ago like 7d, 24h or 30m, or an ISO date like 2026-05-01; got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.timestamp()


def load_records(path: str | Path | None = None, since: float | None = None) -> list[CallRecord]:
    """Read a ledger file (SQLite by default, ``.jsonl`` as JSON lines) without writing to it or beside
    it (:func:`~cachekit.cost.ledger.read_ledger`); a missing file holds no records."""
    path = Path(path) if path is not None else default_ledger_path()
    if not path.exists():
        return []
    return read_ledger(path, since).records


def parse_by(by: str | Sequence[str]) -> tuple[str, ...]:
    """The group fields of a ``--by`` value (``"tenant,model"``); a field :data:`GROUP_FIELDS` lacks is
    a :class:`ValueError` naming the choices."""
    names = tuple(p.strip() for p in by.split(",")) if isinstance(by, str) else tuple(by)
    for name in names:
        if name not in GROUP_FIELDS:
            raise ValueError(f"cannot group by {name!r}; choose from {', '.join(GROUP_FIELDS)}")
    return names


_COLUMNS = (
    Column("calls"),
    Column("hits", optional=True),
    Column("input", optional=True),
    Column("cache write", optional=True),
    Column("cache read", optional=True),
    Column("output", optional=True),
    Column("cost"),
    Column("without cache"),
    Column("saved"),
)
# Token columns are billed tokens (upstream calls); "hits" are calls answered by a local cache. The
# optional ones are left out, rightmost first, when the table must fit a narrow terminal.


def _cells(row: Totals) -> list[str]:
    mark = "*" if row.unpriced_calls else ""
    hits = row.outcomes.get("exact_hit", 0) + row.outcomes.get("semantic_hit", 0)
    saved = usd(row.saving_usd)
    if row.cost_without_caching_usd > 0:
        saved += f" ({row.saving_usd / row.cost_without_caching_usd:.0%})"
    money = [usd(row.cost_usd) + mark, usd(row.cost_without_caching_usd) + mark, saved + mark]
    if row.calls and row.unpriced_calls == row.calls:
        money = ["n/a*"] * 3
    return [
        count(row.calls),
        count(hits),
        count(row.tokens["uncached_input"]),
        count(row.tokens["cache_write_5m"] + row.tokens["cache_write_1h"]),
        count(row.tokens["cache_read"]),
        count(row.tokens["output"]),
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


def render_table(rows: Sequence[Totals], by: str | Sequence[str], *, width: int | None = None) -> str:
    """The report table as text: one line per group and a total line, no line longer than ``width``
    (``None``: as wide as the figures need)."""
    names = parse_by(by)
    total = aggregate_totals(rows)
    columns = [*(Column(name, label=True) for name in names), *_COLUMNS]
    body = [[_label(r.group.get(n)) for n in names] + _cells(r) for r in rows]
    footer = ["total"] + [""] * (len(names) - 1) + _cells(total) if names else _cells(total)
    text = table(columns, body, footer=footer, width=width)
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
    """The report as JSON: the grouping, each group's totals and the grand total (dollar amounts
    rounded to :data:`~cachekit._format.MONEY_DECIMALS` places)."""
    return orjson.dumps(_json_document(rows, by, since), option=orjson.OPT_INDENT_2).decode()


def _json_document(rows: Sequence[Totals], by: str | Sequence[str], since: float | None) -> dict[str, Any]:
    return {
        "by": list(parse_by(by)),
        "since": since,
        "groups": [_rounded(r.to_dict()) for r in rows],
        "total": _rounded(aggregate_totals(rows).to_dict()),
    }


def _rounded(totals: dict[str, Any]) -> dict[str, Any]:
    """A group's JSON with its dollar amounts rounded (:func:`cachekit._format.usd_json`)."""
    for key in ("cost_usd", "cost_without_caching_usd", "saving_usd"):
        totals[key] = usd_json(totals[key])
    return totals


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _shadow_cells(summary: ShadowSummary) -> list[str]:
    low, high = summary.interval
    interval = f"[{low:.3f}, {high:.3f}]" if summary.served else "-"
    choice = summary.suggested
    suggested = (
        "none reaches it"
        if choice is None
        else f"{choice.threshold:.4f} ({choice.right}/{choice.served}, >= {choice.interval[0]:.3f})"
    )
    return [
        str(summary.requests),
        str(summary.judged),
        f"{summary.right}/{summary.served}",
        _share(summary.precision),
        interval,
        _share(summary.recall),
        ", ".join(f"{t:g}" for t in summary.thresholds) or "-",
        suggested,
    ]


def render_shadow(
    records: Sequence[ShadowRecord], *, target: float = DEFAULT_TARGET_PRECISION, width: int | None = None
) -> str:
    """The semantic cache's shadow section as text: per partition (its id shortened) and in total,
    the requests watched, those with a judged candidate, right over would-be hits, precision with its
    95 % Wilson interval, recall, the threshold(s) in force, and the lowest threshold whose lower
    bound reaches ``target`` (with its right/served and lower bound); in the reports' one look
    (:func:`cachekit._format.table`), fitted to ``width`` when given."""
    parts, total = summarize(records, target)
    columns = [
        Column("partition", label=True),
        Column("model", label=True),
        Column("requests"),
        Column("judged"),
        Column("right/hits"),
        Column("precision"),
        Column("95% interval"),
        Column("recall"),
        Column("threshold"),
        Column(f"threshold for precision >= {target:g}"),
    ]
    rows = [[(p.partition or "")[:12], ", ".join(p.models), *_shadow_cells(p)] for p in parts]
    lines = [
        "semantic cache, shadow mode: what it would have served on this traffic",
        table(columns, rows, footer=["total", "", *_shadow_cells(total)], width=width),
        "precision: right would-be hits / would-be hits; recall: of the requests a stored answer "
        "would have served right, the share served; the suggested threshold is measured on these "
        "same records",
    ]
    return "\n".join(lines)


def _shadow_json(records: Sequence[ShadowRecord], target: float) -> dict[str, Any]:
    parts, total = summarize(records, target)
    return {
        "target_precision": target,
        "partitions": [p.to_dict() for p in parts],
        "total": total.to_dict(),
    }


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
    width: int | None = None,
    target_precision: float = DEFAULT_TARGET_PRECISION,
    shadow: Sequence[ShadowRecord] | None = None,
) -> str:
    """Render the cost report of a ledger, a list of records, or a ledger file (the default SQLite one).

    ``by`` is any of ``model``, ``tenant``, ``site``, ``day`` (or ``provider``, ``outcome``, ``hour``;
    comma-separate several); ``since`` is epoch seconds or a ``--since`` string (see
    :func:`parse_since`). With ``plot_path`` a PNG is written too (see :func:`plot`). ``width`` fits
    the table to a terminal (:func:`render_table`). When the ledger holds shadow records of the
    semantic cache (given as ``shadow`` beside a list of records), their section follows
    (:func:`render_shadow`; in JSON under ``"shadow"``), its suggested threshold chosen for
    ``target_precision``.
    """
    if not 0 < target_precision <= 1:
        raise ValueError(f"the target precision is a share in (0, 1], not {target_precision!r}")
    since_ts = parse_since(since) if isinstance(since, str) else since
    if isinstance(source, Ledger):
        records = source.records(since_ts)
        shadow = source.shadow_records(since_ts)
    elif source is None or isinstance(source, (str, Path)):
        path = Path(source) if source is not None else default_ledger_path()
        contents = read_ledger(path, since_ts) if path.exists() else LedgerContents([])
        records, shadow = contents.records, contents.shadow
    else:
        records = [r for r in source if since_ts is None or r.time >= since_ts]
        shadow = [r for r in shadow or () if since_ts is None or r.time >= since_ts]
    names = parse_by(by)
    rows = aggregate(records, names)
    if plot_path is not None:
        plot(records, plot_path)
    changes = prefix_changes(records)
    if as_json:
        document = _json_document(rows, names, since_ts)
        if changes:
            document["prefix_changes"] = [{"change": change, "calls": calls} for change, calls in changes]
        if shadow:
            document["shadow"] = _shadow_json(shadow, target_precision)
        return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    text = render_table(rows, names, width=width)
    if changes:  # "why did it miss?": what broke conversations' cached prefixes
        text = text.rstrip("\n") + "\n\n" + render_prefix_changes(changes)
    if shadow:
        text += "\n\n" + render_shadow(shadow, target=target_precision, width=width)
    return text


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
        f"  {change.ljust(width)}  {calls} call{'s' if calls != 1 else ''}" for change, calls in changes
    ]
    return "\n".join(lines) + "\n"

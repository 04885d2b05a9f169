"""``cachekit report`` and ``cachekit stats``: what calls cost with and without caching, from the cost
ledger; what a store holds, and the hit rates by layer.

Both read the ledger without writing to it (:func:`cachekit.cost.ledger.read_ledger`), and print in
the look every command shares (:mod:`cachekit._format`), fitted to the terminal's width.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from cachekit.cli import _common
from cachekit.cli._common import output_file, say
from cachekit.cli.store import STORE_HELP, open_semantic_index, open_store, semantic_index_url

__all__ = ["register"]


_SINCE_HELP = "since then: 7d, 12h, 30m, or an ISO date (default: every call)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` and ``stats`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_report(commands)
    _add_stats(commands)


def _read(command: str, ledger: Path, since: str | None) -> Any:
    """The ledger's records since ``since`` (:class:`~cachekit.cost.ledger.LedgerContents`); lines of a
    JSON-lines ledger that are not records are counted in one line on stderr, and a file of nothing
    but such lines is an error."""
    from cachekit.cost.ledger import read_ledger
    from cachekit.cost.report import parse_since

    contents = read_ledger(ledger, parse_since(since) if since else None)
    if contents.skipped:
        lines = f"{contents.skipped} line{'s' if contents.skipped != 1 else ''}"
        if not contents.records and not _holds_records(ledger):
            raise _common.UsageError(f"{ledger} holds no ledger records ({lines}, none of them a record)")
        say(command, f"skipped {lines} of {ledger} that are not ledger records")
    return contents


def _holds_records(ledger: Path) -> bool:
    """Whether any line of a JSON-lines ledger is a record, however old (``--since`` may hide them all)."""
    from cachekit.cost.ledger import read_ledger

    return bool(read_ledger(ledger).records)


def _report(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit._format import terminal_width
    from cachekit.cost.ledger import default_ledger_path
    from cachekit.cost.report import parse_by, parse_since, render_report

    # The command line first, then the ledger: a typo is named before the work, and before "no ledger".
    since = parse_since(args.since) if args.since else None
    parse_by(args.by)
    if args.plot:
        output_file(args.plot, "--plot", ".png")
    ledger = Path(args.ledger) if args.ledger else default_ledger_path()
    if not ledger.exists():
        # An all-zero table would read as "caching saved nothing"; the truth is nothing was recorded here.
        raise _common.CommandFailed(
            f"no ledger at {ledger}: no call has been recorded there (name another with --ledger PATH)"
        )
    records = _read("report", ledger, args.since).records
    text = render_report(
        records,
        by=args.by,
        since=since,
        as_json=args.json,
        plot_path=args.plot,
        width=None if args.json else terminal_width(out),
    )
    out.write(text if text.endswith("\n") else text + "\n")
    if args.plot:
        out.write(f"wrote {args.plot}\n")
    return 0


def _layer_rates(ledger: str | None, since: str | None) -> dict[str, Any]:
    """Calls and hit rates by layer from the cost ledger (none when the default ledger does not exist
    yet; a ledger named with ``--ledger`` must exist: a typo is not "no calls")."""
    from cachekit.cost.ledger import default_ledger_path

    path = Path(ledger) if ledger else default_ledger_path()
    if not path.exists():
        if ledger:
            raise _common.CommandFailed(
                f"no ledger at {path}: no call has been recorded there (check --ledger)"
            )
        return {"calls": 0, "outcomes": {}, "rates": {}, "ledger": None}
    records = _read("stats", path, since).records
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    calls = len(records)
    return {
        "calls": calls,
        "outcomes": outcomes,
        "rates": {name: count / calls for name, count in sorted(outcomes.items())} if calls else {},
        "ledger": str(path),
    }


def _stats(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.ops import store_stats

    layers = _layer_rates(args.ledger, args.since)  # a ledger that is not one fails before the store opens
    index = open_semantic_index(args, semantic_index_url(args.semantic_index, args.store))
    try:
        store = open_store(args.store)
        try:
            held = store_stats(store, namespace=args.namespace, index=index)
        finally:
            store.close()
    finally:
        if index is not None:
            index.close()
    if args.json:
        out.write(json.dumps({"store": held.to_dict(), "ledger": layers}, indent=2) + "\n")
        return 0
    out.write(_render_stats(held, layers, index is not None, out))
    return 0


def _render_stats(held: Any, layers: dict[str, Any], indexed: bool, out: TextIO) -> str:
    """The store's entries per namespace and layer, and the ledger's calls per outcome: two tables in
    the shared look, fitted to ``out``'s width."""
    from cachekit._format import Column, count, table, terminal_width

    width = terminal_width(out)
    head = f"store: {count(held.entries)} entries, {count(held.bytes)} bytes"
    if indexed:
        head += f"; semantic index: {count(held.semantic)} entries"
    others = [f"{count(held.probes)} operator probes"] if held.probes else []
    others += [f"{count(held.foreign)} keys not written by this cachekit"] if held.foreign else []
    lines = [head + (f" ({', '.join(others)})" if others else "")]
    rows = [
        [name, layer, count(ns.entries[layer]), count(ns.bytes[layer]) if layer in ns.bytes else "-"]
        for name, ns in sorted(held.namespaces.items())
        for layer in sorted(ns.entries)
    ]
    if rows:
        columns = [
            Column("namespace", label=True),
            Column("layer", label=True),
            Column("entries"),
            Column("bytes"),
        ]
        lines += ["", table(columns, rows, width=width)]
    if layers["ledger"] is None:
        lines += ["", "ledger: no calls recorded (no ledger file yet; name one with --ledger PATH)"]
    else:
        lines += ["", f"ledger: {count(layers['calls'])} calls ({layers['ledger']})"]
        outcomes = sorted(layers["outcomes"].items())
        if outcomes:
            calls = [[name, count(n), f"{layers['rates'][name]:.1%}"] for name, n in outcomes]
            columns = [Column("outcome", label=True), Column("calls"), Column("share")]
            lines += ["", table(columns, calls, width=width)]
    return "\n".join(lines) + "\n"


def _add_report(commands: Any) -> None:
    report = commands.add_parser(
        "report",
        help="cost with and without caching, from the cost ledger",
        description=(
            "What the calls recorded in the cost ledger cost, with caching and as they would have cost "
            "without it, grouped as asked. The ledger is read, never written."
        ),
        epilog="""examples:
  cachekit report                                   # every call, by model
  cachekit report --since 7d --by tenant,model
  cachekit report --json --ledger calls.jsonl
  cachekit report --plot cost.png""",
    )
    report.add_argument("--since", help=f"only calls {_SINCE_HELP}")
    report.add_argument(
        "--by",
        default="model",
        help="group by model, tenant, site, day, provider or outcome, comma-separated (default: %(default)s)",
    )
    report.add_argument("--json", action="store_true", help="print JSON instead of a table")
    report.add_argument(
        "--plot", metavar="PNG", help="also write a chart of cost with and without caching (default: none)"
    )
    report.add_argument(
        "--ledger",
        metavar="PATH",
        help="a ledger file, SQLite or .jsonl (default: $CACHEKIT_HOME/ledger.sqlite3)",
    )
    report.set_defaults(run=_report)


def _add_stats(commands: Any) -> None:
    stats = commands.add_parser(
        "stats",
        help="entries and sizes per namespace, hit rates by layer",
        description=(
            "What the store holds, per namespace and layer, and how the calls in the cost ledger were "
            "answered. Neither is written to, nor created where it does not exist."
        ),
        epilog="""examples:
  cachekit stats
  cachekit stats --store redis://localhost:6379/0 --namespace support --since 24h
  cachekit stats --json""",
    )
    stats.add_argument("--store", metavar="URL", help=STORE_HELP)
    stats.add_argument("--namespace", help="only this namespace (default: every namespace)")
    stats.add_argument(
        "--ledger",
        metavar="PATH",
        help="the cost ledger for hit rates (default: $CACHEKIT_HOME/ledger.sqlite3)",
    )
    stats.add_argument("--since", help=f"hit rates of calls {_SINCE_HELP}")
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.add_argument(
        "--semantic-index",
        metavar="URL",
        help="the Redis 8 semantic index to count too (default: the store's, when the store is Redis)",
    )
    stats.set_defaults(run=_stats)

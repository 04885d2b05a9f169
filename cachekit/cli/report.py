"""``cachekit report`` and ``cachekit stats``: what calls cost with and without caching, from the cost
ledger; what a store holds, and the hit rates by layer."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from cachekit.cli.store import STORE_HELP, open_semantic_index, open_store, semantic_index_url

__all__ = ["register"]


_SINCE_HELP = "since then: 7d, 12h, 30m, or an ISO date (default: every call)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` and ``stats`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_report(commands)
    _add_stats(commands)


def _report(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from cachekit.cost.ledger import default_ledger_path
    from cachekit.cost.report import render_report

    ledger = Path(args.ledger) if args.ledger else default_ledger_path()
    if not ledger.exists():
        # An all-zero table would read as "caching saved nothing"; the truth is nothing was recorded here.
        out.write(
            f"cachekit report: no ledger at {ledger}: no call has been recorded there "
            "(name another with --ledger PATH)\n"
        )
        return 1
    try:
        text = render_report(
            args.ledger,
            by=args.by,
            since=args.since,
            as_json=args.json,
            plot_path=args.plot,
            target_precision=args.target_precision,
        )
    except (ValueError, FileNotFoundError) as exc:
        out.write(f"cachekit report: {exc}\n")
        return 2
    out.write(text if text.endswith("\n") else text + "\n")
    if args.plot:
        out.write(f"wrote {args.plot}\n")
    return 0


def _layer_rates(ledger: str | None, since: str | None) -> dict[str, Any]:
    """Calls and hit rates by layer from the cost ledger (empty when there is no ledger yet)."""
    from cachekit.cost.report import load_records, parse_since

    try:
        records = load_records(ledger, parse_since(since) if since else None)
    except FileNotFoundError:
        return {"calls": 0, "outcomes": {}, "rates": {}}
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    calls = len(records)
    return {
        "calls": calls,
        "outcomes": outcomes,
        "rates": {name: count / calls for name, count in sorted(outcomes.items())} if calls else {},
    }


def _stats(args: argparse.Namespace, out: TextIO) -> int:

    from cachekit.errors import CachekitError
    from cachekit.ops import store_stats

    try:
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
        layers = _layer_rates(args.ledger, args.since)
    except (CachekitError, ValueError) as exc:
        out.write(f"cachekit stats: {exc}\n")
        return 2
    if args.json:
        out.write(json.dumps({"store": held.to_dict(), "ledger": layers}, indent=2) + "\n")
        return 0
    out.write(f"store: {held.entries} entries, {held.bytes:,} bytes")
    if index is not None:
        out.write(f"; semantic index: {held.semantic} entries")
    others = [f"{held.probes} operator probes"] if held.probes else []
    others += [f"{held.foreign} keys not written by this cachekit"] if held.foreign else []
    out.write(f" ({', '.join(others)})\n" if others else "\n")
    for name, ns in sorted(held.namespaces.items()):
        parts = ", ".join(
            f"{layer} {ns.entries[layer]} entries"
            + (f" / {ns.bytes[layer]:,} bytes" if layer in ns.bytes else "")
            for layer in sorted(ns.entries)
        )
        out.write(f"  namespace {name!r}: {parts}\n")
    out.write(f"ledger: {layers['calls']} calls\n")
    for outcome, count in sorted(layers["outcomes"].items()):
        out.write(f"  {outcome:<14} {count:>8}  {layers['rates'][outcome]:6.1%}\n")
    return 0


def _add_report(commands: Any) -> None:
    report = commands.add_parser("report", help="cost with and without caching, from the cost ledger")
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
        "--ledger", metavar="PATH", help="a ledger file (default: $CACHEKIT_HOME/ledger.sqlite3)"
    )
    report.add_argument(
        "--target-precision",
        type=float,
        default=0.95,
        metavar="P",
        help="semantic shadow mode: the precision the suggested threshold must reach, as the lower "
        "bound of its 95%% interval (default: %(default)s)",
    )
    report.set_defaults(run=_report)


def _add_stats(commands: Any) -> None:
    stats = commands.add_parser("stats", help="entries and sizes per namespace, hit rates by layer")
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

"""The ``cachekit`` command line.

``cachekit demo`` shows every layer at work offline on the local backend (SmolLM2), through the official
SDKs with and without cachekit, with what each layer saves (no network, no API key).
``cachekit report`` prints what calls cost, with and without caching, from the cost ledger.
``cachekit stats``, ``cachekit purge`` and ``cachekit health`` are the operator's tools for a store.
``cachekit semantic-eval PAIRS.jsonl`` measures the semantic cache's precision and recall on labelled pairs.
``cachekit serve`` runs the offline local backend: the providers' HTTP APIs on a local engine.
``cachekit replay TRACES.jsonl`` compares cache-breakpoint policies on recorded agent conversations.
``cachekit diff A.json B.json`` shows where two requests' prompt prefixes diverge, and why.
``cachekit lint REQUEST.json ...`` names volatile content in the cached prefix of requests.
``cachekit prices MODEL`` shows the prices cachekit uses for a model, and where they come from.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from cachekit._progress import ProgressPrinter
from cachekit._version import __version__
from cachekit.errors import install_command

__all__ = ["main"]


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.demo import run_demo
    from cachekit.errors import MissingExtraError

    chart = None if args.no_chart else args.chart
    try:
        run_demo(engine=args.engine, provider=args.provider, chart=chart, out=out)
    except MissingExtraError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    return 0


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
            args.ledger, by=args.by, since=args.since, as_json=args.json, plot_path=args.plot
        )
    except (ValueError, FileNotFoundError) as exc:
        out.write(f"cachekit report: {exc}\n")
        return 2
    out.write(text if text.endswith("\n") else text + "\n")
    if args.plot:
        out.write(f"wrote {args.plot}\n")
    return 0


def _open_store(url: str | None) -> Any:
    import os

    from cachekit.config import cachekit_home
    from cachekit.stores.url import store_from_url

    return store_from_url(url or os.environ.get("CACHEKIT_CACHE_URL") or "sqlite://", home=cachekit_home())


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
    import json

    from cachekit.errors import CachekitError
    from cachekit.ops import store_stats

    try:
        index = _open_semantic_index(args, _semantic_index_url(args.semantic_index, args.store))
        try:
            store = _open_store(args.store)
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


def _semantic_index_url(explicit: str | None, store_url: str | None) -> str | None:
    """The semantic index ``purge`` also purges: ``--semantic-index``, else the store's Redis when
    the store is Redis (the index's default home: same URL, same prefix), else none."""
    import os

    from cachekit.errors import ConfigError
    from cachekit.stores.redis import REDIS_SCHEMES

    def is_redis(url: str) -> bool:
        return url.partition("://")[0].strip().lower() in REDIS_SCHEMES

    if explicit is not None:
        if not is_redis(explicit):
            raise ConfigError(
                "--semantic-index takes a Redis 8 URL; a memory index lives in its process: purge it "
                "there with cachekit.ops.purge_semantic"
            )
        return explicit
    url = store_url or os.environ.get("CACHEKIT_CACHE_URL") or ""
    return url if is_redis(url) else None


def _open_semantic_index(args: argparse.Namespace, url: str | None) -> Any:
    """The Redis semantic index at ``url`` (``None`` for none), opened before anything is deleted;
    ``None`` also when the semantic extra is missing and nobody asked for the index by name."""
    if url is None:
        return None
    from cachekit.errors import MissingExtraError
    from cachekit.semantic.index_redis import RedisVectorIndex

    try:
        return RedisVectorIndex(url)
    except MissingExtraError:
        if args.semantic_index is not None:
            raise
        return None


def _older_than(text: str | None) -> float | None:
    """``--older-than`` in seconds: ``0s`` is everything written until now, and so is a date to come."""
    if text is None:
        return None
    from cachekit.cost.report import parse_since

    now = time.time()  # one clock reading: "0s" is exactly 0, never a hair below it
    try:
        since = parse_since(text, now=now)
    except ValueError:
        raise ValueError(
            f"--older-than takes a duration like 30d, 12h, 30m or 0s, or an ISO date; got {text!r}"
        ) from None
    return max(0.0, now - since)


def _purge_refusal(args: argparse.Namespace) -> str | None:
    """Why ``purge`` will not run as asked (before anything is opened), or ``None``."""
    filters = {"--tenant": args.tenant, "--namespace": args.namespace, "--older-than": args.older_than}
    given = [flag for flag, value in filters.items() if value is not None]
    if args.all and given:
        return f"--all deletes everything; it takes no {', '.join(given)}"
    if args.all and not (args.yes or args.dry_run):
        return (
            "--all deletes every entry of the store and of its semantic index: add --yes to do it "
            "(or --dry-run to count them first)"
        )
    if not args.all and not given:
        return (
            "purge needs --tenant, --namespace or --older-than to choose what to delete; "
            "to delete everything (the store and its semantic index): --all --yes"
        )
    return None


def _purge_store(
    args: argparse.Namespace, store: Any, older_than: float | None, matched: set[str] | None
) -> int:
    from cachekit.ops import clear_store, purge

    if args.all:
        return clear_store(store, dry_run=args.dry_run)
    return purge(
        store,
        tenant=args.tenant,
        namespace=args.namespace,
        older_than=older_than,
        dry_run=args.dry_run,
        matched=matched,
    )


def _purge_index(args: argparse.Namespace, index: Any, matched: set[str] | None) -> int:
    from cachekit.ops import clear_semantic, purge_semantic

    if args.all:
        return clear_semantic(index, dry_run=args.dry_run)
    return purge_semantic(
        index, tenant=args.tenant, namespace=args.namespace, keys=matched, dry_run=args.dry_run
    )


def _purge(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.errors import CachekitError

    refusal = _purge_refusal(args)
    if refusal is not None:
        out.write(f"cachekit purge: {refusal}\n")
        return 2
    verb = "would delete" if args.dry_run else "deleted"
    try:
        older_than = _older_than(args.older_than)
        index_url = _semantic_index_url(args.semantic_index, args.store)
        index = _open_semantic_index(args, index_url)
        try:
            # By age, the index follows the store: its entries have no write time of their own.
            matched: set[str] | None = set() if older_than is not None and index is not None else None
            store = _open_store(args.store)
            try:
                count = _purge_store(args, store, older_than, matched)
            finally:
                store.close()
            out.write(f"{verb} {count} entries\n")
            if index is not None:
                out.write(f"{verb} {_purge_index(args, index, matched)} semantic index entries\n")
            elif index_url is not None:
                out.write(f"semantic index not searched: it needs {install_command('semantic')}\n")
        finally:
            if index is not None:
                index.close()
    except (CachekitError, ValueError) as exc:
        out.write(f"cachekit purge: {exc}\n")
        return 2
    return 0


def _health(args: argparse.Namespace, out: TextIO) -> int:
    import json

    from cachekit.errors import CachekitError
    from cachekit.ops import health

    try:
        store = _open_store(args.store)
    except CachekitError as exc:
        out.write(json.dumps({"ok": False, "latency_ms": 0.0, "error": str(exc)}) + "\n")
        return 1
    try:
        result = health(store, budget_ms=args.budget_ms)
    finally:
        store.close()
    out.write(json.dumps(result.to_dict()) + "\n")
    return 0 if result.ok else 1


def _semantic_eval(args: argparse.Namespace, out: TextIO) -> int:
    import json

    from cachekit.errors import CachekitError

    try:
        from cachekit.semantic.embedders import default_embedder
        from cachekit.semantic.evaluate import (
            curve,
            evaluate,
            load_pairs,
            render_compare,
            render_curve,
            render_text,
        )

        if args.index == "redis" and not args.redis_url:
            out.write("cachekit semantic-eval: --index redis needs --redis-url URL (Redis 8)\n")
            return 2
        pairs = load_pairs(args.pairs)
        settings = [_eval_settings(args)]
        if args.compare is not None:
            settings.append(_eval_settings(args, args.compare))
        index: Any = None
        if args.index == "redis":
            from cachekit.semantic.index_redis import RedisVectorIndex

            index = RedisVectorIndex(args.redis_url, timeout=5.0)
        try:
            with ProgressPrinter(sys.stderr, "cachekit semantic-eval") as progress:
                reports = [
                    evaluate(
                        pairs,
                        embedder=default_embedder(),
                        index=index,
                        index_size=args.index_size,
                        progress=progress,
                        **setting,
                    )
                    for setting in settings
                ]
        finally:
            if index is not None:
                index.close()
    except (CachekitError, OSError, ValueError) as exc:
        out.write(f"cachekit semantic-eval: {exc}\n")
        return 2
    report = reports[0]
    if args.json:
        document: dict[str, Any] = report.to_dict()
        if args.curve:
            document["curve"] = [{"point": p, **c.to_dict()} for p, c in curve(report)]
        if len(reports) > 1:
            document = {"a": document, "b": reports[1].to_dict()}
        out.write(json.dumps(document, indent=2) + "\n")
        return 0
    out.write(render_text(report) + "\n")
    if report.calibrated_on:
        out.write(f"operating point calibrated on: {report.calibrated_on}\n")
    if args.curve:
        out.write(render_curve(report, curve(report)) + "\n")
    if len(reports) > 1:
        out.write(render_compare(report, reports[1]) + "\n")
    return 0


def _eval_settings(args: argparse.Namespace, spec: str | None = None) -> dict[str, Any]:
    """The evaluate() settings of the command line, or of a ``--compare`` spec such as
    ``"threshold=0.9 no-verifier"`` (``threshold=``, ``target-precision=``, ``max-false-hit-rate=``,
    ``no-guards``, ``no-verifier``; what it leaves out is the command line's)."""
    settings: dict[str, Any] = {
        "threshold": args.threshold,
        "guards": not args.no_guards,
        "verifier": not args.no_verifier,
        "target_precision": args.target_precision,
        "max_false_hit_rate": args.max_false_hit_rate,
    }
    if spec is None:
        return settings
    settings.update(threshold=None, target_precision=None, max_false_hit_rate=None)
    for word in spec.replace(",", " ").split():
        name, _, value = word.partition("=")
        if name in ("no-guards", "no-verifier") and not value:
            settings[name[3:]] = False
        elif name in ("threshold", "target-precision", "max-false-hit-rate") and value:
            settings[name.replace("-", "_")] = float(value)
        else:
            raise ValueError(f"--compare: cannot read {word!r} (threshold=, target-precision=, ...)")
    return settings


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.errors import CachekitError
    from cachekit.local import LocalBackend, LocalServer, make_engine

    try:
        engine = make_engine(args.engine, model=args.model, device=args.device)
        backend = LocalBackend(engine, rules=args.rules, accept_any_model=args.any_model)
        server = LocalServer(backend, host=args.host, port=args.port)
    except (CachekitError, OSError, ValueError) as exc:
        out.write(f"cachekit serve: {exc}\n")
        return 2
    out.write(
        f"cachekit serve: {engine.name} engine, {args.rules} cache rules, listening on {server.url}\n"
        f"  anthropic.Anthropic(base_url={server.url!r}, api_key='local')\n"
        f"  openai.OpenAI(base_url={(server.url + '/v1')!r}, api_key='local')\n"
    )
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        backend.close()
    return 0


def _replay(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.errors import MissingExtraError
    from cachekit.replay import POLICIES, Conversation, Gaps, TraceError, read_traces, replay

    conversations: list[Conversation] = []
    try:
        gaps = Gaps.parse(args.gaps) if args.gaps is not None else Gaps("fixed", args.gap_seconds)
        for item in read_traces(args.traces, limit=args.limit):
            if isinstance(item, TraceError):
                sys.stderr.write(f"cachekit replay: skipped {item}\n")
            else:
                conversations.append(item)
        with ProgressPrinter(sys.stderr, "cachekit replay") as progress:
            results = replay(
                conversations,
                provider=args.provider,
                model=args.model,
                policies=args.policy or POLICIES,
                gaps=gaps,
                seed=args.seed,
                progress=progress,
                **_replay_openai(args),
            )
    except (OSError, ValueError, MissingExtraError) as exc:
        sys.stderr.write(f"cachekit replay: {exc}\n")
        return 2
    for result in results:
        for error in result.errors:
            sys.stderr.write(f"cachekit replay: {result.policy}: {error}\n")
    if args.json:
        for result in results:
            out.write(json.dumps(result.to_json()) + "\n")
        return 0
    out.write(
        f"{len(conversations)} conversations, {results[0].requests if results else 0} requests, "
        f"{args.provider} {args.model}, gaps {gaps.label()} s, seed {args.seed} (input side only)\n\n"
    )
    header = f"{'policy':<16}{'read':>11}{'written':>11}{'uncached':>11}{'cost $':>11}{'no cache $':>12}"
    out.write(header + f"{'bound $':>10}{'efficiency':>12}\n")
    for result in results:
        efficiency = result.savings_efficiency
        out.write(
            f"{result.policy:<16}{result.cache_read_tokens:>11,}{result.cache_write_tokens:>11,}"
            f"{result.uncached_tokens:>11,}{result.cost_usd:>11.4f}{result.cost_no_cache_usd:>12.4f}"
            f"{result.cost_lower_bound_usd:>10.4f}"
            f"{'-' if efficiency is None else f'{efficiency:.3f}':>12}\n"
        )
    return 0


def _replay_openai(args: argparse.Namespace) -> dict[str, Any]:
    """The OpenAI layout and a price file, when given (``--layout``, ``--prices``)."""
    from cachekit.cost.prices import PriceTable

    extra: dict[str, Any] = {"layout": args.layout} if args.provider != "anthropic" else {}
    if args.prices is not None:
        extra["prices"] = PriceTable.load(overrides=args.prices)
    return extra


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="every layer at work, offline, on a local model: what cachekit saves",
        description=(
            "Sends a support-agent conversation with tools and a batch of customer questions twice, through "
            "the plain SDK and through cachekit, to the local backend (SmolLM2-135M-Instruct, converted on "
            "first use; or the scripted engine), and prints tokens, breakpoints, hits and cost."
        ),
    )
    demo.add_argument(
        "--engine",
        choices=("transformers", "scripted"),
        default="transformers",
        help="transformers: SmolLM2 on CPU or GPU; scripted: instant canned answers (default: %(default)s)",
    )
    demo.add_argument(
        "--provider",
        choices=("anthropic", "openai"),
        default="anthropic",
        help="the SDK and API the conversation goes through (default: %(default)s)",
    )
    demo.add_argument(
        "--chart",
        default="cachekit-demo.png",
        metavar="PNG",
        help="where to write the chart (default: %(default)s)",
    )
    demo.add_argument("--no-chart", action="store_true", help="do not write a chart")
    demo.set_defaults(run=_demo)


def _add_replay(commands: Any) -> None:
    from cachekit.replay import POLICIES

    replay = commands.add_parser(
        "replay",
        help="cost of each cache-breakpoint policy on recorded agent conversations",
        description=(
            "Replays each conversation (request k = system, tools and the messages before assistant turn "
            "k) through cachekit and the local backend's billing, once per policy: none, system (a marker "
            "after the system prompt), last (a marker on the last message), auto (top-level automatic "
            "caching), system+last and system+last-1h (what LiteLLM's and LangChain's defaults send), "
            "auto-1h, cachekit (the planner), oracle-ttl (the planner's markers, each lifetime chosen "
            "knowing when the next request comes)."
        ),
    )
    replay.add_argument("traces", metavar="TRACES.jsonl", help="one conversation per line (Anthropic layout)")
    replay.add_argument(
        "--provider",
        choices=("anthropic", "openai", "bailian"),
        default="anthropic",
        help="the API the traces are replayed through (default: %(default)s)",
    )
    replay.add_argument(
        "--layout",
        choices=("chat", "responses"),
        default="chat",
        help="--provider openai: Chat Completions or Responses requests (default: %(default)s)",
    )
    replay.add_argument(
        "--prices",
        metavar="JSON",
        help="a file of price rows merged over the bundled table (default: the bundled table alone)",
    )
    replay.add_argument(
        "--model", default="claude-sonnet-4-5", help="prices and cache rules (default: %(default)s)"
    )
    replay.add_argument(
        "--policy",
        action="append",
        choices=(*POLICIES, "implicit"),
        help="a policy to replay (repeatable; default: all; openai: none, implicit, last, cachekit)",
    )
    replay.add_argument(
        "--gap-seconds", type=float, default=5.0, help="seconds between requests (default: %(default)g)"
    )
    replay.add_argument(
        "--gaps",
        metavar="SPEC",
        help="think times drawn per request: fixed:S, uniform:LOW:HIGH, lognormal:MEDIAN:SPREAD, or "
        "trace[:S] (each conversation's gap_seconds) (default: fixed, --gap-seconds)",
    )
    replay.add_argument("--seed", type=int, default=0, help="seed of the drawn gaps (default: %(default)s)")
    replay.add_argument(
        "--limit", type=int, metavar="N", help="only the first N conversations (default: all)"
    )
    replay.add_argument("--json", action="store_true", help="one JSON object per policy")
    replay.set_defaults(run=_replay)
    from cachekit._cli_prefix import register  # diff and lint

    register(commands)


_SINCE_HELP = "since then: 7d, 12h, 30m, or an ISO date (default: every call)"
_STORE_HELP = "the store URL (default: $CACHEKIT_CACHE_URL, else SQLite under $CACHEKIT_HOME)"


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
    report.set_defaults(run=_report)


def _add_stats(commands: Any) -> None:
    stats = commands.add_parser("stats", help="entries and sizes per namespace, hit rates by layer")
    stats.add_argument("--store", metavar="URL", help=_STORE_HELP)
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


def _add_purge(commands: Any) -> None:
    purge = commands.add_parser(
        "purge",
        help="delete entries by tenant, namespace or age, or all of them",
        description="Deletes the entries that match every filter given, or with --all --yes every entry.",
    )
    purge.add_argument("--store", metavar="URL", help=_STORE_HELP)
    purge.add_argument("--tenant", help="entries of this tenant (default: any tenant)")
    purge.add_argument("--namespace", help="entries of this namespace (default: any namespace)")
    purge.add_argument(
        "--older-than",
        metavar="AGE",
        help="entries written before then: 30d, 12h, 30m, 0s (all until now) or a date (default: any age)",
    )
    everything = "every entry of the store and of its semantic index (needs --yes; takes no other filter)"
    purge.add_argument("--all", action="store_true", help=everything)
    purge.add_argument("--yes", action="store_true", help="confirm --all")
    purge.add_argument("--dry-run", action="store_true", help="count what would be deleted")
    purge.add_argument(
        "--semantic-index",
        metavar="URL",
        help="the Redis 8 semantic index to purge too (default: the store's, when the store is Redis)",
    )
    purge.set_defaults(run=_purge)


def _add_health(commands: Any) -> None:
    check = commands.add_parser("health", help="probe the store (exit 0 when healthy): a readiness check")
    check.add_argument("--store", metavar="URL", help=_STORE_HELP)
    check.add_argument(
        "--budget-ms", type=float, default=250.0, help="slowest healthy round trip (default: %(default)g ms)"
    )
    check.set_defaults(run=_health)


def _add_semantic_eval(commands: Any) -> None:
    evaluation = commands.add_parser(
        "semantic-eval",
        help="precision and recall of the semantic cache on labelled question pairs",
        description="For each pair, in an empty partition: store a with a dummy answer, look up b.",
    )
    evaluation.add_argument("pairs", metavar="PAIRS.jsonl", help='lines of {"a", "b", "same", "kind"}')
    evaluation.add_argument(
        "--threshold", type=float, help="cosine threshold (default: the semantic cache's, 0.8)"
    )
    evaluation.add_argument("--no-guards", action="store_true", help="the threshold alone decides")
    evaluation.add_argument(
        "--index",
        choices=("memory", "redis"),
        default="memory",
        help="the vector index the pairs are looked up in (default: %(default)s)",
    )
    evaluation.add_argument(
        "--redis-url", metavar="URL", help="a Redis 8 server for --index redis (no default: needed there)"
    )
    evaluation.add_argument("--json", action="store_true", help="print the counts as JSON")
    # issue 18: precision as a setting, index mode, curves and comparisons.
    evaluation.add_argument(
        "--target-precision",
        type=float,
        help="pick the operating point for this precision (default: the threshold and guards, no verifier)",
    )
    evaluation.add_argument(
        "--max-false-hit-rate", type=float, help="... or for this false-hit rate, per kind (default: none)"
    )
    evaluation.add_argument("--no-verifier", action="store_true", help="the threshold and the guards decide")
    evaluation.add_argument(
        "--index-size",
        type=int,
        metavar="N",
        help=(
            "store the first N pairs' a in one partition and ask each b; a hit must serve the query "
            "(default: pairwise, one pair per partition)"
        ),
    )
    evaluation.add_argument("--curve", action="store_true", help="precision/recall over operating points")
    evaluation.add_argument(
        "--compare",
        metavar="SPEC",
        help='a second configuration side by side, e.g. "threshold=0.9 no-verifier" (default: none)',
    )
    evaluation.set_defaults(run=_semantic_eval)


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="the offline local backend: Anthropic and OpenAI HTTP APIs on a local engine",
        description="Serves POST /v1/messages, /v1/chat/completions and /v1/responses until stopped.",
    )
    serve.add_argument(
        "--engine",
        choices=("scripted", "transformers"),
        default="scripted",
        help="scripted: instant canned answers; transformers: a real model (default: %(default)s)",
    )
    serve.add_argument(
        "--model",
        default=None,
        help="transformers engine: smollm2, tiny, or a local model directory (default: smollm2)",
    )
    serve.add_argument(
        "--device", default=None, help="transformers engine: cuda or cpu (default: cuda if any)"
    )
    serve.add_argument(
        "--rules",
        choices=("auto", "anthropic", "openai", "none"),
        default="auto",
        help="prompt-caching rules that bill each API (auto: each by its provider's; default: %(default)s)",
    )
    serve.add_argument(
        "--any-model",
        action="store_true",
        help="accept every model name (default: the models in cachekit's price and cache-rule tables)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8765, help="the port to listen on (default: %(default)s)")
    serve.set_defaults(run=_serve)


def _prices(args: argparse.Namespace, out: TextIO) -> int:
    import datetime as dt

    from cachekit.cost import genai
    from cachekit.cost.prices import find_quote, format_quote

    try:
        at = dt.datetime.fromisoformat(args.at) if args.at else dt.datetime.now(dt.timezone.utc)
        given = args.option or []
        if any("=" not in option for option in given):
            raise ValueError(f"--option takes KEY=VALUE, got {given!r}")
        options = dict(option.split("=", 1) for option in given)
        if args.update:  # the only network access: asked for explicitly
            genai.update_from_network()
    except (ValueError, RuntimeError, OSError) as exc:
        out.write(f"cachekit prices: {exc}\n")
        return 2
    at = at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)
    quote = find_quote(args.model, args.provider, at=at, context=options)
    if quote is None:
        out.write(
            f"cachekit prices: no price for {args.model!r}; add a row with PriceTable.load(overrides=...)\n"
        )
        return 1
    out.write(format_quote(quote, at.astimezone(dt.timezone.utc)))
    return 0


def _add_prices(commands: Any) -> None:
    prices = commands.add_parser("prices", help="the prices cachekit uses for a model, and their source")
    prices.add_argument("model", help="the model name, as sent to the API")
    prices.add_argument(
        "--provider",
        help="anthropic, openai, gemini, deepseek, kimi, glm, xai, bailian (default: the first that has it)",
    )
    prices.add_argument("--at", help="the prices in force then: an ISO date or time, UTC (default: now)")
    prices.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="an option the response reports, repeatable: service_tier=flex, speed=fast, inference_geo=us "
        "(default: none, standard prices)",
    )
    prices.add_argument("--update", action="store_true", help="fetch the newest genai-prices data first")
    prices.set_defaults(run=_prices)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cachekit", description="Caching middleware for hosted LLM APIs.")
    parser.add_argument("--version", action="version", version=f"cachekit {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, help="the command to run (each has --help)"
    )
    for add in (_add_demo, _add_report, _add_stats, _add_purge, _add_health, _add_semantic_eval, _add_serve):
        add(commands)
    _add_prices(commands)
    _add_replay(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``cachekit`` command; returns the exit status."""
    args = _build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace, TextIO], int] = args.run
    return run(args, out or sys.stdout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

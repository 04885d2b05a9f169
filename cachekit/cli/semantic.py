"""``cachekit semantic-eval``: the semantic cache's precision and recall on labelled question pairs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from cachekit._progress import ProgressPrinter

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``semantic-eval`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_semantic_eval(commands)


def _semantic_eval(args: argparse.Namespace, out: TextIO) -> int:

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

        if args.calibrate is not None:
            return _calibrate(args, out)
        if args.pairs is None:
            out.write("cachekit semantic-eval: name the labelled pairs (PAIRS.jsonl), or --calibrate FILE\n")
            return 2
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


def _calibrate(args: argparse.Namespace, out: TextIO) -> int:
    """``--calibrate FILE --out CAL.json``: measure the shipped verifier at every score threshold on
    the user's labelled pairs (never fitted on) and write the calibration ``SemanticConfig`` loads."""
    from pathlib import Path

    from cachekit.errors import ConfigError
    from cachekit.semantic.embedders import default_embedder
    from cachekit.semantic.evaluate import calibrate, evaluate, load_pairs
    from cachekit.semantic.matcher import Matcher
    from cachekit.semantic.verifier import DataSource, load_verifier, operating_point

    if args.out is None:
        out.write("cachekit semantic-eval: --calibrate needs --out CAL.json (where to write it)\n")
        return 2
    if args.index_size is not None:
        out.write("cachekit semantic-eval: a calibration is measured pair by pair (no --index-size)\n")
        return 2
    path = Path(args.calibrate)
    pairs = load_pairs(path)
    verifier = load_verifier()
    embedder = default_embedder()
    # Operating point 0: every candidate that passes the guards is scored, so every threshold can be read.
    matcher = Matcher(embedder, threshold=verifier.cosine_floor, verifier=verifier, min_score=0.0)
    with ProgressPrinter(sys.stderr, "cachekit semantic-eval") as progress:
        report = evaluate(pairs, embedder=embedder, matcher=matcher, progress=progress)
    same = sum(p.same for p in pairs)
    table = calibrate(
        report,
        verifier=verifier.digest(),
        calibrated_on=f"{len(pairs)} pairs of {path.name} ({same} same, {len(pairs) - same} different)",
        sources=[DataSource(path.name, f"labelled pairs read from {path}", "the user's own", len(pairs))],
    )
    Path(args.out).write_text(json.dumps(table.to_dict(), indent=1) + "\n", encoding="utf-8")
    out.write(f"wrote {args.out}: {table.calibrated_on}\n")
    out.write("target precision  operating point  precision (95% interval)  recall\n")
    for target in (0.8, 0.85, 0.9, 0.95, 0.98):
        try:
            point = operating_point(table, target_precision=target)
        except ConfigError:
            out.write(f"{target:>16}  not reached\n")
            continue
        row = next(r for r in table.rows if r.threshold == point)
        low, high = row.precision_interval
        out.write(
            f"{target:>16}  {point:>15}  {row.precision:.3f} ({low:.3f}-{high:.3f})  {row.recall:>15.3f}\n"
        )
    out.write(f'use it: SemanticConfig(target_precision=..., calibration="{args.out}")\n')
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
        "calibration": args.calibration,
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


def _add_semantic_eval(commands: Any) -> None:
    evaluation = commands.add_parser(
        "semantic-eval",
        help="precision and recall of the semantic cache on labelled question pairs",
        description="For each pair, in an empty partition: store a with a dummy answer, look up b.",
    )
    evaluation.add_argument(
        "pairs", metavar="PAIRS.jsonl", nargs="?", help='lines of {"a", "b", "same", "kind"}'
    )
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
    # issue 30: calibration from the user's own labelled pairs.
    evaluation.add_argument(
        "--calibrate",
        metavar="FILE",
        help="measure the verifier on these labelled pairs and write a calibration to --out (default: none)",
    )
    evaluation.add_argument(
        "--out", metavar="CAL.json", help="where --calibrate writes (no default: needed there)"
    )
    evaluation.add_argument(
        "--calibration",
        metavar="CAL.json",
        help="read --target-precision's operating point from this calibration (default: the shipped one)",
    )
    evaluation.set_defaults(run=_semantic_eval)

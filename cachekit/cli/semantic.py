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

        embedder = default_embedder(args.embedder)
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
                        embedder=embedder,
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


def _add_semantic_eval(commands: Any) -> None:
    evaluation = commands.add_parser(
        "semantic-eval",
        help="precision and recall of the semantic cache on labelled question pairs",
        description="For each pair, in an empty partition: store a with a dummy answer, look up b.",
    )
    evaluation.add_argument("pairs", metavar="PAIRS.jsonl", help='lines of {"a", "b", "same", "kind"}')
    evaluation.add_argument(
        "--embedder",
        choices=("auto", "onnx", "sentence-transformers"),
        default="auto",
        help="all-MiniLM-L6-v2 on onnxruntime (no torch) or on sentence-transformers (default: "
        "%(default)s, as the semantic cache picks: sentence-transformers where installed)",
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
    evaluation.set_defaults(run=_semantic_eval)

"""``cachekit semantic-eval``: the semantic cache's precision and recall on labelled question pairs."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any, TextIO

from cachekit._progress import ProgressPrinter
from cachekit.cli import _common
from cachekit.cli._common import at_least, between, input_file, missing

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``semantic-eval`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_semantic_eval(commands)


def _semantic_eval(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.errors import MissingExtraError

    if args.index == "redis" and not args.redis_url:
        raise _common.UsageError("--index redis needs --redis-url URL (a Redis 8 server)")
    pairs = _pairs(args.pairs)
    settings = [_eval_settings(args)]
    if args.compare is not None:
        settings.append(_eval_settings(args, args.compare))
    for module in ("numpy", "sentence_transformers"):
        if missing(module):
            raise MissingExtraError(module.replace("_", "-"), "semantic", "cachekit semantic-eval")

    from cachekit.semantic.embedders import default_embedder
    from cachekit.semantic.evaluate import curve, evaluate, render_compare, render_curve, render_text

    index: Any = None
    if args.index == "redis":
        from cachekit.semantic.index_redis import RedisVectorIndex

        index = RedisVectorIndex(args.redis_url, timeout=5.0)
    try:
        with ProgressPrinter(sys.stderr, "cachekit semantic-eval") as progress:
            # The model loads on its first use, for seconds: a stage of its own, not "embedding 0%".
            progress("loading the embedding model", 0, 1)
            default_embedder().embed(["warm up"])
            progress("loading the embedding model", 1, 1)
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
    report = reports[0]
    if args.json:
        document: dict[str, Any] = _json_report(report, pairs)
        if args.curve:
            document["curve"] = [{"point": p, **_json_counts(c)} for p, c in curve(report)]
        if len(reports) > 1:
            document = {"a": document, "b": _json_report(reports[1], pairs)}
        out.write(json.dumps(document, indent=2) + "\n")
        return 0
    out.write(render_text(report) + "\n")
    out.write(_about(report, pairs, args))
    if args.curve:
        out.write(render_curve(report, curve(report)) + "\n")
    if len(reports) > 1:
        out.write(render_compare(report, reports[1]) + "\n")
    return 0


def _pairs(path: str) -> list[Any]:
    """The labelled pairs of ``path``; a file without any is an error (a report of zeros is no answer)."""
    from cachekit.semantic.evaluate import load_pairs

    try:
        pairs = load_pairs(input_file(path, 'a JSON Lines file of {"a", "b", "same", "kind"} pairs'))
    except UnicodeDecodeError as exc:
        raise _common.UsageError(
            f"{path} is not UTF-8 text (byte {exc.start}): give a JSON Lines file of pairs"
        ) from None
    if not pairs:
        raise _common.UsageError(f'{path} holds no pairs: give lines of {{"a", "b", "same", "kind"}}')
    return pairs


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
        elif name in _RANGES and value:
            settings[name.replace("-", "_")] = _in_range(name, value)
        else:
            raise ValueError(f"--compare: cannot read {word!r} (threshold=, target-precision=, ...)")
    return settings


# -- validation: the range of each figure, on the command line and in --compare ----------------------

_RANGES = {
    "threshold": between(-1.0, 1.0),  # a cosine
    "target-precision": between(0.0, 1.0, low_open=True),
    "max-false-hit-rate": between(0.0, 1.0),
}


def _in_range(name: str, value: str) -> float:
    try:
        return _RANGES[name](value)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"--compare: {name}={value}: {exc}") from None


# -- output formatting: no figure that is undefined is printed as one ------------------------------

#: Kinds of pair that are made to fool a cache: a small edit that changes the answer.
ADVERSARIAL_KINDS = frozenset(
    {"negation", "antonym", "number", "numbers", "entity", "entities", "operator", "role", "roles", "swap"}
)


def _json_counts(counts: Any) -> dict[str, Any]:
    """``Counts.to_dict()`` with ``null`` for a rate whose denominator is zero (the library's 1.0 or
    0.0 there claims a figure nobody measured)."""
    document: dict[str, Any] = counts.to_dict()
    for rate, denominator in (
        ("precision", counts.hits),
        ("recall", counts.same),
        ("false_hit_rate", counts.different),
    ):
        if not denominator:
            document[rate] = None
    return document


def _json_report(report: Any, pairs: list[Any]) -> dict[str, Any]:
    document = _json_counts(report.total)
    document["by_kind"] = {kind: _json_counts(report.by_kind[kind]) for kind in sorted(report.by_kind)}
    document["verifier"] = report.operating_point is not None
    document["operating_point"] = report.operating_point
    adversarial = _adversarial(pairs)
    document["adversarial_pairs"] = sum(adversarial.values()) if adversarial else None
    return document


def _adversarial(pairs: list[Any]) -> dict[str, int]:
    """The pairs made to fool a cache, by kind, when they are at least half of the sample (else
    empty): on such a sample precision is a stress test, not what real traffic sees."""
    kinds = Counter(p.kind for p in pairs if not p.same and p.kind.lower() in ADVERSARIAL_KINDS)
    return dict(kinds.most_common()) if 2 * sum(kinds.values()) >= len(pairs) else {}


def _about(report: Any, pairs: list[Any], args: argparse.Namespace) -> str:
    """The lines under the table: whether the verifier ran, and whether the sample is adversarial."""
    if report.operating_point is not None:
        verifier = f"verifier: on, at score {report.operating_point:g} (from cachekit's shipped calibration)"
    elif args.no_verifier:
        verifier = "verifier: off (--no-verifier)"
    else:
        verifier = "verifier: off (it runs with --target-precision or --max-false-hit-rate)"
    lines = [verifier]
    adversarial = _adversarial(pairs)
    if adversarial:
        kinds = ", ".join(f"{kind} {n}" for kind, n in adversarial.items())
        lines.append(
            f"adversarial sample: {sum(adversarial.values())} of {len(pairs)} pairs are near-misses made to "
            f"fool a cache ({kinds}); its precision is a stress test, not what real traffic sees"
        )
    return "".join(line + "\n" for line in lines)


def _add_semantic_eval(commands: Any) -> None:
    evaluation = commands.add_parser(
        "semantic-eval",
        help="precision and recall of the semantic cache on labelled question pairs",
        description="For each pair, in an empty partition: store a with a dummy answer, look up b.",
        epilog="""examples:
  cachekit semantic-eval pairs.jsonl                         # lines of {"a", "b", "same", "kind"}
  cachekit semantic-eval pairs.jsonl --target-precision 0.9 --curve
  cachekit semantic-eval pairs.jsonl --compare "threshold=0.9 no-verifier"
  cachekit semantic-eval pairs.jsonl --json""",
    )
    evaluation.add_argument("pairs", metavar="PAIRS.jsonl", help='lines of {"a", "b", "same", "kind"}')
    evaluation.add_argument(
        "--threshold",
        type=_RANGES["threshold"],
        help="cosine threshold, -1 to 1 (default: the semantic cache's, 0.8)",
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
        type=_RANGES["target-precision"],
        help="pick the operating point for this precision, above 0 to 1 (default: the threshold and "
        "guards, no verifier)",
    )
    evaluation.add_argument(
        "--max-false-hit-rate",
        type=_RANGES["max-false-hit-rate"],
        help="... or for this false-hit rate per kind, 0 to 1 (default: none)",
    )
    evaluation.add_argument("--no-verifier", action="store_true", help="the threshold and the guards decide")
    evaluation.add_argument(
        "--index-size",
        type=at_least(1),
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

"""``cachekit purge`` and ``cachekit health``: the operator's tools for a store, and the helpers that open
a store and its semantic index (``cachekit stats`` counts with them too)."""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, TextIO

from cachekit.cli import _common
from cachekit.cli._common import between, say
from cachekit.errors import install_command

__all__ = ["register"]


#: The help of every command's ``--store``.
STORE_HELP = "the store URL (default: $CACHEKIT_CACHE_URL, else SQLite under $CACHEKIT_HOME)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``purge`` and ``health`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_purge(commands)
    _add_health(commands)


def open_store(url: str | None) -> Any:
    """The store at ``url`` (``$CACHEKIT_CACHE_URL``, else SQLite under ``$CACHEKIT_HOME``), which must
    exist: the operator's commands never create a SQLite file, or its folder, where a typo points.

    Raises:
        _common.CommandFailed: no SQLite store at the path (nothing was ever cached there).
    """
    import os

    from cachekit.config import cachekit_home
    from cachekit.stores.url import sqlite_path, store_from_url

    chosen = url or os.environ.get("CACHEKIT_CACHE_URL") or "sqlite://"
    home = cachekit_home()
    path = sqlite_path(chosen, home=home)
    if path is not None and not path.exists():
        where = (
            "--store"
            if url
            else "$CACHEKIT_CACHE_URL"
            if os.environ.get("CACHEKIT_CACHE_URL")
            else "$CACHEKIT_HOME"
        )
        raise _common.CommandFailed(f"no store at {path}: nothing has been cached there (check {where})")
    return store_from_url(chosen, home=home)


def semantic_index_url(explicit: str | None, store_url: str | None) -> str | None:
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


def open_semantic_index(args: argparse.Namespace, url: str | None) -> Any:
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
    return max(0.0, now - parse_since(text, now=now, option="--older-than"))


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
    refusal = _purge_refusal(args)
    if refusal is not None:
        raise _common.UsageError(refusal)
    verb = "would delete" if args.dry_run else "deleted"
    older_than = _older_than(args.older_than)
    index_url = semantic_index_url(args.semantic_index, args.store)
    index = open_semantic_index(args, index_url)
    try:
        # By age, the index follows the store: its entries have no write time of their own.
        matched: set[str] | None = set() if older_than is not None and index is not None else None
        store = open_store(args.store)
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
    return 0


def _health(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.errors import CachekitError
    from cachekit.ops import health

    try:
        store = open_store(args.store)
    except (CachekitError, _common.CommandFailed) as exc:
        # A probe reads the JSON; a person reads the line on stderr. Both say why.
        out.write(json.dumps({"ok": False, "latency_ms": 0.0, "error": str(exc)}) + "\n")
        say("health", str(exc))
        return 1
    try:
        result = health(store, budget_ms=args.budget_ms)
    finally:
        store.close()
    out.write(json.dumps(result.to_dict()) + "\n")
    if not result.ok:
        say("health", f"unhealthy: {result.error}")
    return 0 if result.ok else 1


def _add_purge(commands: Any) -> None:
    purge = commands.add_parser(
        "purge",
        help="delete entries by tenant, namespace or age, or all of them",
        description="Deletes the entries that match every filter given, or with --all --yes every entry.",
        epilog="""examples:
  cachekit purge --tenant acme --dry-run     # count what would go
  cachekit purge --namespace support --older-than 30d
  cachekit purge --store redis://localhost:6379/0 --all --yes""",
    )
    purge.add_argument("--store", metavar="URL", help=STORE_HELP)
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
    check = commands.add_parser(
        "health",
        help="probe the store (exit 0 when healthy): a readiness check",
        description=(
            "Writes, reads back and deletes a probe entry; prints the result as one JSON object and exits 0 "
            "when the store answered within the budget, 1 otherwise (a store that does not exist included: "
            "the check never creates one)."
        ),
        epilog="""examples:
  cachekit health                                      # the default store
  cachekit health --store redis://cache:6379/0 --budget-ms 50""",
    )
    check.add_argument("--store", metavar="URL", help=STORE_HELP)
    check.add_argument(
        "--budget-ms",
        type=between(0.0, math.inf, low_open=True, high_open=True),
        default=250.0,
        help="slowest healthy round trip (default: %(default)g ms)",
    )
    check.set_defaults(run=_health)

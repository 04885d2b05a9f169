"""``cachekit proxy``: every cachekit layer for any client that can point a base URL at it."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``proxy`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_proxy(commands)


def _proxy(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.errors import CachekitError

    if args.fingerprint:
        return _fingerprints(out)
    try:
        from cachekit.proxy import ProxyConfig, serve

        config = ProxyConfig.load(
            args.config,
            host=args.host,
            port=args.port,
            anthropic_base_url=args.anthropic_base_url,
            openai_base_url=args.openai_base_url,
            store=args.store,
            workers=args.workers,
        )
    except (CachekitError, OSError, ValueError) as exc:
        out.write(f"cachekit proxy: {exc}\n")
        return 2
    _configure_logging(args.log_format)

    def listening(url: str) -> None:
        workers = f"{config.workers} worker{'s' if config.workers > 1 else ''}"
        out.write(
            f"cachekit proxy: listening on {url} ({workers})\n"
            f"  anthropic -> {config.anthropic_base_url}: ANTHROPIC_BASE_URL={url}\n"
            f"  openai    -> {config.openai_base_url}: OPENAI_BASE_URL={url}/v1\n"
        )
        out.flush()

    try:
        serve(config, listening)
    except (CachekitError, OSError) as exc:
        out.write(f"cachekit proxy: {exc}\n")
        return 2
    return 0


def _fingerprints(out: TextIO) -> int:
    """Read keys from standard input, one a line; print each one's fingerprint (never the key)."""
    from cachekit.stores.keys import credential_fingerprint

    for line in sys.stdin:
        if line.strip():
            out.write(credential_fingerprint(line) + "\n")
    return 0


def _configure_logging(form: str) -> None:
    """One line per request on standard error: JSON (default) or plain text."""
    import logging

    from cachekit.proxy.logs import JSONFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JSONFormatter()
        if form == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    # uvicorn's own lines (startup, shutdown, workers) too: its access log is off (cachekit's replaces it).
    for name in ("cachekit", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _add_proxy(commands: Any) -> None:
    proxy = commands.add_parser(
        "proxy",
        help="an HTTP proxy that gives every cachekit layer to any client (any language) by its base URL",
        description=(
            "Serves the Anthropic Messages and OpenAI Chat Completions and Responses APIs through cachekit's "
            "pipeline; every other path is passed through. Settings: --config FILE (TOML, docs/proxy.md), "
            "then these options."
        ),
    )
    proxy.add_argument("--config", default=None, help="a TOML file of settings (docs/proxy.md)")
    proxy.add_argument("--host", default=None, help="the address to listen on (default: 127.0.0.1)")
    proxy.add_argument("--port", type=int, default=None, help="the port to listen on (default: 8787)")
    proxy.add_argument(
        "--anthropic-base-url",
        default=None,
        help="upstream for Anthropic requests, as an SDK's base_url (default: https://api.anthropic.com)",
    )
    proxy.add_argument(
        "--openai-base-url",
        default=None,
        help="upstream for OpenAI requests, as an SDK's base_url (default: https://api.openai.com/v1)",
    )
    proxy.add_argument(
        "--store",
        default=None,
        help="the cache's store URL, e.g. redis://host:6379/0 (several workers/instances)",
    )
    proxy.add_argument("--workers", type=int, default=None, help="worker processes (default: 1)")
    proxy.add_argument(
        "--log-format",
        choices=("json", "text"),
        default="json",
        help="request log lines (default: %(default)s)",
    )
    proxy.add_argument(
        "--fingerprint",
        action="store_true",
        help="print the fingerprint of each key read from standard input ([tenants], [[keys]]), and exit",
    )
    proxy.set_defaults(run=_proxy)

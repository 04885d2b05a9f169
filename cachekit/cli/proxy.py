"""``cachekit proxy``: every cachekit layer for any client that can point a base URL at it."""

from __future__ import annotations

import argparse
import contextlib
import errno
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from cachekit.cli import _common
from cachekit.cli._common import at_least, port

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``proxy`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_proxy(commands)


def _proxy(args: argparse.Namespace, out: TextIO) -> int:
    if args.fingerprint:
        return _fingerprints(out)
    from cachekit.proxy import ProxyConfig, serve

    if args.config is not None:
        _common.input_file(args.config, "a TOML file of proxy settings")
    # A bad setting is a ConfigError (a ValueError): cachekit.cli.main prints it as one line, exit 2.
    config = ProxyConfig.load(
        args.config,
        host=args.host,
        port=args.port,
        anthropic_base_url=args.anthropic_base_url,
        openai_base_url=args.openai_base_url,
        store=args.store,
        workers=args.workers,
    )

    def listening(url: str) -> None:
        workers = f"{config.workers} worker{'s' if config.workers > 1 else ''}"
        out.write(
            f"cachekit proxy: listening on {url} ({workers})\n"
            f"  anthropic -> {config.anthropic_base_url}: ANTHROPIC_BASE_URL={url}\n"
            f"  openai    -> {config.openai_base_url}: OPENAI_BASE_URL={url}/v1\n"
        )
        out.flush()

    try:
        with _logging_to_stderr(args.log_format):
            serve(config, listening)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        reason = exc.strerror or str(exc)
        raise _common.CommandFailed(
            f"cannot listen on {config.host}:{config.port}: {reason} (is a server there already? choose "
            "another --port or --host)"
        ) from None
    return 0


def _fingerprints(out: TextIO) -> int:
    """Read keys from standard input, one a line; print each one's fingerprint (never the key)."""
    from cachekit.stores.keys import credential_fingerprint

    for line in sys.stdin:
        if line.strip():
            out.write(credential_fingerprint(line) + "\n")
    return 0


@contextlib.contextmanager
def _logging_to_stderr(form: str) -> Iterator[None]:
    """While the proxy serves: one line per request on standard error, JSON (default) or plain text,
    uvicorn's own lines (startup, shutdown, workers) too; its access log is off (cachekit's replaces
    it). The loggers are put back as they were afterwards: a program (or a test) that runs the command
    in its own process keeps its logging."""
    import logging

    from cachekit.proxy.logs import JSONFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JSONFormatter()
        if form == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    loggers = [logging.getLogger(name) for name in ("cachekit", "uvicorn.error")]
    saved = [(logger.level, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, (level, propagate) in zip(loggers, saved, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


def _add_proxy(commands: Any) -> None:
    proxy = commands.add_parser(
        "proxy",
        help="an HTTP proxy that gives every cachekit layer to any client (any language) by its base URL",
        description=(
            "Serves the Anthropic Messages and OpenAI Chat Completions and Responses APIs through cachekit's "
            "pipeline; every other path is passed through. Settings: --config FILE (TOML, docs/proxy.md), "
            "then these options."
        ),
        epilog="""examples:
  cachekit proxy                                         # on 127.0.0.1:8787, to the providers' APIs
  cachekit proxy --anthropic-base-url http://127.0.0.1:8765 --openai-base-url http://127.0.0.1:8765/v1
  cachekit proxy --config proxy.toml --workers 4 --store redis://localhost:6379/0""",
    )
    proxy.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="a TOML file of settings (docs/proxy.md; default: none, the defaults and these options)",
    )
    proxy.add_argument("--host", default=None, help="the address to listen on (default: 127.0.0.1)")
    proxy.add_argument(
        "--port", type=port, default=None, help="the port to listen on, 0 for any free one (default: 8787)"
    )
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
        help=(
            "the cache's store URL, e.g. redis://host:6379/0 for several workers or instances (default: "
            "the config file's, else $CACHEKIT_CACHE_URL or SQLite under $CACHEKIT_HOME)"
        ),
    )
    proxy.add_argument("--workers", type=at_least(1), default=None, help="worker processes (default: 1)")
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

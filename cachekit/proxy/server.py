"""Running the proxy: in this process's foreground (``cachekit proxy``, with worker processes) or on a
background thread (:class:`ProxyServer`: tests, benchmarks, an application that embeds it)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from cachekit._asgi import ServerHandle, ServerThread, bind, server_config
from cachekit.cost.ledger import LedgerSink
from cachekit.proxy.app import ProxyApp
from cachekit.proxy.config import ENV_CONFIG, ProxyConfig
from cachekit.proxy.metrics import ProxyMetrics
from cachekit.stores.base import AsyncStore, Store

__all__ = ["ProxyServer", "serve"]


def _settings(config: ProxyConfig) -> dict[str, Any]:
    return {
        "keep_alive": config.keep_alive,
        "graceful_timeout": config.graceful_timeout,
        "limit_concurrency": config.limit_concurrency,
        "refusal": _refusal,
    }


def _refusal(path: str, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
    """A request whose framing the HTTP parser refused: the API's own 400 document."""
    import orjson

    from cachekit.providers.error_bodies import status_error
    from cachekit.proxy.app import _family

    family, _ = _family(path, headers)
    document = status_error(family, 400, "The request could not be read: malformed HTTP framing.")
    return 400, [("content-type", "application/json"), ("x-should-retry", "false")], orjson.dumps(document)


class ProxyServer(ServerHandle):
    """The proxy on a background thread, on ``config.host``:``config.port`` (0: a free port).

    ``store``, ``sinks``, ``transport`` and ``metrics`` go to :class:`ProxyApp` (tests share a store or
    an in-process upstream). Use as a context manager, or :meth:`start` / :meth:`stop` (in-flight
    answers finish first)."""

    def __init__(
        self,
        config: ProxyConfig,
        *,
        store: Store | AsyncStore | None = None,
        sinks: Sequence[LedgerSink] = (),
        transport: Any = None,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        self.app = ProxyApp(config, store=store, sinks=sinks, transport=transport, metrics=metrics)
        self._server = ServerThread(
            self.app, host=config.host, port=config.port, name="cachekit-proxy", **_settings(config)
        )


def serve(config: ProxyConfig, on_listen: Callable[[str], None] | None = None) -> None:
    """Serve in the foreground until SIGINT or SIGTERM: the graceful shutdown stops accepting, lets
    in-flight requests (streams) finish within ``graceful_timeout``, then closes the cache. With
    ``workers`` > 1, uvicorn's supervisor runs that many processes on one socket, restarting any that
    dies; each builds its own cache client (share a Redis store between them). ``on_listen`` is told
    the base URL once the socket listens (with ``port=0``, the port chosen)."""
    os.environ[ENV_CONFIG] = config.to_json()  # how the workers get their settings
    # Without the proxy extra this raises MissingExtraError (the fix: install it), before uvicorn is used.
    settings = server_config(
        "cachekit.proxy.app:worker_app",
        factory=True,
        workers=config.workers,
        host=config.host,
        port=config.port,
        **_settings(config),
    )
    import uvicorn

    server = uvicorn.Server(settings)
    # uvicorn delivers the SIGTERM it caught again once its graceful shutdown is over, to the handler
    # found at start: the default one would end the process by the signal (status -15) after a clean
    # stop. This one ends it with status 0, as a supervisor expects of a clean stop (and a SIGTERM that
    # comes before uvicorn listens still ends the process). It is this call's only: restored on the
    # way out, so a caller that runs serve() in its own process (a test, an embedding program) and
    # forks later does not hand its children a SIGTERM that does not stop them.
    scoped = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stopped) if scoped else None
    try:
        sock = bind(config.host, config.port)
        if on_listen is not None:
            host, port = sock.getsockname()[:2]
            on_listen(f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}")
        if config.workers > 1:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(settings, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    finally:
        if scoped:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _stopped(signum: int, frame: Any) -> None:
    """SIGTERM outside uvicorn's own handling (after the graceful shutdown it asked for has run, or
    before the server listens): end with status 0."""
    raise SystemExit(0)

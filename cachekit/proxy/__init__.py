"""``cachekit proxy``: the whole pipeline behind an HTTP server, for every client in any language.

Point an SDK or an agent at it by its base URL (``ANTHROPIC_BASE_URL=http://127.0.0.1:8787``,
``OPENAI_BASE_URL=http://127.0.0.1:8787/v1``): every request gets what cachekit's Python clients get
(shaping, breakpoints, exact and semantic caches, single-flight, the cost ledger), decided by the same
code (:class:`~cachekit.transport.AsyncCachingTransport`). docs/proxy.md tells the rest.

Needs the ``proxy`` extra (uvicorn, httptools, prometheus-client).
"""

from __future__ import annotations

from cachekit.proxy.app import PROXY_KEY_HEADER, ProxyApp
from cachekit.proxy.config import ProxyConfig, ProxyKey
from cachekit.proxy.server import ProxyServer, serve

__all__ = ["PROXY_KEY_HEADER", "ProxyApp", "ProxyConfig", "ProxyKey", "ProxyServer", "serve"]

"""The drop-in SDK clients, :func:`wrap`, and the request memo that makes their repeated calls cheap.

:mod:`cachekit.clients.dropin` builds ``cachekit.Anthropic`` and the other drop-in classes and wraps
clients made elsewhere; :mod:`cachekit.clients.memo` lets a repeated call skip the SDK's own argument
transformation. The names below are re-exported from :mod:`~cachekit.clients.dropin`.
"""

from __future__ import annotations

from cachekit.clients.dropin import DROP_IN_CLIENTS, cache_of, drop_in_class, install, wrap

__all__ = ["DROP_IN_CLIENTS", "cache_of", "drop_in_class", "install", "wrap"]

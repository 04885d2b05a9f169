"""Exact-response stores: where cached responses are kept.

* :class:`MemoryStore` — in this process, LRU, bounded by bytes (and optionally entries).
* :class:`SQLiteStore` — one SQLite file shared by threads and processes on a host (the default).
* :func:`store_from_url` — open either from a URL (``memory://``, ``sqlite:///path.db``).

Every store keeps opaque bytes; :mod:`cachekit.stores.record` is the one format stored in them.
"""

from __future__ import annotations

from cachekit.stores.base import AsyncStore, Store
from cachekit.stores.memory import MemoryStore
from cachekit.stores.sqlite import SQLiteStore
from cachekit.stores.url import store_from_url

__all__ = ["AsyncStore", "MemoryStore", "SQLiteStore", "Store", "store_from_url"]

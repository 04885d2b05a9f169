"""Exact-response stores: where cached responses are kept.

* :class:`MemoryStore` — in this process, LRU, bounded by bytes (and optionally entries).
* :class:`SQLiteStore` — one SQLite file shared by threads and processes on a host (the default).
* :class:`RedisStore` — Redis or a Redis Cluster, shared by hosts; sync and async (``cachekit-llm[redis]``).
* :func:`store_from_url` — open any of them from a URL (``memory://``, ``sqlite:///path.db``,
  ``redis://host:6379/0``, ``redis+cluster://host:7000``).

Every store keeps opaque bytes; :mod:`cachekit.stores.record` is the one format stored in them, and
:mod:`cachekit.stores.keys` the key schema: every key cachekit writes, and its partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachekit.stores.base import AsyncStore, EntryInfo, Inspectable, Store
from cachekit.stores.memory import MemoryStore
from cachekit.stores.sqlite import SQLiteStore
from cachekit.stores.url import store_from_url

if TYPE_CHECKING:
    from cachekit.stores.redis import RedisStore

__all__ = [
    "AsyncStore",
    "EntryInfo",
    "Inspectable",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "store_from_url",
]


def __getattr__(name: str) -> Any:
    # RedisStore is loaded on first access, so `import cachekit.stores` never imports its module
    # (which itself imports redis-py only when a store is made).
    if name == "RedisStore":
        from cachekit.stores.redis import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

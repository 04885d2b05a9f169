"""A configured response cache: one store and the pipeline that decides how to use it.

Several transports (a client's default transport and its proxy mounts, or the sync and async clients of
one application) can share one :class:`Cache`, so they share entries, counters and the store's
connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeAlias, cast

from cachekit import _fork
from cachekit.config import CacheConfig, cachekit_home
from cachekit.cost.ledger import Ledger, SQLiteSink, default_ledger_path
from cachekit.errors import ConfigError
from cachekit.pipeline import Pipeline, PipelineStats
from cachekit.stores.base import AsyncStore, Store, is_async_store, is_store
from cachekit.stores.url import store_from_url

__all__ = ["Cache", "CacheLike", "as_cache"]


class Cache:
    """A store plus the :class:`~cachekit.pipeline.Pipeline` that uses it.

    Args:
        config: how to cache; its ``store`` (object or URL) is opened here. A store opened from a URL
            belongs to this cache and is closed by :meth:`close`; a store object passed in is the
            caller's to close.
        clock: seconds since any fixed point (default :func:`time.time`): entry ages and the
            breakpoint planner's gaps between requests, and single-flight's patience (by default
            :func:`time.monotonic` there). Replays and tests pass a manual clock.
    """

    def __init__(
        self, config: CacheConfig | None = None, *, clock: Callable[[], float] | None = None
    ) -> None:
        self.config = config if config is not None else CacheConfig.from_env()
        store = self.config.store
        if store is None:
            self.store: Store | AsyncStore = store_from_url("sqlite://", home=cachekit_home())
            self._owns_store = True
        elif isinstance(store, str):
            self.store = store_from_url(store, home=cachekit_home())
            self._owns_store = True
        elif is_store(store) or is_async_store(store):
            self.store = store
            self._owns_store = False
        else:
            raise ConfigError(
                f"cache store must be a Store, an AsyncStore or a URL, not {type(store).__name__}"
            )
        if self.config.encryption_keys is not None:
            self.store = _encrypted(self.store, self.config.encryption_keys)
        # Decided once here: a runtime Protocol check costs microseconds, too much for every request.
        self.async_store: AsyncStore | None = (
            cast("AsyncStore", self.store) if is_async_store(self.store) else None
        )
        self.sync_store: Store | None = cast("Store", self.store) if is_store(self.store) else None
        self.ledger = _ledger_for(self.config.ledger)
        store_ref = self.store
        self.pipeline = Pipeline(
            self.config,
            secret=lambda: store_ref.secret,
            ledger=self.ledger,
            clock=clock or time.time,
            flight_clock=clock or time.monotonic,
        )
        self._closed = False
        self._lock = _fork.lock(self)

    @property
    def stats(self) -> PipelineStats:
        """Live counters: hits, misses, bypasses, stores, store errors, corrupt entries."""
        return self.pipeline.stats

    def close(self) -> None:
        """Write what this process recorded to the ledger, and close the store if this cache opened
        it. Idempotent. (The ledger stays open: other clients may share it.)"""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.pipeline.close_semantic()  # first: shadow judgments still running land in the ledger
        self._flush_ledger()
        if self._owns_store and self.sync_store is not None:
            self.sync_store.close()

    async def aclose(self) -> None:
        """As :meth:`close`, for async stores too. Idempotent."""
        if self.async_store is not None and self._owns_store:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
            self.pipeline.close_semantic()
            self._flush_ledger()
            await self.async_store.aclose()
        else:
            self.close()

    def _flush_ledger(self) -> None:
        # Closing a client is the documented way for a process that will not run exit hooks (a forked
        # child ending with os._exit) to keep its records; a blocking write, fine off the request path.
        if self.ledger is not None:
            self.ledger.flush()


def _encrypted(store: Store | AsyncStore, keys: Mapping[str, bytes] | str) -> Store | AsyncStore:
    """``store`` wrapped so that what it holds is encrypted with ``keys`` (the first is current)."""
    from cachekit.stores.encrypted import EncryptedStore, keys_from_spec

    wrapped: Store | AsyncStore = EncryptedStore(
        store, keys_from_spec(keys) if isinstance(keys, str) else keys
    )
    return wrapped


_default_ledgers: dict[Path, Ledger] = {}
_default_ledgers_lock = _fork.lock()


def _ledger_for(setting: Ledger | bool) -> Ledger | None:
    """The ledger a config asks for. ``True`` shares one default ledger per file across the process,
    so many clients write through one background writer."""
    if setting is False:
        return None
    if setting is True:
        path = default_ledger_path()
        with _default_ledgers_lock:
            ledger = _default_ledgers.get(path)
            if ledger is None:
                ledger = _default_ledgers[path] = Ledger([SQLiteSink(path)])
        return ledger
    return setting


#: Everything a ``cache=`` argument accepts.
CacheLike: TypeAlias = "Cache | CacheConfig | Store | AsyncStore | str | None"


def as_cache(cache: CacheLike) -> tuple[Cache, bool]:
    """Turn a ``cache=`` argument into a :class:`Cache`; the flag says whether the caller now owns it."""
    if isinstance(cache, Cache):
        return cache, False
    if isinstance(cache, CacheConfig):
        return Cache(cache), True
    if cache is None:
        return Cache(), True
    if isinstance(cache, str) or is_store(cache) or is_async_store(cache):
        return Cache(CacheConfig.from_env(store=cache)), True
    raise ConfigError(
        "cache= takes a Cache, a CacheConfig, a store object or a store URL, not " + type(cache).__name__
    )

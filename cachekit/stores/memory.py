"""An in-process exact-response store: LRU, bounded by bytes and optionally by entry count.

Entries live in one :class:`collections.OrderedDict` guarded by one lock; the dict's order is the
recency order (oldest first), so eviction is ``popitem(last=False)`` and a hit is ``move_to_end``.
Nothing is shared between processes: use :class:`~cachekit.stores.sqlite.SQLiteStore` for that.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType

from cachekit import _fork
from cachekit.errors import ConfigError, StoreError
from cachekit.stores.base import EntryInfo

__all__ = ["MemoryStats", "MemoryStore"]

_log = logging.getLogger("cachekit.stores")


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """A snapshot of a :class:`MemoryStore`'s size and counters.

    Attributes:
        entries: entries held now (expired ones not yet noticed included).
        bytes: the sum of ``len(key) + len(value)`` over those entries.
        hits: ``get`` calls that returned a value.
        misses: ``get`` calls that returned ``None`` (absent or expired).
        evictions: entries dropped to stay within ``max_bytes`` / ``max_entries``.
    """

    entries: int
    bytes: int
    hits: int
    misses: int
    evictions: int


class MemoryStore:
    """A thread-safe, size-bounded LRU store kept in this process's memory.

    Args:
        max_bytes: upper bound on the sum of ``len(key) + len(value)`` over all entries. A single
            entry larger than this is not stored at all (it would evict everything and still not fit).
        max_entries: optional upper bound on the number of entries.
        clock: the time source for TTLs, in seconds; inject a fake one in tests.

    Least-recently-used entries (by ``get`` or ``set``) are evicted first. Expired entries count as
    misses and are removed when they are next looked up, or by :meth:`purge_expired`.
    """

    def __init__(
        self,
        *,
        max_bytes: int = 64 * 2**20,
        max_entries: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # bool is an int subclass; True as a byte budget is certainly a mistake.
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ConfigError(f"MemoryStore max_bytes must be a positive integer, not {max_bytes!r}")
        if max_entries is not None and (
            isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries <= 0
        ):
            raise ConfigError(
                f"MemoryStore max_entries must be a positive integer or None, not {max_entries!r}"
            )
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self._clock = clock
        self._secret = os.urandom(32)
        self._lock = _fork.lock(self)
        # key -> (value, expires_at or None); ordered oldest-used first.
        self._entries: OrderedDict[str, tuple[bytes, float | None]] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._closed = False

    @property
    def secret(self) -> bytes:
        """A random 32-byte secret, new for every instance (nothing outlives the process)."""
        return self._secret

    @property
    def max_bytes(self) -> int:
        """The byte budget this store was created with."""
        return self._max_bytes

    @property
    def max_entries(self) -> int | None:
        """The entry budget this store was created with, or ``None`` for no count limit."""
        return self._max_entries

    def get(self, key: str) -> bytes | None:
        """Return the value under ``key`` and mark it most recently used; ``None`` if absent or expired."""
        with self._lock:
            self._check_open()
            item = self._entries.get(key)
            if item is None:
                self._misses += 1
                return None
            value, expires_at = item
            if expires_at is not None and self._clock() >= expires_at:
                self._remove(key)
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return value

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``, replacing any earlier value, then evict down to the budgets.

        A ``ttl`` of ``None`` (or infinity) never expires; a ``ttl`` of zero or less is already expired,
        so it only removes an earlier value.
        """
        ttl = _check_ttl(ttl)
        # A bytearray or memoryview would let the caller change a cached value after the fact.
        value = bytes(value)
        size = len(key) + len(value)
        with self._lock:
            self._check_open()
            # Whatever happens next, the earlier value must not survive a set: serving it would be stale.
            self._remove(key)
            if ttl is not None and ttl <= 0:
                return
            if size > self._max_bytes:
                # A warning, as in the Redis store: an entry the store can never hold is a setting to
                # fix (a memoized result or an answer that will be paid for again on every call).
                _log.warning(
                    "not caching an entry of %d bytes: larger than max_bytes=%d", size, self._max_bytes
                )
                return
            expires_at = None if ttl is None else self._clock() + ttl
            self._entries[key] = (value, expires_at)
            self._bytes += size
            self._evict()

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        with self._lock:
            self._check_open()
            self._remove(key)

    def clear(self) -> None:
        """Remove every entry; the secret and the counters are kept."""
        with self._lock:
            self._check_open()
            self._entries.clear()
            self._bytes = 0

    def purge_expired(self) -> int:
        """Remove every expired entry now and return how many were removed."""
        with self._lock:
            self._check_open()
            now = self._clock()
            expired = [k for k, (_, exp) in self._entries.items() if exp is not None and now >= exp]
            for key in expired:
                self._remove(key)
            return len(expired)

    def entries(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Yield every live entry whose key starts with ``prefix``, as of the call (a snapshot).

        ``created_at`` is ``None``: this store does not keep it (nobody outside the process can
        inspect a memory store, so it would cost every entry a float for little).
        """
        with self._lock:
            self._check_open()
            now = self._clock()
            found = [
                EntryInfo(key, len(value), None, expires_at)
                for key, (value, expires_at) in self._entries.items()
                if key.startswith(prefix) and (expires_at is None or now < expires_at)
            ]
        # Yielded after the lock is released: a slow consumer must not block the request path.
        yield from found

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete ``keys``; return how many were live (expired ones are removed but not counted)."""
        keys = list(keys)  # consumed before taking the lock: a generator might call back into the store
        with self._lock:
            self._check_open()
            now = self._clock()
            deleted = 0
            for key in keys:
                item = self._entries.get(key)
                if item is None:
                    continue
                if item[1] is None or now < item[1]:
                    deleted += 1
                self._remove(key)
            return deleted

    def ping(self) -> None:
        """Return while the store is open; :class:`StoreError` once it is closed."""
        with self._lock:
            self._check_open()

    def stats(self) -> MemoryStats:
        """A consistent snapshot of the size and the counters."""
        with self._lock:
            return MemoryStats(len(self._entries), self._bytes, self._hits, self._misses, self._evictions)

    def close(self) -> None:
        """Drop every entry and refuse further use (:class:`StoreError`). Idempotent."""
        with self._lock:
            self._closed = True
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        """The number of entries held (expired ones not yet noticed included)."""
        with self._lock:
            return len(self._entries)

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore(max_bytes={self._max_bytes}, max_entries={self._max_entries})"

    # -- internals; the caller holds the lock ---------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("MemoryStore is closed")

    def _remove(self, key: str) -> None:
        item = self._entries.pop(key, None)
        if item is not None:
            self._bytes -= len(key) + len(item[0])

    def _evict(self) -> None:
        limit = self._max_entries
        while self._bytes > self._max_bytes or (limit is not None and len(self._entries) > limit):
            key, (value, _) = self._entries.popitem(last=False)
            self._bytes -= len(key) + len(value)
            self._evictions += 1


def _check_ttl(ttl: float | None) -> float | None:
    """A ``ttl`` given to a store's (or an index's) ``set``, as every store reads it: ``None`` or
    infinity never expires (``None`` returned), zero or less (negative infinity too) is already
    expired, any other number is seconds (a store keeps what it can represent: Redis whole
    milliseconds, at least one, at most about 31,700 years). NaN raises :class:`ValueError`: every
    comparison with it is false, so the entry would silently never expire. The edges
    (:func:`cachekit.config.check_ttl`) refuse all but (0, ten years] before a store sees a TTL."""
    if ttl is None or ttl == math.inf:
        return None
    if math.isnan(ttl):
        raise ValueError("ttl must be a number of seconds or None, not NaN")
    return float(ttl)

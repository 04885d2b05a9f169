"""The small protocol every exact-response store implements.

Stores keep opaque ``bytes`` under ``str`` keys; encoding and validating what is stored is the job of
:mod:`cachekit.stores.record`, so that every store (memory, SQLite, Redis) shares one format and one
corruption check.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "AsyncStore",
    "EntryInfo",
    "Inspectable",
    "Store",
    "is_async_store",
    "is_inspectable",
    "is_store",
]

_STORE_NAMES = ("secret", "get", "set", "delete", "clear", "close")
_ASYNC_STORE_NAMES = ("secret", "aget", "aset", "adelete", "aclose")


def _has(obj: object, names: tuple[str, ...]) -> bool:
    # getattr_static finds class attributes, properties and instance attributes alike without calling a
    # property: a runtime Protocol check (isinstance) calls hasattr, which would read ``secret``.
    missing = object()
    return all(inspect.getattr_static(obj, name, missing) is not missing for name in names)


def is_store(obj: object) -> bool:
    """Whether ``obj`` implements :class:`Store`, without touching its attributes.

    Unlike ``isinstance(obj, Store)`` this never reads the ``secret`` property, which for a network
    store is a round trip that may fail.
    """
    return _has(obj, _STORE_NAMES)


def is_async_store(obj: object) -> bool:
    """Whether ``obj`` implements :class:`AsyncStore` (see :func:`is_store`)."""
    return _has(obj, _ASYNC_STORE_NAMES)


def is_inspectable(obj: object) -> bool:
    """Whether ``obj`` implements :class:`Inspectable` (see :func:`is_store`)."""
    return _has(obj, ("entries", "delete_many", "ping"))


@runtime_checkable
class Store(Protocol):
    """A synchronous key-value store with per-entry time-to-live.

    Implementations must be safe to call from several threads at once. ``get`` returns ``None`` for a
    missing or expired key. A ``ttl`` of ``None`` (or infinity) means the entry does not expire (it
    may still be evicted for space); zero or less means already expired: nothing is written and an
    earlier value is removed; NaN raises :class:`ValueError`; a TTL longer than the store can hold is
    kept as long as it can. Failures raise :class:`cachekit.errors.StoreError`.
    """

    @property
    def secret(self) -> bytes:
        """A random per-store secret (at least 32 bytes) used to key credential HMACs.

        It is created once with the store's data and kept with it, so every process that shares the
        store derives the same partition for the same credential, and nobody who lacks the store can.
        """
        ...

    def get(self, key: str) -> bytes | None:
        """Return the value stored under ``key``, or ``None`` when absent or expired."""
        ...

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key`` atomically, replacing any earlier value."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        ...

    def clear(self) -> None:
        """Remove every entry (the secret is kept)."""
        ...

    def close(self) -> None:
        """Release connections and file handles. Idempotent."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """The asynchronous twin of :class:`Store`, for stores that do network I/O (Redis)."""

    @property
    def secret(self) -> bytes:
        """See :attr:`Store.secret`."""
        ...

    async def aget(self, key: str) -> bytes | None:
        """See :meth:`Store.get`."""
        ...

    async def aset(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """See :meth:`Store.set`."""
        ...

    async def adelete(self, key: str) -> None:
        """See :meth:`Store.delete`."""
        ...

    async def aclose(self) -> None:
        """See :meth:`Store.close`."""
        ...


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """What an operator tool (``cachekit stats``/``purge``) learns about one stored entry."""

    key: str
    #: Bytes of the stored value.
    size: int
    #: When the entry was written (epoch seconds); ``None`` when the store does not know.
    created_at: float | None
    #: When it expires (epoch seconds); ``None`` for never.
    expires_at: float | None


@runtime_checkable
class Inspectable(Protocol):
    """The operator side of a store: list and delete entries, and answer a health probe.

    These calls are for tools run by operators, never on a request's path; they may be slow (a Redis
    ``SCAN`` over every node of a cluster).
    """

    def entries(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Yield every live entry whose key starts with ``prefix`` (in no particular order)."""
        ...

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete ``keys``; return how many existed."""
        ...

    def ping(self) -> None:
        """Return if the store answers; raise :class:`cachekit.errors.StoreError` otherwise."""
        ...

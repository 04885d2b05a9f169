"""Operator tools over a store: what it holds, purging by tenant/namespace/age, and a health probe.

These run from ``cachekit stats``, ``cachekit purge`` and ``cachekit health`` (or a readiness probe in
your own service), never on a request's path: listing a Redis store is a ``SCAN`` over every node.
They read only the clear parts of store keys (kind, namespace, partition; see
:func:`cachekit.keys.store_key`), so they work on encrypted stores too and never see a prompt.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cachekit.errors import ConfigError, StoreError
from cachekit.keys import EXACT_KIND, MEMO_KIND, KeyParts, key_prefix, parse_key, tenant_partition
from cachekit.stores.base import EntryInfo, Inspectable, Store, is_inspectable

__all__ = ["Health", "NamespaceStats", "StoreStats", "health", "purge", "store_stats"]

logger = logging.getLogger("cachekit.ops")

_LAYERS = {EXACT_KIND: "exact", MEMO_KIND: "memo"}


@dataclass(slots=True)
class NamespaceStats:
    """Entries and stored bytes of one namespace, per layer (``exact``, ``memo``)."""

    entries: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"entries": dict(self.entries), "bytes": dict(self.bytes)}


@dataclass(slots=True)
class StoreStats:
    """What a store holds, by namespace; ``foreign`` counts keys cachekit did not write (or an older
    key schema wrote)."""

    namespaces: dict[str, NamespaceStats] = field(default_factory=dict)
    entries: int = 0
    bytes: int = 0
    foreign: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "entries": self.entries,
            "bytes": self.bytes,
            "foreign": self.foreign,
            "namespaces": {name: ns.to_dict() for name, ns in sorted(self.namespaces.items())},
        }


def _inspectable(store: object) -> Inspectable:
    if not is_inspectable(store):
        raise ConfigError(f"{type(store).__name__} cannot be listed (it has no entries/delete_many/ping)")
    return store  # type: ignore[return-value]  # checked by name above, without touching properties


def _entries(store: Inspectable, namespace: str | None) -> Iterator[tuple[EntryInfo, KeyParts | None]]:
    prefixes = [key_prefix(kind, namespace) for kind in _LAYERS] if namespace is not None else [""]
    for prefix in prefixes:
        for info in store.entries(prefix):
            yield info, parse_key(info.key)


def store_stats(store: object, *, namespace: str | None = None) -> StoreStats:
    """Count entries and bytes per namespace and layer (one namespace, or all of them)."""
    stats = StoreStats()
    for info, parts in _entries(_inspectable(store), namespace):
        if parts is None:
            stats.foreign += 1
            continue
        layer = _LAYERS[parts.kind]
        ns = stats.namespaces.setdefault(parts.namespace, NamespaceStats())
        ns.entries[layer] = ns.entries.get(layer, 0) + 1
        ns.bytes[layer] = ns.bytes.get(layer, 0) + info.size
        stats.entries += 1
        stats.bytes += info.size
    return stats


def purge(
    store: object,
    *,
    tenant: str | None = None,
    namespace: str | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
    batch: int = 500,
) -> int:
    """Delete the cachekit entries that match every filter given; return how many matched.

    Args:
        tenant: entries of this explicit tenant (``CacheConfig(tenant=...)``, ``x-cachekit-tenant``).
        namespace: entries of this namespace.
        older_than: entries written more than this many seconds ago (entries whose write time the
            store does not know are kept).
        dry_run: count, delete nothing.

    At least one filter is required: purging everything is :meth:`Store.clear`. Keys cachekit did
    not write are never touched.
    """
    if tenant is None and namespace is None and older_than is None:
        raise ConfigError("purge needs --tenant, --namespace or --older-than (to empty a store, clear it)")
    if older_than is not None and not 0 <= older_than < math.inf:
        raise ConfigError(f"older_than must be a finite number of seconds >= 0, not {older_than!r}")
    target = _inspectable(store)
    partition = tenant_partition(tenant) if tenant is not None else None
    cutoff = clock() - older_than if older_than is not None else None
    doomed: list[str] = []
    matched = 0
    for info, parts in _entries(target, namespace):
        if parts is None or (partition is not None and parts.partition != partition):
            continue
        if cutoff is not None and (info.created_at is None or info.created_at > cutoff):
            continue
        matched += 1
        if not dry_run:
            doomed.append(info.key)
            if len(doomed) >= batch:
                target.delete_many(doomed)
                doomed.clear()
    if doomed:
        target.delete_many(doomed)
    logger.info("purge matched %d entries%s", matched, " (dry run)" if dry_run else "")
    return matched


@dataclass(frozen=True, slots=True)
class Health:
    """The result of :func:`health`: whether the store answered a full round trip, and how fast."""

    ok: bool
    latency_ms: float
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"ok": self.ok, "latency_ms": round(self.latency_ms, 3), "error": self.error}


def health(
    store: Store, *, budget_ms: float = 250.0, clock: Callable[[], float] = time.perf_counter
) -> Health:
    """Probe ``store`` the way a request uses it: write, read back and delete a probe entry.

    ``ok`` is false when any step fails, the value read back differs, or the round trip takes longer
    than ``budget_ms``. Suitable for a readiness probe: it never raises for a store failure.
    ``clock`` (seconds, monotonic) times the round trip; tests pass a fake one.
    """
    key = f"ckhealth:{os.getpid()}:{time.monotonic_ns()}"
    value = os.urandom(16)
    start = clock()
    try:
        store.set(key, value, ttl=30.0)
        read = store.get(key)
        store.delete(key)
    except StoreError as exc:
        elapsed = (clock() - start) * 1000
        return Health(False, elapsed, f"{type(exc).__name__}: {exc}")
    elapsed = (clock() - start) * 1000
    if read != value:
        return Health(False, elapsed, "the probe entry did not read back")
    if elapsed > budget_ms:
        return Health(False, elapsed, f"round trip took {elapsed:.1f} ms, over the {budget_ms:g} ms budget")
    return Health(True, elapsed)

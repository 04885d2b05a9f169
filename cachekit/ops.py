"""Operator tools over a store: what it holds, purging by tenant/namespace/age, and a health probe.

These run from ``cachekit stats``, ``cachekit purge`` and ``cachekit health`` (or a readiness probe in
your own service), never on a request's path: listing a Redis store is a ``SCAN`` over every node.
They read only the clear parts of store keys (kind, namespace, partition; see
:func:`cachekit.stores.keys.store_key`), so they work on encrypted stores too and never see a prompt.

The semantic index is counted and purged by the same rule (:func:`store_stats` with ``index=``,
:func:`purge_semantic`): its partitions are opaque digests, but every indexed question names the store
key of the answer it points at, and that key's namespace and partition select it.

Every kind of key cachekit writes is in one table (:data:`cachekit.stores.keys.LAYERS`): exact
responses, memoized results, the planner's timing statistics, the operator tools' probes. Statistics
count each under its layer, and a purge by tenant, namespace or age removes each kind that has them.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from cachekit.errors import ConfigError, StoreError
from cachekit.semantic.base import PurgeableIndex
from cachekit.stores.base import EntryInfo, Inspectable, Store, is_inspectable
from cachekit.stores.keys import (
    LAYERS,
    PROBE_KIND,
    KeyParts,
    key_prefix,
    parse_key,
    partition_names_tenant,
    probe_key,
)

__all__ = [
    "Health",
    "NamespaceStats",
    "StoreStats",
    "clear_semantic",
    "clear_store",
    "health",
    "purge",
    "purge_semantic",
    "store_stats",
]

logger = logging.getLogger("cachekit.ops")

#: The kinds that live in a namespace (and a partition): what a purge by namespace lists.
_SCOPED = tuple(kind for kind in LAYERS if kind != PROBE_KIND)


@dataclass(slots=True)
class NamespaceStats:
    """Entries and stored bytes of one namespace, per layer (``exact``, ``memo``, ``gaps``; with an
    index, ``semantic`` entries, whose bytes are not counted)."""

    entries: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"entries": dict(self.entries), "bytes": dict(self.bytes)}


@dataclass(slots=True)
class StoreStats:
    """What a store (and its semantic index) holds, by namespace.

    ``entries`` and ``bytes`` count the store's namespaced entries; ``probes`` the operator tools'
    short-lived probes (store entries and index entries); ``semantic`` the index's entries;
    ``foreign`` the keys (store keys, index entries' keys) that cachekit did not write, or an older
    key schema wrote.
    """

    namespaces: dict[str, NamespaceStats] = field(default_factory=dict)
    entries: int = 0
    bytes: int = 0
    foreign: int = 0
    probes: int = 0
    semantic: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "entries": self.entries,
            "bytes": self.bytes,
            "foreign": self.foreign,
            "probes": self.probes,
            "semantic": self.semantic,
            "namespaces": {name: ns.to_dict() for name, ns in sorted(self.namespaces.items())},
        }


def _inspectable(store: object) -> Inspectable:
    if not is_inspectable(store):
        raise ConfigError(f"{type(store).__name__} cannot be listed (it has no entries/delete_many/ping)")
    return store  # type: ignore[return-value]  # checked by name above, without touching properties


def _purgeable(index: object) -> PurgeableIndex:
    if not isinstance(index, PurgeableIndex):
        raise ConfigError(f"{type(index).__name__} cannot be purged (it has no remove_where)")
    return index


def _selects(parts: KeyParts | None, tenant: str | None, namespace: str | None) -> bool:
    """Whether a key (its parsed fields) is one a purge of ``tenant`` / ``namespace`` removes: the one
    rule for store entries and index entries alike. Keys cachekit did not write never are."""
    return (
        parts is not None
        and (tenant is None or partition_names_tenant(parts.partition, tenant))
        and (namespace is None or parts.namespace == namespace)
    )


def _entries(store: Inspectable, namespace: str | None) -> Iterator[tuple[EntryInfo, KeyParts | None]]:
    prefixes = [key_prefix(kind, namespace) for kind in _SCOPED] if namespace is not None else [""]
    for prefix in prefixes:
        for info in store.entries(prefix):
            yield info, parse_key(info.key)


def store_stats(store: object, *, namespace: str | None = None, index: object = None) -> StoreStats:
    """Count entries and bytes per namespace and layer (one namespace, or all of them).

    With ``index`` (a :class:`~cachekit.semantic.base.PurgeableIndex`: the Redis 8 index, or a
    process's memory index), its entries are counted too, as the ``semantic`` layer of the namespace
    of the store key each answers with (entries past their TTL that the index has not dropped yet
    included: they hold memory until it does).
    """
    stats = StoreStats()
    for info, parts in _entries(_inspectable(store), namespace):
        _tally(stats, parts, LAYERS[parts.kind] if parts is not None else "", info.size)
    if index is not None:

        def visit(entry_key: str) -> bool:
            # Called once per entry, and matching none: a visitor, so nothing can be removed.
            parts = parse_key(entry_key)
            if namespace is None or (parts is not None and parts.namespace == namespace):
                _tally(stats, parts, "semantic", 0)
            return False

        _purgeable(index).remove_where(visit, dry_run=True)
    return stats


def _tally(stats: StoreStats, parts: KeyParts | None, layer: str, size: int) -> None:
    """Count one key: under its namespace and layer, as a probe, or as foreign."""
    if parts is None:
        stats.foreign += 1
        return
    if parts.kind == PROBE_KIND:
        stats.probes += 1
        return
    ns = stats.namespaces.setdefault(parts.namespace, NamespaceStats())
    ns.entries[layer] = ns.entries.get(layer, 0) + 1
    if layer == "semantic":  # an index entry: a vector and a question, not a stored value
        stats.semantic += 1
        return
    ns.bytes[layer] = ns.bytes.get(layer, 0) + size
    stats.entries += 1
    stats.bytes += size


def purge(
    store: object,
    *,
    tenant: str | None = None,
    namespace: str | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
    batch: int = 500,
    matched: set[str] | None = None,
) -> int:
    """Delete the cachekit entries that match every filter given; return how many matched.

    Args:
        tenant: entries of this tenant, whichever way it was named (``CacheConfig(tenant=...)``,
            ``x-cachekit-tenant``, ``cachekit.policy(tenant=...)``) and under whichever API key.
        namespace: entries of this namespace.
        older_than: entries written more than this many seconds ago (entries whose write time the
            store does not know are kept).
        dry_run: count, delete nothing.
        matched: a set that receives the key of every entry that matched, for
            :func:`purge_semantic` ``(keys=...)`` after a purge by age.

    At least one filter is required: deleting everything is :func:`clear_store`. Keys cachekit did
    not write are never touched. The semantic index is purged by :func:`purge_semantic`.
    """
    if tenant is None and namespace is None and older_than is None:
        raise ConfigError(
            "purge needs --tenant, --namespace or --older-than (to delete everything: --all --yes, "
            "or clear_store)"
        )
    if older_than is not None and not 0 <= older_than < math.inf:
        raise ConfigError(f"older_than must be a finite number of seconds >= 0, not {older_than!r}")
    target = _inspectable(store)
    cutoff = clock() - older_than if older_than is not None else None

    def selected() -> Iterator[str]:
        for info, parts in _entries(target, namespace):
            if not _selects(parts, tenant, namespace):
                continue
            if cutoff is not None and (info.created_at is None or info.created_at > cutoff):
                continue
            if matched is not None:
                matched.add(info.key)
            yield info.key

    count = _delete(target, selected(), dry_run=dry_run, batch=batch)
    logger.info("purge matched %d entries%s", count, " (dry run)" if dry_run else "")
    return count


def clear_store(store: object, *, dry_run: bool = False, batch: int = 500) -> int:
    """Delete every entry of ``store`` (``cachekit purge --all``); return how many there were.

    Every entry :func:`store_stats` counts goes, the keys cachekit did not write (an older key
    schema's) included; the store's secret is kept, so later entries stay readable by other
    processes. The semantic index is cleared by :func:`clear_semantic`.
    """
    target = _inspectable(store)
    count = _delete(target, (info.key for info in target.entries("")), dry_run=dry_run, batch=batch)
    logger.info("clear matched %d entries%s", count, " (dry run)" if dry_run else "")
    return count


def _delete(target: Inspectable, keys: Iterator[str], *, dry_run: bool, batch: int) -> int:
    """Delete ``keys`` in batches of ``batch`` (with ``dry_run``, only count them); return the count."""
    doomed: list[str] = []
    count = 0
    for key in keys:
        count += 1
        if not dry_run:
            doomed.append(key)
            if len(doomed) >= batch:
                target.delete_many(doomed)
                doomed.clear()
    if doomed:
        target.delete_many(doomed)
    return count


def purge_semantic(
    index: object,
    *,
    tenant: str | None = None,
    namespace: str | None = None,
    keys: Collection[str] | None = None,
    dry_run: bool = False,
) -> int:
    """Delete the semantic index entries (vectors and question texts) that match every filter given;
    return how many matched.

    Args:
        index: a :class:`~cachekit.semantic.base.PurgeableIndex`: the Redis 8 index (every partition
            on every node) or a process's memory index (``cache_of(client).pipeline.semantic.index``).
        tenant: entries of this explicit tenant, as :func:`purge`.
        namespace: entries of this namespace, as :func:`purge`.
        keys: only entries that answer with one of these store keys (what :func:`purge` deleted:
            its ``matched``); an index entry has no write time, so this is how a purge by age reaches
            the index.
        dry_run: count, delete nothing.

    An entry is selected by the store key of the answer it points at, so no prompt is needed.
    """
    if tenant is None and namespace is None and keys is None:
        raise ConfigError(
            "purge_semantic needs a tenant, a namespace or keys (to empty an index: clear_semantic)"
        )
    target = _purgeable(index)

    def selected(entry_key: str) -> bool:
        if keys is not None and entry_key not in keys:
            return False
        return _selects(parse_key(entry_key), tenant, namespace)

    count = target.remove_where(selected, dry_run=dry_run)
    logger.info("purge matched %d semantic index entries%s", count, " (dry run)" if dry_run else "")
    return count


def clear_semantic(index: object, *, dry_run: bool = False) -> int:
    """Delete every entry of the semantic index, vectors and question texts (``cachekit purge
    --all``); return how many there were. ``index`` is a :class:`PurgeableIndex`, as for
    :func:`purge_semantic`."""
    count = _purgeable(index).remove_where(lambda _entry_key: True, dry_run=dry_run)
    logger.info("clear matched %d semantic index entries%s", count, " (dry run)" if dry_run else "")
    return count


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
    key = probe_key(f"health.{os.getpid()}.{time.monotonic_ns()}")
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

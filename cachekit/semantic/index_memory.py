"""The in-process vector index (numpy): the embedded default.

Per partition, a growing ``float32`` matrix of unit rows (capacity doubles, so appends are amortized
O(1), and halves when it is three-quarters empty), the entry keys, question texts and MACs of the rows,
and their expiry times. A search is one matrix-vector product over the partition, then the live rows at
or above the threshold, the best ``k`` picked with ``argpartition``. Removing a row moves the last row
into its place, so the matrix stays dense.

Bounds: each partition keeps at most ``max_entries_per_partition`` entries and the whole index at most
``max_entries``; past either, the entries added longest ago go first (a replaced entry counts as newly
added). Expired entries are never returned; they are dropped when a search meets them, before any
eviction, and by a sweep over all partitions that runs after as many adds as there are partitions (so
its cost per add stays constant). A partition with no entries is forgotten, dimension included.

:meth:`MemoryVectorIndex.remove_where` purges by entry key (a tenant's or a namespace's entries:
``cachekit.ops.purge_semantic``); this index lives in its process, so that is where it is purged.

Thread-safe (one lock). Sync only: the async path of the semantic layer calls it inline, since nothing
here waits on I/O.
"""

from __future__ import annotations

import importlib.util
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from cachekit.errors import ConfigError, MissingExtraError
from cachekit.semantic.base import Candidate, DimensionMismatchError, SemanticError, Vector
from cachekit.stores.memory import _check_ttl

__all__ = ["MemoryVectorIndex"]

_INITIAL_ROWS = 16


def require_numpy() -> None:
    """Raise :class:`MissingExtraError` when numpy is not installed."""
    if importlib.util.find_spec("numpy") is None:
        raise MissingExtraError("numpy", "semantic", "the semantic cache")


def unit_vector(vector: Any) -> Vector:
    """``vector`` as a 1-D C-contiguous ``float32`` array of unit length: one row of an embedding.

    Accepts a 1-D array or a ``(1, d)`` matrix. Re-normalizes (cosine is a dot product only between
    unit vectors). Raises :class:`SemanticError` for an empty, zero or non-finite vector.
    """
    import numpy as np

    try:
        array = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise SemanticError(f"not a vector: {exc}") from exc
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1 or array.shape[0] == 0:
        raise SemanticError(f"a vector must be 1-D and non-empty, not of shape {array.shape}")
    norm = float(np.linalg.norm(array))
    if not math.isfinite(norm) or norm == 0.0:
        raise SemanticError("a vector must be finite and non-zero")
    return np.ascontiguousarray(array / norm, dtype=np.float32)


def check_search_args(k: int, min_similarity: float) -> None:
    """Reject a non-integer ``k`` or a NaN threshold (every comparison with NaN is false)."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an integer, not {k!r}")
    if not isinstance(min_similarity, int | float) or math.isnan(min_similarity):
        raise ValueError(f"min_similarity must be a number, not {min_similarity!r}")


def positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, not {value!r}")
    return value


class _Partition:
    """The rows of one partition. Not locked: the index holds its lock around every call."""

    __slots__ = ("dim", "expires", "keys", "macs", "rows", "texts", "vectors")

    def __init__(self, dim: int) -> None:
        import numpy as np

        self.dim = dim
        self.vectors = np.empty((_INITIAL_ROWS, dim), dtype=np.float32)
        self.expires = np.empty(_INITIAL_ROWS, dtype=np.float64)
        self.keys: list[str] = []
        self.texts: list[str] = []
        self.macs: list[str] = []
        #: entry key -> row, oldest-added first
        self.rows: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self.keys)

    def put(self, key: str, vector: Vector, text: str, mac: str, expires_at: float) -> None:
        row = self.rows.get(key)
        if row is None:
            row = len(self.keys)
            if row == self.vectors.shape[0]:
                self._resize(2 * row)
            self.keys.append(key)
            self.texts.append(text)
            self.macs.append(mac)
            self.rows[key] = row
        else:
            self.texts[row] = text
            self.macs[row] = mac
            self.rows.move_to_end(key)
        self.vectors[row] = vector
        self.expires[row] = expires_at

    def drop(self, key: str) -> bool:
        row = self.rows.pop(key, None)
        if row is None:
            return False
        last = len(self.keys) - 1
        if row != last:
            moved = self.keys[last]
            self.vectors[row] = self.vectors[last]
            self.expires[row] = self.expires[last]
            self.keys[row] = moved
            self.texts[row] = self.texts[last]
            self.macs[row] = self.macs[last]
            self.rows[moved] = row  # updating a value keeps the key's place in the order
        self.keys.pop()
        self.texts.pop()
        self.macs.pop()
        capacity = self.vectors.shape[0]
        if capacity > _INITIAL_ROWS and len(self.keys) <= capacity // 4:
            self._resize(max(_INITIAL_ROWS, capacity // 2))
        return True

    def expired_keys(self, now: float) -> list[str]:
        import numpy as np

        n = len(self.keys)
        return [self.keys[i] for i in np.flatnonzero(self.expires[:n] <= now)]

    def oldest(self) -> str:
        return next(iter(self.rows))

    def _resize(self, capacity: int) -> None:
        import numpy as np

        n = len(self.keys)
        vectors = np.empty((capacity, self.dim), dtype=np.float32)
        vectors[:n] = self.vectors[:n]
        expires = np.empty(capacity, dtype=np.float64)
        expires[:n] = self.expires[:n]
        self.vectors, self.expires = vectors, expires


class MemoryVectorIndex:
    """Vectors in this process's memory, one dense matrix per partition.

    Args:
        max_entries_per_partition: a partition's size cap; the oldest-added entries go first.
        max_entries: the whole index's cap, over all partitions (partitions include the earlier turns
            of a conversation, so there can be very many); the oldest-added entries go first.
            100,000 entries of 384 dimensions take about 150 MB plus their texts.
        clock: the time source for TTLs (epoch seconds).

    Implements :class:`~cachekit.semantic.base.VectorIndex`.
    """

    def __init__(
        self,
        *,
        max_entries_per_partition: int = 10_000,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._cap = positive_int(max_entries_per_partition, "max_entries_per_partition")
        self._total_cap = positive_int(max_entries, "max_entries")
        require_numpy()
        self._clock = clock
        self._lock = threading.Lock()
        self._parts: dict[str, _Partition] = {}
        #: (partition, entry key) of every entry, oldest-added first: the global eviction order
        self._order: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._adds_since_sweep = 0
        self._closed = False

    @property
    def max_entries_per_partition(self) -> int:
        """The size cap of each partition."""
        return self._cap

    @property
    def max_entries(self) -> int:
        """The size cap of the whole index."""
        return self._total_cap

    def __len__(self) -> int:
        """How many entries are held (expired ones not yet dropped included)."""
        with self._lock:
            return len(self._order)

    def partition_size(self, partition: str) -> int:
        """How many entries ``partition`` holds (expired ones not yet dropped included)."""
        with self._lock:
            part = self._parts.get(partition)
            return 0 if part is None else len(part)

    # -- VectorIndex -------------------------------------------------------------------------------

    def search(self, partition: str, vector: Vector, *, k: int, min_similarity: float) -> list[Candidate]:
        """Up to ``k`` live entries of ``partition`` with cosine >= ``min_similarity``, best first."""
        import numpy as np

        check_search_args(k, min_similarity)
        query = unit_vector(vector)
        with self._lock:
            self._check_open()
            part = self._parts.get(partition)
            if part is None:
                return []
            _check_dim(part, query)
            if k <= 0:
                return []
            n = len(part)
            now = self._clock()
            sims = part.vectors[:n] @ query
            live = part.expires[:n] > now
            chosen = np.flatnonzero(live & (sims >= min_similarity))
            if chosen.size > k:
                chosen = chosen[np.argpartition(-sims[chosen], k - 1)[:k]]
            chosen = chosen[np.argsort(-sims[chosen], kind="stable")]
            found = [
                Candidate(
                    entry_key=part.keys[i],
                    similarity=min(1.0, max(-1.0, float(sims[i]))),
                    text=part.texts[i],
                    mac=part.macs[i],
                )
                for i in chosen
            ]
            if not live.all():
                for key in part.expired_keys(now):
                    self._drop(partition, part, key)
        return found

    def add(
        self, partition: str, entry_key: str, vector: Vector, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        """Add or replace ``entry_key``'s entry (with its ``mac``); ``ttl`` ``None`` never expires,
        ``<= 0`` stores nothing.

        Raises :class:`DimensionMismatchError` when the partition holds vectors of another length.
        """
        _check_ttl(ttl)
        row = unit_vector(vector)
        with self._lock:
            self._check_open()
            part = self._parts.get(partition)
            if part is not None:
                _check_dim(part, row)
            if ttl is not None and ttl <= 0:
                if part is not None:
                    self._drop(partition, part, entry_key)
                return
            now = self._clock()
            if part is None:
                part = self._parts[partition] = _Partition(row.shape[0])
            part.put(entry_key, row, text, mac, math.inf if ttl is None else now + ttl)
            self._order[(partition, entry_key)] = None
            self._order.move_to_end((partition, entry_key))
            if len(part) > self._cap:
                for key in part.expired_keys(now):
                    self._drop(partition, part, key)
                while len(part) > self._cap:
                    self._drop(partition, part, part.oldest())
            self._adds_since_sweep += 1
            if self._adds_since_sweep >= max(256, len(self._parts)):
                self._sweep(now)
            if len(self._order) > self._total_cap:
                self._sweep(now)
                while len(self._order) > self._total_cap:
                    old_partition, old_key = next(iter(self._order))
                    self._drop(old_partition, self._parts[old_partition], old_key)

    def remove(self, partition: str, entry_key: str) -> None:
        """Remove ``entry_key``'s entry from ``partition``; nothing happens if there is none."""
        with self._lock:
            self._check_open()
            part = self._parts.get(partition)
            if part is not None:
                self._drop(partition, part, entry_key)

    def remove_where(self, match: Callable[[str], bool], *, dry_run: bool = False) -> int:
        """Remove every entry whose entry key satisfies ``match``; return how many matched.

        See :class:`~cachekit.semantic.base.PurgeableIndex` (``cachekit.ops.purge_semantic``).
        """
        with self._lock:
            self._check_open()
            doomed = [(partition, key) for partition, key in self._order if match(key)]
            if not dry_run:
                for partition, key in doomed:
                    self._drop(partition, self._parts[partition], key)
        return len(doomed)

    def clear(self) -> None:
        """Remove every entry of every partition."""
        with self._lock:
            self._check_open()
            self._parts.clear()
            self._order.clear()
            self._adds_since_sweep = 0

    def close(self) -> None:
        """Drop everything; later calls raise :class:`SemanticError`. Idempotent."""
        with self._lock:
            self._closed = True
            self._parts.clear()
            self._order.clear()

    def __repr__(self) -> str:
        return f"MemoryVectorIndex(max_entries_per_partition={self._cap}, max_entries={self._total_cap})"

    # -- internals ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SemanticError("the memory vector index is closed")

    def _drop(self, partition: str, part: _Partition, key: str) -> None:
        if part.drop(key):
            self._order.pop((partition, key), None)
            if not part.keys:
                del self._parts[partition]

    def _sweep(self, now: float) -> None:
        self._adds_since_sweep = 0
        for partition, part in list(self._parts.items()):
            for key in part.expired_keys(now):
                self._drop(partition, part, key)


def _check_dim(part: _Partition, vector: Vector) -> None:
    if vector.shape[0] != part.dim:
        raise DimensionMismatchError(
            f"a vector of {vector.shape[0]} dimensions for a partition of {part.dim}-dimensional "
            "vectors (the embedding model changed?); vectors of different models are never mixed"
        )

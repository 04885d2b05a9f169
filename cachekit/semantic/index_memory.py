"""The in-process vector index (numpy): the embedded default.

Per partition, a growing ``float32`` matrix of unit rows (capacity doubles, so appends are amortized
O(1), and halves when it is three-quarters empty), the entry keys, question texts and MACs of the rows,
and their expiry times. A search is one matrix-vector product over the partition, then the live rows at
or above the threshold, the best ``k`` picked with ``argpartition``. Removing a row moves the last row
into its place, so the matrix stays dense.

At scale. Brute force costs a pass over the whole partition (about 18 ms at 100k entries of 384
dimensions on two cores). A partition of ``exact_below`` entries or more is searched through an HNSW
graph from `usearch <https://github.com/unum-cloud/usearch>`_ (the ``ann`` extra, Apache-2.0) when it
is installed: the graph proposes the nearest rows (its keys are the matrix's row numbers, renamed when
a row moves), and their similarities are recomputed exactly from the matrix, so a candidate's
similarity, the threshold and the order of the results mean what they mean below that size; only
*which* rows are found is approximate (recall against exact search is measured by
``benchmarks/semantic.py`` and tested). Without usearch every partition is searched exactly, and the
index says so once in the log (``engine`` tells which it uses).

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
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from cachekit import _fork
from cachekit.errors import ConfigError, MissingExtraError
from cachekit.semantic.base import Candidate, DimensionMismatchError, SemanticError, Vector
from cachekit.stores.memory import _check_ttl

__all__ = ["MemoryVectorIndex", "ann_available"]

logger = logging.getLogger("cachekit.semantic.index")

_INITIAL_ROWS = 16
#: Partitions with fewer entries are searched exactly: brute force over them takes well under 1 ms.
DEFAULT_EXACT_BELOW = 4096
#: The HNSW search's exploration factor (usearch's ``expansion_search``): chosen with
#: ``benchmarks/semantic.py`` as the smallest that finds the exact best match for real questions.
DEFAULT_ANN_EF = 64
#: Rows the graph is asked for at least (more than ``k``: a candidate can fall below the threshold).
_ANN_MIN_COUNT = 16


def ann_available() -> bool:
    """Whether the approximate-nearest-neighbour library (``usearch``, the ``ann`` extra) is installed."""
    return importlib.util.find_spec("usearch") is not None


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

    __slots__ = ("ann", "dim", "expires", "keys", "macs", "rows", "texts", "vectors")

    def __init__(self, dim: int) -> None:
        import numpy as np

        self.dim = dim
        #: The HNSW graph over the rows (usearch, keyed by row number), or None: searched exactly.
        self.ann: Any = None
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
            if self.ann is not None:
                self.ann.remove(row)
        self.vectors[row] = vector
        self.expires[row] = expires_at
        if self.ann is not None:
            self.ann.add(row, vector, threads=1)

    def drop(self, key: str) -> bool:
        row = self.rows.pop(key, None)
        if row is None:
            return False
        last = len(self.keys) - 1
        if self.ann is not None:
            self.ann.remove(row)
            if row != last:
                self.ann.rename(last, row)  # the graph's keys follow the rows
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

    def build_ann(self, ef: int) -> None:
        """Index every row in an HNSW graph (inner product: the rows are unit vectors)."""
        import numpy as np
        from usearch.index import Index

        n = len(self.keys)
        self.ann = Index(ndim=self.dim, metric="ip", dtype="f32", expansion_search=ef)
        # One thread: the same graph every time (and no cores taken behind the caller's back).
        self.ann.add(np.arange(n, dtype=np.uint64), self.vectors[:n], threads=1)

    def nearest_rows(self, query: Vector, k: int, min_similarity: float) -> tuple[Any, Any]:
        """Rows of the best matches (graph search when there is a graph, else all rows) and their
        exact similarities; the caller keeps those >= ``min_similarity``, the best ``k``."""
        import numpy as np

        n = len(self.keys)
        if self.ann is None:
            return np.arange(n), self.vectors[:n] @ query
        count = min(n, max(k, _ANN_MIN_COUNT))
        while True:
            rows = self.ann.search(query, count, threads=1).keys.astype(np.intp)
            sims = self.vectors[rows] @ query  # exact, as below the threshold
            # Ask for more only while fewer than k rows qualify and every row found does (then a
            # qualifying row may lie beyond them).
            qualified = int((sims >= min_similarity).sum())
            if qualified >= k or qualified < rows.size or count >= n:
                return rows, sims
            count = min(n, 4 * count)

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
            100,000 entries of 384 dimensions take about 150 MB plus their texts, and as much
            again for the graph where a partition has one (``approximate``).
        clock: the time source for TTLs (epoch seconds).
        approximate: search partitions of ``exact_below`` entries or more through an HNSW graph
            (``usearch``, the ``ann`` extra): ``None`` (the default) when it is installed, ``True``
            requires it, ``False`` always searches exactly.
        exact_below: the partition size from which the graph is used.
        ef: the graph search's exploration factor (higher: better recall, slower).

    Implements :class:`~cachekit.semantic.base.VectorIndex`.
    """

    def __init__(
        self,
        *,
        max_entries_per_partition: int = 10_000,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.time,
        approximate: bool | None = None,
        exact_below: int = DEFAULT_EXACT_BELOW,
        ef: int = DEFAULT_ANN_EF,
    ) -> None:
        self._cap = positive_int(max_entries_per_partition, "max_entries_per_partition")
        self._total_cap = positive_int(max_entries, "max_entries")
        self._exact_below = positive_int(exact_below, "exact_below")
        self._ef = positive_int(ef, "ef")
        require_numpy()
        self._approximate = _choose_approximate(approximate)
        self._clock = clock
        self._lock = _fork.lock(self)
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

    @property
    def engine(self) -> str:
        """How partitions of ``exact_below`` entries or more are searched: ``"usearch"`` (HNSW,
        approximate) or ``"numpy"`` (brute force, exact)."""
        return "usearch" if self._approximate else "numpy"

    @property
    def exact_below(self) -> int:
        """The partition size from which the HNSW graph is used (when :attr:`engine` is usearch)."""
        return self._exact_below

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
            # Expired rows go first, so that whatever is searched next (matrix or graph) is live.
            for key in part.expired_keys(self._clock()):
                self._drop(partition, part, key)
            if partition not in self._parts:
                return []
            rows, sims = part.nearest_rows(query, k, min_similarity)
            chosen = np.flatnonzero(sims >= min_similarity)
            if chosen.size > k:
                chosen = chosen[np.argpartition(-sims[chosen], k - 1)[:k]]
            chosen = chosen[np.argsort(-sims[chosen], kind="stable")]
            return [
                Candidate(
                    entry_key=part.keys[rows[i]],
                    similarity=min(1.0, max(-1.0, float(sims[i]))),
                    text=part.texts[rows[i]],
                    mac=part.macs[rows[i]],
                )
                for i in chosen
            ]

    def add(
        self, partition: str, entry_key: str, vector: Vector, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        """Add or replace ``entry_key``'s entry (with its ``mac``); ``ttl`` ``None`` never expires,
        ``<= 0`` stores nothing.

        Raises :class:`DimensionMismatchError` when the partition holds vectors of another length.
        """
        ttl = _check_ttl(ttl)
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
            if self._approximate and part.ann is None and len(part) >= self._exact_below:
                part.build_ann(self._ef)
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
            elif part.ann is not None and len(part) < self._exact_below // 2:
                part.ann = None  # small again: exact search, and the graph's memory back

    def _sweep(self, now: float) -> None:
        self._adds_since_sweep = 0
        for partition, part in list(self._parts.items()):
            for key in part.expired_keys(now):
                self._drop(partition, part, key)


def _choose_approximate(approximate: bool | None) -> bool:
    """Whether large partitions use the HNSW graph; says so once when the library is missing."""
    if approximate is not None and not isinstance(approximate, bool):
        raise ConfigError(f"approximate must be True, False or None, not {approximate!r}")
    if approximate is False:
        return False
    if ann_available():
        return True
    if approximate:
        raise MissingExtraError("usearch", "ann", "approximate search in the memory vector index")
    if not _warned_exact:
        _warned_exact.append(True)
        logger.info(
            "usearch is not installed (the 'ann' extra): the memory vector index searches every "
            "partition by brute force, about 18 ms per lookup at 100k entries"
        )
    return False


_warned_exact: list[bool] = []


def _check_dim(part: _Partition, vector: Vector) -> None:
    if vector.shape[0] != part.dim:
        raise DimensionMismatchError(
            f"a vector of {vector.shape[0]} dimensions for a partition of {part.dim}-dimensional "
            "vectors (the embedding model changed?); vectors of different models are never mixed"
        )

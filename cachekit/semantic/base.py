"""The protocols of the semantic cache: embedders, vector indexes, and what a lookup returns.

A semantic entry points at an exact-cache entry: the index keeps, per partition, the embedding of the
last user question, the question's text (the guards compare it with a new question), the key of the
stored response in the exact store and a MAC binding them to the partition
(:mod:`cachekit.semantic.binding`). A hit serves that stored response.

Vectors are ``numpy`` arrays of ``float32``, L2-normalized, so cosine similarity is a dot product and
lies in [-1, 1] — the one similarity scale used everywhere in cachekit (Redis ``VSIM`` reports
``(1 + cos) / 2``; the Redis index converts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cachekit.errors import DimensionMismatchError, SemanticError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
else:
    Vector = Any

__all__ = [
    "AsyncVectorIndex",
    "Candidate",
    "DimensionMismatchError",
    "Embedder",
    "PurgeableIndex",
    "SemanticError",
    "Vector",
    "VectorIndex",
]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalized ``float32`` vectors."""

    @property
    def model_id(self) -> str:
        """A stable id of the model (name and revision/weights digest): part of every partition."""
        ...

    @property
    def dimension(self) -> int:
        """The length of the vectors this embedder returns."""
        ...

    def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts``: an array of shape ``(len(texts), dimension)``, rows L2-normalized.

        Raises :class:`SemanticError` on failure.
        """
        ...


@dataclass(frozen=True, slots=True)
class Candidate:
    """One stored question close to a query, as a vector index returns it."""

    #: The exact-store key of the stored response this entry answers with.
    entry_key: str
    #: Cosine similarity to the query, in [-1, 1].
    similarity: float
    #: The stored question's text (compared with the query by the guards).
    text: str
    #: The MAC the entry was added with (``""``: none); checked before the entry may be served.
    mac: str = ""


@runtime_checkable
class VectorIndex(Protocol):
    """A synchronous vector index, one namespace of vectors per partition.

    Entries expire after their TTL (an expired entry is never returned) and a partition holds at most
    a configured number of entries (the oldest are dropped first). Failures raise
    :class:`SemanticError` (or :class:`cachekit.errors.StoreError` for a backend outage).
    """

    def search(self, partition: str, vector: Vector, *, k: int, min_similarity: float) -> list[Candidate]:
        """Up to ``k`` live entries of ``partition`` with similarity >= ``min_similarity``, best first."""
        ...

    def add(
        self, partition: str, entry_key: str, vector: Vector, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        """Add (or replace) the entry for ``entry_key`` in ``partition``; ``mac`` is kept with it and
        returned as :attr:`Candidate.mac` (an index that drops it never serves a hit)."""
        ...

    def remove(self, partition: str, entry_key: str) -> None:
        """Remove the entry for ``entry_key`` (its stored response is gone); no error if absent."""
        ...

    def clear(self) -> None:
        """Remove every entry of every partition."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


@runtime_checkable
class AsyncVectorIndex(Protocol):
    """The asynchronous twin of :class:`VectorIndex` (for indexes that do network I/O)."""

    async def asearch(
        self, partition: str, vector: Vector, *, k: int, min_similarity: float
    ) -> list[Candidate]:
        """See :meth:`VectorIndex.search`."""
        ...

    async def aadd(
        self, partition: str, entry_key: str, vector: Vector, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        """See :meth:`VectorIndex.add`."""
        ...

    async def aremove(self, partition: str, entry_key: str) -> None:
        """See :meth:`VectorIndex.remove`."""
        ...

    async def aclose(self) -> None:
        """See :meth:`VectorIndex.close`."""
        ...


@runtime_checkable
class PurgeableIndex(Protocol):
    """An index an operator can purge by what its entries answer with (``cachekit purge``).

    Partitions are opaque digests; each entry's entry key (a store key, with its namespace and
    partition in the clear) is what selects it.
    """

    def remove_where(self, match: Callable[[str], bool], *, dry_run: bool = False) -> int:
        """Remove every entry, of every partition, whose entry key satisfies ``match``; return how
        many matched (with ``dry_run``, remove nothing). For operator tools, never on a request's
        path: it visits every entry."""
        ...

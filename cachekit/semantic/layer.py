"""The semantic layer: what the pipeline asks after an exact miss, and tells after a store.

One :class:`SemanticLayer` per cache. It owns the embedder, the vector index and the matcher (the
threshold and the guards). The pipeline decides *when* to use it; this module decides *how*:

* :meth:`SemanticLayer.prepare` — is the request eligible, and which partition and question is it?
* :meth:`SemanticLayer.lookup` — embed the question once, search its partition, let the matcher (the
  threshold, then every guard) pick a candidate. The vector is kept for :meth:`remember`.
* :meth:`SemanticLayer.remember` — after the fresh answer was stored under its exact key, index it.
* :meth:`SemanticLayer.forget` — an indexed entry whose stored response is gone (expired, evicted).

Every method is synchronous and may take milliseconds (embedding runs a model); the async transport
runs them in a worker thread so the event loop never waits on them.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cachekit import canonical
from cachekit._types import Dialect
from cachekit.errors import ConfigError
from cachekit.semantic.base import Candidate, Embedder, Vector, VectorIndex
from cachekit.semantic.partition import SemanticRequest, split_request

if TYPE_CHECKING:
    from cachekit.semantic.matcher import Matcher

__all__ = ["Lookup", "SemanticConfig", "SemanticLayer", "SemanticStats"]

logger = logging.getLogger("cachekit.semantic")


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    """How the semantic cache behaves (``CacheConfig(semantic=SemanticConfig(...))``).

    Attributes:
        index: where vectors live: ``"memory://"`` (this process; the default), a Redis 8 URL
            (``redis://``, ``rediss://``, ``redis+cluster://``), or a :class:`VectorIndex` object.
        embedder: the :class:`Embedder`; default all-MiniLM-L6-v2, bundled and offline (needs the
            ``semantic`` extra).
        threshold: the cosine similarity (in [-1, 1]) a candidate needs before the guards look at it;
            ``None`` for :data:`cachekit.semantic.matcher.DEFAULT_THRESHOLD`. A request can raise or
            lower it with ``x-cachekit-semantic: <number>``.
        guards: run the guards (negation, numbers, changed content words, ...). Turning them off is
            for measurement only.
        allow_sampling: also answer requests that sample (temperature absent or non-zero).
        k: candidates fetched per lookup (the best one that passes every guard wins).
        max_entries_per_partition: the oldest entries of a partition are dropped beyond this.
        enabled: on for every request of the client (``False``: only where a request or call site opts
            in with ``x-cachekit-semantic: on`` or ``cachekit.policy(semantic=True)``).
    """

    index: VectorIndex | str = "memory://"
    embedder: Embedder | None = None
    threshold: float | None = None
    guards: bool = True
    allow_sampling: bool = False
    k: int = 4
    max_entries_per_partition: int = 10_000
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            raise ConfigError(f"semantic threshold is a cosine in [-1, 1], not {self.threshold!r}")
        if not isinstance(self.k, int) or self.k < 1:
            raise ConfigError(f"semantic k must be an integer >= 1, not {self.k!r}")
        if not isinstance(self.max_entries_per_partition, int) or self.max_entries_per_partition < 1:
            raise ConfigError("max_entries_per_partition must be an integer >= 1")


@dataclass(slots=True)
class SemanticStats:
    """Counters of the semantic layer: lookups, hits, and why requests were not served."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    errors: int = 0
    stale: int = 0
    #: Requests the layer does not answer, by reason (``sampling``, ``not_text``, ...).
    ineligible: Counter[str] = field(default_factory=Counter)
    #: Candidates above the threshold that a guard rejected, by reason.
    rejected: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, reason: str | None = None, count: int = 1) -> None:
        """Increment a counter (``reason`` picks the entry of ``ineligible``/``rejected``)."""
        with self._lock:
            if reason is None:
                setattr(self, name, getattr(self, name) + count)
            else:
                getattr(self, name)[reason] += count


@dataclass(frozen=True, slots=True)
class Lookup:
    """The outcome of one lookup: the chosen candidate (if any) and the question's vector."""

    request: SemanticRequest
    vector: Vector
    hit: Candidate | None


class SemanticLayer:
    """The embedder, index and matcher of one cache (see the module docstring)."""

    def __init__(self, config: SemanticConfig, *, store_prompts: bool = True) -> None:
        if not store_prompts:
            raise ConfigError(
                "the semantic cache keeps each question's text for its guards; it cannot be combined "
                "with store_prompts=False"
            )
        self.config = config
        self.stats = SemanticStats()
        self._lock = threading.Lock()
        self._embedder: Embedder | None = config.embedder
        self._index: VectorIndex | None = config.index if not isinstance(config.index, str) else None
        self._matchers: dict[float, Matcher] = {}

    # -- lazily built parts (loading a model or connecting must not slow down building a client) -----

    @property
    def embedder(self) -> Embedder:
        """The embedder (the default one is shared by the process and loads on first use)."""
        if self._embedder is None:
            from cachekit.semantic.embedders import default_embedder

            with self._lock:
                if self._embedder is None:
                    self._embedder = default_embedder()
        return self._embedder

    @property
    def index(self) -> VectorIndex:
        """The vector index, opened from its URL on first use."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = _open_index(self.config)
        return self._index

    def matcher(self, threshold: float | None) -> Matcher:
        """The matcher for ``threshold`` (the configured one, or :data:`DEFAULT_THRESHOLD`)."""
        from cachekit.semantic.matcher import DEFAULT_THRESHOLD, Matcher

        value = threshold if threshold is not None else self.config.threshold
        value = DEFAULT_THRESHOLD if value is None else value
        matcher = self._matchers.get(value)
        if matcher is None:
            with self._lock:
                matcher = self._matchers.get(value)
                if matcher is None:
                    guards = None if self.config.guards else ()
                    matcher = self._matchers[value] = Matcher(self.embedder, threshold=value, guards=guards)
        return matcher

    # -- the steps ------------------------------------------------------------------------------------

    def prepare(
        self,
        dialect: Dialect,
        body: Mapping[str, Any],
        *,
        scope: Iterable[str],
        options: canonical.CanonicalOptions,
        ignore_fields: frozenset[str],
    ) -> SemanticRequest | None:
        """The request's partition and question, or ``None`` (counted by reason) when not eligible.

        The embedding model's id is part of the partition: vectors of two models never meet.
        """
        prepared = split_request(
            dialect,
            body,
            scope=(*scope, self.embedder.model_id),
            options=options,
            ignore_fields=ignore_fields,
            allow_sampling=self.config.allow_sampling,
        )
        if isinstance(prepared, str):
            self.stats.add("ineligible", prepared)
            return None
        return prepared

    def lookup(self, request: SemanticRequest, threshold: float | None = None) -> Lookup:
        """Embed the question, search its partition, and pick the best candidate the guards accept."""
        self.stats.add("lookups")
        vector = self.embedder.embed([request.question])[0]
        matcher = self.matcher(threshold)
        candidates = self.index.search(
            request.partition, vector, k=self.config.k, min_similarity=matcher.threshold
        )
        result = matcher.match(request.question, candidates)
        for reason, count in result.rejected.items():
            self.stats.add("rejected", reason, count)
        self.stats.add("hits" if result.hit is not None else "misses")
        return Lookup(request, vector, result.hit)

    def remember(self, lookup: Lookup, entry_key: str, ttl: float | None) -> None:
        """Index the question of ``lookup`` as answered by the stored entry ``entry_key``."""
        self.index.add(lookup.request.partition, entry_key, lookup.vector, lookup.request.question, ttl=ttl)

    def forget(self, partition: str, entry_key: str) -> None:
        """Drop an indexed entry whose stored response is gone."""
        self.stats.add("stale")
        self.index.remove(partition, entry_key)

    def close(self) -> None:
        """Close the index if this layer opened it."""
        if isinstance(self.config.index, str) and self._index is not None:
            self._index.close()


def _open_index(config: SemanticConfig) -> VectorIndex:
    url = config.index
    if not isinstance(url, str):  # pragma: no cover - the caller checks
        return url
    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        from cachekit.semantic.index_memory import MemoryVectorIndex

        if url.rstrip("/") != "memory:":
            raise ConfigError(f"a memory vector index takes no host or path, got {url!r}")
        return MemoryVectorIndex(max_entries_per_partition=config.max_entries_per_partition)
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        from cachekit.semantic.index_redis import RedisVectorIndex

        return RedisVectorIndex(url, max_entries_per_partition=config.max_entries_per_partition)
    raise ConfigError("a semantic index is memory:// or a Redis 8 URL (redis://, redis+cluster://, ...)")


def parse_threshold(value: str) -> float | None:
    """The threshold in an ``x-cachekit-semantic`` header value, or ``None`` for on/off words."""
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number) or not -1.0 <= number <= 1.0:
        raise ValueError(f"a semantic threshold is a cosine in [-1, 1], not {value!r}")
    return number

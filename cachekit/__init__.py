"""cachekit: client-side caching middleware for hosted LLM APIs.

Three ways in:

* drop-in clients: ``cachekit.Anthropic``, ``AsyncAnthropic``, ``OpenAI``, ``AsyncOpenAI`` (the SDK's own
  constructor plus ``cache=``), or :func:`wrap` for a client built elsewhere;
* the decorator :func:`cached` (and the context manager :func:`policy`) for per-call-site policy;
* the transports :class:`CachingTransport` / :class:`AsyncCachingTransport` for any httpx client.

The drop-in clients are built on first access, so ``import cachekit`` never imports an SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachekit._version import __version__
from cachekit.cache import Cache
from cachekit.clients import cache_of, wrap
from cachekit.config import CacheConfig
from cachekit.context import CallPolicy, current_policy, policy
from cachekit.decorator import cached
from cachekit.errors import (
    CachekitError,
    CacheRulesError,
    CacheUnavailableError,
    ConfigError,
    CorruptEntryError,
    DimensionMismatchError,
    MemoizeError,
    MemoizeWarning,
    MissingExtraError,
    PlanError,
    PrefixLintError,
    PriceTableError,
    RequestRefusedError,
    ScriptedError,
    ScriptError,
    SemanticError,
    StoreError,
    StoreUnavailableError,
    StreamError,
    TraceError,
    UnknownProviderError,
)
from cachekit.semantic.layer import SemanticConfig
from cachekit.stores import AsyncStore, MemoryStore, SQLiteStore, Store, store_from_url
from cachekit.transport import AsyncCachingTransport, CachingTransport

if TYPE_CHECKING:  # pragma: no cover - the real classes are SDK subclasses built on first access
    import anthropic
    import openai

    from cachekit.cache import CacheLike

    class Anthropic(anthropic.Anthropic):
        """``anthropic.Anthropic`` with a response cache (see :func:`cachekit.clients.drop_in_class`)."""

        def __init__(self, *args: Any, cache: CacheLike = None, **kwargs: Any) -> None: ...

    class AsyncAnthropic(anthropic.AsyncAnthropic):
        """``anthropic.AsyncAnthropic`` with a response cache."""

        def __init__(self, *args: Any, cache: CacheLike = None, **kwargs: Any) -> None: ...

    class OpenAI(openai.OpenAI):
        """``openai.OpenAI`` with a response cache."""

        def __init__(self, *args: Any, cache: CacheLike = None, **kwargs: Any) -> None: ...

    class AsyncOpenAI(openai.AsyncOpenAI):
        """``openai.AsyncOpenAI`` with a response cache."""

        def __init__(self, *args: Any, cache: CacheLike = None, **kwargs: Any) -> None: ...


__all__ = [
    "Anthropic",
    "AsyncAnthropic",
    "AsyncCachingTransport",
    "AsyncOpenAI",
    "AsyncStore",
    "Cache",
    "CacheConfig",
    "CacheRulesError",
    "CacheUnavailableError",
    "CachekitError",
    "CachingTransport",
    "CallPolicy",
    "ConfigError",
    "CorruptEntryError",
    "DimensionMismatchError",
    "MemoizeError",
    "MemoizeWarning",
    "MemoryStore",
    "MissingExtraError",
    "OpenAI",
    "PlanError",
    "PrefixLintError",
    "PriceTableError",
    "RequestRefusedError",
    "SQLiteStore",
    "ScriptError",
    "ScriptedError",
    "SemanticConfig",
    "SemanticError",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "StreamError",
    "TraceError",
    "UnknownProviderError",
    "__version__",
    "cache_of",
    "cached",
    "current_policy",
    "policy",
    "store_from_url",
    "wrap",
]


def __getattr__(name: str) -> Any:
    from cachekit.clients import DROP_IN_CLIENTS, drop_in_class

    if name in DROP_IN_CLIENTS:
        return drop_in_class(name)
    raise AttributeError(f"module 'cachekit' has no attribute {name!r}")

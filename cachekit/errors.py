"""The exceptions cachekit raises, as one tree.

::

    CachekitError
    ├── ConfigError            bad option, store URL or environment setting (also a ValueError)
    ├── MissingExtraError      an optional extra is not installed (also an ImportError)
    ├── MemoizeError           a memoized function's arguments are not JSON, or it needs name= (a TypeError)
    ├── PrefixLintError        lint="raise": volatile content in the cached prefix (cachekit.lint)
    └── StoreError             a cache store failed; caught on the request path (on_cache_error="bypass")
        ├── StoreUnavailableError  the backend did not answer (refused, timed out): trips the breaker
        ├── CorruptEntryError  a stored entry could not be decoded; treated as a miss and overwritten
        └── CacheUnavailableError  raised to the caller only with on_cache_error="raise"

One warning: :class:`MemoizeWarning` (a ``UserWarning``), when a memoized function's result cannot be
memoized because it is not JSON; the result is returned all the same.

Provider errors are never wrapped: an HTTP error from upstream reaches the SDK untouched, so the SDK
raises its own typed exception (``anthropic.RateLimitError`` and so on).
"""

from __future__ import annotations

from cachekit._version import DISTRIBUTION

__all__ = [
    "CacheUnavailableError",
    "CachekitError",
    "ConfigError",
    "CorruptEntryError",
    "MemoizeError",
    "MemoizeWarning",
    "MissingExtraError",
    "StoreError",
    "StoreUnavailableError",
    "install_command",
]


class CachekitError(Exception):
    """Base class of every exception cachekit raises."""


class ConfigError(CachekitError, ValueError):
    """An option, store URL or environment variable has a value cachekit cannot use."""


def install_command(*extras: str) -> str:
    """The ``pip install`` line for cachekit with ``extras``, under its name on the package index.

    That name is :data:`cachekit._version.DISTRIBUTION` (``cachekit-llm``), not ``cachekit``: an
    unrelated project is published as ``cachekit``, so ``pip install 'cachekit[...]'`` would install it.
    """
    return f"pip install '{DISTRIBUTION}[{','.join(extras)}]'"


class MissingExtraError(CachekitError, ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed; "
            f"install it with: {install_command(extra)}"
        )
        self.package = package
        self.extra = extra


class MemoizeError(CachekitError, TypeError):
    """A memoized function was called with arguments that are not JSON-serializable.

    Raised before the function runs, so no work is lost. A result that is not JSON is never raised:
    it is returned, with a :class:`MemoizeWarning`.
    """


class MemoizeWarning(UserWarning):
    """A memoized function's result was returned but not memoized: it is not JSON-serializable.

    The function already ran (and its LLM calls were paid for), so the result is never thrown away;
    the warning says why the next call with the same arguments will run it again.
    """


class StoreError(CachekitError):
    """A cache store failed to read or write. The transport logs it and goes upstream."""


class StoreUnavailableError(StoreError):
    """The store's backend did not answer: connection refused or reset, a timeout, a cluster down.

    Only these open the circuit breaker; a backend that answers with an error (out of memory under
    ``noeviction``, a refused command) is up, so its reads keep being used.
    """


class CacheUnavailableError(StoreError):
    """The cache path failed (or its circuit breaker is open) and ``on_cache_error="raise"`` is set.

    Only raised for callers who asked for it; by default a cache failure sends the request upstream.
    """


class CorruptEntryError(StoreError):
    """A stored entry is not a valid cachekit record (truncated, tampered with, or another format)."""

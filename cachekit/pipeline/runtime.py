"""What every stage of one pipeline shares: the configuration, the counters, the store's circuit
breaker and the store-health reports (a failed store call is logged and counted, never raised), and
what the pipeline learns across requests (the planner's memory, the caching rules hosts announced)
with the two questions several stages ask of it: whose caching rules plan a request
(:meth:`Runtime.rules_provider`) and whose prices price it (:meth:`Runtime.priced_as`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cachekit import _fork
from cachekit.config import CacheConfig
from cachekit.cost.ledger import Ledger
from cachekit.errors import CacheUnavailableError, StoreError, StoreUnavailableError
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.providers import NO_PROMPT_CACHE, PROVIDERS, HostRules, Route
from cachekit.shape.planner import Planner

__all__ = ["KNOWN_PROVIDERS", "PipelineStats", "Runtime"]

logger = logging.getLogger("cachekit.pipeline")
KNOWN_PROVIDERS = frozenset(provider.name for provider in PROVIDERS)

# Why no breakpoints can be planned for a host, as ``x-cachekit-breakpoints: off; <why>`` says it.
_OFF_NOT_YET = "unknown host: no rules announced yet"
_OFF_UNKNOWN = "unknown host: set price_as"
_OFF_NO_CACHE = "host bills no prompt cache"
_OFF_OPENAI_ELSEWHERE = "price_as=openai: prompt_cache_key goes to OpenAI only"


@dataclass
class PipelineStats:
    """Counters of what the response cache did (read them with :meth:`Pipeline.snapshot`)."""

    hits: int = 0
    misses: int = 0
    bypasses: int = 0
    passthroughs: int = 0
    stores: int = 0
    store_errors: int = 0
    #: Store calls skipped without trying (the circuit breaker was open).
    store_skips: int = 0
    semantic_hits: int = 0
    semantic_errors: int = 0
    #: Semantic lookups skipped without trying (the semantic layer's breaker was open).
    semantic_skips: int = 0
    corrupt_entries: int = 0
    #: Stored answers not served because the form asked for carries a field they lack (usage: a
    #: document, or a Chat stream with ``include_usage``, from an entry stored without it); each a miss.
    incomplete_entries: int = 0
    #: Requests answered by an identical request's upstream call, after waiting for it (single-flight).
    coalesced: int = 0
    incomplete_streams: int = 0
    #: 2xx JSON documents that were not a complete answer of their dialect (passed on, not stored).
    incomplete_answers: int = 0
    #: Requests that went upstream with markers (or a prompt_cache_key) cachekit added.
    planned: int = 0
    #: Requests whose volatile system blocks were moved after the stable ones (``stable_first``).
    reordered: int = 0
    #: Requests refused before they were sent because lint found volatile content (``lint="raise"``).
    lint_refusals: int = 0
    #: Requests whose breakpoints could not be planned (the caller's markers break the provider's rules).
    plan_errors: int = 0
    # Set by __post_init__: a lock the fork registry renews, which holds its owner weakly (so no slots).
    _lock: threading.Lock = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._lock = _fork.lock(self)

    def add(self, name: str) -> None:
        """Increment one counter, thread-safely."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


@dataclass(slots=True)
class Runtime:
    """The state the stages of one pipeline share (one per client; all its transports share it)."""

    config: CacheConfig
    clock: Callable[[], float]
    #: Skips the store while it keeps failing (shared by every transport of this pipeline).
    breaker: CircuitBreaker
    #: Where usage and cost are recorded (``None``: not recorded).
    ledger: Ledger | None = None
    stats: PipelineStats = field(default_factory=PipelineStats)
    #: Places cache breakpoints, and learns: token ratios from usage (record cost), cache writes the
    #: provider accepted (shape), each tenant's timing statistics (the pauses stage).
    planner: Planner = field(default_factory=Planner)
    #: The caching rules that hosts outside the provider table announced (``x-cachekit-rules``).
    hosts: HostRules = field(default_factory=HostRules)

    def rules_provider(self, route: Route) -> tuple[str | None, str]:
        """Whose caching rules plan a request to ``route``, or ``None`` and why not (``x-cachekit-
        breakpoints: off; <why>``). A known provider's own; for a host cachekit does not know (a gateway,
        a compatible server), the ``price_as`` provider's, since only the caller knows what is behind
        it, else the rules the host announced (none yet on the first call: it goes as written).
        OpenAI's ``prompt_cache_key`` goes to OpenAI, or to a host that announced OpenAI's rules."""
        if route.provider in KNOWN_PROVIDERS:
            return route.provider, ""
        announced = self.hosts.announced(route)
        if self.config.price_as is not None:
            named = self.config.price_as.strip().lower()
            if named == "openai" and announced != "openai":
                return None, _OFF_OPENAI_ELSEWHERE
            return named, ""
        if announced == NO_PROMPT_CACHE:
            return None, _OFF_NO_CACHE
        if announced is not None:
            return announced, ""
        return None, _OFF_UNKNOWN if self.hosts.answered(route) else _OFF_NOT_YET

    def priced_as(self, route: Route) -> str:
        """Whose price table prices a call: the known provider's, else ``price_as`` (the caller knows
        best), else the rules the host announced, else the host's own name (no price)."""
        if route.provider in KNOWN_PROVIDERS:
            return route.provider
        if self.config.price_as is not None:
            return self.config.price_as
        announced = self.hosts.announced(route)
        return announced if announced is not None and announced != NO_PROMPT_CACHE else route.provider

    def unavailable(self, what: str, exc: Exception | None) -> None:
        """The store could not be asked (``exc``) or was skipped (breaker open) before going upstream.

        With ``on_cache_error="raise"`` this raises, so the call fails before any money is spent.
        """
        if exc is None:
            self.stats.add("store_skips")
        else:
            self.report(exc)
            self.stats.add("store_errors")
            logger.warning(
                "cache %s failed, going on without the cache: %s: %s", what, type(exc).__name__, exc
            )
        if self.config.on_cache_error == "raise":
            reason = "its circuit breaker is open" if exc is None else f"{type(exc).__name__}: {exc}"
            raise CacheUnavailableError(f"cache {what} failed ({reason}); on_cache_error='raise'") from exc

    def report(self, exc: Exception) -> None:
        """Tell the breaker about a failed store call: only a backend that did not answer counts.

        An error *reply* (Redis out of memory under ``noeviction``, a refused write) means the store is
        up: its reads still work, so they must not be skipped.
        """
        if isinstance(exc, StoreError) and not isinstance(exc, StoreUnavailableError):
            self.breaker.success()
        else:
            self.breaker.failure()

    def saved(self, exc: Exception | None) -> None:
        """The outcome of a store write. A failed write is logged and counted, never raised: the
        caller already has (and has paid for) the fresh answer."""
        if exc is None:
            self.breaker.success()
            self.stats.add("stores")
            return
        self.report(exc)
        self.stats.add("store_errors")
        logger.warning("cache store failed, the answer is not cached: %s: %s", type(exc).__name__, exc)

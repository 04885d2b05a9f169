"""Stage 2's timing statistics (issue 19): read from the cache store before a miss is shaped, and
written back once the provider accepted it.

The planner chooses 1-hour lifetimes before a pause is seen from the tenant's timing statistics
(:mod:`cachekit.shape.lifetimes`). They outlive the process in the store, under a key of their own per
namespace, partition and model; they hold a few numbers, never prompt text. A store that fails here
only means starting from nothing: logged, never raised (whatever ``on_cache_error`` says), and not
counted against the store's circuit breaker.

Reads the view's body (the model) and the keyed call (namespace, partition); writes nothing on the
view; yields :class:`~cachekit.pipeline.effects.Load` and :class:`~cachekit.pipeline.effects.Save`.
"""

from __future__ import annotations

import logging

from cachekit.pipeline.effects import Load, Save, Step
from cachekit.pipeline.key import Call
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.view import RequestView
from cachekit.shape.lifetimes import GAP_KIND, STATS_TTL
from cachekit.shape.planner import Applied
from cachekit.stores.keys import store_key

__all__ = ["GapStatistics"]

logger = logging.getLogger("cachekit.pipeline")


class GapStatistics:
    """Loads a partition's timing statistics before a miss is shaped, and saves them once it landed."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def _key(self, call: Call, model: str) -> str:
        digest = self._rt.planner.gaps.digest(model)
        return store_key(GAP_KIND, call.control.namespace, call.partition, digest)

    def load(self, view: RequestView, call: Call) -> Step[None]:
        """Read the statistics for the request's model, once per process, where the provider has cache
        lifetimes to choose (explicit caching)."""
        body = view.body()
        model = body.get("model") if body is not None else None
        if not isinstance(model, str) or not model or not call.control.breakpoints:
            return
        planner = self._rt.planner
        provider, _ = self._rt.rules_provider(call.route)
        rules = planner.rules(provider, model) if provider is not None else None
        if rules is None or rules.mode != "explicit":
            return
        partition = call.partition.encode()
        if not planner.gaps.wants_load(partition, model) or not self._rt.breaker.allow():
            return
        try:
            raw = yield Load(self._key(call, model))
        except Exception as exc:
            logger.warning("cache gap statistics not read: %s: %s", type(exc).__name__, exc)
            raw = None
        planner.gaps.loaded(partition, model, raw)

    def save(self, call: Call, applied: Applied | None) -> Step[None]:
        """Write the statistics back when they changed (at most every 30 s)."""
        if applied is None or not applied.model:
            return
        raw = self._rt.planner.gaps.to_save(call.partition.encode(), applied.model, self._rt.clock())
        if raw is None or not self._rt.breaker.allow():
            return
        try:
            yield Save(self._key(call, applied.model), raw, STATS_TTL)
        except Exception as exc:
            logger.warning("cache gap statistics not saved: %s: %s", type(exc).__name__, exc)

"""The sans-I/O core: what happens to one request, as stages that yield effects.

The request's path, one module per stage (see ``docs/architecture.md``):

1. :mod:`~cachekit.pipeline.controls`: read controls (headers, call site, config)
2. :mod:`~cachekit.pipeline.shape`: canonical form, lint, stable-first, breakpoints
3. :mod:`~cachekit.pipeline.key`: exact key, partition, semantic scope
4. :mod:`~cachekit.pipeline.exact`: exact lookup
5. :mod:`~cachekit.pipeline.semantic`: semantic lookup
6. :mod:`~cachekit.pipeline.upstream`: upstream with single-flight
7. :mod:`~cachekit.pipeline.store`: store
8. :mod:`~cachekit.pipeline.record_cost`: record cost

all reading one :class:`~cachekit.pipeline.view.RequestView`, run by the thin
:class:`~cachekit.pipeline.driver.Pipeline`. Effects and what a driver sends back for each are in
:mod:`cachekit.pipeline.effects`; the transports perform them (:mod:`cachekit.transport`).

Beside the stages, what runs them: the timing statistics loaded and saved around shaping
(:mod:`~cachekit.pipeline.pauses`), single-flight (:mod:`~cachekit.pipeline.flights`), the store's
circuit breaker (:mod:`~cachekit.pipeline.breaker`), what every stage shares
(:mod:`~cachekit.pipeline.runtime`) and how answers leave (:mod:`~cachekit.pipeline.respond`).
"""

from __future__ import annotations

from cachekit.pipeline.controls import (
    BREAKPOINTS_HEADER,
    BYPASS_REASON_HEADER,
    CACHE_HEADER,
    CONTROL_PREFIX,
    INELIGIBLE_HEADER,
    KEY_HEADER,
    REFUSED_HEADER,
    SIMILARITY_HEADER,
)
from cachekit.pipeline.driver import Pipeline
from cachekit.pipeline.effects import Effect, Exchange, Load, Offload, Read, Save, Send, Tee, Wait
from cachekit.pipeline.runtime import PipelineStats
from cachekit.pipeline.view import JSON_TYPE, SSE_TYPE

__all__ = [
    "BREAKPOINTS_HEADER",
    "BYPASS_REASON_HEADER",
    "CACHE_HEADER",
    "CONTROL_PREFIX",
    "INELIGIBLE_HEADER",
    "JSON_TYPE",
    "KEY_HEADER",
    "REFUSED_HEADER",
    "SIMILARITY_HEADER",
    "SSE_TYPE",
    "Effect",
    "Exchange",
    "Load",
    "Offload",
    "Pipeline",
    "PipelineStats",
    "Read",
    "Save",
    "Send",
    "Tee",
    "Wait",
]

"""The sans-I/O core: what happens to one request, as stages that yield effects.

The request's path, one module per stage, in the order the driver runs them (see
``docs/architecture.md``):

1. :mod:`~cachekit.pipeline.controls`: read controls (headers, call site, config)
2. :meth:`~cachekit.pipeline.view.RequestView.canonicalize`: the canonical form
3. :mod:`~cachekit.pipeline.key`: exact key, partition, semantic scope
4. :mod:`~cachekit.pipeline.exact`: exact lookup, with the single-flight join
5. :mod:`~cachekit.pipeline.semantic`: semantic lookup
2. :mod:`~cachekit.pipeline.pauses` and :mod:`~cachekit.pipeline.shape`: the tenant's timing
   statistics, lint, stable-first, breakpoints
6. :mod:`~cachekit.pipeline.upstream`: upstream (a stream through a tee)
7. :mod:`~cachekit.pipeline.store`: store (then stage 5 indexes what was stored)
8. :mod:`~cachekit.pipeline.record_cost`: record cost

all reading one :class:`~cachekit.pipeline.view.RequestView`, wired and run by
:class:`~cachekit.pipeline.driver.Pipeline` alone: no stage calls another. Effects and what a driver
sends back for each are in :mod:`cachekit.pipeline.effects`; the transports perform them
(:mod:`cachekit.transport`).

Beside the stages, what runs them: stored entries as the stages read and write them
(:mod:`~cachekit.pipeline.entries`), single-flight (:mod:`~cachekit.pipeline.flights`), the store's
circuit breaker (:mod:`~cachekit.pipeline.breaker`), what every stage shares and what the pipeline
learns (:mod:`~cachekit.pipeline.runtime`) and how answers leave (:mod:`~cachekit.pipeline.respond`).
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

"""An optional OpenTelemetry exporter for the cost ledger (needs ``pip install 'cachekit-llm[otel]'``).

:class:`OpenTelemetrySink` is a synchronous :class:`~cachekit.cost.ledger.LedgerSink`: as each
:class:`~cachekit.cost.ledger.CallRecord` is recorded it sets span attributes on the *current* span
(:func:`opentelemetry.trace.get_current_span`), if that span is recording. Records are made on the
thread that made the LLM call, so the current span is the caller's (or an SDK instrumentation's) span
around that call. Nothing is set when no span is active or no SDK is configured.

Attributes from the OpenTelemetry semantic conventions for generative AI (status: Development;
https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/, now maintained in
https://github.com/open-telemetry/semantic-conventions-genai; the cache and reasoning usage attributes
as published in ``opentelemetry-semantic-conventions``' incubating ``gen_ai`` attributes)::

    gen_ai.provider.name                       anthropic, openai, deepseek, x_ai, gcp.gemini, or
                                               cachekit's provider name where the conventions have none
    gen_ai.request.model                       the model of the call
    gen_ai.usage.input_tokens                  ALL input tokens, cache reads and writes included, as the
                                               conventions ask (Anthropic's ``input_tokens`` excludes them)
    gen_ai.usage.output_tokens                 output tokens (reasoning included)
    gen_ai.usage.cache_read.input_tokens       input tokens read from the provider's prompt cache
    gen_ai.usage.cache_creation.input_tokens   input tokens written to it (both retention tiers)
    gen_ai.usage.reasoning.output_tokens       the reasoning part of the output, where reported
    gen_ai.system                              the deprecated name of gen_ai.provider.name, only with
                                               ``legacy_system_attribute=True``

cachekit's own attributes, for what the conventions do not cover::

    cachekit.cache.outcome                     prompt_cache, exact_hit, semantic_hit, miss or bypass
    cachekit.usage.known                       false when the call's usage could not be read
    cachekit.usage.cache_write_5m.input_tokens cache writes at the standard retention rate
    cachekit.usage.cache_write_1h.input_tokens cache writes at the long retention rate
    cachekit.cost.usd                          what the call cost (0 for a local hit)
    cachekit.cost.without_caching_usd          what it would have cost with no caching
    cachekit.cost.saving_usd                   the difference (negative when a cache write is not repaid)
    cachekit.tenant / cachekit.site            the record's labels, when set (``include_labels=True``)

A value the ledger does not know (unreadable usage, an unpriced model) is left unset, never set to 0.
A local hit (``exact_hit`` / ``semantic_hit``) made no provider call, so it gets no ``gen_ai.usage.*``
attributes: its avoided cost is in ``cachekit.cost.without_caching_usd`` / ``cachekit.cost.saving_usd``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Union

from cachekit.cost.ledger import CallRecord
from cachekit.errors import MissingExtraError

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["GENAI_PROVIDER_NAMES", "OpenTelemetrySink", "span_attributes"]

#: An attribute value this module sets (a subset of ``opentelemetry.util.types.AttributeValue``).
AttributeValue = Union[str, bool, int, float]  # noqa: UP007 - a runtime alias, still valid on 3.10

#: cachekit provider names whose well-known ``gen_ai.provider.name`` value is spelled differently.
GENAI_PROVIDER_NAMES: Mapping[str, str] = {"xai": "x_ai", "gemini": "gcp.gemini"}

_HITS = frozenset({"exact_hit", "semantic_hit"})


def _usage_attributes(record: CallRecord) -> dict[str, AttributeValue]:
    u = record.usage
    attrs: dict[str, AttributeValue] = {}
    inputs = (u.uncached_input, u.cache_write_5m, u.cache_write_1h, u.cache_read)
    if all(n is not None for n in inputs):
        attrs["gen_ai.usage.input_tokens"] = sum(n for n in inputs if n is not None)
    if u.output is not None:
        attrs["gen_ai.usage.output_tokens"] = u.output
    if u.cache_read is not None:
        attrs["gen_ai.usage.cache_read.input_tokens"] = u.cache_read
    if u.cache_write_5m is not None and u.cache_write_1h is not None:
        attrs["gen_ai.usage.cache_creation.input_tokens"] = u.cache_write_5m + u.cache_write_1h
    if u.reasoning is not None:
        attrs["gen_ai.usage.reasoning.output_tokens"] = u.reasoning
    if u.cache_write_5m is not None:
        attrs["cachekit.usage.cache_write_5m.input_tokens"] = u.cache_write_5m
    if u.cache_write_1h is not None:
        attrs["cachekit.usage.cache_write_1h.input_tokens"] = u.cache_write_1h
    return attrs


def span_attributes(
    record: CallRecord, *, legacy_system_attribute: bool = False, include_labels: bool = True
) -> dict[str, AttributeValue]:
    """The span attributes :class:`OpenTelemetrySink` sets for ``record`` (see the module docstring).

    Pure and free of OpenTelemetry imports, for setting the same attributes on a span of your own.
    """
    provider = GENAI_PROVIDER_NAMES.get(record.provider, record.provider)
    attrs: dict[str, AttributeValue] = {
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": record.model,
        "cachekit.cache.outcome": record.outcome,
        "cachekit.usage.known": record.usage.known,
    }
    if legacy_system_attribute:
        attrs["gen_ai.system"] = provider
    if record.usage.known and record.outcome not in _HITS:
        attrs.update(_usage_attributes(record))
    if record.cost is not None:
        attrs["cachekit.cost.usd"] = record.cost
    if record.cost_without_caching is not None:
        attrs["cachekit.cost.without_caching_usd"] = record.cost_without_caching
    if record.saving is not None:
        attrs["cachekit.cost.saving_usd"] = record.saving
    if include_labels:
        if record.tenant is not None:
            attrs["cachekit.tenant"] = record.tenant
        if record.site is not None:
            attrs["cachekit.site"] = record.site
    return attrs


class OpenTelemetrySink:
    """A write-only ledger sink that puts each call's usage and cost on the current OpenTelemetry span.

    ``legacy_system_attribute`` also sets ``gen_ai.system`` (the name used up to semantic conventions
    v1.36 for ``gen_ai.provider.name``) for backends that still read it; ``include_labels`` sets the
    record's tenant and site as ``cachekit.tenant`` / ``cachekit.site`` (span attributes are per call,
    so unlike metric labels they cost no extra time series). When a batch holds several records (the
    :class:`~cachekit.cost.ledger.Ledger` writes synchronous sinks one record at a time) they are applied
    in order, so the last one's values win.

    Raises :class:`~cachekit.errors.MissingExtraError` when ``opentelemetry-api`` is not installed.
    """

    synchronous = True

    def __init__(self, *, legacy_system_attribute: bool = False, include_labels: bool = True) -> None:
        try:
            from opentelemetry import trace
        except ImportError:
            raise MissingExtraError("opentelemetry-api", "otel", "the OpenTelemetry exporter") from None
        self._current_span: Callable[[], Span] = trace.get_current_span
        self.legacy_system_attribute = legacy_system_attribute
        self.include_labels = include_labels

    def write(self, records: Sequence[CallRecord]) -> None:
        """Set the records' attributes on the current span, if it is recording."""
        span = self._current_span()
        if not span.is_recording():
            return
        for record in records:
            span.set_attributes(
                span_attributes(
                    record,
                    legacy_system_attribute=self.legacy_system_attribute,
                    include_labels=self.include_labels,
                )
            )

    def read(self, since: float | None = None) -> list[CallRecord]:
        """Always ``[]``: spans cannot be read back as records (put a readable sink first)."""
        return []

    def close(self) -> None:
        """Nothing to release (the tracer provider is the application's to shut down)."""

"""An optional Prometheus exporter for the cost ledger (needs ``pip install 'cachekit-llm[metrics]'``).

:class:`PrometheusSink` is a synchronous :class:`~cachekit.cost.ledger.LedgerSink`: every
:class:`~cachekit.cost.ledger.CallRecord` updates these counters as it is recorded (names shown with the
default ``namespace="cachekit"``)::

    cachekit_tokens_total{provider,model,kind}                 billed tokens; kind is uncached_input,
                                                               cache_write_5m, cache_write_1h,
                                                               cache_read or output
    cachekit_cost_usd_total{provider,model}                    what the calls cost
    cachekit_cost_without_caching_usd_total{provider,model}    what they would have cost uncached
    cachekit_calls_total{provider,model,outcome}               calls by the layer that answered them:
                                                               prompt_cache, exact_hit, semantic_hit,
                                                               miss or bypass
    cachekit_unknown_usage_calls_total{provider,model}         calls whose usage could not be read
    cachekit_unpriced_calls_total{provider,model}              calls that could not be priced

A value the ledger does not know (unreadable usage, an unpriced model) is skipped, never counted as 0;
the two ``unknown``/``unpriced`` counters say how many calls were left out that way. There is no saving
counter because a saving can be negative (a prompt-cache write that is never read costs more than an
uncached call) and a counter only goes up; the saving is
``cachekit_cost_without_caching_usd_total - cachekit_cost_usd_total``. Token counters count
billed tokens only: a local hit (``exact_hit`` / ``semantic_hit``) sent nothing upstream, so its stored
usage is not counted again (the same rule as :func:`~cachekit.cost.ledger.aggregate`); its avoided cost
shows in ``cost_without_caching``.

Label cardinality is kept low on purpose: every distinct label set is a separate time series held in
memory by this process and by the Prometheus server, so the default labels are the few providers, models,
token kinds and outcomes. Tenants and call sites are often unbounded (one per customer, per user, per
prompt template), so they are left out unless asked for with ``labels=("tenant",)`` /
``labels=("tenant", "site")``; the ledger itself (SQLite, JSONL) keeps them for per-tenant reports.

Example::

    from prometheus_client import start_http_server
    from cachekit.cost import Ledger, PrometheusSink, SQLiteSink

    ledger = Ledger([SQLiteSink(), PrometheusSink()])
    start_http_server(9108)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cachekit.cost.ledger import CallRecord
from cachekit.cost.usage import TOKEN_FIELDS
from cachekit.errors import ConfigError, MissingExtraError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter

__all__ = ["PROMETHEUS_LABELS", "PrometheusSink"]

#: The optional extra labels :class:`PrometheusSink` accepts (both unbounded in general: see above).
PROMETHEUS_LABELS: tuple[str, ...] = ("tenant", "site")

_HITS = frozenset({"exact_hit", "semantic_hit"})


def _usd(value: float | None) -> float | None:
    """A cost a counter can add, or ``None`` (unknown, or not a finite non-negative number)."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value


class PrometheusSink:
    """A write-only ledger sink that keeps Prometheus counters of tokens, cost and calls by outcome.

    ``registry`` is the :class:`prometheus_client.CollectorRegistry` to register the counters in (the
    global ``prometheus_client.REGISTRY`` when ``None``); ``namespace`` prefixes every metric name.
    ``labels`` adds record fields from :data:`PROMETHEUS_LABELS` as labels to every counter (a missing
    value becomes the empty string). A registry holds one set of these counters per namespace: create
    one sink per registry and namespace and share it between ledgers.

    Raises :class:`~cachekit.errors.MissingExtraError` when ``prometheus_client`` is not installed and
    :class:`~cachekit.errors.ConfigError` for a label it does not know.
    """

    synchronous = True

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        namespace: str = "cachekit",
        *,
        labels: Sequence[str] = (),
    ) -> None:
        try:
            import prometheus_client
        except ImportError:
            raise MissingExtraError("prometheus_client", "metrics", "the Prometheus exporter") from None
        if isinstance(labels, str):
            labels = (labels,)
        extra = tuple(labels)
        for name in extra:
            if name not in PROMETHEUS_LABELS:
                raise ConfigError(
                    f"PrometheusSink cannot label by {name!r}; choose from {', '.join(PROMETHEUS_LABELS)}"
                )
        if len(set(extra)) != len(extra):
            raise ConfigError(f"PrometheusSink labels repeat a name: {extra!r}")
        self.registry: CollectorRegistry = prometheus_client.REGISTRY if registry is None else registry
        self.namespace = namespace
        self.labels: tuple[str, ...] = extra
        base = ("provider", "model", *extra)

        def counter(name: str, doc: str, *more: str) -> Counter:
            return prometheus_client.Counter(
                name, doc, (*base, *more), namespace=namespace, registry=self.registry
            )

        self.tokens = counter("tokens", "Billed tokens of upstream LLM calls, by kind.", "kind")
        self.cost = counter("cost_usd", "Cost of LLM calls in USD (local cache hits cost 0).")
        self.cost_without_caching = counter(
            "cost_without_caching_usd",
            "What the LLM calls would have cost in USD with no prompt caching and no local cache.",
        )
        self.calls = counter(
            "calls", "LLM calls by the layer that answered them (prompt_cache, exact_hit, ...).", "outcome"
        )
        self.unknown_usage = counter(
            "unknown_usage_calls", "LLM calls whose token usage could not be read (not counted in tokens)."
        )
        self.unpriced = counter(
            "unpriced_calls", "LLM calls that could not be priced (not counted in the USD counters)."
        )

    def _label_values(self, record: CallRecord) -> tuple[str, ...]:
        values = [record.provider, record.model]
        for name in self.labels:
            value: str | None = getattr(record, name)
            values.append("" if value is None else value)
        return tuple(values)

    def write(self, records: Sequence[CallRecord]) -> None:
        """Add the records to the counters (values the record does not know are skipped)."""
        for record in records:
            base = self._label_values(record)
            self.calls.labels(*base, record.outcome).inc()
            usage = record.usage
            if not usage.known:
                self.unknown_usage.labels(*base).inc()
            elif record.outcome not in _HITS:
                for kind in TOKEN_FIELDS:
                    count: int | None = getattr(usage, kind)
                    if count is not None and count >= 0:
                        self.tokens.labels(*base, kind).inc(count)
            cost, without = _usd(record.cost), _usd(record.cost_without_caching)
            if cost is None or without is None:
                self.unpriced.labels(*base).inc()
            if cost is not None:
                self.cost.labels(*base).inc(cost)
            if without is not None:
                self.cost_without_caching.labels(*base).inc(without)

    def read(self, since: float | None = None) -> list[CallRecord]:
        """Always ``[]``: counters cannot be read back as records (put a readable sink first)."""
        return []

    def close(self) -> None:
        """Nothing to release; the counters stay registered so a scrape still sees the final values."""

"""Cost tracking: normalized usage, a dated price table, a ledger of calls, and reports.

::

    usage.py    provider usage objects -> UsageRecord (uncached, cache writes 5m/1h, cache reads, output)
    prices.py   genai-prices, else prices.json (per provider and model, with source URL and date) -> Cost
    genai.py    genai-prices: dated prices, time-of-day and tier variants (extra: prices)
    ledger.py   CallRecord per call -> sinks (memory, SQLite under $CACHEKIT_HOME, JSONL), totals, budgets
    shadow.py   ShadowRecord per request the semantic cache only watched -> its precision, recall, threshold
    report.py   terminal table (rich), JSON, and a PNG of cost with and without caching
    metrics.py  PrometheusSink: counters of tokens, cost and calls by outcome (extra: metrics)
    otel.py     OpenTelemetrySink: GenAI semantic-convention attributes on the current span (extra: otel)

Typical use from the request pipeline::

    ledger = Ledger()                      # SQLite at $CACHEKIT_HOME/ledger.sqlite3, batched writes
    ledger.record_body("anthropic", "anthropic_messages", model, response_body, tenant=t, site=s)
    ledger.record_call("openai", model, stored_usage, outcome="exact_hit")   # a local cache hit
    ledger.totals(group_by=("tenant", "model"), since=datetime.timedelta(days=7))
"""

from __future__ import annotations

from cachekit.cost.ledger import (
    GROUP_FIELDS,
    OUTCOMES,
    Budget,
    BudgetAlert,
    CallRecord,
    JSONLSink,
    Ledger,
    LedgerSink,
    LedgerStats,
    MemorySink,
    Outcome,
    ShadowSink,
    SQLiteSink,
    Totals,
    aggregate,
    default_ledger_path,
    make_record,
    outcome_for_usage,
)
from cachekit.cost.metrics import PROMETHEUS_LABELS, PrometheusSink
from cachekit.cost.otel import GENAI_PROVIDER_NAMES, OpenTelemetrySink, span_attributes
from cachekit.cost.prices import (
    Cost,
    ModelPrice,
    PriceQuote,
    PriceTable,
    PriceTableError,
    Rates,
    default_prices,
    find_quote,
)
from cachekit.cost.report import parse_since, plot, render_report
from cachekit.cost.shadow import ShadowRecord, ShadowSummary, summarize, wilson
from cachekit.cost.usage import TOKEN_FIELDS, UsageRecord, normalize, price_context_of_body, usage_of_body

__all__ = [
    "GENAI_PROVIDER_NAMES",
    "GROUP_FIELDS",
    "OUTCOMES",
    "PROMETHEUS_LABELS",
    "TOKEN_FIELDS",
    "Budget",
    "BudgetAlert",
    "CallRecord",
    "Cost",
    "JSONLSink",
    "Ledger",
    "LedgerSink",
    "LedgerStats",
    "MemorySink",
    "ModelPrice",
    "OpenTelemetrySink",
    "Outcome",
    "PriceQuote",
    "PriceTable",
    "PriceTableError",
    "PrometheusSink",
    "Rates",
    "SQLiteSink",
    "ShadowRecord",
    "ShadowSink",
    "ShadowSummary",
    "Totals",
    "UsageRecord",
    "aggregate",
    "default_ledger_path",
    "default_prices",
    "find_quote",
    "make_record",
    "normalize",
    "outcome_for_usage",
    "parse_since",
    "plot",
    "price_context_of_body",
    "render_report",
    "span_attributes",
    "summarize",
    "usage_of_body",
    "wilson",
]

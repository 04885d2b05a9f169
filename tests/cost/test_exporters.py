"""The optional exporters, with the real packages: Prometheus counters and OpenTelemetry GenAI attributes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import prometheus_client
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from cachekit.cost import (
    CallRecord,
    Ledger,
    LedgerSink,
    OpenTelemetrySink,
    PrometheusSink,
    UsageRecord,
    span_attributes,
)
from cachekit.errors import ConfigError

SONNET = ("anthropic", "claude-sonnet-4-5")
# 1,000 uncached, 10,000 written (5m), 50,000 read, 500 out: $0.063 with caching, $0.1905 without.
SONNET_USAGE = UsageRecord(1_000, 10_000, 0, 50_000, 500)
KINDS = ("uncached_input", "cache_write_5m", "cache_write_1h", "cache_read", "output")


# -- Prometheus ------------------------------------------------------------------------------------------


@pytest.fixture
def registry() -> Any:
    return prometheus_client.CollectorRegistry()


@pytest.fixture
def prom(registry: Any) -> PrometheusSink:
    return PrometheusSink(registry)


def sample(registry: Any, name: str, **labels: str) -> float | None:
    value: float | None = registry.get_sample_value(name, labels)
    return value


def tokens(registry: Any, kind: str, provider: str = SONNET[0], model: str = SONNET[1]) -> float | None:
    return sample(registry, "cachekit_tokens_total", provider=provider, model=model, kind=kind)


def record_all(sink: LedgerSink, calls: list[tuple[Any, ...]]) -> Ledger:
    """Record ``(provider, model, usage, outcome, kwargs)`` calls through a real ledger; no write may fail."""
    with Ledger([sink]) as ledger:
        for provider, model, usage, outcome, kwargs in calls:
            ledger.record_call(provider, model, usage, outcome=outcome, **kwargs)
    assert ledger.stats.write_errors == 0
    return ledger


def test_prometheus_sink_is_a_synchronous_write_only_sink(prom: PrometheusSink) -> None:
    assert isinstance(prom, LedgerSink)
    assert prom.synchronous is True
    record_all(prom, [(*SONNET, SONNET_USAGE, None, {})])
    assert prom.read() == []
    assert prom.read(0.0) == []


def test_prometheus_counts_tokens_by_kind_cost_and_the_outcome(registry: Any, prom: PrometheusSink) -> None:
    record_all(prom, [(*SONNET, SONNET_USAGE, None, {}), (*SONNET, SONNET_USAGE, None, {})])
    assert {kind: tokens(registry, kind) for kind in KINDS} == {
        "uncached_input": 2_000,
        "cache_write_5m": 20_000,
        "cache_write_1h": 0,
        "cache_read": 100_000,
        "output": 1_000,
    }
    labels = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    assert sample(registry, "cachekit_cost_usd_total", **labels) == pytest.approx(0.126)
    assert sample(registry, "cachekit_cost_without_caching_usd_total", **labels) == pytest.approx(0.381)
    assert sample(registry, "cachekit_calls_total", **labels, outcome="prompt_cache") == 2
    assert sample(registry, "cachekit_calls_total", **labels, outcome="miss") is None
    assert sample(registry, "cachekit_unknown_usage_calls_total", **labels) is None
    assert sample(registry, "cachekit_unpriced_calls_total", **labels) is None


def test_prometheus_counts_hits_by_layer_and_only_billed_tokens(registry: Any, prom: PrometheusSink) -> None:
    miss = UsageRecord(1_000, 0, 0, 0, 100)
    record_all(
        prom,
        [
            (*SONNET, miss, "miss", {}),
            (*SONNET, SONNET_USAGE, "prompt_cache", {}),
            (*SONNET, miss, "exact_hit", {}),
            (*SONNET, miss, "exact_hit", {}),
            (*SONNET, miss, "semantic_hit", {}),
            (*SONNET, miss, "bypass", {}),
        ],
    )
    labels = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    outcomes = ("miss", "prompt_cache", "bypass", "exact_hit", "semantic_hit")
    calls = {o: sample(registry, "cachekit_calls_total", **labels, outcome=o) for o in outcomes}
    assert calls == {"miss": 1, "prompt_cache": 1, "bypass": 1, "exact_hit": 2, "semantic_hit": 1}
    # The three hits sent nothing upstream: their stored usage is not billed tokens.
    assert tokens(registry, "uncached_input") == 1_000 + 1_000 + 1_000  # miss, prompt_cache, bypass
    assert tokens(registry, "output") == 100 + 500 + 100
    # ... but their avoided cost ($3/M in, $15/M out: $0.0045 each) is in the without-caching total.
    miss_cost = 1_000 * 3e-6 + 100 * 15e-6
    assert sample(registry, "cachekit_cost_usd_total", **labels) == pytest.approx(2 * miss_cost + 0.063)
    assert sample(registry, "cachekit_cost_without_caching_usd_total", **labels) == pytest.approx(
        5 * miss_cost + 0.1905
    )


def test_prometheus_skips_unknown_usage_and_unpriced_costs(registry: Any, prom: PrometheusSink) -> None:
    record_all(
        prom,
        [
            (*SONNET, UsageRecord.unknown("no usage object"), "miss", {}),
            ("anthropic", "claude-from-the-future", UsageRecord(700, 0, 0, 0, 70), "miss", {}),
            # Known, but one tier not reported: that kind is skipped, the others are counted.
            (*SONNET, UsageRecord(10, 5, None, 0, 1), "miss", {}),
        ],
    )
    sonnet = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    future = {"provider": "anthropic", "model": "claude-from-the-future"}
    assert sample(registry, "cachekit_calls_total", **sonnet, outcome="miss") == 2
    assert sample(registry, "cachekit_unknown_usage_calls_total", **sonnet) == 1
    assert {kind: tokens(registry, kind) for kind in KINDS} == {
        "uncached_input": 10,
        "cache_write_5m": 5,
        "cache_write_1h": None,  # never counted as 0
        "cache_read": 0,
        "output": 1,
    }
    # The unpriced model: its tokens count, its cost is left out (no series at all), and it is flagged.
    assert tokens(registry, "uncached_input", *future.values()) == 700
    assert sample(registry, "cachekit_cost_usd_total", **future) is None
    assert sample(registry, "cachekit_cost_without_caching_usd_total", **future) is None
    assert sample(registry, "cachekit_unpriced_calls_total", **future) == 1
    assert sample(registry, "cachekit_unknown_usage_calls_total", **future) is None


def test_prometheus_a_negative_saving_does_not_break_the_counters(
    registry: Any, prom: PrometheusSink
) -> None:
    # A cache write that is never read costs more than no caching: the saving is negative, and counters
    # only go up, so there is no saving counter; cost and cost-without-caching still count.
    ledger = record_all(prom, [(*SONNET, UsageRecord(100, 10_000, 0, 0, 10), "miss", {})])
    assert ledger.stats.write_errors == 0
    labels = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    cost = sample(registry, "cachekit_cost_usd_total", **labels)
    without = sample(registry, "cachekit_cost_without_caching_usd_total", **labels)
    assert cost is not None
    assert without is not None
    assert cost > without
    assert tokens(registry, "cache_write_5m") == 10_000


def test_prometheus_has_no_tenant_label_unless_asked(registry: Any, prom: PrometheusSink) -> None:
    record_all(prom, [(*SONNET, SONNET_USAGE, None, {"tenant": "acme", "site": "chat"})])
    names = {
        s.name: set(s.labels)
        for metric in registry.collect()
        for s in metric.samples
        if s.name.endswith("_total")
    }
    assert names["cachekit_tokens_total"] == {"provider", "model", "kind"}
    assert names["cachekit_calls_total"] == {"provider", "model", "outcome"}
    assert names["cachekit_cost_usd_total"] == {"provider", "model"}


def test_prometheus_optional_tenant_label_and_namespace(registry: Any) -> None:
    sink = PrometheusSink(registry, namespace="llm", labels=("tenant",))
    record_all(
        sink,
        [
            (*SONNET, SONNET_USAGE, None, {"tenant": "acme"}),
            (*SONNET, SONNET_USAGE, None, {"tenant": "acme"}),
            (*SONNET, SONNET_USAGE, None, {}),
        ],
    )
    base = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    assert sample(registry, "llm_calls_total", **base, tenant="acme", outcome="prompt_cache") == 2
    assert sample(registry, "llm_calls_total", **base, tenant="", outcome="prompt_cache") == 1
    assert sample(registry, "llm_tokens_total", **base, tenant="acme", kind="cache_read") == 100_000
    assert sample(registry, "cachekit_calls_total", **base, outcome="prompt_cache") is None


@pytest.mark.parametrize("labels", [("user",), ("tenant", "tenant"), ("model",)])
def test_prometheus_rejects_unknown_labels(registry: Any, labels: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="PrometheusSink"):
        PrometheusSink(registry, labels=labels)


def test_prometheus_default_registry() -> None:
    sink = PrometheusSink(namespace="cachekit_test_default_registry")
    try:
        assert sink.registry is prometheus_client.REGISTRY
        record_all(sink, [(*SONNET, SONNET_USAGE, None, {})])
        value = prometheus_client.REGISTRY.get_sample_value(
            "cachekit_test_default_registry_calls_total",
            {"provider": "anthropic", "model": "claude-sonnet-4-5", "outcome": "prompt_cache"},
        )
        assert value == 1
    finally:
        for counter in (
            sink.tokens,
            sink.cost,
            sink.cost_without_caching,
            sink.calls,
            sink.unknown_usage,
            sink.unpriced,
        ):
            prometheus_client.REGISTRY.unregister(counter)


# -- OpenTelemetry ---------------------------------------------------------------------------------------


@pytest.fixture
def spans() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def traced(
    spans: tuple[trace.Tracer, InMemorySpanExporter], sink: LedgerSink, calls: list[tuple[Any, ...]]
) -> ReadableSpan:
    """Record ``calls`` inside one span, as the request pipeline would, and return the finished span."""
    tracer, exporter = spans
    with tracer.start_as_current_span("chat claude-sonnet-4-5"):
        record_all(sink, calls)
    (span,) = exporter.get_finished_spans()
    return span


def test_otel_sink_is_a_synchronous_write_only_sink() -> None:
    sink = OpenTelemetrySink()
    assert isinstance(sink, LedgerSink)
    assert sink.synchronous is True
    assert sink.read() == []


def test_otel_sets_genai_attributes_on_the_current_span(spans: Any) -> None:
    span = traced(
        spans, OpenTelemetrySink(), [(*SONNET, SONNET_USAGE, None, {"tenant": "acme", "site": "chat"})]
    )
    attrs = dict(span.attributes or {})
    assert attrs == {
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        # All input tokens, cache reads and writes included, as the conventions ask.
        "gen_ai.usage.input_tokens": 61_000,
        "gen_ai.usage.output_tokens": 500,
        "gen_ai.usage.cache_read.input_tokens": 50_000,
        "gen_ai.usage.cache_creation.input_tokens": 10_000,
        "cachekit.usage.cache_write_5m.input_tokens": 10_000,
        "cachekit.usage.cache_write_1h.input_tokens": 0,
        "cachekit.usage.known": True,
        "cachekit.cache.outcome": "prompt_cache",
        "cachekit.cost.usd": pytest.approx(0.063),
        "cachekit.cost.without_caching_usd": pytest.approx(0.1905),
        "cachekit.cost.saving_usd": pytest.approx(0.1275),
        "cachekit.tenant": "acme",
        "cachekit.site": "chat",
    }
    assert isinstance(attrs["gen_ai.usage.input_tokens"], int)


@pytest.mark.parametrize("outcome", ["exact_hit", "semantic_hit"])
def test_otel_local_hit_has_no_usage_and_a_zero_cost(spans: Any, outcome: str) -> None:
    span = traced(spans, OpenTelemetrySink(), [(*SONNET, SONNET_USAGE, outcome, {})])
    attrs = dict(span.attributes or {})
    assert not [key for key in attrs if key.startswith(("gen_ai.usage.", "cachekit.usage.cache_"))]
    assert attrs["cachekit.cache.outcome"] == outcome
    assert attrs["cachekit.cost.usd"] == 0.0
    assert attrs["cachekit.cost.saving_usd"] == pytest.approx(0.1905)


def test_otel_unknown_usage_and_cost_are_left_unset(spans: Any) -> None:
    span = traced(spans, OpenTelemetrySink(), [(*SONNET, UsageRecord.unknown("no usage"), "miss", {})])
    assert dict(span.attributes or {}) == {
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "cachekit.usage.known": False,
        "cachekit.cache.outcome": "miss",
    }


def test_otel_partly_known_usage_sets_only_what_is_known(spans: Any) -> None:
    # No 1h tier reported and an unpriced model: no input total, no cache-creation total, no cost.
    usage = UsageRecord(10, 5, None, 3, 7, reasoning=2)
    span = traced(spans, OpenTelemetrySink(), [("openai", "gpt-from-the-future", usage, "miss", {})])
    attrs = dict(span.attributes or {})
    assert attrs == {
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-from-the-future",
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.reasoning.output_tokens": 2,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "cachekit.usage.cache_write_5m.input_tokens": 5,
        "cachekit.usage.known": True,
        "cachekit.cache.outcome": "miss",
    }


def test_otel_provider_names_legacy_system_and_no_labels(spans: Any) -> None:
    sink = OpenTelemetrySink(legacy_system_attribute=True, include_labels=False)
    span = traced(spans, sink, [("xai", "grok-4", UsageRecord(1, 0, 0, 0, 1), "bypass", {"tenant": "acme"})])
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.provider.name"] == "x_ai"
    assert attrs["gen_ai.system"] == "x_ai"
    assert "cachekit.tenant" not in attrs
    assert (
        span_attributes(
            CallRecord(0.0, "gemini", "m", None, None, "miss", UsageRecord.unknown(), None, None, None)
        )["gen_ai.provider.name"]
        == "gcp.gemini"
    )


def test_otel_does_nothing_without_a_recording_span(spans: Any) -> None:
    set_calls: list[Any] = []

    class SpyNonRecordingSpan(trace.NonRecordingSpan):
        def set_attributes(self, attributes: Any) -> None:
            set_calls.append(attributes)

    sink = OpenTelemetrySink()
    # No span at all: the default current span is INVALID_SPAN, which does not record.
    record_all(sink, [(*SONNET, SONNET_USAGE, None, {})])
    # A sampled-out span does not record either.
    unsampled = TracerProvider(sampler=ALWAYS_OFF).get_tracer("test")
    with unsampled.start_as_current_span("dropped") as dropped:
        assert not dropped.is_recording()
        record_all(sink, [(*SONNET, SONNET_USAGE, None, {})])
    spy = SpyNonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
    with trace.use_span(spy):
        record_all(sink, [(*SONNET, SONNET_USAGE, None, {})])
    assert set_calls == []
    _, exporter = spans
    assert exporter.get_finished_spans() == ()


# -- missing packages and lazy imports ---------------------------------------------------------------------


def run_python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_importing_cachekit_cost_does_not_import_the_exporter_packages() -> None:
    out = run_python(
        "import sys, cachekit.cost\n"
        "print(any(m.split('.')[0] in ('prometheus_client', 'opentelemetry') for m in sys.modules))"
    )
    assert out.split() == ["False"]


@pytest.mark.parametrize(
    ("blocked", "sink", "package", "extra"),
    [
        ("prometheus_client", "PrometheusSink", "prometheus_client", "metrics"),
        ("opentelemetry", "OpenTelemetrySink", "opentelemetry-api", "otel"),
    ],
)
def test_missing_package_names_the_extra(blocked: str, sink: str, package: str, extra: str) -> None:
    out = run_python(
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "import cachekit.cost\n"
        "from cachekit.errors import MissingExtraError\n"
        "try:\n"
        f"    cachekit.cost.{sink}()\n"
        "except MissingExtraError as e:\n"
        "    print(isinstance(e, ImportError), e.package, e.extra, e, sep='|')\n"
    )
    is_import_error, got_package, got_extra, message = out.strip().split("|")
    assert (is_import_error, got_package, got_extra) == ("True", package, extra)
    assert f"pip install 'cachekit-llm[{extra}]'" in message

"""The proxy's Prometheus metrics: requests, latency, time to first byte, rejections, in flight.

Beside these, ``/metrics`` carries the cost ledger's counters (tokens, cost, calls by outcome:
:class:`cachekit.cost.PrometheusSink`) on the same registry. Labels are few and bounded: the API
(``anthropic_messages``, ``openai_chat``, ..., ``passthrough``), the cache outcome (``hit``, ``miss``,
``semantic``, ``bypass``, ``none``) and the status class (``2xx``...). Never a tenant, a path with ids,
or anything a client chose freely.

With worker processes, set ``PROMETHEUS_MULTIPROC_DIR`` (an empty directory) before starting: each
worker writes its values there, and ``/metrics`` from any worker reports the sum over all of them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cachekit.errors import MissingExtraError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["ProxyMetrics"]

# Latency buckets: a hit is answered in well under a millisecond, an upstream call in seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ProxyMetrics:
    """The proxy's own counters, on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        try:
            import prometheus_client
        except ImportError:
            raise MissingExtraError("prometheus_client", "proxy", "the proxy's /metrics") from None
        self._client = prometheus_client
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry: CollectorRegistry = registry or prometheus_client.CollectorRegistry()
        ns = "cachekit_proxy"
        self.requests = prometheus_client.Counter(
            "requests", "Requests answered, by API, cache outcome and status class.",
            ("api", "cache", "status"), namespace=ns, registry=self.registry,
        )  # fmt: skip
        self.seconds = prometheus_client.Histogram(
            "request_seconds", "Time from a request's arrival to its last byte sent.",
            ("api", "cache"), namespace=ns, registry=self.registry, buckets=_BUCKETS,
        )  # fmt: skip
        self.first_byte = prometheus_client.Histogram(
            "first_byte_seconds", "Time from a request's arrival to the first byte of its answer's body.",
            ("api", "cache"), namespace=ns, registry=self.registry, buckets=_BUCKETS,
        )  # fmt: skip
        self.rejected = prometheus_client.Counter(
            "rejected", "Requests refused before the cache or upstream saw them, by reason.",
            ("reason",), namespace=ns, registry=self.registry,
        )  # fmt: skip
        self.upstream_errors = prometheus_client.Counter(
            "upstream_errors", "Upstream calls that failed without an answer (connect, timeout).",
            ("api",), namespace=ns, registry=self.registry,
        )  # fmt: skip
        self.disconnects = prometheus_client.Counter(
            "client_disconnects", "Clients that went away before their answer ended (upstream cancelled).",
            ("api",), namespace=ns, registry=self.registry,
        )  # fmt: skip
        self.in_flight = prometheus_client.Gauge(
            "in_flight", "Requests being answered now.", namespace=ns, registry=self.registry,
            multiprocess_mode="livesum",
        )  # fmt: skip

    def observe(self, api: str, cache: str, status: int, seconds: float, first_byte: float | None) -> None:
        """One answered request."""
        self.requests.labels(api, cache, f"{status // 100}xx").inc()
        self.seconds.labels(api, cache).observe(seconds)
        if first_byte is not None:
            self.first_byte.labels(api, cache).observe(first_byte)

    def disconnected(self, api: str) -> None:
        """A client went away before its answer ended; its upstream call has been cancelled."""
        self.disconnects.labels(api).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type (summed over workers in multiprocess mode)."""
        client: Any = self._client
        registry = self.registry
        if self.multiprocess:
            from prometheus_client import multiprocess

            registry = client.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return client.generate_latest(registry), client.CONTENT_TYPE_LATEST

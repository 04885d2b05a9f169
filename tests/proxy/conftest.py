"""The proxy end to end: a real ``cachekit serve`` upstream (``LocalServer``) on loopback, the proxy on
uvicorn in front of it, and real clients (the Python and Node SDKs, curl) pointed at the proxy.

The upstream records every request it receives (:class:`RecordingBackend`), so a test can check what
reached it: the forwarded body (the backend's validator answered it), which credential, how many
calls. The proxy's cache is a memory store, its ledger a :class:`MemorySink`, both per test.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from cachekit.cost.ledger import MemorySink
from cachekit.local import LocalBackend, LocalServer, Reply
from cachekit.proxy import ProxyConfig, ProxyServer
from cachekit.proxy.metrics import ProxyMetrics
from cachekit.stores import MemoryStore

MODEL = "claude-sonnet-4-5"
CHAT_MODEL = "gpt-4o-mini"


@dataclass(frozen=True)
class Received:
    """One request as the upstream received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> Any:
        return orjson.loads(self.body)


class RecordingBackend(LocalBackend):
    """The local backend (scripted engine, the providers' caching rules and validation), recording
    every request it answers."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.received: list[Received] = []
        self._recorded = threading.Lock()

    def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, *, host: str = "localhost"
    ) -> Reply:
        reply = super().handle(method, path, headers, body, host=host)
        with self._recorded:
            self.received.append(Received(method, path, dict(headers), body, reply.status))
        return reply

    def calls(self, path_suffix: str = "") -> list[Received]:
        with self._recorded:
            return [r for r in self.received if r.path.endswith(path_suffix)]


@dataclass
class Stack:
    """An upstream, a proxy in front of it, and what the proxy's cache wrote."""

    upstream: LocalServer
    backend: RecordingBackend
    proxy: ProxyServer
    store: MemoryStore
    ledger: MemorySink
    metrics: ProxyMetrics
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def anthropic_url(self) -> str:
        return self.proxy.url

    @property
    def openai_url(self) -> str:
        return self.proxy.url + "/v1"


def make_stack(
    upstream: LocalServer, backend: RecordingBackend, config: ProxyConfig | None = None, **kwargs: Any
) -> Stack:
    """A proxy in front of ``upstream``: a memory store and a memory ledger of the test's own (the
    default SQLite ledger off), its metrics on a registry of its own."""
    store = MemoryStore()
    sink = MemorySink()
    metrics = ProxyMetrics()
    config = (config or ProxyConfig()).with_(
        port=0, anthropic_base_url=upstream.url, openai_base_url=upstream.url + "/v1", ledger=False
    )
    proxy = ProxyServer(config, store=store, sinks=[sink], metrics=metrics, **kwargs)
    return Stack(upstream, backend, proxy, store, sink, metrics)


@pytest.fixture
def upstream() -> Iterator[tuple[LocalServer, RecordingBackend]]:
    backend = RecordingBackend()
    with LocalServer(backend) as server:
        yield server, backend


@pytest.fixture
def stack(upstream: tuple[LocalServer, RecordingBackend]) -> Iterator[Stack]:
    built = make_stack(*upstream)
    with built.proxy:
        yield built


class AccessLog(logging.Handler):
    """The proxy's access lines, as they are written. The proxy writes one (and counts the request in
    its metrics) after the answer's last byte went out, so a client may have its answer first: a test
    waits here for the lines before it reads the log or the metrics."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self._grown = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._grown:
            self.records.append(record)
            self._grown.notify_all()

    def wait(self, count: int, timeout: float = 30) -> list[logging.LogRecord]:
        """The first ``count`` lines, once written (an assertion error if they never come)."""
        with self._grown:
            assert self._grown.wait_for(lambda: len(self.records) >= count, timeout), self.records
            return self.records[:count]


@pytest.fixture
def access_log() -> Iterator[AccessLog]:
    logger = logging.getLogger("cachekit.proxy.access")
    handler, level = AccessLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)

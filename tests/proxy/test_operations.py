"""Running the proxy: /healthz, /metrics, structured logs, limits, a client that goes away, a graceful
shutdown that lets an in-flight stream finish (in process and by SIGTERM to ``cachekit proxy``),
worker processes and several instances over one Redis. No sleeps: every wait is on an event."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from cachekit.proxy import ProxyConfig, ProxyServer
from cachekit.proxy.logs import JSONFormatter
from cachekit.proxy.metrics import ProxyMetrics
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client
from tests.proxy.conftest import MODEL, AccessLog, RecordingBackend, Stack

BASE = "http://upstream.invalid"
PARAMS: dict[str, Any] = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "ops"}]}


class _Metrics(ProxyMetrics):
    """Metrics that also tell the test when a client's departure was handled."""

    def __init__(self) -> None:
        super().__init__()
        self.gone = threading.Event()

    def disconnected(self, api: str) -> None:
        super().disconnected(api)
        self.gone.set()


#: The fake fixture: a proxy over a :class:`FakeUpstream`, and what it stores.
Fake = tuple[ProxyServer, FakeUpstream, MemoryStore, _Metrics]


@pytest.fixture
def fake() -> Iterator[Fake]:
    upstream, store, metrics = FakeUpstream(), MemoryStore(), _Metrics()
    config = ProxyConfig(
        port=0, anthropic_base_url=BASE, openai_base_url=BASE + "/v1", ledger=False, max_body=4096
    )
    with ProxyServer(config, store=store, transport=upstream, metrics=metrics) as proxy:
        yield proxy, upstream, store, metrics
    upstream.reset()  # releases any hold a failed test left


def test_healthz_and_metrics(stack: Stack, access_log: AccessLog) -> None:
    with sdk_client("anthropic", plain=True, api_key="k", base_url=stack.anthropic_url) as client:
        client.messages.create(**PARAMS)
        client.messages.create(**PARAMS)
    access_log.wait(2)  # both requests counted
    health = httpx2.get(stack.proxy.url + "/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    assert health.json()["store"] == "ok"
    text = httpx2.get(stack.proxy.url + "/metrics").text
    assert 'cachekit_proxy_requests_total{api="anthropic_messages",cache="hit",status="2xx"} 1.0' in text
    assert 'cachekit_proxy_requests_total{api="anthropic_messages",cache="miss",status="2xx"} 1.0' in text
    assert 'cachekit_proxy_first_byte_seconds_count{api="anthropic_messages",cache="hit"} 1.0' in text
    assert 'cachekit_calls_total{model="claude-sonnet-4-5",outcome="exact_hit"' in text  # the ledger's


def test_each_request_logs_one_structured_line_without_prompt_or_key(
    stack: Stack, access_log: AccessLog
) -> None:
    with sdk_client(
        "anthropic", plain=True, api_key="sk-logged-never", base_url=stack.anthropic_url
    ) as client:
        client.messages.create(**{**PARAMS, "messages": [{"role": "user", "content": "a private prompt"}]})
    (record,) = access_log.wait(1)
    line = orjson.loads(JSONFormatter().format(record))
    assert line["api"] == "anthropic_messages"
    assert line["status"] == 200
    assert line["cache"] == "miss"
    assert line["ms"] >= line["first_byte_ms"] > 0
    assert line["complete"] is True
    assert "private prompt" not in str(line)
    assert "sk-logged-never" not in str(line)


def test_a_body_over_the_cap_is_a_providers_413(fake: Fake) -> None:
    proxy = fake[0]
    big = {**PARAMS, "messages": [{"role": "user", "content": "x" * 5000}]}
    with (
        sdk_client("anthropic", plain=True, api_key="k", base_url=proxy.url) as client,
        pytest.raises(anthropic.APIStatusError) as refused,
    ):
        client.messages.create(**big)
    assert refused.value.status_code == 413
    assert refused.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    assert fake[1].calls == 0


def test_a_body_that_stalls_is_a_408() -> None:
    upstream = FakeUpstream()
    config = ProxyConfig(
        port=0, anthropic_base_url=BASE, openai_base_url=BASE, ledger=False, body_timeout=0.05
    )
    with (
        ProxyServer(config, store=MemoryStore(), transport=upstream) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port)) as sock,
    ):
        sock.sendall(b'POST /v1/messages HTTP/1.1\r\nHost: p\r\nContent-Length: 100\r\n\r\n{"model"')
        answer = b""
        while chunk := sock.recv(65536):  # the server answers, then closes
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408")
    assert upstream.calls == 0


def test_a_client_that_goes_away_cancels_the_upstream_stream_and_nothing_is_stored(fake: Fake) -> None:
    proxy, upstream, store, metrics = fake
    hold = upstream.hold_next_stream(after=2)
    with (
        httpx2.Client(base_url=proxy.url) as http,
        http.stream(
            "POST", "/v1/messages", json={**PARAMS, "stream": True}, headers={"x-api-key": "k"}
        ) as response,
    ):
        assert hold.reached(30)
        next(response.iter_raw())  # the first events arrived as they were sent (not buffered)
    # The client closed its connection mid-stream.
    assert metrics.gone.wait(30)
    assert hold.closed(30)  # the proxy closed the upstream stream
    assert len(store) == 0
    assert "cachekit_proxy_client_disconnects_total" in metrics.render()[0].decode()


def test_a_graceful_stop_lets_an_in_flight_stream_finish(fake: Fake) -> None:
    proxy, upstream, store, _ = fake
    hold = upstream.hold_next_stream(after=1)
    result: dict[str, Any] = {}
    # What the store held when the server closed the cache (its last step): a graceful stop gets
    # there only once the stream in flight has ended and been stored; a forced one at once.
    stored_at_close: list[int] = []
    transport = proxy.app.transport
    assert transport is not None
    close = transport.aclose

    async def closing() -> None:
        stored_at_close.append(len(store))
        await close()

    transport.aclose = closing  # type: ignore[method-assign]

    def ask() -> None:
        with (
            sdk_client("anthropic", plain=True, api_key="k", base_url=proxy.url) as client,
            client.messages.stream(**PARAMS) as events,
        ):
            result["text"] = events.get_final_text()

    asking = threading.Thread(target=ask)
    asking.start()
    assert hold.reached(30)
    stopping = threading.Thread(target=proxy.stop)
    stopping.start()
    assert proxy.draining.wait(30)  # no new connections; this one is waited for
    hold.release()
    asking.join()
    stopping.join()
    assert result["text"].startswith("Fake reply")
    assert len(store) == 1  # the stream ended complete, and was stored
    assert stored_at_close == [1]  # ...before the server closed the cache


# -- cachekit proxy, the command -------------------------------------------------------------------


def _start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "cachekit", "proxy", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert "listening on" in first, first + (process.stderr.read() if process.stderr else "")
    return process, first.split("listening on ")[1].split()[0]


def _close_pipes(process: subprocess.Popen[str]) -> None:
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


class HoldingBackend(RecordingBackend):
    """An upstream that keeps its next answer until released."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Event()
        self.release = threading.Event()

    def handle(self, method: str, path: str, headers: Any, body: bytes, *, host: str = "localhost") -> Any:
        if method == "POST" and not self.arrived.is_set():
            self.arrived.set()
            self.release.wait(60)
        return super().handle(method, path, headers, body, host=host)


def test_sigterm_lets_the_request_in_flight_finish_then_exits() -> None:
    from cachekit.local import LocalServer

    backend = HoldingBackend()
    with LocalServer(backend) as upstream:
        process, url = _start(
            "--anthropic-base-url",
            upstream.url,
            "--store",
            "memory://",
            env={"CACHEKIT_HOME": os.environ["CACHEKIT_HOME"]},
        )
        try:
            answer: dict[str, Any] = {}

            def ask() -> None:
                with sdk_client("anthropic", plain=True, api_key="k", base_url=url) as client:
                    answer["message"] = client.messages.create(**PARAMS)

            asking = threading.Thread(target=ask)
            asking.start()
            assert backend.arrived.wait(60)
            process.send_signal(signal.SIGTERM)
            assert process.stderr is not None
            for line in process.stderr:  # uvicorn says it is shutting down, and waits for the request
                if "Waiting for connections to close" in line:
                    break
            backend.release.set()
            asking.join()
            assert process.wait(60) == 0
        finally:
            backend.release.set()
            if process.poll() is None:
                process.kill()
                process.wait()
            _close_pipes(process)
    assert answer["message"].content[0].text.startswith("Scripted reply")


@pytest.fixture
def redis_url() -> Iterator[str]:
    from tests.redis_servers import RedisServer, redis7_binary

    with RedisServer(redis7_binary()) as server:  # a private one: no entry of another test's
        yield server.url


def test_several_instances_over_one_redis_share_the_cache(redis_url: str) -> None:
    upstream = FakeUpstream()
    config = ProxyConfig(port=0, anthropic_base_url=BASE, openai_base_url=BASE, store=redis_url, ledger=False)
    with ProxyServer(config, transport=upstream) as one, ProxyServer(config, transport=upstream) as two:
        with sdk_client("anthropic", plain=True, api_key="k", base_url=one.url) as first:
            assert first.messages.with_raw_response.create(**PARAMS).headers["x-cachekit-cache"] == "miss"
        with sdk_client("anthropic", plain=True, api_key="k", base_url=two.url) as second:
            assert second.messages.with_raw_response.create(**PARAMS).headers["x-cachekit-cache"] == "hit"
    assert upstream.calls == 1


def test_worker_processes_serve_and_share_one_redis(redis_url: str) -> None:
    from cachekit.local import LocalServer

    backend = RecordingBackend()
    with LocalServer(backend) as upstream:
        process, url = _start(
            "--anthropic-base-url", upstream.url, "--store", redis_url, "--workers", "2",
            env={"CACHEKIT_HOME": os.environ["CACHEKIT_HOME"]},
        )  # fmt: skip
        try:
            pids, outcomes = set(), []
            with sdk_client("anthropic", plain=True, api_key="k", base_url=url) as client:
                for _ in range(6):
                    # A new connection each time, so the kernel may hand it to either worker.
                    with httpx2.Client() as http:
                        raw = client.with_options(http_client=http).messages.with_raw_response.create(
                            **PARAMS
                        )
                    outcomes.append(raw.headers["x-cachekit-cache"])
                    pids.add(httpx2.get(url + "/healthz").json()["pid"])
            assert outcomes == ["miss"] + ["hit"] * 5
            assert len(backend.calls("/v1/messages")) == 1
            assert process.pid not in pids  # answered by the workers, not the supervisor
        finally:
            process.send_signal(signal.SIGTERM)
            status = process.wait(60)
            _close_pipes(process)
        assert status == 0


def test_serve_leaves_the_callers_sigterm_handler_and_logging_as_it_found_them() -> None:
    """``cachekit proxy`` run in a caller's own process (here: a port already taken, so it stops at
    once) restores the SIGTERM handler it set for its clean exit (a process forked later by the caller,
    a multiprocessing pool, must still stop on SIGTERM, as ``Pool.terminate`` expects) and the
    ``cachekit`` logger it pointed at standard error (the caller's handlers must still see records)."""
    import logging

    from cachekit.cli import main

    before = signal.getsignal(signal.SIGTERM)
    logger = logging.getLogger("cachekit")
    logged = (logger.level, logger.propagate, list(logger.handlers))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main(["proxy", "--port", str(port), "--store", "memory://"])
    assert status == 1  # the port is taken: one line on stderr, no server
    assert signal.getsignal(signal.SIGTERM) is before
    assert (logger.level, logger.propagate, list(logger.handlers)) == logged

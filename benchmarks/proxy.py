"""What ``cachekit proxy`` adds over calling the upstream directly, side by side with LiteLLM's proxy.

Three ways to one upstream, each its own process on loopback: the upstream itself (``cachekit serve``,
the scripted engine: instant answers), ``cachekit proxy`` in front of it (memory store) and, when a
LiteLLM install is given, LiteLLM's proxy in front of it with its response cache on (in-memory). The
client speaks OpenAI Chat Completions (the API both proxies serve) over keep-alive connections.

* miss latency: a request never seen before (p50/p99), the variants interleaved round by round so
  machine noise hits them alike; the proxies' figures minus the direct ones is what they add;
* hit latency: one request asked again (p50/p99; direct calls have no cache: the upstream's time);
* streaming: time to the first byte of a streamed miss;
* hit throughput: ``--clients`` concurrent clients asking the cached request, requests per second;
* CPU: the milliseconds of CPU each server process spends on one miss and on one hit (``--cpu``
  sequential requests of each, read from /proc on Linux): what the added latency would be on an
  idle machine, whatever the load of this one.

LiteLLM goes in a separate, throwaway virtual environment, never the project's::

    python -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'
    python benchmarks/proxy.py [--rounds 300] [--clients 64] [--hits 4000] \
        [--litellm /tmp/litellm-venv/bin/litellm]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import orjson

MODEL = "gpt-4o-mini"
SYSTEM = "You are a careful assistant. " * 40  # a realistic prefix (~1k tokens): bodies are not tiny


#: Each server's process id, by base URL (for its CPU time).
PIDS: dict[str, int] = {}


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_per_request(http: httpx2.Client, url: str, bodies: list[bytes]) -> float:
    """Milliseconds of the server's CPU per request, over ``bodies`` sent one after another."""
    before = _cpu_seconds(PIDS[url])
    for body in bodies:
        _timed_call(http, url, body)
    return (_cpu_seconds(PIDS[url]) - before) * 1000 / len(bodies)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _process(args: list[str], port: int, ready: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``args`` until the block ends; yields its base URL once ``ready`` (a path) answers."""
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}
    )
    url = f"http://127.0.0.1:{port}"
    PIDS[url] = process.pid
    try:
        deadline = time.monotonic() + 120
        while True:  # a benchmark may poll: nothing here is a test
            if process.poll() is not None:
                raise SystemExit(f"{args[0]} exited with {process.returncode}: {' '.join(args)}")
            try:
                if httpx2.get(url + ready, timeout=2).status_code < 500:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{' '.join(args)} did not start")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _body(text: str, stream: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 32,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
    }
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


#: The key every variant is sent: LiteLLM's proxy takes it as its master key (it refuses to start
#: without one), the upstream and cachekit take it as the API key.
KEY = "sk-bench-" + "0123456789abcdef" * 4
HEADERS = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}


def _timed_call(http: httpx2.Client, url: str, body: bytes) -> float:
    started = time.perf_counter()
    response = http.post(url + "/v1/chat/completions", content=body, headers=HEADERS)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"{url}: {response.status_code} {response.text[:300]}")
    return elapsed


def _first_byte(http: httpx2.Client, url: str, body: bytes) -> float:
    started = time.perf_counter()
    with http.stream("POST", url + "/v1/chat/completions", content=body, headers=HEADERS) as response:
        if response.status_code != 200:
            raise SystemExit(f"{url}: {response.status_code} {response.read()[:300]!r}")
        chunks = response.iter_raw()
        next(chunks)
        first = time.perf_counter() - started
        for _ in chunks:
            pass
    return first


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def _throughput(url: str, clients: int, total: int) -> float:
    body = _body("the cached question")
    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx2.AsyncClient(limits=limits, timeout=60) as http:
        first = await http.post(url + "/v1/chat/completions", content=body, headers=HEADERS)
        if first.status_code != 200:
            raise SystemExit(f"{url}: {first.status_code} {first.text[:300]}")
        remaining = [total]

        async def client() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                answer = await http.post(url + "/v1/chat/completions", content=body, headers=HEADERS)
                if answer.status_code != 200:
                    raise SystemExit(f"{url}: {answer.status_code}")

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return total / (time.perf_counter() - started)


def _litellm(stack: ExitStack, binary: str, upstream: str, work: Path) -> str:
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: sk-bench\n"
        "litellm_settings:\n"
        "  cache: true\n"
        "  cache_params:\n"
        "    type: local\n"
        "  telemetry: false\n"
    )
    port = _free_port()
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": KEY}
    args = [binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    return stack.enter_context(_process(args, port, "/health/liveliness", env))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--hits", type=int, default=4000, help="requests in the throughput run")
    parser.add_argument("--cpu", type=int, default=300, help="requests of each kind in the CPU run")
    parser.add_argument("--litellm", default=None, help="the litellm command of a separate install")
    args = parser.parse_args()

    with ExitStack() as stack, tempfile.TemporaryDirectory() as work:
        home = {"CACHEKIT_HOME": work}
        port = _free_port()
        upstream = stack.enter_context(
            _process(
                [sys.executable, "-m", "cachekit", "serve", "--port", str(port)], port, "/v1/models", home
            )
        )
        port = _free_port()
        proxy_args = [sys.executable, "-m", "cachekit", "proxy", "--port", str(port), "--store", "memory://"]
        proxy_args += ["--anthropic-base-url", upstream, "--openai-base-url", upstream + "/v1"]
        variants = {
            "direct": upstream,
            "cachekit": stack.enter_context(_process(proxy_args, port, "/healthz", home)),
        }
        if args.litellm:
            variants["litellm"] = _litellm(stack, args.litellm, upstream, Path(work))

        miss: dict[str, list[float]] = {name: [] for name in variants}
        hit: dict[str, list[float]] = {name: [] for name in variants}
        ttfb: dict[str, list[float]] = {name: [] for name in variants}
        clients = {name: stack.enter_context(httpx2.Client(timeout=60)) for name in variants}
        for name, url in variants.items():  # warm up: connections, first-request work, the cached entry
            for i in range(20):
                _timed_call(clients[name], url, _body(f"warm {name} {i}"))
            _timed_call(clients[name], url, _body("the cached question"))
        for round_ in range(args.rounds):
            for name, url in variants.items():
                http = clients[name]
                miss[name].append(_timed_call(http, url, _body(f"miss {name} {round_}")))
                hit[name].append(_timed_call(http, url, _body("the cached question")))
                ttfb[name].append(_first_byte(http, url, _body(f"stream {name} {round_}", stream=True)))

        cpu: dict[str, tuple[float, float]] = {}
        if Path("/proc/self/stat").exists():
            for name, url in variants.items():
                misses = [_body(f"cpu {name} {i}") for i in range(args.cpu)]
                hits = [_body("the cached question")] * args.cpu
                cpu[name] = (
                    _cpu_per_request(clients[name], url, misses),
                    _cpu_per_request(clients[name], url, hits),
                )

        rates = {
            name: asyncio.run(_throughput(url, args.clients, args.hits)) for name, url in variants.items()
        }

    print(f"{args.rounds} rounds; latencies in ms (p50 / p99); added = proxy p50 - direct p50")
    print(f"{'':10} {'miss':>16} {'added':>7} {'hit':>16} {'stream TTFB':>16} {'added':>7} {'hit req/s':>10}")
    for name in variants:
        added_miss = _pct(miss[name], 0.5) - _pct(miss["direct"], 0.5)
        added_ttfb = _pct(ttfb[name], 0.5) - _pct(ttfb["direct"], 0.5)
        print(
            f"{name:10} {_pct(miss[name], 0.5):7.2f} / {_pct(miss[name], 0.99):6.2f} {added_miss:7.2f}"
            f" {_pct(hit[name], 0.5):7.2f} / {_pct(hit[name], 0.99):6.2f}"
            f" {_pct(ttfb[name], 0.5):7.2f} / {_pct(ttfb[name], 0.99):6.2f} {added_ttfb:7.2f}"
            f" {rates[name]:10.0f}"
        )
    for name, (per_miss, per_hit) in cpu.items():
        print(f"{name:10} server CPU per request: miss {per_miss:.2f} ms, hit {per_hit:.2f} ms")
    if "litellm" in variants:
        print(
            f"cachekit / litellm: hit throughput x{rates['cachekit'] / rates['litellm']:.2f}, "
            f"hit p50 x{_pct(hit['litellm'], 0.5) / _pct(hit['cachekit'], 0.5):.2f} faster"
        )


if __name__ == "__main__":
    main()

"""The Redis store against memory and SQLite, and what a call pays while Redis is down.

1. Store hits: ``get`` of a stored 2 KB response record, memory vs SQLite vs Redis (one server) vs a
   3-master Redis Cluster, interleaved round by round: median and p99 in microseconds.
2. Throughput: hits per second from 8 threads in one process, for each store, side by side.
3. Whole calls: a cached call through the transport (httpx2 client, stand-in upstream) per store.
4. Redis down: the added latency per call (versus the same client with no cache) while Redis is
   (a) refusing connections (killed) and (b) silent (``DEBUG SLEEP``: connects, never answers), split
   into the calls made before the circuit breaker opened and after.

Starts its own Redis servers on loopback (Redis 7 from PATH or ``$CACHEKIT_REDIS7_SERVER``).

    python benchmarks/redis_store.py [--rounds 2000] [--seconds 2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.redis_servers

import cachekit
from cachekit.stores import MemoryStore, SQLiteStore, record
from cachekit.stores.redis import RedisStore
from cachekit.testing import FakeUpstream
from tests.redis_servers import RedisCluster3, RedisServer, redis7_binary

URL = "https://api.openai.com/v1/chat/completions"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(name: str, values: list[float], unit: str = "us", base: float | None = None) -> str:
    med = statistics.median(values)
    ratio = f"  {med / base:5.2f}x" if base else ""
    return f"  {name:<24} median {med:9.1f} {unit}   p99 {pct(values, 0.99):9.1f} {unit}{ratio}"


def body(question: str) -> dict[str, Any]:
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]}


def store_hits(stores: dict[str, Any], rounds: int) -> None:
    value = record.encode(
        record.CachedResponse(200, (("content-type", "application/json"),), b"x" * 2048, 0.0)
    )
    keys = [f"ck3:bench:shared:{i:064d}" for i in range(64)]
    for store in stores.values():
        for key in keys:
            store.set(key, value, ttl=3600)
    times: dict[str, list[float]] = {name: [] for name in stores}
    for i in range(rounds):
        key = keys[i % len(keys)]
        for name, store in stores.items():
            start = time.perf_counter()
            got = store.get(key)
            times[name].append((time.perf_counter() - start) * 1e6)
            assert got == value
    print(f"1. store get of a 2 KB record (hit), {rounds} rounds, interleaved")
    base = statistics.median(times["memory"])
    for name, values in times.items():
        print(row(name, values, base=base))


def throughput(stores: dict[str, Any], seconds: float, threads: int = 8) -> None:
    key = "ck3:bench:shared:" + "0" * 64
    print(f"2. hits per second, {threads} threads, {seconds:g} s each (one store at a time, in turn)")
    for name, store in stores.items():
        counts = [0] * threads
        stop = time.monotonic() + seconds

        def run(t: int, store: Any = store, stop: float = stop, counts: list[int] = counts) -> None:
            n = 0
            while time.monotonic() < stop:
                store.get(key)
                n += 1
            counts[t] = n

        workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        print(f"  {name:<24} {sum(counts) / seconds:10.0f} hits/s")


def whole_calls(urls: dict[str, Any], rounds: int) -> None:
    clients: dict[str, httpx2.Client] = {}
    for name, store in urls.items():
        config = cachekit.CacheConfig(store=store, ledger=False, namespace="bench-calls")
        clients[name] = httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config))
    raw = httpx2.Client(transport=FakeUpstream())
    payloads = [body(f"question {i}") for i in range(32)]
    for client in clients.values():
        for p in payloads:
            client.post(URL, json=p)
    times: dict[str, list[float]] = {"no cache (upstream)": []} | {name: [] for name in clients}
    for i in range(rounds):
        p = payloads[i % len(payloads)]
        start = time.perf_counter()
        raw.post(URL, json=p)
        times["no cache (upstream)"].append((time.perf_counter() - start) * 1e6)
        for name, client in clients.items():
            start = time.perf_counter()
            r = client.post(URL, json=p)
            times[name].append((time.perf_counter() - start) * 1e6)
            assert r.headers["x-cachekit-cache"] == "hit"
    print(f"3. whole cached call through the transport (hit), {rounds} rounds, interleaved")
    base = statistics.median(times["no cache (upstream)"])
    for name, values in times.items():
        print(row(name, values, base=base))
    for client in clients.values():
        client.close()


def down(rounds: int) -> None:
    print("4. added latency per call while Redis is down (vs the same call with no cache)")
    for fault in ("killed (connection refused)", "silent (DEBUG SLEEP)"):
        server = RedisServer(redis7_binary()).start()
        store = RedisStore(server.url)
        config = cachekit.CacheConfig(store=store, ledger=False, breaker_cooldown=30.0)
        cache = cachekit.Cache(config)
        client = httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=cache))
        raw = httpx2.Client(transport=FakeUpstream())
        client.post(URL, json=body("warm"))  # the secret is read, connections are open
        if fault.startswith("killed"):
            server.stop(kill=True)
            sleeper: threading.Thread | None = None
        else:
            sleeper = server.debug_sleep(30)
        before: list[float] = []
        after: list[float] = []
        for i in range(rounds):
            p = body(f"down {i}")
            start = time.perf_counter()
            raw.post(URL, json=p)
            plain = time.perf_counter() - start
            is_open = cache.pipeline.breaker.state == "open"
            start = time.perf_counter()
            r = client.post(URL, json=p)
            added = (time.perf_counter() - start - plain) * 1e3
            assert r.status_code == 200
            (after if is_open else before).append(added)
        print(f"  {fault}: {len(before)} calls before the breaker opened, {len(after)} after")
        print(row("before it opened", before, unit="ms"))
        print(row("after it opened", after, unit="ms"))
        client.close()
        raw.close()
        store.close()
        server.cleanup()
        if sleeper is not None:
            sleeper.join(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the down phase logs a warning per failure, by design
    server = RedisServer(redis7_binary()).start()
    cluster = RedisCluster3(redis7_binary()).start()
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Any] = {
            "memory": MemoryStore(),
            "sqlite": SQLiteStore(Path(tmp) / "bench.db"),
            "redis": RedisStore(server.url),
            "redis cluster (3)": RedisStore(cluster.url),
        }
        try:
            store_hits(stores, args.rounds)
            throughput(stores, args.seconds)
            whole_calls(stores, args.rounds // 2)
            down(max(args.rounds // 20, 40))
        finally:
            for store in stores.values():
                store.close()
            server.cleanup()
            cluster.cleanup()


if __name__ == "__main__":
    main()

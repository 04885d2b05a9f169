"""Load: 8 processes x 50 threads against one real Redis, mixed hits and misses.

Every call must succeed, every answer must be the answer to its own request, and the hit rate must be
exactly what the request mix implies: half the requests pick from a set of questions stored before the
run (each must be a hit), half ask a question nobody asked before (each must be a miss).

The run is a fixed amount of work (each thread makes ``CALLS`` calls, all threads of a process starting
together), not a fixed time: what it checks does not depend on how fast the machine is, and a slow
machine takes longer rather than checking less. ``CACHEKIT_LOAD_CALLS`` makes a longer soak.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
from typing import Any

import httpx2
import pytest

import cachekit
from cachekit.stores.redis import RedisStore
from cachekit.testing import FakeUpstream
from tests.redis_servers import RedisServer, redis7_binary

pytestmark = pytest.mark.slow

PROCESSES = 8
THREADS = 50
#: Calls per thread: 8 x 50 x 10 = 4,000 calls, half of them hits on a shared hot set.
CALLS = int(os.environ.get("CACHEKIT_LOAD_CALLS", "10"))
HOT = 200
URL = "https://api.openai.com/v1/chat/completions"
NAMESPACE = "load"


def _body(question: str) -> dict[str, Any]:
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]}


#: The store's timeout for this test. Eight busy processes on a 2-core CI machine starve the Redis
#: server of CPU, so replies can take longer than the default 50 ms; those calls would correctly go
#: upstream (and open the breaker), but this test checks concurrency, not the latency budget, so it
#: asks for an exact hit rate and gives Redis room. The fault tests cover the timeout path.
STORE_TIMEOUT = 2.0


def _client(url: str) -> tuple[httpx2.Client, RedisStore]:
    store = RedisStore(url, timeout=STORE_TIMEOUT)
    config = cachekit.CacheConfig(store=store, ledger=False, namespace=NAMESPACE)
    return httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config)), store


def _worker(url: str, proc: int, calls: int, results: Any) -> None:
    """One process: THREADS threads making ``calls`` calls each; puts its tallies on ``results``."""
    client, store = _client(url)
    tally = {"calls": 0, "failed": 0, "wrong": 0, "hot": 0, "hits": 0, "unexpected": 0}
    lock = threading.Lock()
    start = threading.Barrier(THREADS)
    failures: list[str] = []

    def run(thread: int) -> None:
        rng = random.Random(proc * 1000 + thread)
        local = dict.fromkeys(tally, 0)
        start.wait()
        for n in range(calls):
            hot = rng.random() < 0.5
            question = f"hot {rng.randrange(HOT)}" if hot else f"fresh {proc}-{thread}-{n}"
            local["calls"] += 1
            local["hot"] += hot
            try:
                response = client.post(URL, json=_body(question))
                text = response.json()["choices"][0]["message"]["content"]
            except Exception as exc:
                local["failed"] += 1
                if len(failures) < 5:
                    failures.append(f"{type(exc).__name__}: {exc}")
                continue
            if response.status_code != 200:
                local["failed"] += 1
                continue
            if not text.endswith("to: " + question):
                local["wrong"] += 1
            outcome = response.headers["x-cachekit-cache"]
            local["hits"] += outcome == "hit"
            local["unexpected"] += outcome != ("hit" if hot else "miss")
        with lock:
            for name, value in local.items():
                tally[name] += value

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = client._transport.stats  # type: ignore[attr-defined]
    tally["store_errors"] = stats.store_errors
    tally["store_skips"] = stats.store_skips
    client.close()
    store.close()
    results.put((tally, failures))


def test_eight_processes_of_fifty_threads_on_one_redis() -> None:
    server = RedisServer(redis7_binary(), extra_args=("--maxclients", "2000")).start()
    try:
        client, store = _client(server.url)
        with client:
            for i in range(HOT):  # the hot set, stored before the run
                assert client.post(URL, json=_body(f"hot {i}")).headers["x-cachekit-cache"] == "miss"
        store.close()
        context = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited sockets
        results = context.Queue()
        procs = [
            context.Process(target=_worker, args=(server.url, p, CALLS, results)) for p in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        gathered = [results.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    finally:
        server.cleanup()
    total = {name: sum(t[name] for t, _ in gathered) for name in gathered[0][0]}
    failures = [f for _, fs in gathered for f in fs]
    print(f"\nload: {total}")
    assert total["calls"] == PROCESSES * THREADS * CALLS  # every thread made every call
    assert total["failed"] == 0, failures
    assert total["wrong"] == 0
    assert total["store_errors"] == 0
    # The hit rate is exactly the share of hot requests: every hot one hit, every fresh one missed.
    assert total["unexpected"] == 0
    assert total["hits"] == total["hot"]

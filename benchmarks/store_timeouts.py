"""How long a failing store takes to fail: the figures behind "a broken cache costs a timeout, not a hang".

The tests check what happens when a store fails (a miss, a ``StoreError``, one attempt and no retry);
how long it takes is a property of the machine, so it is measured here:

1. SQLite: a write while another connection holds the write lock (the default 50 ms busy timeout).
2. Redis unreachable (nothing listens): each store operation, and ``RedisVectorIndex.search``.
3. Redis stalled (``DEBUG SLEEP``): a ``get`` with the store's 50 ms timeout, on one server and on one
   node of a three-master cluster.
4. ``cachekit.ops.health`` (what ``cachekit health`` runs) on an unreachable Redis.

Prints the median and the slowest of each, in milliseconds. Starts its own Redis servers on loopback
(``$CACHEKIT_REDIS7_SERVER``, else ``redis-server`` from PATH).

    python benchmarks/store_timeouts.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.redis_servers

from cachekit.errors import StoreError
from cachekit.ops import health
from cachekit.stores import SQLiteStore
from cachekit.stores.redis import RedisStore
from tests.redis_servers import RedisCluster3, RedisServer, escape_glob, free_port, redis7_binary

TIMEOUT = 0.05  # the Redis store's default


def failing(fn: Callable[[], object]) -> float:
    """Milliseconds until ``fn`` raised :class:`StoreError` (it must)."""
    start = time.perf_counter()
    try:
        fn()
    except StoreError:
        return (time.perf_counter() - start) * 1000
    raise AssertionError("the call did not fail")


def report(name: str, samples: list[float]) -> None:
    print(f"  {name:<38} median {statistics.median(samples):8.1f} ms   slowest {max(samples):8.1f} ms")


def sqlite_locked(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.db"
        with SQLiteStore(path) as store:
            store.set("k", b"v")
            blocker = sqlite3.connect(path, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            try:
                report(
                    "sqlite: set on a locked file",
                    [failing(lambda: store.set("k2", b"v")) for _ in range(rounds)],
                )
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()


def unreachable(rounds: int) -> None:
    from cachekit.semantic.index_redis import RedisVectorIndex

    url = f"redis://127.0.0.1:{free_port()}/0"
    store = RedisStore(url, timeout=TIMEOUT)
    uses: dict[str, Callable[[], object]] = {
        "get": lambda: store.get("k"),
        "set": lambda: store.set("k", b"v", ttl=5),
        "delete": lambda: store.delete("k"),
        "aget": lambda: asyncio.run(store.aget("k")),
        "entries": lambda: list(store.entries()),
    }
    for name, use in uses.items():
        report(f"redis unreachable: {name}", [failing(use) for _ in range(rounds)])
    store.close()
    index = RedisVectorIndex(url, prefix="bench:")
    row = [1.0] + [0.0] * 383
    report(
        "redis unreachable: vector index search",
        [failing(lambda: index.search("p", row, k=1, min_similarity=0.0)) for _ in range(rounds)],
    )
    index.close()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        result = health(RedisStore(url, timeout=TIMEOUT))
        assert not result.ok
        samples.append((time.perf_counter() - start) * 1000)
    report("health on an unreachable redis", samples)


def owner_of(target: RedisServer | RedisCluster3, prefix: str) -> RedisServer:
    """The server (or cluster node) holding the keys under ``prefix``."""
    nodes = target.nodes if isinstance(target, RedisCluster3) else [target]
    for node in nodes:
        client = node.client()
        try:
            if any(True for _ in client.scan_iter(match=escape_glob(prefix) + "*")):
                return node
        finally:
            client.close()
    raise AssertionError("no node holds the key")


def stalled(target: RedisServer | RedisCluster3, name: str, rounds: int) -> None:
    prefix = "bench-stall:"
    store = RedisStore(target.url, timeout=TIMEOUT, prefix=prefix)
    store.set("k", b"v")
    server = owner_of(target, prefix)
    samples = []
    for _ in range(rounds):
        sleeper = server.debug_sleep(0.3)
        samples.append(failing(lambda: store.get("k")))
        sleeper.join()
        for _ in range(3):  # let the client reconnect (a cluster client refreshes its node map)
            try:
                store.get("k")
                break
            except StoreError:
                continue
    report(f"{name}: get", samples)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # every failure is logged by the store; the figures are the point
    print("time until a failing store call fails:")
    sqlite_locked(args.rounds)
    unreachable(args.rounds)
    with RedisServer(redis7_binary()) as server:
        stalled(server, "redis stalled (DEBUG SLEEP)", args.rounds)
    cluster = RedisCluster3(redis7_binary()).start()
    try:
        stalled(cluster, "redis cluster, one node stalled", max(3, args.rounds // 4))
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    main()

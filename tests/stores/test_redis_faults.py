"""Fault injection with real Redis servers: killed, restarted, paused, asleep, unreachable.

Every user call must still succeed with its own upstream answer; the breaker must open while Redis is
down and close once it is back; nothing half-written may ever be served. The checks are structural
(how many calls paid a store timeout, what the breaker did), never wall-clock bounds: the latency of
these phases is measured in ``benchmarks/redis_store.py``. The breaker runs on a fake clock, so its
cooldown passes when a test says so, and each phase waits for an event (Redis answering again, writers
having written), never for a fixed time.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

import cachekit
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.stores import record
from cachekit.stores.redis import RedisStore
from cachekit.testing import FakeUpstream
from tests.redis_servers import RedisCluster3, RedisServer, free_port, redis7_binary

pytestmark = pytest.mark.slow

URL = "https://api.openai.com/v1/chat/completions"
TIMEOUT = 0.05  # the store's default
THRESHOLD = 3  # the breaker's default: failures in a row that open it
MAX_COOLDOWN = 30.0  # the breaker's default: the longest cooldown after failed probes


def state(breaker: CircuitBreaker) -> str:
    """The breaker's state, read anew (an assertion on the property would narrow its type for good)."""
    return breaker.state


class FakeClock:
    """The breaker's clock: it moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _breaker(clock: FakeClock, threshold: int = THRESHOLD) -> CircuitBreaker:
    return CircuitBreaker(failure_threshold=threshold, clock=clock, max_cooldown=MAX_COOLDOWN)


def _body(question: str) -> dict[str, Any]:
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]}


class World:
    """A sync client through cachekit on a Redis store, with a stand-in upstream and a fake-clock breaker."""

    def __init__(self, url: str, *, breaker_threshold: int = THRESHOLD) -> None:
        self.upstream = FakeUpstream()
        self.store = RedisStore(url, timeout=TIMEOUT)
        self.cache = cachekit.Cache(cachekit.CacheConfig(store=self.store, ledger=False))
        self.clock = FakeClock()
        self.cache.pipeline.breaker = _breaker(self.clock, breaker_threshold)
        self.client = httpx2.Client(transport=cachekit.CachingTransport(self.upstream, cache=self.cache))

    def ask(self, question: str) -> str:
        """One call; checks it succeeded with the answer to *this* question; returns the cache outcome."""
        response = self.client.post(URL, json=_body(question))
        assert response.status_code == 200, response.text
        text = response.json()["choices"][0]["message"]["content"]
        assert text.endswith("to: " + question), (question, text)
        return str(response.headers["x-cachekit-cache"])

    def close(self) -> None:
        self.client.close()
        self.store.close()


@pytest.fixture
def server() -> Iterator[RedisServer]:
    # Its own server (these tests kill it), persisted with an append-only file so a restart keeps data.
    srv = RedisServer(redis7_binary(), appendonly=True).start()
    yield srv
    srv.cleanup()


def _cooldowns(breaker: CircuitBreaker, clock: FakeClock) -> Iterator[None]:
    """Let the breaker's cooldown pass, once per iteration, until it has closed; the caller probes
    (makes one call) in each iteration, which the breaker lets try the store.

    A probe can still fail on a connection the restart broke; the next cooldown (at most MAX_COOLDOWN)
    gives it another try, a bounded number of times.
    """
    for _ in range(5):
        if state(breaker) == "closed":
            return
        clock.now += MAX_COOLDOWN
        yield
    assert state(breaker) == "closed", "the breaker never closed after Redis came back"


def _wait_closed(world: World, question: str) -> None:
    for _ in _cooldowns(world.cache.pipeline.breaker, world.clock):
        world.ask(question)
    assert state(world.cache.pipeline.breaker) == "closed"


def test_killed_restarted_and_back(server: RedisServer) -> None:
    world = World(server.url)
    try:
        questions = [f"warm question {i}" for i in range(20)]
        assert [world.ask(q) for q in questions] == ["miss"] * 20
        assert [world.ask(q) for q in questions] == ["hit"] * 20

        server.stop(kill=True)
        outcomes = [world.ask(q) for q in questions]
        assert set(outcomes) == {"miss"}  # answered upstream, correctly
        breaker = world.cache.pipeline.breaker
        assert state(breaker) == "open"
        stats = world.cache.stats
        assert stats.store_errors == 3  # then the breaker stopped paying the timeout
        assert stats.store_skips >= 17

        server.start()  # same port; the append-only file brings the entries back
        _wait_closed(world, "probe after restart")
        assert [world.ask(q) for q in questions] == ["hit"] * 20
        assert breaker.stats().opened == 1
    finally:
        world.close()


@pytest.mark.parametrize("fault", ["client-pause", "debug-sleep"])
def test_a_paused_or_sleeping_redis_costs_a_bounded_wait(server: RedisServer, fault: str) -> None:
    world = World(server.url)
    try:
        assert world.ask("before") == "miss"
        if fault == "client-pause":
            server.pause(1.5)
            sleeper = None
        else:
            sleeper = server.debug_sleep(1.5)
        stats = world.cache.stats
        errors, skips = stats.store_errors, stats.store_skips
        outcomes = [world.ask(f"during {i}") for i in range(10)]
        assert set(outcomes) == {"miss"}
        assert state(world.cache.pipeline.breaker) == "open"
        # Three calls waited (one store timeout each), then the breaker opened: the rest skipped the store.
        assert world.cache.stats.store_errors - errors == THRESHOLD
        assert world.cache.stats.store_skips - skips >= 10 - THRESHOLD
        if sleeper is not None:
            sleeper.join(30)
        server.command("PING", timeout=30)  # answered once the pause (or sleep) is over
        _wait_closed(world, "probe")
        assert world.ask("before") == "hit"
    finally:
        world.close()


def test_unreachable_from_the_start() -> None:
    port = free_port()  # nothing listens there
    world = World(f"redis://127.0.0.1:{port}/0")
    try:
        outcomes = [world.ask(f"q{i}") for i in range(10)]
        # The store's secret could not be read, so nothing is keyed: every call bypasses the cache.
        assert set(outcomes) == {"bypass"}
        assert world.upstream.calls == 10
        assert state(world.cache.pipeline.breaker) == "open"
        assert world.cache.stats.store_errors == 3
    finally:
        world.close()


def test_a_black_hole_that_accepts_and_never_answers() -> None:
    # A listener whose backlog accepts connections but never reads: connects succeed, reads time out.
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    try:
        world = World(f"redis://127.0.0.1:{hole.getsockname()[1]}/0")
        try:
            assert {world.ask(f"q{i}") for i in range(6)} == {"bypass"}
            assert state(world.cache.pipeline.breaker) == "open"
            assert world.cache.stats.store_errors == THRESHOLD  # a timeout each, no hang, no retry
        finally:
            world.close()
    finally:
        hole.close()


class Tally:
    """Counts the writers' successes and failures; the test waits for counts, never for time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._counts = {"ok": 0, "failed": 0}

    def add(self, what: str) -> None:
        with self._cond:
            self._counts[what] += 1
            self._cond.notify_all()

    def count(self, what: str) -> int:
        with self._cond:
            return self._counts[what]

    def wait_for(self, what: str, at_least: int, timeout: float = 60.0) -> None:
        """Block until ``what`` has happened ``at_least`` times in all."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._counts[what] >= at_least, timeout)
            assert done, (what, at_least, self._counts)


def test_killed_mid_write_never_serves_a_half_entry(server: RedisServer) -> None:
    """Writers store large entries (and clients make calls) while Redis is killed with SIGKILL and
    restarted from its append-only file; afterwards every stored value must decode whole, hold the
    body written under its key, and every call must get its own answer."""
    world = World(server.url)
    stop, killed, restarted = threading.Event(), threading.Event(), threading.Event()
    tally = Tally()
    errors: list[BaseException] = []
    asked: list[str] = []

    def body_for(key: str) -> bytes:
        return (key.encode() + b"|") * (200_000 // (len(key) + 1))  # ~200 KB: a kill lands mid-write

    def writer(t: int) -> None:
        n = 0
        while not stop.is_set():
            key = f"ck3:faults:shared:{t}-{n}"
            value = record.encode(record.CachedResponse(200, (), body_for(key), time.time()))
            try:
                world.store.set(key, value, ttl=600)
                tally.add("ok")
            except cachekit.StoreError:
                tally.add("failed")  # Redis is down: a failed write is expected, a half write is not
                if killed.is_set():
                    restarted.wait(60)  # no point retrying before the restart
            n += 1

    def caller(t: int) -> None:
        n = 0
        while not stop.is_set():
            q = f"caller {t} question {n}"
            try:
                world.ask(q)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return
            asked.append(q)
            n += 1

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    threads += [threading.Thread(target=caller, args=(t,)) for t in range(2)]
    try:
        for t in threads:
            t.start()
        tally.wait_for("ok", 6)  # the writers are writing
        failed = tally.count("failed")
        killed.set()
        server.stop(kill=True)
        tally.wait_for("failed", failed + 3)  # each writer has run into the kill
        ok = tally.count("ok")
        server.start()
        restarted.set()
        tally.wait_for("ok", ok + 6)  # and they write again
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, errors[:3]
        entries = list(world.store.entries(""))
        written = [info for info in entries if info.key.startswith("ck3:faults:")]
        assert written, "nothing was stored before or after the kill"
        for info in written:
            raw = world.store.get(info.key)
            assert raw is not None
            stored = record.decode(raw)  # raises CorruptEntryError on half an entry
            assert stored.body == body_for(info.key)
        _wait_closed(world, "probe")
        for q in asked[-50:]:
            world.ask(q)  # a hit or a miss, but always its own answer (checked in ask)
    finally:
        stop.set()
        restarted.set()
        world.close()


@pytest.mark.anyio
async def test_async_clients_survive_a_kill(server: RedisServer) -> None:
    upstream = FakeUpstream()
    store = RedisStore(server.url, timeout=TIMEOUT)
    cache = cachekit.Cache(cachekit.CacheConfig(store=store, ledger=False))
    clock = FakeClock()
    breaker = cache.pipeline.breaker = _breaker(clock)
    async with httpx2.AsyncClient(transport=cachekit.AsyncCachingTransport(upstream, cache=cache)) as client:

        async def ask(q: str) -> str:
            r = await client.post(URL, json=_body(q))
            assert r.status_code == 200
            assert r.json()["choices"][0]["message"]["content"].endswith("to: " + q)
            return str(r.headers["x-cachekit-cache"])

        assert await ask("a") == "miss"
        assert await ask("a") == "hit"
        server.stop(kill=True)
        assert {await ask(f"down {i}") for i in range(8)} == {"miss"}
        assert state(breaker) == "open"
        server.start()
        for _ in _cooldowns(breaker, clock):
            await ask("probe")
        assert state(breaker) == "closed"
        assert await ask("a") == "hit"
    await store.aclose()


def test_a_cluster_master_killed() -> None:
    """With one of three masters down, keys on the other two keep hitting; the rest go upstream."""
    cluster = RedisCluster3(
        redis7_binary(), node_timeout_ms=1000, extra_args=("--cluster-require-full-coverage", "no")
    ).start()
    try:
        world = World(cluster.url, breaker_threshold=1_000_000)  # keep asking: measure per-key outcomes
        try:
            questions = [f"cluster question {i}" for i in range(30)]
            assert {world.ask(q) for q in questions} == {"miss"}
            assert {world.ask(q) for q in questions} == {"hit"}
            cluster.nodes[0].stop(kill=True)
            outcomes = [world.ask(q) for q in questions]
            assert "hit" in outcomes  # the surviving masters still serve their slots
            assert "miss" in outcomes  # the dead master's keys go upstream, answered correctly
        finally:
            world.close()
    finally:
        cluster.cleanup()

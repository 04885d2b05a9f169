"""The circuit breaker on its own (a fake clock, no I/O), then wired into the pipeline."""

from __future__ import annotations

import threading

import httpx2
import pytest

import cachekit
from cachekit.errors import CacheUnavailableError, ConfigError, StoreError, StoreUnavailableError
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.requests import openai_chat as _openai_chat


def state(breaker: CircuitBreaker) -> str:
    """The breaker's state, read anew (an assertion on the property would narrow its type for good)."""
    return breaker.state


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breaker(
    clock: Clock, threshold: int = 3, cooldown: float = 1.0, max_cooldown: float = 8.0
) -> CircuitBreaker:
    return CircuitBreaker(
        failure_threshold=threshold, cooldown=cooldown, max_cooldown=max_cooldown, clock=clock
    )


def test_opens_after_threshold_consecutive_failures() -> None:
    clock = Clock()
    b = _breaker(clock)
    for _ in range(2):
        assert b.allow()
        b.failure()
    assert state(b) == "closed"
    assert b.allow()
    b.failure()
    assert state(b) == "open"
    assert not b.allow()
    assert not b.allow()
    stats = b.stats()
    assert (stats.opened, stats.rejected) == (1, 2)


def test_a_success_resets_the_count() -> None:
    b = _breaker(Clock())
    b.failure()
    b.failure()
    b.success()
    b.failure()
    b.failure()
    assert state(b) == "closed"
    assert b.stats().consecutive_failures == 2


def test_half_open_lets_one_probe_through_and_its_success_closes() -> None:
    clock = Clock()
    b = _breaker(clock)
    for _ in range(3):
        b.failure()
    clock.now += 0.999
    assert not b.allow()
    clock.now += 0.001
    assert state(b) == "half-open"
    assert b.allow()  # the probe
    assert not b.allow()  # only one at a time
    b.success()
    assert state(b) == "closed"
    assert b.allow()
    assert b.allow()


def test_a_failed_probe_reopens_with_a_doubled_cooldown_up_to_the_cap() -> None:
    clock = Clock()
    b = _breaker(clock, cooldown=1.0, max_cooldown=3.0)
    for _ in range(3):
        b.failure()
    expected = [2.0, 3.0, 3.0]
    waited = 1.0
    for cooldown in expected:
        clock.now += waited
        assert b.allow()
        b.failure()
        assert state(b) == "open"
        assert b.stats().cooldown == cooldown
        clock.now += cooldown - 0.01
        assert not b.allow()
        waited = 0.01
    clock.now += 0.01
    assert b.allow()
    b.success()
    assert b.stats().cooldown == 1.0  # back to the base cooldown once closed
    assert b.stats().opened == 4


def test_a_probe_that_never_reports_stops_blocking_after_a_cooldown() -> None:
    clock = Clock()
    b = _breaker(clock)
    for _ in range(3):
        b.failure()
    clock.now += 1.0
    assert b.allow()  # the probe's caller is cancelled and never reports
    clock.now += 0.5
    assert not b.allow()
    clock.now += 0.5
    assert b.allow()


def test_concurrent_callers_get_exactly_one_probe() -> None:
    clock = Clock()
    b = _breaker(clock)
    for _ in range(3):
        b.failure()
    clock.now += 1.0
    results: list[bool] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def call() -> None:
        barrier.wait()
        allowed = b.allow()
        with lock:
            results.append(allowed)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failure_threshold": 0},
        {"failure_threshold": 1.5},
        {"cooldown": 0},
        {"cooldown": float("nan")},
        {"cooldown": float("inf")},
        {"cooldown": 5.0, "max_cooldown": 1.0},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        CircuitBreaker(**kwargs)  # type: ignore[arg-type]


# -- wired into the pipeline -------------------------------------------------------------------------


class SwitchableStore(MemoryStore):
    """A memory store that can be switched off, counting the calls that reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.calls = 0
        self.secret_calls = 0

    @property
    def secret(self) -> bytes:
        self.secret_calls += 1
        if self.down:
            raise StoreUnavailableError("secret unavailable")
        return super().secret

    def get(self, key: str) -> bytes | None:
        self.calls += 1
        if self.down:
            raise StoreUnavailableError("store is down")
        return super().get(key)

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        self.calls += 1
        if self.down:
            raise StoreUnavailableError("store is down")
        super().set(key, value, ttl=ttl)


def _client(
    store: SwitchableStore, clock: Clock, **config: object
) -> tuple[httpx2.Client, FakeUpstream, cachekit.Cache]:
    upstream = FakeUpstream()
    cache = cachekit.Cache(cachekit.CacheConfig(store=store, ledger=False, **config))  # type: ignore[arg-type]
    cache.pipeline.breaker = _breaker(clock)
    return httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=cache)), upstream, cache


URL = "https://api.openai.com/v1/chat/completions"


def openai_chat(question: str) -> dict[str, object]:
    body = _openai_chat()
    body["messages"] = [{"role": "user", "content": question}]
    return body


def test_the_breaker_stops_store_calls_while_down_and_recovers() -> None:
    clock, store = Clock(), SwitchableStore()
    client, upstream, cache = _client(store, clock)
    with client:
        assert client.post(URL, json=openai_chat("warm")).headers["x-cachekit-cache"] == "miss"
        store.down = True
        store.calls = 0
        for i in range(10):
            r = client.post(URL, json=openai_chat(f"q{i}"))
            assert r.status_code == 200
            assert r.json()["object"] == "chat.completion"
        # lookup + store for the first call, one lookup for the second: three failures open it;
        # the other eight calls never touch the store.
        assert store.calls == 3
        assert state(cache.pipeline.breaker) == "open"
        assert cache.stats.store_skips == 1 + 2 * 8
        store.down = False
        clock.now += 1.0
        r = client.post(URL, json=openai_chat("warm"))  # the probe: a lookup that works, a hit
        assert r.headers["x-cachekit-cache"] == "hit"
        assert state(cache.pipeline.breaker) == "closed"
    assert upstream.calls == 11


def test_on_cache_error_raise_fails_the_call_before_going_upstream() -> None:
    clock, store = Clock(), SwitchableStore()
    client, upstream, _ = _client(store, clock, on_cache_error="raise")
    with client:
        client.post(URL, json=openai_chat("warm"))
        store.down = True
        with pytest.raises(CacheUnavailableError, match="store is down"):
            client.post(URL, json=openai_chat("new"))
        for _ in range(2):
            with pytest.raises(CacheUnavailableError):
                client.post(URL, json=openai_chat("new"))
        with pytest.raises(CacheUnavailableError, match="circuit breaker is open"):
            client.post(URL, json=openai_chat("new"))
    assert upstream.calls == 1


def test_a_store_down_at_startup_does_not_stop_the_client() -> None:
    clock, store = Clock(), SwitchableStore()
    store.down = True
    client, upstream, cache = _client(store, clock)
    with client:
        for i in range(5):
            r = client.post(URL, json=openai_chat(f"q{i}"))
            assert r.status_code == 200
            assert r.headers["x-cachekit-cache"] == "bypass"
        assert store.secret_calls == 3  # then the breaker opened
        store.down = False
        clock.now += 1.0
        assert client.post(URL, json=openai_chat("q0")).headers["x-cachekit-cache"] == "miss"
        assert client.post(URL, json=openai_chat("q0")).headers["x-cachekit-cache"] == "hit"
    assert upstream.calls == 6
    assert cache.stats.store_errors == 3


@pytest.mark.anyio
async def test_the_async_path_shares_the_breaker() -> None:
    clock, store = Clock(), SwitchableStore()
    upstream = FakeUpstream()
    cache = cachekit.Cache(cachekit.CacheConfig(store=store, ledger=False))
    cache.pipeline.breaker = _breaker(clock)
    async with httpx2.AsyncClient(transport=cachekit.AsyncCachingTransport(upstream, cache=cache)) as client:
        await client.post(URL, json=openai_chat("warm"))
        store.down = True
        store.calls = 0
        for i in range(6):
            assert (await client.post(URL, json=openai_chat(f"q{i}"))).status_code == 200
    assert store.calls == 3
    assert state(cache.pipeline.breaker) == "open"


def test_an_error_reply_does_not_open_the_breaker() -> None:
    """A store that answers with an error (Redis out of memory under noeviction) is up: its reads
    keep being used, so the breaker stays closed however many writes fail."""

    class Full(MemoryStore):
        def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
            raise StoreError("OOM command not allowed when used memory > 'maxmemory'")

    clock, store = Clock(), Full()
    upstream = FakeUpstream()
    cache = cachekit.Cache(cachekit.CacheConfig(store=store, ledger=False))
    cache.pipeline.breaker = _breaker(clock)
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=cache)) as client:
        for i in range(6):
            assert client.post(URL, json=openai_chat(f"q{i}")).status_code == 200
    assert state(cache.pipeline.breaker) == "closed"
    assert cache.stats.store_errors == 6
    assert cache.stats.store_skips == 0


def test_late_reports_from_before_the_breaker_opened_change_nothing() -> None:
    clock = Clock()
    b = _breaker(clock)
    for _ in range(3):
        b.failure()
    b.success()  # a slow call that started before it opened answers now: not a probe
    assert state(b) == "open"
    clock.now += 1.0  # the cooldown is over, no probe granted yet
    b.failure()  # another late one: must not count as a failed probe
    assert b.stats().cooldown == 1.0
    assert b.allow()  # the probe
    b.success()
    assert state(b) == "closed"

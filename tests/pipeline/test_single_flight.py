"""Single-flight (issue 15, items 7 and 8): nobody waits on a leader that cannot progress, and the
followers of a failed leader elect one new leader instead of all going upstream.

Through the real SDKs, sync (threads) and async (tasks), over the in-process upstream. Concurrency is
lined up with events: the upstream holds the leader's request (``FakeUpstream.hold_next``) until every
follower waits on its flight (seen by a spy around ``Flight.wait``); time only moves on a manual
clock. No sleeps.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import operator
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import cachekit
from cachekit.local import ManualClock
from cachekit.pipeline.flights import SLOW_WAIT, STALL_AFTER, Flight, Flights, WaitResult, retry_of
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream, Hold
from tests.conftest import sdk_client
from tests.requests import DIALECTS, anthropic_messages, openai_chat

#: Long enough that a test which waited for it would never end: a wait shows up as an event instead.
FOREVER = 3600.0
#: Guards against a broken test hanging the suite; no assertion depends on it.
HANG_GUARD = 60.0
PROMPT = "should I pack an umbrella"  # in every request body of tests.requests
CROWD = 6
DIALECT_IDS = ["anthropic", "chat", "responses"]


def _client(provider: str, upstream: FakeUpstream, *, is_async: bool, **options: Any) -> Any:
    clock = options.pop("clock", None)
    store = options.pop("store", None)
    cache = cachekit.Cache(
        cachekit.CacheConfig(
            store=MemoryStore() if store is None else store, ledger=False, coalesce_timeout=FOREVER
        ),
        clock=clock,
    )
    mode = "async" if is_async else "sync"
    return sdk_client(provider, mode, transport=upstream, api_key="k", cache=cache, **options)


class Watch:
    """A spy around ``Flight.wait`` and ``Flight.wait_async``: who waited on which flight, and how many
    callers have finished; :meth:`until` blocks until a condition on them holds (no polling).

    ``blocking=False`` turns every wait that would block into an immediate timeout (recorded in
    :attr:`blocked`), so a test shows that a call *would* have waited instead of hanging on it.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, blocking: bool = True) -> None:
        self.blocked: list[float] = []
        #: The flights waited on, in the order of their first wait.
        self.flights: list[Flight] = []
        self.finished = 0
        self._callers: dict[int, set[object]] = {}
        self._changed = threading.Condition()
        sync_wait, async_wait = Flight.wait, Flight.wait_async

        def wait(flight: Flight, timeout: float) -> WaitResult:
            self._saw(flight, threading.get_ident())
            return self._after(sync_wait(flight, timeout if blocking else 0), timeout, blocking)

        async def wait_async(flight: Flight, timeout: float) -> WaitResult:
            self._saw(flight, asyncio.current_task())
            return self._after(await async_wait(flight, timeout if blocking else 0), timeout, blocking)

        monkeypatch.setattr(Flight, "wait", wait)
        monkeypatch.setattr(Flight, "wait_async", wait_async)

    def _saw(self, flight: Flight, caller: object) -> None:
        with self._changed:
            if id(flight) not in self._callers:
                self.flights.append(flight)
            self._callers.setdefault(id(flight), set()).add(caller)
            self._changed.notify_all()

    def _after(self, result: Any, timeout: float, blocking: bool) -> WaitResult:
        # Before the fix a wait answered True/False; a refused one ("own") never blocks.
        if not blocking and result in (False, "timeout"):
            self.blocked.append(timeout)
        return result

    def done(self) -> None:
        """One caller has its result (or its exception)."""
        with self._changed:
            self.finished += 1
            self._changed.notify_all()

    def waiting(self, *, first: bool) -> set[object]:
        """The callers (threads or tasks) that waited on the first flight (``first``), or on later ones."""
        flights = self.flights[:1] if first else self.flights[1:]
        return set().union(*(self._callers[id(f)] for f in flights))

    def until(self, condition: Callable[[], bool]) -> bool:
        """Block until ``condition`` holds (evaluated each time a caller waits or finishes)."""
        with self._changed:
            return self._changed.wait_for(condition, HANG_GUARD)


def _create(client: Any, method: str) -> Callable[..., Any]:
    return operator.attrgetter(method)(client)


# -- item 7: a caller never waits on its own open stream, nor on a stalled one ----------------------


def _twice_in_one_thread(client: Any, method: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Open a stream and read part of it, make the identical call, then read both to their ends."""
    first = iter(_create(client, method)(**body, stream=True))
    opened = [next(first), next(first)]  # partly read: the first call still leads the key's flight
    second = list(_create(client, method)(**body, stream=True))
    client.close()
    return [type(e).__name__ for e in opened + list(first)], [type(e).__name__ for e in second]


async def _twice_in_one_task(client: Any, method: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """:func:`_twice_in_one_thread` in one asyncio task."""
    first = (await _create(client, method)(**body, stream=True)).__aiter__()
    opened = [await first.__anext__(), await first.__anext__()]
    second = [e async for e in await _create(client, method)(**body, stream=True)]
    rest = [e async for e in first]
    await client.close()
    return [type(e).__name__ for e in opened + rest], [type(e).__name__ for e in second]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(("provider", "method", "body"), DIALECTS, ids=DIALECT_IDS)
def test_a_second_call_does_not_wait_for_its_own_open_stream(
    monkeypatch: pytest.MonkeyPatch, mode: str, provider: str, method: str, body: Callable[[], dict[str, Any]]
) -> None:
    """The same thread (sync clients) or the same task (async clients) calls again while its stream is
    open: it goes upstream at once."""
    waits = Watch(monkeypatch, blocking=False)
    upstream = FakeUpstream()
    client = _client(provider, upstream, is_async=mode == "async")
    if mode == "async":
        first, second = asyncio.run(_twice_in_one_task(client, method, body()))
    else:
        first, second = _twice_in_one_thread(client, method, body())
    assert waits.blocked == []  # before the fix: a wait of coalesce_timeout (an hour here)
    assert upstream.calls == 2
    assert first == second  # both streams complete


def _stalled_in_a_thread(
    client: Any, method: str, body: dict[str, Any], clock: ManualClock
) -> tuple[Any, list[Any]]:
    """Another thread opens a stream, reads one event and keeps it unread; ``STALL_AFTER`` seconds
    later this thread makes the identical call. Its answer, and the rest of the kept stream."""
    held: list[Iterator[Any]] = []

    def lead() -> None:
        stream = iter(_create(client, method)(**body, stream=True))
        next(stream)
        held.append(stream)

    leader = threading.Thread(target=lead)
    leader.start()
    leader.join(HANG_GUARD)
    clock.advance(STALL_AFTER)
    answer = _create(client, method)(**body)
    rest = list(held[0])
    client.close()
    return answer, rest


async def _stalled_in_a_task(
    client: Any, method: str, body: dict[str, Any], clock: ManualClock
) -> tuple[Any, list[Any]]:
    """:func:`_stalled_in_a_thread` with another task."""

    async def lead() -> Any:
        stream = (await _create(client, method)(**body, stream=True)).__aiter__()
        await stream.__anext__()
        return stream

    held = await asyncio.create_task(lead())
    clock.advance(STALL_AFTER)
    answer = await _create(client, method)(**body)
    rest = [event async for event in held]
    await client.close()
    return answer, rest


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(("provider", "method", "body"), DIALECTS, ids=DIALECT_IDS)
def test_a_stream_held_unread_by_another_caller_is_taken_over(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    provider: str,
    method: str,
    body: Callable[[], dict[str, Any]],
) -> None:
    waits = Watch(monkeypatch, blocking=False)
    upstream = FakeUpstream()
    clock = ManualClock()
    client = _client(provider, upstream, is_async=mode == "async", clock=clock)
    with caplog.at_level(logging.WARNING, logger="cachekit.flights"):
        if mode == "async":
            answer, rest = asyncio.run(_stalled_in_a_task(client, method, body(), clock))
        else:
            answer, rest = _stalled_in_a_thread(client, method, body(), clock)
    assert waits.blocked == []  # before the fix: a wait of coalesce_timeout (an hour here)
    assert upstream.calls == 2
    assert answer.id
    assert rest  # the stalled stream still reads to its end
    assert "has not read its stream for 5.0 s" in caplog.text
    assert PROMPT not in caplog.text


def test_a_stream_dropped_unread_does_not_hold_its_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    # The dropped stream's flight lands from its finalizer, on cachekit's worker thread. The test
    # waits for that landing (an event, not a timeout), then makes the identical request: it must
    # find no flight to wait for. Before the fix the flight never landed, and the next request waited
    # for the lost leader until it gave up (or, from the same thread, went upstream beside it).
    landed = threading.Event()
    land = Flights.land

    def recording_land(flights: Flights, key: str, flight: Flight) -> None:
        land(flights, key, flight)
        landed.set()

    waits: list[WaitResult] = []
    wait = Flight.wait

    def recording_wait(flight: Flight, timeout: float) -> WaitResult:
        waits.append(wait(flight, timeout))
        return waits[-1]

    monkeypatch.setattr(Flights, "land", recording_land)
    monkeypatch.setattr(Flight, "wait", recording_wait)
    upstream = FakeUpstream()
    client = sdk_client(
        "openai",
        transport=upstream,
        api_key="k",
        cache=cachekit.Cache(
            cachekit.CacheConfig(store=MemoryStore(), ledger=False, coalesce_timeout=3600),
            clock=ManualClock(),  # nobody gives up on a flight, nor judges one stalled
        ),
    )
    stream = client.chat.completions.create(**openai_chat(), stream=True)
    del stream
    gc.collect()
    assert landed.wait(60)  # a guard against a hang: only the landing sets it
    client.chat.completions.create(**openai_chat())
    assert waits == []  # no flight was left to wait for
    assert upstream.calls == 2
    client.close()


def test_a_follower_wakes_when_its_leader_could_first_be_judged_stalled() -> None:
    clock = ManualClock()
    flights = Flights(clock=clock)
    flight, leading = flights.join("k")
    follower = flights.follower("k", FOREVER)
    assert leading
    assert follower.before(flight) == SLOW_WAIT  # waiting on the provider: wake only to log
    flight.idle(True)  # its caller holds the stream
    clock.advance(3)
    assert follower.before(flight) == STALL_AFTER - 3
    flight.idle(False)  # ... and reads again: waiting on the provider, never a stall
    clock.advance(FOREVER / 2)  # (the wait is logged now, once)
    assert follower.before(flight) == STALL_AFTER
    flight.idle(True)
    clock.advance(STALL_AFTER)
    assert follower.before(flight) == "take over"


def test_a_long_wait_is_logged_with_its_reason_then_given_up(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    flights = Flights(clock=clock)
    flight, _ = flights.join("k" * 64)
    follower = flights.follower("k" * 64, 20)
    with caplog.at_level(logging.INFO, logger="cachekit.flights"):
        clock.advance(SLOW_WAIT)
        assert follower.before(flight) == 20 - SLOW_WAIT  # logged once; now only the deadline
        clock.advance(20 - SLOW_WAIT)
        assert follower.before(flight) == "give up"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "waited 5.0 s so far: the identical request is still waiting for the provider's answer "
        f"(key={'k' * 16})",
        "gave up after 20.0 s waiting for an identical request (coalesce_timeout): the identical "
        f"request is still waiting for the provider's answer; going upstream (key={'k' * 16})",
    ]


# -- item 8: the followers of a failed leader elect one new leader ----------------------------------


def _crowd(
    mode: str,
    upstream: FakeUpstream,
    watch: Watch,
    ask: Callable[[], Any],
    *,
    cancel_leader: bool = False,
    then: int = 1,
) -> list[Any]:
    """Run ``ask`` ``CROWD`` times at once; results and exceptions, in no order.

    The first call reaches the upstream and is held there until the others all wait for it (then its
    task is cancelled, with ``cancel_leader``), then the upstream answers it: so the followers provably
    joined the leader's flight (without single-flight nobody waits, and the crowd never lines up).

    ``then=1``: the next request to reach the upstream (a new leader) is held in turn until every
    other caller has either finished or begun to wait again: so a fix that works only because the
    callers happened to run one after the other shows up as more upstream calls. ``then=n``: the next
    ``n`` requests are held until all of them arrived (they went upstream at once, none waiting for
    another). ``then=0``: nobody else is expected upstream.
    """
    first = upstream.hold_next()
    second = upstream.hold_next(then) if then else None

    def lined_up(tasks: list[asyncio.Task[Any]]) -> None:
        try:
            assert first.arrived(HANG_GUARD)
            assert watch.until(lambda: len(watch.waiting(first=True)) == CROWD - 1)
            if cancel_leader:  # the one task that is not waiting; from this thread, through its loop
                (leader,) = set(tasks) - watch.waiting(first=True)
                leader.get_loop().call_soon_threadsafe(leader.cancel)
            first.release()
            if second is not None:
                assert second.arrived(HANG_GUARD)
            if then == 1:
                # Everyone but the request held second: finished, or waiting for it.
                assert watch.until(lambda: watch.finished + len(watch.waiting(first=False)) >= CROWD - 1)
        finally:
            first.release()
            if second is not None:
                second.release()

    if mode == "async":
        return asyncio.run(_crowd_async(ask, watch, lined_up))
    return _crowd_sync(ask, watch, lined_up)


def _crowd_sync(
    ask: Callable[[], Any], watch: Watch, lined_up: Callable[[list[asyncio.Task[Any]]], None]
) -> list[Any]:
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(ask())
        except Exception as exc:  # the leader's own failure, returned for the test to check
            results.append(exc)
        finally:
            watch.done()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(CROWD)]
    for thread in threads:
        thread.start()
    try:
        lined_up([])
    finally:
        for thread in threads:
            thread.join(HANG_GUARD)
    return results


async def _crowd_async(
    ask: Callable[[], Awaitable[Any]], watch: Watch, lined_up: Callable[[list[asyncio.Task[Any]]], None]
) -> list[Any]:
    async def run() -> Any:
        try:
            return await ask()
        finally:
            watch.done()

    tasks = [asyncio.ensure_future(run()) for _ in range(CROWD)]
    await asyncio.to_thread(lined_up, tasks)  # waits on events while the tasks run in this loop
    return list(await asyncio.gather(*tasks, return_exceptions=True))


def _split(results: list[Any]) -> tuple[list[BaseException], list[Any]]:
    failures = [r for r in results if isinstance(r, BaseException)]
    return failures, [r for r in results if not isinstance(r, BaseException)]


def _reader(
    client: Any, method: str, body: dict[str, Any], *, stream: bool, is_async: bool
) -> Callable[[], Any]:
    """One call: its answer, or (``stream``) every event of its stream as a dict, read to the end."""
    create = _create(client, method)
    if not is_async:
        if stream:
            return lambda: [event.model_dump() for event in create(**body, stream=True)]
        return lambda: create(**body)

    async def read() -> Any:
        if stream:
            return [event.model_dump() async for event in await create(**body, stream=True)]
        return await create(**body)

    return read


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", [False, True], ids=["document", "stream"])
@pytest.mark.parametrize(("provider", "method", "body"), DIALECTS, ids=DIALECT_IDS)
def test_identical_calls_at_once_make_one_upstream_call(
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    stream: bool,
    provider: str,
    method: str,
    body: Callable[[], dict[str, Any]],
) -> None:
    """Threads (sync clients) or tasks (async clients): the first call leads, held upstream until the
    others wait for its flight, and they then read its stored answer."""
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    client = _client(provider, upstream, is_async=mode == "async")
    ask = _reader(client, method, body(), stream=stream, is_async=mode == "async")
    failures, answers = _split(_crowd(mode, upstream, watch, ask, then=0))
    assert failures == []
    assert upstream.calls == 1
    assert len(answers) == CROWD
    assert all(answer == answers[0] for answer in answers)  # the same answer, replayed
    assert cachekit.cache_of(client).stats.coalesced == CROWD - 1


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(("provider", "method", "body"), DIALECTS, ids=DIALECT_IDS)
def test_a_leader_failure_a_retry_would_repeat_reaches_only_its_caller(
    monkeypatch: pytest.MonkeyPatch, mode: str, provider: str, method: str, body: Callable[[], dict[str, Any]]
) -> None:
    """A 500 the provider says not to retry: the followers waited for the leader (lined up behind it),
    none of them gets its failure, and each then asks on its own at once (nothing to elect a leader
    for): all of them are upstream together before any is answered."""
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    upstream.fail_next(500, headers={"x-should-retry": "false"}, message="the leader's own failure")
    client = _client(provider, upstream, is_async=mode == "async")
    ask = lambda: _create(client, method)(**body())  # noqa: E731
    failures, answers = _split(_crowd(mode, upstream, watch, ask, then=CROWD - 1))
    assert len(failures) == 1
    assert isinstance(failures[0], (anthropic.InternalServerError, openai.InternalServerError))
    assert "the leader's own failure" in str(failures[0])
    assert len(answers) == CROWD - 1
    assert upstream.calls == CROWD


@pytest.mark.parametrize("leader", ["sync", "async"])
def test_clients_that_share_a_cache_coalesce_across_each_other(
    monkeypatch: pytest.MonkeyPatch, leader: str
) -> None:
    """docs/exact.md: "Clients that share one cachekit.Cache coalesce across each other", a sync and
    an async client in its example. One client's call leads (held upstream); the other client's
    calls, and more of its own, wait for that flight and read its answer."""
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    cache = cachekit.Cache(cachekit.CacheConfig(store=MemoryStore(), ledger=False, coalesce_timeout=FOREVER))
    sync_client = sdk_client("anthropic", transport=upstream, api_key="k", cache=cache)
    async_client = sdk_client("anthropic", "async", transport=upstream, api_key="k", cache=cache)
    results: list[Any] = []
    first = upstream.hold_next()

    def sync_call() -> None:
        results.append(sync_client.messages.create(**anthropic_messages()))

    def async_calls(before: int, after: int) -> None:
        """``before`` calls at once, then ``after`` more once the first call is held upstream."""

        async def main() -> None:
            calls = [
                asyncio.ensure_future(async_client.messages.create(**anthropic_messages()))
                for _ in range(before)
            ]
            if after:
                await asyncio.to_thread(first.arrived, HANG_GUARD)
                calls += [
                    asyncio.ensure_future(async_client.messages.create(**anthropic_messages()))
                    for _ in range(after)
                ]
            results.extend(await asyncio.gather(*calls))
            await async_client.close()

        asyncio.run(main())

    # The leading client's first call; once it is held upstream, two more of its own and three of
    # the other client's (threads for the sync client, tasks in one event loop for the async one).
    if leader == "sync":
        started = [threading.Thread(target=sync_call, daemon=True)]
        later = [threading.Thread(target=sync_call, daemon=True) for _ in range(2)]
        later.append(threading.Thread(target=async_calls, args=(3, 0), daemon=True))
    else:
        started = [threading.Thread(target=async_calls, args=(1, 2), daemon=True)]
        later = [threading.Thread(target=sync_call, daemon=True) for _ in range(3)]
    started[0].start()
    try:
        assert first.arrived(HANG_GUARD)
        for thread in later:
            thread.start()
        assert watch.until(lambda: len(watch.waiting(first=True)) == 5)
    finally:
        first.release()
        for thread in started + later:
            thread.join(HANG_GUARD)
    assert upstream.calls == 1
    assert len(results) == 6
    assert len({answer.id for answer in results}) == 1
    assert cache.stats.coalesced == 5
    sync_client.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("status", "headers"), [(500, {}), (503, {"retry-after": "0"}), (429, {"retry-after-ms": "1"})]
)
@pytest.mark.parametrize(("provider", "method", "body"), DIALECTS, ids=DIALECT_IDS)
def test_the_followers_of_a_failed_leader_elect_one_new_leader(
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    status: int,
    headers: dict[str, str],
    provider: str,
    method: str,
    body: Callable[[], dict[str, Any]],
) -> None:
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    upstream.fail_next(status, headers=headers, message="the leader's own failure")
    client = _client(provider, upstream, is_async=mode == "async")
    failures, answers = _split(_crowd(mode, upstream, watch, lambda: _create(client, method)(**body())))
    assert upstream.calls == 2  # the failed leader, then one new leader (before: one per follower)
    # The failure reaches its own caller untouched, and nobody else.
    assert len(failures) == 1
    assert isinstance(failures[0], (anthropic.APIStatusError, openai.APIStatusError))
    assert failures[0].status_code == status
    assert "the leader's own failure" in str(failures[0])
    assert all(failures[0].response.headers[name] == value for name, value in headers.items())
    # Every follower has the new leader's answer.
    assert len(answers) == CROWD - 1
    assert len({answer.id for answer in answers}) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_followers_of_a_stream_cut_short_elect_one_new_leader(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    upstream.break_next_stream(after=2, how="disconnect")
    client = _client("anthropic", upstream, is_async=mode == "async")

    def ask() -> Any:
        with client.messages.stream(**anthropic_messages()) as stream:
            return stream.get_final_message()

    async def ask_async() -> Any:
        async with client.messages.stream(**anthropic_messages()) as stream:
            return await stream.get_final_message()

    failures, answers = _split(_crowd(mode, upstream, watch, ask_async if mode == "async" else ask))
    assert upstream.calls == 2
    assert len(failures) == 1  # the leader's reader saw its connection drop
    assert len(answers) == CROWD - 1
    assert len({answer.id for answer in answers}) == 1


def test_the_followers_of_a_cancelled_leader_elect_one_new_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    client = _client("openai", upstream, is_async=True)

    results = _crowd(
        "async",
        upstream,
        watch,
        lambda: client.chat.completions.create(**DIALECTS[1][2]()),
        cancel_leader=True,
    )
    failures, answers = _split(results)
    assert upstream.calls == 2
    assert [type(f) for f in failures] == [asyncio.CancelledError]
    assert len({answer.id for answer in answers}) == 1


def test_a_leader_cancelled_while_looking_up_lands_its_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    # Any wait for a flight is recorded and refused at once ("own": the caller goes upstream), so a
    # flight the cancelled leader left behind shows up as a wait, not as a pause of coalesce_timeout
    # that ends in the same upstream call (which is how this test passed without the fix).
    waits: list[Flight] = []

    async def refused_wait(flight: Flight, timeout: float) -> WaitResult:
        waits.append(flight)
        return "own"

    monkeypatch.setattr(Flight, "wait_async", refused_wait)

    class HeldStore(MemoryStore):
        """Holds the second lookup (the leader's look again after joining its flight) until cancelled."""

        def __init__(self) -> None:
            super().__init__()
            self.lookups = 0
            self.holding = asyncio.Event()

        async def aget(self, key: str) -> bytes | None:
            self.lookups += 1
            if self.lookups == 2:
                self.holding.set()
                await asyncio.Future()  # never resolves: only the cancellation ends it
            return self.get(key)

        async def aset(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
            self.set(key, value, ttl=ttl)

        async def adelete(self, key: str) -> None:
            self.delete(key)

        async def aclose(self) -> None:
            self.close()

    upstream = FakeUpstream()

    async def main() -> cachekit.Cache:
        store = HeldStore()
        cache = cachekit.Cache(cachekit.CacheConfig(store=store, ledger=False))
        transport = cachekit.AsyncCachingTransport(upstream, cache=cache)
        async with httpx2.AsyncClient(transport=transport) as client:

            def post() -> Any:
                return client.post("https://api.openai.com/v1/chat/completions", json=openai_chat())

            leader = asyncio.ensure_future(post())
            await store.holding.wait()
            leader.cancel()  # during its second lookup
            with pytest.raises(asyncio.CancelledError):
                await leader
            await post()
        return cache

    cache = asyncio.run(main())
    assert waits == []  # the next request found no flight of the cancelled leader to wait for
    assert cache.stats.coalesced == 0
    assert upstream.calls == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rate_limited_leader_retries_as_a_follower_of_the_new_leader(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The SDK's own retry (after the provider's retry-after) joins the new leader's flight or reads
    its answer: everyone, the rate-limited caller too, gets one answer from two upstream calls."""
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    upstream.fail_next(429, headers={"retry-after-ms": "1"})
    client = _client("anthropic", upstream, is_async=mode == "async", max_retries=2)
    failures, answers = _split(
        _crowd(mode, upstream, watch, lambda: client.messages.create(**anthropic_messages()))
    )
    assert failures == []
    assert upstream.calls == 2
    assert len(answers) == CROWD
    assert len({answer.id for answer in answers}) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_a_retry_would_repeat_is_asked_for_by_each_follower(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A 400 is no reason to elect: the followers go upstream on their own at once (a failure is
    never shared as an answer), each getting its own error."""
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    upstream.fail_next(400, times=CROWD)
    client = _client("openai", upstream, is_async=mode == "async")
    failures, answers = _split(
        _crowd(mode, upstream, watch, lambda: client.chat.completions.create(**DIALECTS[1][2]()))
    )
    assert upstream.calls == CROWD
    assert answers == []
    assert len({f.request_id for f in failures}) == CROWD  # type: ignore[attr-defined]


class UnwritableStore(MemoryStore):
    """Reads work, writes fail: no answer can be stored."""

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        raise OSError("disk full")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_answer_that_cannot_be_stored_sends_each_follower_on_its_own(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The leader got its answer: a retry is not needed, so its followers do not line up behind one
    another; each asks at once (nothing is stored for them to read)."""
    watch = Watch(monkeypatch)
    upstream = FakeUpstream()
    client = _client("anthropic", upstream, is_async=mode == "async", store=UnwritableStore())
    failures, answers = _split(
        _crowd(mode, upstream, watch, lambda: client.messages.create(**anthropic_messages()))
    )
    assert failures == []
    assert upstream.calls == CROWD
    assert len({answer.id for answer in answers}) == CROWD


def test_who_takes_a_stalled_flight_over_leads_the_followers_that_waited_for_it() -> None:
    clock = ManualClock()
    flights = Flights(clock=clock)
    stalled, _ = flights.join("k")
    assert flights.join("k") == (stalled, False)  # a follower, waiting
    taken_over, leading = flights.join("k", instead_of=stalled)  # another caller judged it stalled
    assert leading
    assert stalled.landed  # its followers wake ...
    assert stalled.retry  # ... and join again ...
    assert flights.join("k") == (taken_over, False)  # ... behind the new leader
    stalled.settle(retry=False)  # the stalled leader finishing later changes nothing
    flights.land("k", stalled)
    assert flights.join("k") == (taken_over, False)


def test_the_key_stays_reserved_for_the_providers_retry_after() -> None:
    clock = ManualClock()
    flights = Flights(clock=clock)
    failed, _ = flights.join("k")
    assert flights.join("k") == (failed, False)  # a follower
    failed.settle(retry=True, retry_after=2.0)
    flights.land("k", failed)
    reserved, leading = flights.join("k")
    assert not leading  # nobody leads before the provider's delay has passed ...
    assert flights.follower("k", FOREVER).before(reserved) == 2.0  # ... and followers wake then
    clock.advance(2.0)
    assert flights.join("k") == (reserved, True)  # the first to join afterwards leads
    assert flights.join("k") == (reserved, False)


def test_a_retry_after_without_followers_reserves_nothing() -> None:
    flights = Flights(clock=ManualClock())
    failed, _ = flights.join("k")
    failed.settle(retry=True, retry_after=2.0)
    flights.land("k", failed)
    assert len(flights) == 0
    assert flights.join("k")[1]


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (500, {}, (True, None)),
        (529, {"retry-after": "3"}, (True, 3.0)),
        (429, {"retry-after-ms": "1500", "retry-after": "9"}, (True, 1.5)),
        (429, {"retry-after": "soon"}, (True, None)),
        (408, {}, (True, None)),
        (409, {}, (True, None)),
        (500, {"x-should-retry": "false"}, (False, None)),
        (400, {"x-should-retry": "true", "retry-after": "1"}, (True, 1.0)),
        (400, {"retry-after": "1"}, (False, None)),
        (404, {}, (False, None)),
        (429, {"retry-after": "-1"}, (True, None)),
    ],
)
def test_retry_of_follows_the_sdks_rule(
    status: int, headers: dict[str, str], expected: tuple[bool, float | None]
) -> None:
    assert retry_of(status, httpx2.Headers(headers)) == expected


def test_retry_after_as_an_http_date() -> None:
    retry, delay = retry_of(503, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert retry
    assert delay is None  # in the past


def test_a_held_request_waits_until_released_or_reset() -> None:
    upstream = FakeUpstream()
    # the plain SDK: every call reaches the upstream
    client = sdk_client("openai", transport=upstream, plain=True, api_key="k")
    answers: list[Any] = []
    ask = lambda: answers.append(client.chat.completions.create(**DIALECTS[1][2]()))  # noqa: E731
    for let_go in (Hold.release, lambda hold: upstream.reset()):
        hold = upstream.hold_next()
        caller = threading.Thread(target=ask)
        caller.start()
        assert hold.arrived(HANG_GUARD)  # received, and waiting: it cannot have answered yet
        assert caller.is_alive()
        let_go(hold)
        caller.join(HANG_GUARD)
    assert len(answers) == 2
    client.close()

"""Single-flight: concurrent identical requests in one process make one upstream call.

The first request for a key that misses becomes the *leader*; requests for the same key that arrive
while it is in flight are *followers* and wait for it to land, then read its stored answer.

A follower does not wait for a leader that cannot or does not make progress:

* its own open stream: a leader in the same thread (for a blocking wait) or the same asyncio task (for
  an awaited one) can only go on once this call returns, so :meth:`Flight.wait` refuses at once;
* a stalled stream: a streaming leader whose caller has held the stream unread for ``stall_after``
  seconds (the stream's tee reports each chunk it hands over, and each time the caller asks for more);

in both cases it takes the key over and leads a new flight. Nobody waits longer than ``patience``
seconds in all (``CacheConfig.coalesce_timeout``): then it goes upstream on its own. A wait longer than
:data:`SLOW_WAIT` seconds is logged with its reason. Followers never poll: each waits on the flight's
event, with a timeout only at the moment something could change without the leader saying so (the
leader may be judged stalled, a retry-after ends, the wait should be logged or given up).

A leader that fails in a way a retry may fix (:func:`retry_of`: what the SDKs retry, plus a dropped
connection, a cancellation, a stream cut short) stores nothing, and its followers elect one new leader
among themselves: the first to join again leads, the rest follow it. When the provider asked for a
delay (``retry-after``), the key stays reserved for that long: whoever joins waits, and the first to
join after it leads. A failure is never shared as an answer: the failed leader's caller gets its error
untouched, its followers get the new leader's answer. Other endings (an answer, an error that an
identical request would get again) leave nothing to elect: followers read the store, and where it has
nothing for them each goes upstream on its own.

One :class:`Flight` serves threads and asyncio tasks alike (its landing is a :class:`Signal`).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

from cachekit import _fork

__all__ = ["SLOW_WAIT", "STALL_AFTER", "Flight", "Flights", "Follower", "Signal", "WaitResult", "retry_of"]

logger = logging.getLogger("cachekit.flights")

#: Seconds a streaming leader's caller may hold its stream unread before followers stop waiting for it.
STALL_AFTER = 5.0
#: A follower that has waited this many seconds logs a warning saying what it waits for.
SLOW_WAIT = 5.0

#: How a wait on a flight ended: it landed, the timeout passed, or the caller leads it itself.
WaitResult: TypeAlias = Literal["landed", "timeout", "own"]
#: What a follower does next (see :class:`Follower`).
Step: TypeAlias = Literal["read", "again", "take over", "give up"]
#: Who leads a flight: the thread, and the asyncio task when there is one.
_Caller: TypeAlias = "tuple[int, asyncio.Task[Any] | None]"


def _caller() -> _Caller:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop runs in this thread
        task = None
    return threading.get_ident(), task


class Signal:
    """A one-shot event that threads wait on (blocking) and asyncio tasks await, set from any thread.

    Threads wait on a :class:`threading.Event`; tasks on a future that :meth:`set` resolves through its
    loop's ``call_soon_threadsafe``, so no task ever blocks its event loop.
    """

    __slots__ = ("_event", "_lock", "_waiters")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._event.is_set()

    def set(self) -> None:
        """Wake every waiter, now and later. Idempotent."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future)

    def wait(self, timeout: float | None) -> bool:
        """Block this thread until set; ``False`` on timeout (``None``: no timeout)."""
        return self._event.wait(timeout)

    async def wait_async(self, timeout: float | None) -> bool:
        """Wait in this task until set; ``False`` on timeout (``None``: no timeout)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._event.is_set():
                return True
            self._waiters.append((loop, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            # A waiter that gave up (timeout, cancellation) must not stay on a signal never set.
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Flight:
    """One in-flight upstream call that others may wait for.

    A flight without a leader (``leader is None``) reserves its key until ``not_before``: the delay a
    provider asked for after a failure. The first to join after it leads the flight.
    """

    __slots__ = (
        "_clock",
        "_idle_since",
        "_landed",
        "_lock",
        "_retry",
        "_retry_after",
        "_streaming",
        "followed",
        "leader",
        "not_before",
        "started",
    )

    def __init__(
        self, clock: Callable[[], float], leader: _Caller | None, *, not_before: float = 0.0
    ) -> None:
        self._clock = clock
        self.started = clock()
        self.leader = leader
        self.not_before = not_before
        #: Whether anyone joined as a follower (only then is a retry-after worth reserving the key).
        self.followed = False
        # Until its leader says otherwise a flight has failed: a leader that vanishes (cancelled,
        # crashed, its stream dropped unread) left nothing to read.
        self._retry = True
        self._retry_after: float | None = None
        self._streaming = False
        self._idle_since: float | None = None
        self._landed = Signal()
        self._lock = threading.Lock()

    @property
    def landed(self) -> bool:
        """Whether the leader has finished (successfully or not)."""
        return self._landed.is_set()

    @property
    def retry(self) -> bool:
        """Whether the leader failed in a way a retry may fix (its followers then elect a new leader)."""
        return self._retry

    @property
    def retry_after(self) -> float | None:
        """The delay in seconds the provider asked for with the leader's failure, if any."""
        return self._retry_after

    def settle(self, *, retry: bool, retry_after: float | None = None) -> None:
        """Record the leader's outcome before it lands (ignored once landed: the first ending counts)."""
        with self._lock:
            if not self._landed.is_set():
                self._retry, self._retry_after = retry, retry_after

    def claim(self, leader: _Caller) -> None:
        """Lead a flight that had no leader (its reservation is over)."""
        self.leader = leader
        self.started = self._clock()

    def idle(self, idle: bool) -> None:
        """Report the leader's stream: ``True`` when its caller has every chunk so far and has not asked
        for more (time from then on counts towards a stall), ``False`` when it asks again."""
        self._streaming = True
        self._idle_since = self._clock() if idle else None

    def idle_for(self, now: float) -> float:
        """How long the leader's caller has held its stream without reading it (0 while it reads)."""
        since = self._idle_since
        return 0.0 if since is None else now - since

    def recheck_in(self, now: float, stall_after: float) -> float:
        """Seconds until this flight may have changed without landing: its reservation ends, or its
        leader can first be judged stalled; infinite for a leader waiting on the provider."""
        if self.leader is None:
            return self.not_before - now
        if not self._streaming:
            return math.inf
        since = self._idle_since
        return stall_after if since is None else since + stall_after - now

    def land(self, *, abandoned: bool = False) -> None:
        """Wake every waiter. Idempotent. ``abandoned``: the leader was replaced, so its followers
        elect a new one whatever it is doing."""
        with self._lock:
            if abandoned and not self._landed.is_set():
                self._retry, self._retry_after = True, None
            self._landed.set()

    def wait(self, timeout: float) -> WaitResult:
        """Block this thread until the flight lands (at most ``timeout`` seconds).

        ``"own"`` at once when the leader runs in this thread: it cannot go on while the thread waits.
        """
        leader = self.leader
        if leader is not None and leader[0] == threading.get_ident():
            return "own"
        return "landed" if self._landed.wait(timeout) else "timeout"

    async def wait_async(self, timeout: float) -> WaitResult:
        """Wait in this task until the flight lands (at most ``timeout`` seconds).

        ``"own"`` at once when this task leads the flight, or a blocking call in this thread outside
        any task does: neither goes on before this wait ends.
        """
        leader = self.leader
        if (
            leader is not None
            and leader[0] == threading.get_ident()
            and (leader[1] is None or leader[1] is asyncio.current_task())
        ):
            return "own"
        return "landed" if await self._landed.wait_async(timeout) else "timeout"

    def why(self, now: float) -> str:
        """What a follower of this flight waits for, in words (for the slow-wait log)."""
        if self.leader is None:
            return f"the provider asked to retry after a delay ({max(0.0, self.not_before - now):.1f} s left)"
        if not self._streaming:
            return "the identical request is still waiting for the provider's answer"
        idle = self.idle_for(now)
        if idle > 0:
            return f"the identical request's caller has not read its stream for {idle:.1f} s"
        return "the identical request's stream is still arriving"


class Flights:
    """The flights in progress, by cache key.

    Args:
        stale_after: a flight older than this is treated as lost (a leader whose stream was abandoned
            without being closed) and replaced, so one lost leader cannot slow a key forever.
        stall_after: seconds a streaming leader's caller may hold its stream unread (:data:`STALL_AFTER`).
        clock: seconds from any fixed point (tests pass a manual clock).
    """

    def __init__(
        self,
        stale_after: float = 60.0,
        *,
        stall_after: float = STALL_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = _fork.lock(self)
        self._flights: dict[str, Flight] = {}
        self._stale_after = stale_after
        self.stall_after = stall_after
        self.clock = clock
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        # The leaders of the flights in progress are threads of the parent: nothing would land them
        # here, and a follower in the child would wait for them until its patience ran out.
        self._flights = {}

    def join(self, key: str, *, instead_of: Flight | None = None) -> tuple[Flight, bool]:
        """The flight for ``key`` and whether the caller leads it (a new flight) or follows.

        ``instead_of``: a flight the caller will not wait for (its own, or a stalled one); if it still
        holds the key, the caller replaces it and leads, and its followers are woken to follow the new
        leader. A stale flight is replaced the same way; a reservation that has ended is claimed.
        """
        caller = _caller()
        with self._lock:
            now = self.clock()
            flight = self._flights.get(key)
            if flight is not None and flight is not instead_of and now - flight.started < self._stale_after:
                if flight.leader is None and now >= flight.not_before:
                    flight.claim(caller)
                    return flight, True
                flight.followed = True
                return flight, False
            if flight is not None:
                flight.land(abandoned=True)
            flight = self._flights[key] = Flight(self.clock, caller)
            return flight, True

    def land(self, key: str, flight: Flight) -> None:
        """End the leader's flight: forget it, then wake its followers.

        After a failure with a retry-after that followers wait on, the key stays reserved (a flight
        without a leader) until the delay has passed, so that none of them calls the provider sooner.
        """
        with self._lock:
            if self._flights.get(key) is flight:
                delay = flight.retry_after
                if flight.followed and flight.retry and delay is not None and 0 < delay < self._stale_after:
                    self._flights[key] = Flight(self.clock, None, not_before=self.clock() + delay)
                else:
                    del self._flights[key]
        flight.land()

    def stalled(self, flight: Flight, now: float) -> bool:
        """Whether ``flight``'s leader holds its stream unread for too long to be waited for."""
        return flight.leader is not None and flight.idle_for(now) >= self.stall_after

    def follower(self, key: str, patience: float) -> Follower:
        """The waiting of one request that follows ``key``'s flights for at most ``patience`` seconds."""
        return Follower(self, key, patience)

    def __len__(self) -> int:
        return len(self._flights)


class Follower:
    """One follower's decisions, from joining a flight to reading its answer (no I/O: the pipeline
    performs the waits and reads). Around each wait: :meth:`before` gives the timeout (or says not to
    wait), :meth:`after` says what the wait's result means."""

    def __init__(self, flights: Flights, key: str, patience: float) -> None:
        self._flights = flights
        self._key = key[-16:]  # enough to find it in logs; never the prompt
        self._started = flights.clock()
        self._deadline = self._started + patience
        self._warned = False

    def before(self, flight: Flight) -> float | Step:
        """How long to wait for ``flight``; or ``"give up"`` (waited long enough: read, then go alone)
        or ``"take over"`` (its leader has stalled: lead a new flight instead)."""
        now = self._flights.clock()
        if now >= self._deadline:
            logger.warning(
                "gave up after %.1f s waiting for an identical request (coalesce_timeout): %s; "
                "going upstream (key=%s)",
                now - self._started,
                flight.why(now),
                self._key,
            )
            return "give up"
        if self._flights.stalled(flight, now):
            logger.warning(
                "not waiting any longer: %s; going upstream instead (key=%s)", flight.why(now), self._key
            )
            return "take over"
        if not self._warned and now - self._started >= SLOW_WAIT:
            self._warned = True
            logger.warning(
                "waited %.1f s so far: %s (key=%s)", now - self._started, flight.why(now), self._key
            )
        until = self._deadline if self._warned else min(self._deadline, self._started + SLOW_WAIT)
        return max(0.0, min(until - now, flight.recheck_in(now, self._flights.stall_after)))

    def after(self, result: WaitResult) -> Step:
        """What to do once a wait ended: ``"read"`` (it landed), ``"again"`` (join again: the flight may
        have changed) or ``"take over"`` (it is the caller's own)."""
        if result == "own":
            logger.info("not waiting for this caller's own open stream; going upstream (key=%s)", self._key)
            return "take over"
        return "read" if result == "landed" else "again"


def retry_of(status: int, headers: Mapping[str, str]) -> tuple[bool, float | None]:
    """Whether an identical request may get an answer where this error status did, and the delay in
    seconds the provider asked for (``retry-after-ms``, else ``retry-after`` in seconds or as a date).

    The SDKs' rule: ``x-should-retry`` when the provider sends it, else 408, 409, 429 and 5xx.
    """
    should = headers.get("x-should-retry")
    retry = should == "true" if should in ("true", "false") else status in (408, 409, 429) or status >= 500
    return retry, _retry_after(headers) if retry else None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    delay: float | None = None
    if (ms := headers.get("retry-after-ms")) is not None:
        delay = _seconds(ms, 1000.0)
    if delay is None and (value := headers.get("retry-after")) is not None:
        delay = _seconds(value, 1.0)
        if delay is None and (date := email.utils.parsedate_tz(value)) is not None:
            delay = email.utils.mktime_tz(date) - time.time()
    return delay if delay is not None and math.isfinite(delay) and delay > 0 else None


def _seconds(value: str, per_second: float) -> float | None:
    try:
        return float(value) / per_second
    except ValueError:
        return None

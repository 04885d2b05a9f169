"""Single-flight: concurrent identical requests in one process make one upstream call.

The first request for a key that misses becomes the *leader*; requests for the same key that arrive
while it is in flight are *followers* and wait for it to land, then read its stored answer. A leader
that fails stores nothing, so its followers find no entry and go upstream themselves: a failure is
never shared as an answer.

One :class:`Flight` serves threads and asyncio tasks alike: threads wait on a
:class:`threading.Event`; tasks wait on a future that the landing thread resolves through its loop's
``call_soon_threadsafe``, so no task ever blocks its event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time

__all__ = ["Flight", "Flights"]


class Flight:
    """One in-flight upstream call that others may wait for."""

    __slots__ = ("_event", "_lock", "_waiters", "started")

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def landed(self) -> bool:
        """Whether the leader has finished (successfully or not)."""
        return self._event.is_set()

    def land(self) -> None:
        """Wake every waiter. Idempotent."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future)

    def wait(self, timeout: float) -> bool:
        """Block this thread until the flight lands; ``False`` on timeout."""
        return self._event.wait(timeout)

    async def wait_async(self, timeout: float) -> bool:
        """Wait in this task until the flight lands; ``False`` on timeout."""
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
            # A waiter that gave up (timeout, cancellation) must not stay on a flight that never lands.
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Flights:
    """The flights in progress, by cache key."""

    def __init__(self, stale_after: float = 60.0) -> None:
        self._lock = threading.Lock()
        self._flights: dict[str, Flight] = {}
        self._stale_after = stale_after

    def join(self, key: str) -> tuple[Flight, bool]:
        """The flight for ``key`` and whether the caller leads it (a new flight) or follows.

        A flight older than ``stale_after`` seconds is treated as lost (a leader whose stream was
        abandoned without being closed) and replaced, so one lost leader cannot slow a key forever.
        """
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and time.monotonic() - flight.started < self._stale_after:
                return flight, False
            if flight is not None:
                flight.land()
            flight = self._flights[key] = Flight()
            return flight, True

    def land(self, key: str, flight: Flight) -> None:
        """End the leader's flight: forget it, then wake its followers."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.land()

    def __len__(self) -> int:
        return len(self._flights)

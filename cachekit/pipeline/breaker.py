"""A circuit breaker for the cache path: stop paying a dead backend's timeout, probe to recover.

States::

    closed ──(threshold consecutive failures)──► open ──(cooldown elapsed)──► half-open
      ▲                                           ▲                               │
      └────────────(the probe succeeds)───────────┼───────────────────────────────┤
                                                  └──────(the probe fails)────────┘

While *open* every call is refused at once (the request goes upstream without touching the store).
After the cooldown one call at a time is let through as a probe (*half-open*); its success closes
the breaker, its failure re-opens it with the cooldown doubled (up to ``max_cooldown``), so a backend
that stays down costs one bounded timeout per cooldown, not one per request.

The breaker knows nothing about I/O: callers ask :meth:`CircuitBreaker.allow` before a store call and
report :meth:`~CircuitBreaker.success` or :meth:`~CircuitBreaker.failure` after it. It is thread-safe
and shared by a cache's sync and async paths.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from cachekit import _fork
from cachekit.errors import ConfigError

__all__ = ["BreakerState", "BreakerStats", "CircuitBreaker"]

logger = logging.getLogger("cachekit.breaker")

BreakerState = Literal["closed", "open", "half-open"]


@dataclass(frozen=True, slots=True)
class BreakerStats:
    """A snapshot of a breaker's state and counters."""

    state: BreakerState
    #: Times the breaker opened (including re-openings after a failed probe).
    opened: int
    #: Calls refused without touching the backend.
    rejected: int
    #: Failures in a row right now.
    consecutive_failures: int
    #: Seconds the current (or next) open period lasts.
    cooldown: float


class CircuitBreaker:
    """Counts consecutive cache-path failures and short-circuits calls while the backend is down.

    Args:
        failure_threshold: consecutive failures that open the breaker.
        cooldown: seconds to stay open before the first probe.
        max_cooldown: the longest open period; each failed probe doubles the cooldown up to this.
        clock: a monotonic time source in seconds (inject a fake one in tests).
        name: how log lines name the backend (never a URL with credentials).
    """

    def __init__(
        self,
        *,
        failure_threshold: int = 3,
        cooldown: float = 1.0,
        max_cooldown: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        name: str = "cache store",
    ) -> None:
        if not isinstance(failure_threshold, int) or failure_threshold < 1:
            raise ConfigError(f"failure_threshold must be an integer >= 1, not {failure_threshold!r}")
        for label, value in (("cooldown", cooldown), ("max_cooldown", max_cooldown)):
            if not 0 < value < math.inf:  # also rejects NaN
                raise ConfigError(f"{label} must be a positive finite number of seconds, not {value!r}")
        if max_cooldown < cooldown:
            raise ConfigError(f"max_cooldown ({max_cooldown}) must not be shorter than cooldown ({cooldown})")
        self._threshold = failure_threshold
        self._base_cooldown = float(cooldown)
        self._max_cooldown = float(max_cooldown)
        self._clock = clock
        self._name = name
        self._lock = _fork.lock(self)
        self._state: BreakerState = "closed"
        self._failures = 0
        self._cooldown = self._base_cooldown
        self._opened_at = 0.0
        # When the probe in flight was let through; a probe that never reports back (its caller was
        # cancelled) stops blocking the next one after a cooldown.
        self._probe_since: float | None = None
        self._opened = 0
        self._rejected = 0

    @property
    def state(self) -> BreakerState:
        """``closed`` (calls go through), ``open`` (refused) or ``half-open`` (one probe at a time)."""
        with self._lock:
            return self._current_state(self._clock())

    def allow(self) -> bool:
        """Whether a cache call may go to the backend now (``False``: skip the cache)."""
        if self._state == "closed":  # the common case, read without the lock (a plain attribute)
            return True
        with self._lock:
            now = self._clock()
            state = self._current_state(now)
            if state == "closed":
                return True
            if state == "half-open" and (
                self._probe_since is None or now - self._probe_since >= self._cooldown
            ):
                self._state = "half-open"
                self._probe_since = now
                return True
            self._rejected += 1
            return False

    def success(self) -> None:
        """Report a backend call that worked: closes a half-open breaker, resets the failure count."""
        if self._state == "closed" and self._failures == 0:
            return
        with self._lock:
            if self._state == "open":
                # A call let through before the breaker opened, answering late: only the probe (let
                # through in half-open) may close it.
                return
            if self._state == "half-open":
                logger.info("%s answers again; closing the circuit breaker", self._name)
            self._state = "closed"
            self._failures = 0
            self._cooldown = self._base_cooldown
            self._probe_since = None

    def failure(self) -> None:
        """Report a failed backend call (an error or a timeout)."""
        with self._lock:
            now = self._clock()
            if self._state == "half-open":
                # The probe failed: back to open, waiting longer this time.
                self._cooldown = min(self._cooldown * 2, self._max_cooldown)
                self._open(now)
                return
            if self._state == "open":
                return  # a call let through before the breaker opened, failing late: not a probe
            self._failures += 1
            if self._failures >= self._threshold:
                self._open(now)

    def stats(self) -> BreakerStats:
        """The current state and counters."""
        with self._lock:
            return BreakerStats(
                state=self._current_state(self._clock()),
                opened=self._opened,
                rejected=self._rejected,
                consecutive_failures=self._failures,
                cooldown=self._cooldown,
            )

    def _open(self, now: float) -> None:
        self._state = "open"
        self._opened_at = now
        self._probe_since = None
        self._opened += 1
        logger.warning(
            "%s failed %d time(s) in a row; skipping it for %.1f s (circuit breaker open)",
            self._name,
            max(self._failures, 1),
            self._cooldown,
        )

    def _current_state(self, now: float) -> BreakerState:
        if self._state == "open" and now - self._opened_at >= self._cooldown:
            return "half-open"
        return self._state

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r}, name={self._name!r})"

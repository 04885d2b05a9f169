"""Time for the local backend's cache lifetimes: a callable returning seconds, real or manual.

Cache entries expire and refresh by the clock they are given, so tests and trace replays can move
time forward exactly (:class:`ManualClock`) instead of sleeping. The default is
:func:`time.monotonic`: lifetimes are durations, so wall-clock jumps must not expire or revive them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["DEFAULT_CLOCK", "Clock", "ManualClock"]

Clock = Callable[[], float]
"""A source of time in seconds; only differences between its readings matter."""

DEFAULT_CLOCK: Clock = time.monotonic
"""The clock used when none is given."""


class ManualClock:
    """A clock that moves only when told to: ``clock()`` reads it, :meth:`advance` moves it forward."""

    def __init__(self, start: float = 0.0) -> None:
        if not math.isfinite(start):
            raise ValueError(f"start must be a finite number of seconds, got {start!r}")
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward and return the new reading; time never goes back."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"a clock only moves forward: seconds must be finite and >= 0, got {seconds!r}")
        self._now += seconds
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"

"""The budget of the property tests and fuzzers, and how one of their failures is reproduced.

They draw fresh random examples on every run: no fixed seed (``derandomize``), no example database,
so each run explores cases no earlier run saw. A failure prints the falsifying example and
Hypothesis's reproduction blob: add the ``@reproduce_failure(...)`` line it prints to the test to
run exactly that case again.

``CACHEKIT_FUZZ_SCALE`` multiplies every budget set here (default 1; ``scripts/test``, which CI
runs, sets a larger one): the same tests, more examples, no code of their own.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings

__all__ = ["SCALE", "fuzz"]


def _scale() -> int:
    raw = os.environ.get("CACHEKIT_FUZZ_SCALE", "1")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"CACHEKIT_FUZZ_SCALE must be a whole number of at least 1, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"CACHEKIT_FUZZ_SCALE must be a whole number of at least 1, got {raw!r}")
    return value


#: How many times its base number of examples each test draws.
SCALE = _scale()


def fuzz(max_examples: int, **options: Any) -> settings:
    """Settings for a randomized property test of ``max_examples`` examples (times :data:`SCALE`).

    No deadline (the machine running the suite may be busy; the properties are about results, not
    speed); the health checks for slow or large examples off (the examples are large on purpose);
    the explain phase off: on Python before 3.12 it traces every line it runs, which made shrinking
    a failure of the planner's properties take minutes, past the suite's per-test timeout, so that
    nothing was reported. ``options`` override any of these.
    """
    chosen: dict[str, Any] = {
        "max_examples": max_examples * SCALE,
        "deadline": None,
        "database": None,
        "derandomize": False,
        "print_blob": True,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
        "phases": tuple(phase for phase in Phase if phase is not Phase.explain),
    }
    chosen.update(options)
    return settings(**chosen)

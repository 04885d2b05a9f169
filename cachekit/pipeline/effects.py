"""The effects a pipeline stage yields, and what a driver sends back for each.

* :class:`Send` → the upstream response (an ``httpx``/``httpx2`` response, body not yet read)
* :class:`Load` → the stored bytes or ``None``
* :class:`Save` → ``None``
* :class:`Read` → ``None`` (the response's body is then in ``response.content``)
* :class:`Wait` → ``"landed"``, ``"timeout"``, or ``"own"`` when the caller leads the flight itself
  (:meth:`Flight.wait <cachekit.pipeline.flights.Flight.wait>` and its async twin decide)
* :class:`Tee` → ``None``, or the response to hand the caller instead (an in-memory response whose
  body ``rewrite`` changed); the driver wraps the response's stream so the recorder sees each chunk
  as it passes to the caller (telling ``idle`` whose turn it is), and when the stream ends performs
  ``on_end``'s store write, then ``release``
* :class:`Offload` → what its function returns; the async driver runs it in a worker thread
  (embedding and vector search for the semantic cache)

A driver throws an effect's exception back into the generator; the stages catch cache-path failures
(logged, counted, then the request goes upstream) and everything else propagates to the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from cachekit._http import Request, Response
from cachekit.pipeline.flights import Flight
from cachekit.providers import sse

_T = TypeVar("_T")

__all__ = ["Effect", "Exchange", "Load", "Offload", "Read", "Save", "Send", "Step", "Tee", "Wait", "nothing"]


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` through the inner transport."""

    request: Request


@dataclass(frozen=True, slots=True)
class Load:
    """Read the stored value under ``key``."""

    key: str


@dataclass(frozen=True, slots=True)
class Save:
    """Store ``value`` under ``key`` for ``ttl`` seconds."""

    key: str
    value: bytes
    ttl: float | None


@dataclass(frozen=True, slots=True)
class Read:
    """Read ``response``'s whole body."""

    response: Response


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait (at most ``timeout`` seconds) for another request's upstream call to land."""

    flight: Flight
    timeout: float


def nothing(*_: object) -> None:
    """A :class:`Tee` callback with nothing to do: a stream that no flight follows (``idle``,
    ``release``) or whose store write never happens (``stored``, a bypassed stream)."""


@dataclass(frozen=True, slots=True)
class Tee:
    """Record ``response``'s stream while the caller reads it.

    When the stream ends the driver calls ``on_end`` with the recorder's complete bytes (``None`` if
    the stream was cut, errored, or abandoned), performs the :class:`Save` it returns and reports the
    outcome to ``stored`` (``None`` on success, else the exception), then calls ``release`` whatever
    happened. While it passes, ``idle(True)`` each time a chunk was handed to the caller and
    ``idle(False)`` each time the caller asks for more (a single-flight leader's progress).

    With ``rewrite``, the recorder still sees the bytes as they came, and the caller gets what
    ``rewrite`` makes of them (a Chat stream asked for usage, without it: :class:`sse.UsageStripper`).
    """

    response: Response
    recorder: sse.StreamRecorder
    on_end: Callable[[bytes | None], Save | None]
    release: Callable[[], None]
    stored: Callable[[Exception | None], None]
    idle: Callable[[bool], None] = nothing
    rewrite: sse.UsageStripper | None = None


@dataclass(frozen=True, slots=True)
class Offload:
    """Run ``fn`` (CPU-bound or blocking: embedding a question, a vector search) and return its result.

    The sync driver calls it inline; the async driver runs it in a worker thread so the event loop
    never waits on a model.
    """

    fn: Callable[[], Any]


Effect = Send | Load | Save | Read | Wait | Tee | Offload
#: A whole exchange: effects out, their results in, the response at the end.
Exchange = Generator[Effect, Any, Response]
#: One stage's step: effects out, the stage's own result at the end.
Step = Generator[Effect, Any, _T]

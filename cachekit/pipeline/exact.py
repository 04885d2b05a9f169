"""Stage 4, exact lookup with the single-flight join: the stored answer under the request's key, in
the form the request wants, with the prompt fields the provider echoed put back
(:mod:`~cachekit.pipeline.entries`); on a miss, the key's flight (:mod:`~cachekit.pipeline.flights`):
the request leads it (and goes upstream), or follows it, waits for its leader to land and reads the
leader's answer.

Reads the keyed call and (on a hit that needs its echoed prompt back) the view's body; writes
nothing on the view; yields :class:`~cachekit.pipeline.effects.Load` and
:class:`~cachekit.pipeline.effects.Wait` (a follower); gives a :class:`~cachekit.pipeline.entries.Hit`,
or the :class:`Lead` of the flight this request now leads, which the driver settles with the
outcome and lands once the answer is in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cachekit.pipeline import respond
from cachekit.pipeline.effects import Step, Wait
from cachekit.pipeline.entries import Hit, lookup, reechoed
from cachekit.pipeline.flights import Flight, Flights
from cachekit.pipeline.key import Call
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.view import RequestView
from cachekit.stores import record

__all__ = ["ExactLookup", "Lead", "Looked"]

logger = logging.getLogger("cachekit.pipeline")


@dataclass(frozen=True, slots=True)
class Lead:
    """The flight a request leads (single-flight): identical requests wait until it lands.

    Until its leader says otherwise a flight has failed (see :meth:`Flight.settle`): the stages after
    the lookup settle it with what they learn, and it lands when the answer is in hand, or, for a
    stream, when the stream ends.
    """

    flights: Flights
    key: str
    flight: Flight

    def settle(self, retry: bool, retry_after: float | None = None) -> None:
        """Record the leader's outcome: whether a follower's retry may get an answer (and after how
        long the provider asked to wait)."""
        self.flight.settle(retry=retry, retry_after=retry_after)

    def land(self) -> None:
        """End the flight and wake its followers."""
        self.flights.land(self.key, self.flight)

    def idle(self, idle: bool) -> None:
        """The leader's stream: whether its caller holds every chunk so far (see :meth:`Flight.idle`)."""
        self.flight.idle(idle)


#: What the exact lookup gives: the answer, or ``None`` and the flight this request now leads (``None``
#: when it goes upstream without one: a store that failed, ``only-if-cached``, a follower that gave up).
Looked = tuple[Hit | None, Lead | None]


class ExactLookup:
    """The exact cache's lookup and single-flight for one pipeline."""

    def __init__(self, runtime: Runtime, flights: Flights) -> None:
        self._rt = runtime
        self.flights = flights

    def find(self, view: RequestView, call: Call) -> Step[Looked]:
        """The stored answer, or ``None`` and the flight this request now leads (single-flight: not
        for ``only-if-cached``, which never goes upstream)."""
        served, failed, source = yield from lookup(
            self._rt, call.key, call.route.dialect, call.form, max_age=call.control.max_age
        )
        if served is not None and source is not None:  # both or neither
            return self._hit(view, call, served, source), None
        if call.control.mode == "only-if-cached" or failed:
            return None, None
        return (yield from self._coalesce(view, call))

    def _coalesce(self, view: RequestView, call: Call) -> Step[Looked]:
        """Single-flight for a miss: lead the key's flight, or follow it and read its answer; ``None,
        None`` to go upstream alone. See :mod:`cachekit.pipeline.flights`."""
        key, dialect, form = call.key, call.route.dialect, call.form
        follower = self.flights.follower(key, self._rt.config.coalesce_timeout)
        replacing: Flight | None = None
        while True:
            flight, leading = self.flights.join(key, instead_of=replacing)
            if leading:
                return (yield from self._lead(view, call, Lead(self.flights, key, flight)))
            step = follower.before(flight)
            if not isinstance(step, str):
                step = follower.after((yield Wait(flight, step)))
            replacing = flight if step == "take over" else None
            if step not in ("read", "give up"):
                continue
            served, failed, source = yield from lookup(
                self._rt, key, dialect, form, max_age=call.control.max_age
            )
            if served is not None and source is not None:  # both or neither
                hit = self._hit(view, call, served, source)
                if hit is not None:
                    self._rt.stats.add("coalesced")
                return hit, None
            if step == "give up" or failed or not flight.retry:
                return None, None  # nothing to elect: this request goes upstream on its own
            # The leader failed in a way a retry may fix: join again, where the first to do so leads.

    def _lead(self, view: RequestView, call: Call, lead: Lead) -> Step[Looked]:
        """Lead the flight after one more look (a leader may have landed between the first look and
        the join)."""
        try:
            served, _, source = yield from lookup(
                self._rt,
                call.key,
                call.route.dialect,
                call.form,
                again=True,
                max_age=call.control.max_age,
            )
        except BaseException:
            # Cancelled (or failed) while leading: land now, or followers would wait for nothing.
            lead.land()
            raise
        if served is not None and source is not None:  # both or neither
            lead.settle(retry=False)
            lead.land()
            return self._hit(view, call, served, source), None
        return None, lead

    def _hit(
        self, view: RequestView, call: Call, served: record.CachedResponse, source: record.CachedResponse
    ) -> Hit | None:
        """The stored answer, replayed for this request; ``None`` when its echoed prompt cannot be put
        back (then the request is answered upstream, without a flight)."""
        rt = self._rt
        replayed = reechoed(rt, served, view)
        if replayed is None:
            return None
        rt.stats.add("hits")
        logger.debug(
            "hit provider=%s dialect=%s key=%s", call.route.provider, call.route.dialect, call.key[-16:]
        )
        return Hit(respond.replay(view.request, replayed, call.key, rt.clock), source, "exact_hit")

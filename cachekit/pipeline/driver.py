"""The driver: one request through the stages, as a generator of effects.

:meth:`Pipeline.exchange` runs the stages in order (``docs/architecture.md``): read controls
(:mod:`~cachekit.pipeline.controls`), shape (:mod:`~cachekit.pipeline.shape`), key
(:mod:`~cachekit.pipeline.key`), exact lookup (:mod:`~cachekit.pipeline.exact`), semantic lookup
(:mod:`~cachekit.pipeline.semantic`), upstream with single-flight (:mod:`~cachekit.pipeline.upstream`),
store (:mod:`~cachekit.pipeline.store`) and record cost (:mod:`~cachekit.pipeline.record_cost`), over
one :class:`~cachekit.pipeline.view.RequestView`. Each stage decides and *yields* the I/O it needs
as effects (:mod:`cachekit.pipeline.effects`); the sync and async transports only perform them
(:mod:`cachekit.transport`), so no decision is written twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cachekit._http import Request, Response
from cachekit.config import CacheConfig
from cachekit.context import current_policy
from cachekit.cost.ledger import Ledger
from cachekit.pipeline import respond
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.pipeline.controls import Control, _BadControl, admit, read_control, strip_control_headers
from cachekit.pipeline.effects import Exchange, Send, Step
from cachekit.pipeline.exact import reechoed
from cachekit.pipeline.flights import Flight, Flights
from cachekit.pipeline.key import Call, Keyer
from cachekit.pipeline.record_cost import Accountant
from cachekit.pipeline.runtime import PipelineStats, Runtime
from cachekit.pipeline.semantic import SemanticCall, SemanticStage
from cachekit.pipeline.shape import Shaper
from cachekit.pipeline.store import Storer
from cachekit.pipeline.upstream import Upstream
from cachekit.pipeline.view import FORM_FIELDS, Form, RequestView, Seen, SeenBodies, _NotCanonical
from cachekit.providers import route_request
from cachekit.providers.state import Verdict
from cachekit.shape import canonical
from cachekit.shape.lint import PrefixLinter
from cachekit.shape.planner import Planner

if TYPE_CHECKING:
    from cachekit.semantic.layer import SemanticLayer

__all__ = ["Pipeline"]

logger = logging.getLogger("cachekit.pipeline")

#: What the exact and semantic lookups give: the answer, or the flight this request leads and what
#: the semantic layer needs to index the fresh answer.
_Cached = tuple[Response | None, Flight | None, SemanticCall | None]


class Pipeline:
    """The caching decisions for one client (all of its transports share one pipeline)."""

    def __init__(
        self,
        config: CacheConfig,
        *,
        secret: bytes | Callable[[], bytes],
        clock: Callable[[], float] = time.time,
        ledger: Ledger | None = None,
        breaker: CircuitBreaker | None = None,
        flight_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        breaker = breaker or CircuitBreaker(
            failure_threshold=config.breaker_threshold, cooldown=config.breaker_cooldown
        )
        self._rt = Runtime(config, clock, breaker, ledger)
        self._options = canonical.CanonicalOptions(
            tool_order=config.tool_order, normalize_whitespace=config.normalize_whitespace
        )
        self._seen = SeenBodies()
        self._keyer = Keyer(self._rt, secret)
        self._shaper = Shaper(self._rt)
        self._accountant = Accountant(self._rt, self._shaper)
        self._semantic = SemanticStage(self._rt, self._accountant, self._options)
        self._storer = Storer(self._rt, self._accountant, self._semantic)
        self._upstream = Upstream(
            self._rt,
            flights=Flights(stale_after=config.coalesce_timeout, clock=flight_clock),
            shaper=self._shaper,
            keyer=self._keyer,
            storer=self._storer,
            accountant=self._accountant,
            semantic=self._semantic,
        )

    # -- what the pipeline shows of its stages ----------------------------------------------------

    @property
    def stats(self) -> PipelineStats:
        """Counters of what the response cache did."""
        return self._rt.stats

    @property
    def breaker(self) -> CircuitBreaker:
        """Skips the store while it keeps failing (shared by every transport of this pipeline)."""
        return self._rt.breaker

    @breaker.setter
    def breaker(self, breaker: CircuitBreaker) -> None:
        self._rt.breaker = breaker

    @property
    def semantic_breaker(self) -> CircuitBreaker:
        """Skips the semantic layer while its index or embedder keeps failing."""
        return self._semantic.breaker

    @semantic_breaker.setter
    def semantic_breaker(self, breaker: CircuitBreaker) -> None:
        self._semantic.breaker = breaker

    @property
    def planner(self) -> Planner:
        """Places cache breakpoints on requests going upstream, and learns token ratios from usage."""
        return self._shaper.planner

    @planner.setter
    def planner(self, planner: Planner) -> None:
        self._shaper.planner = planner

    @property
    def _linter(self) -> PrefixLinter | None:
        return self._shaper.linter

    @_linter.setter
    def _linter(self, linter: PrefixLinter | None) -> None:
        self._shaper.linter = linter

    @property
    def _flights(self) -> Flights:
        return self._upstream.flights

    @property
    def semantic(self) -> SemanticLayer | None:
        """The semantic layer, once configured or first opted in to (its ``stats`` count its work)."""
        return self._semantic.layer

    def close_semantic(self) -> None:
        """Close the semantic layer's index if it opened one."""
        self._semantic.close()

    # -- the flow ---------------------------------------------------------------------------------

    def exchange(self, request: Request) -> Exchange:
        """Handle one request; see :mod:`cachekit.pipeline.effects` for the effects protocol."""
        url = request.url
        route = route_request(request.method, url.scheme, url.host, url.port, url.path)
        # One snapshot of the headers (lower-cased names): each lookup on an httpx Headers object
        # scans and decodes the whole list, and a request needs a dozen lookups.
        headers: dict[str, str] = dict(request.headers.items())
        if route is None:
            strip_control_headers(request, headers)
            self._rt.stats.add("passthroughs")
            return (yield Send(request))

        # Stage 1: read controls.
        try:
            control = read_control(headers, self.config, current_policy())
        except _BadControl as exc:
            message = f"cachekit: {exc}"
            return respond.synthetic(
                request, route.dialect, 400, "invalid_request_error", message, reason="bad-control"
            )
        strip_control_headers(request, headers)
        view = RequestView.of(request, headers, route)
        # A request whose exact bytes were seen before needs no parsing: its canonical digest, form and
        # model are remembered by the digest of those bytes (the hit path's main saving).
        # The dialect is part of what the digest stands for: the same bytes mean other things elsewhere.
        seen = view.seen = self._seen.get(view.digest) if view.content is not None else None
        body = view.parsed() if seen is None else None
        # What may be answered from cache is one table (docs/correctness.md): stage 1 asks it once per
        # new body (the verdict is remembered with the bytes) and bounds the TTL of vouched-for URLs.
        admission = admit(self.config, route.dialect, control, seen, body)
        control = admission.control
        if (reason := admission.reason) is not None:
            # Not a JSON object (multipart upload, a body we cannot read), the cache is off, the caller
            # asked to bypass, or the answer depends on live data or state outside the request: send it
            # as it is (canonical when it is JSON), never coalesced, never stored.
            with contextlib.suppress(_NotCanonical):  # then it goes as the caller wrote it
                view.canonicalize(self._options)
            return (yield from self._upstream.uncached(view, control, reason=reason))

        # Stage 2 (its first part): the canonical form, which the key is made of.
        if seen is None:
            try:
                view.canonicalize(self._options)
            except _NotCanonical:
                # Valid JSON that cannot be keyed (nested deeper than orjson writes): as it is.
                return (yield from self._upstream.uncached(view, control, reason="not-keyable"))
            seen = self._remember(view, admission.verdict or Verdict())
        # Stage 3: key.
        keyed = self._keyer.key(view, control, seen.digest)
        if keyed is None:  # the store could not give its secret: no key, so no caching for this call
            return (yield from self._upstream.uncached(view, control, reason="store-unavailable"))
        call = self._call(view, control, seen, *keyed)
        # Stages 4 and 5: exact lookup (joining the key's flight on a miss), then semantic lookup.
        flight: Flight | None = None
        semantic: SemanticCall | None = None
        if control.mode != "refresh":
            answer, flight, semantic = yield from self._from_cache(view, call)
            if answer is not None:
                return answer
        elif (layer := self._semantic.layer_for(control)) is not None:
            # A refreshed answer is indexed too (embedding only, no search).
            semantic = (yield from self._semantic.find(layer, view, call, search=False))[1]
        if view.canonical is None:
            # Known bytes but no stored answer: canonicalize now, since the canonical body is what
            # goes upstream.
            try:
                view.canonicalize(self._options)
            except BaseException:
                if flight is not None:
                    self._upstream.flights.land(call.key, flight)
                raise
        # Stages 6 to 8: shape the rest, go upstream, store, record the cost.
        return (yield from self._upstream.fetch(view, call, flight, semantic))

    def _call(self, view: RequestView, control: Control, seen: Seen, key: str, partition: str) -> Call:
        """The keyed request; the semantic scope is only built for requests that may use it."""
        scope, binding = (
            self._keyer.semantic_scope(view, control, partition)
            if self._semantic.wants(control)
            else ((), None)
        )
        return Call(key, view.route, seen.form, control, seen.model, partition, scope, binding)

    def _from_cache(self, view: RequestView, call: Call) -> Step[_Cached]:
        """The answer from the exact cache, then the semantic one; else ``None``, the flight this
        request now leads (single-flight) and what the semantic layer needs to index the answer."""
        rt, control, key = self._rt, call.control, call.key
        served, flight = yield from self._upstream.find(call, coalesce=control.mode != "only-if-cached")
        if served is not None:
            replayed = reechoed(rt, served, view)
            if replayed is not None:
                return respond.replay(view.request, replayed, key, rt.clock), None, None
            # The echoed prompt could not be put back: answered upstream instead (flight is None).
        semantic: SemanticCall | None = None
        answer: Response | None = None
        try:
            layer = self._semantic.layer_for(control)
            if layer is not None:
                answer, semantic = yield from self._semantic.find(layer, view, call)
        except BaseException:
            if flight is not None:
                self._upstream.flights.land(key, flight)
            raise
        if answer is not None:
            if flight is not None:
                flight.settle(retry=False)  # answered: followers look for themselves, at once
                self._upstream.flights.land(key, flight)
            return answer, None, None
        if control.mode == "only-if-cached":
            rt.stats.add("misses")
            message = "cachekit: not in cache (x-cachekit: only-if-cached)"
            return respond.synthetic(view.request, call.route.dialect, 504, "api_error", message), None, None
        return None, flight, semantic

    def _remember(self, view: RequestView, verdict: Verdict) -> Seen:
        """Work out (and remember by the view's digest) what the key needs from a parsed body, and
        what it depends on outside itself (``verdict``)."""
        dialect = view.route.dialect
        body, body_bytes = view.parsed(), view.canonical_bytes
        assert body is not None  # canonicalized just before
        assert body_bytes is not None
        excluded = FORM_FIELDS | self.config.ignore_fields
        if not excluded.isdisjoint(body):
            # Opted-out and form fields leave the key but still go upstream.
            kept = {k: v for k, v in body.items() if k not in excluded}
            body_bytes = canonical.dumps(canonical.canonicalize(kept, dialect, self._options).body, dialect)
        model = body.get("model")
        seen = Seen(
            hashlib.sha256(body_bytes).digest(),
            Form.of(dialect, body),
            model if isinstance(model, str) else "",
            verdict,
        )
        self._seen.put(view.digest, seen)
        return seen

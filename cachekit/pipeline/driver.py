"""The driver: one request through the stages, as a generator of effects. It alone wires the stages
and runs every one of them, hits, misses and bypasses alike; no stage calls another.

:meth:`Pipeline.exchange` runs them in order (``docs/architecture.md``): read controls
(:mod:`~cachekit.pipeline.controls`), the canonical form (:meth:`RequestView.canonicalize`), key
(:mod:`~cachekit.pipeline.key`), exact lookup with the single-flight join
(:mod:`~cachekit.pipeline.exact`), semantic lookup (:mod:`~cachekit.pipeline.semantic`), the rest of
shaping with the tenant's timing statistics (:mod:`~cachekit.pipeline.shape`,
:mod:`~cachekit.pipeline.pauses`), upstream (:mod:`~cachekit.pipeline.upstream`), store
(:mod:`~cachekit.pipeline.store`) and record cost (:mod:`~cachekit.pipeline.record_cost`), over one
:class:`~cachekit.pipeline.view.RequestView`. What one stage gives the next passes here, as small
frozen values (:class:`~cachekit.pipeline.key.Call`, :class:`~cachekit.pipeline.entries.Hit`,
:class:`~cachekit.pipeline.exact.Lead`, :class:`~cachekit.pipeline.shape.Shaped`,
:class:`~cachekit.pipeline.store.Kept`, ...). Each stage decides and *yields* the I/O it needs as
effects (:mod:`cachekit.pipeline.effects`); the sync and async transports only perform them
(:mod:`cachekit.transport`), so no decision is written twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cachekit._http import Request, Response
from cachekit.config import CacheConfig
from cachekit.context import current_policy
from cachekit.cost.ledger import Ledger
from cachekit.pipeline import respond, upstream
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.pipeline.controls import Control, _BadControl, admit, read_control, strip_control_headers
from cachekit.pipeline.effects import Exchange, Read, Save, Send, Step
from cachekit.pipeline.entries import Hit
from cachekit.pipeline.exact import ExactLookup, Lead
from cachekit.pipeline.flights import Flights, retry_of
from cachekit.pipeline.key import Call, Keyer
from cachekit.pipeline.pauses import GapStatistics
from cachekit.pipeline.record_cost import Accountant
from cachekit.pipeline.runtime import PipelineStats, Runtime
from cachekit.pipeline.semantic import SemanticCall, SemanticStage
from cachekit.pipeline.shape import Shaped, Shaper
from cachekit.pipeline.store import Storer
from cachekit.pipeline.upstream import AfterStream
from cachekit.pipeline.view import (
    FORM_FIELDS,
    Form,
    RequestView,
    Seen,
    SeenBodies,
    _NotCanonical,
    is_event_stream,
    is_json,
)
from cachekit.providers import route_request
from cachekit.providers.state import Verdict
from cachekit.shape import canonical
from cachekit.shape.lint import PrefixLinter, PrefixLintError
from cachekit.shape.planner import Applied, Planner
from cachekit.stores import record

if TYPE_CHECKING:
    from cachekit.semantic.layer import SemanticLayer

__all__ = ["Pipeline"]

logger = logging.getLogger("cachekit.pipeline")


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
        # The stages. Each holds only the shared runtime (and its own state); what one gives the next
        # is passed in exchange() and _fetch().
        self._keyer = Keyer(self._rt, secret)
        self._exact = ExactLookup(self._rt, Flights(stale_after=config.coalesce_timeout, clock=flight_clock))
        self._semantic = SemanticStage(self._rt, self._options)
        self._pauses = GapStatistics(self._rt)
        self._shaper = Shaper(self._rt)
        self._store = Storer(self._rt)
        self._accountant = Accountant(self._rt)

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
        return self._rt.planner

    @planner.setter
    def planner(self, planner: Planner) -> None:
        self._rt.planner = planner

    @property
    def _linter(self) -> PrefixLinter | None:
        return self._shaper.linter

    @_linter.setter
    def _linter(self, linter: PrefixLinter | None) -> None:
        self._shaper.linter = linter

    @property
    def _flights(self) -> Flights:
        return self._exact.flights

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
            return (yield from self._uncached(view, control, reason))

        # Stage 2 (its first part): the canonical form, which the key is made of.
        if seen is None:
            try:
                view.canonicalize(self._options)
            except _NotCanonical:
                # Valid JSON that cannot be keyed (nested deeper than orjson writes): as it is.
                return (yield from self._uncached(view, control, "not-keyable"))
            seen = self._remember(view, admission.verdict or Verdict())
        # Stage 3: key.
        keyed = self._keyer.key(view, control, seen.digest)
        if keyed is None:  # the store could not give its secret: no key, so no caching for this call
            return (yield from self._uncached(view, control, "store-unavailable"))
        call = self._call(view, control, seen, *keyed)

        lead: Lead | None = None
        semantic: SemanticCall | None = None
        if control.mode != "refresh":
            # Stages 4 and 5: exact lookup (joining the key's flight on a miss), then semantic lookup.
            hit, lead, semantic = yield from self._lookup(view, call)
            if hit is not None:
                # Stage 8: a hit records the cost it avoided.
                self._accountant.account(call, hit.source, hit.outcome)
                return hit.response
            if control.mode == "only-if-cached":
                self._rt.stats.add("misses")
                message = "cachekit: not in cache (x-cachekit: only-if-cached)"
                return respond.synthetic(request, route.dialect, 504, "api_error", message)
        elif (layer := self._semantic.layer_for(control)) is not None:
            # A refreshed answer is indexed too (stage 5 embeds its question, without a search).
            semantic = (yield from self._semantic.find(layer, view, call, search=False))[1]
        if view.canonical is None:
            # Known bytes but no stored answer: canonicalize now, since the canonical body is what
            # goes upstream.
            try:
                view.canonicalize(self._options)
            except BaseException:
                if lead is not None:
                    lead.land()
                raise
        return (yield from self._fetch(view, call, lead, semantic))

    def _lookup(
        self, view: RequestView, call: Call
    ) -> Step[tuple[Hit | None, Lead | None, SemanticCall | None]]:
        """Stages 4 and 5: the answer from the exact cache, then the semantic one; else ``None``, the
        flight this request now leads (single-flight) and what the semantic stage needs to index the
        fresh answer."""
        hit, lead = yield from self._exact.find(view, call)
        if hit is not None:
            return hit, None, None
        semantic: SemanticCall | None = None
        try:
            layer = self._semantic.layer_for(call.control)
            if layer is not None:
                hit, semantic = yield from self._semantic.find(layer, view, call)
        except BaseException:
            if lead is not None:
                lead.land()
            raise
        if hit is not None and lead is not None:
            lead.settle(retry=False)  # answered: followers look for themselves, at once
            lead.land()
            lead = None
        return hit, lead, semantic

    def _uncached(self, view: RequestView, control: Control, reason: str) -> Exchange:
        """A request the cache cannot answer (not keyable, cache off, bypassed, store secret
        unavailable, dependent on server state) takes the miss's path with the cache's stages skipped:
        no key, lookup, flight, timing statistics or store. Unless the caller said never to go upstream."""
        if control.mode == "only-if-cached":
            self._rt.stats.add("misses")
            message = "cachekit: this request cannot be answered from the cache (x-cachekit: only-if-cached)"
            return respond.synthetic(view.request, view.route.dialect, 504, "api_error", message)
        call = Call("", view.route, Form(False, False), control, "")
        return (yield from self._fetch(view, call, None, None, bypass=reason))

    def _fetch(
        self,
        view: RequestView,
        call: Call,
        lead: Lead | None,
        semantic: SemanticCall | None,
        *,
        bypass: str | None = None,
    ) -> Exchange:
        """A request no cache answered: shaped and sent upstream; its complete 2xx answer stored and
        indexed, its cost recorded; the flight it leads landed (a stream's when the stream ends).
        ``bypass``: why the cache is not used (told in the answer's header); nothing is then stored."""
        rt, route, control = self._rt, view.route, call.control
        cached = bypass is None
        handed_off = False
        try:
            rt.stats.add("misses" if cached else "bypasses")
            # Stage 2, the rest: lint, stable-first and breakpoints, planned with the tenant's timing
            # statistics (read once per process and partition).
            if cached:
                yield from self._pauses.load(view, call)
            asked = upstream.ask_usage(view, call)  # before shaping, which serializes the body
            # A call without a cache key: its partition is derived only when shaping needs it.
            partition = call.partition if cached else (lambda: self._keyer.plan_partition(view, control))
            try:
                shaped = self._shaper.shape(view, control, partition)
            except PrefixLintError as exc:
                if lead is not None:
                    lead.settle(retry=False)  # the same request would be refused again
                return self._shaper.refusal(view, exc)
            applied = shaped.applied
            if shaped.changed is not None:
                # Why the provider's prompt cache could not read this call's prefix: the answer's
                # header says it, and record cost writes it into the ledger.
                call = replace(call, prefix_change=shaped.changed)
            # Stage 6: upstream.
            response = yield from upstream.send(view)
            self._shaper.learn_rules(route, response)  # a host outside the table may announce rules
            if not 200 <= response.status_code < 300:
                # Errors (429, 5xx, 4xx) are never stored; the SDK sees them untouched and retries.
                # Followers elect a new leader when a retry may succeed (after the provider's delay).
                if lead is not None:
                    lead.settle(*retry_of(response.status_code, response.headers))
                return _tagged(response, call, shaped, semantic, bypass)
            self._shaper.commit(applied)  # the provider accepted what was planned
            if cached:
                yield from self._pauses.save(call, applied)
            elif not self._accountant.wanted(applied):
                return _tagged(
                    response, call, shaped, semantic, bypass
                )  # nothing to record or learn: the answer passes untouched
            content_type = response.headers.get("content-type")
            # A bypassed request's form is not read: any stream is recorded, for its cost.
            if is_event_stream(content_type) and (call.form.streaming or not cached):
                # The caller reads the stream as it arrives; stages 7 and 8 run when it ends (the
                # entry is stored only if it reached its terminator with no error event).
                after, stored = self._after_stream(call, response, applied, lead, semantic, cached=cached)
                replaced = yield upstream.tee(
                    view, response, after=after, stored=stored, lead=lead, asked=asked
                )
                handed_off = True
                if lead is not None:
                    lead.idle(True)  # the caller holds the stream from here; followers watch it
                return _tagged(replaced if replaced is not None else response, call, shaped, semantic, bypass)
            return (
                yield from self._document(
                    view, call, response, shaped=shaped, lead=lead, semantic=semantic, bypass=bypass
                )
            )
        finally:
            # A stream's flight lands when the stream ends (see Tee); anything else lands here, whether
            # it succeeded, failed, or was cancelled.
            if lead is not None and not handed_off:
                lead.land()

    def _document(
        self,
        view: RequestView,
        call: Call,
        response: Response,
        *,
        shaped: Shaped,
        lead: Lead | None,
        semantic: SemanticCall | None,
        bypass: str | None,
    ) -> Exchange:
        """What follows a 2xx answer that is not a stream: read, then stored (stage 7), indexed (stage
        5) and its cost recorded (stage 8); a bypassed one is only recorded."""
        if not is_json(response.headers.get("content-type")):
            if lead is not None:
                lead.settle(retry=False)
            return _tagged(response, call, shaped, semantic, bypass)  # not JSON: never stored
        yield Read(response)
        # The answer is in hand: followers read it, or (if it cannot be stored) ask for themselves.
        if lead is not None:
            lead.settle(retry=False)
        applied = shaped.applied
        if bypass is not None:
            answer = record.CachedResponse(response.status_code, (), response.content, 0.0)
            self._accountant.account(call, answer, "bypass", applied=applied)
            return _tagged(response, call, shaped, semantic, bypass)
        kept = yield from self._store.keep_document(call, response)
        if kept.stored and semantic is not None:
            yield from self._semantic.remember(semantic, call)
        if semantic is not None and semantic.shadow and kept.complete and kept.answer is not None:
            # Shadow mode: the fresh answer judges what the semantic stage would have served.
            self._semantic.judge_later(semantic, call, kept.answer, kept.document, self._accountant.shadow)
        if kept.answer is not None:  # paid for, stored or not
            self._accountant.account(call, kept.answer, None, kept.document, applied=applied)
        if kept.answer is None or not kept.complete:
            return _tagged(response, call, shaped, semantic, bypass)  # passed on as it came
        refused = semantic.headers if semantic is not None else ()
        extra = respond.miss_headers(shaped.breakpoints, refused, shaped.changed)
        return respond.replay(
            view.request, kept.answer, call.key, self._rt.clock, outcome="miss", extra=extra
        )

    def _after_stream(
        self,
        call: Call,
        response: Response,
        applied: Applied | None,
        lead: Lead | None,
        semantic: SemanticCall | None,
        *,
        cached: bool,
    ) -> tuple[AfterStream, Callable[[Exception | None], None]]:
        """What follows a streamed answer, run by the transport when the stream ends: stage 7 gives
        the store write (which the transport performs) and stage 8 records the cost; once the write
        succeeded, stage 5 indexes the answer. A bypassed stream is only recorded."""
        status, headers = response.status_code, respond.kept_headers(response)

        def after(raw: bytes | None, message: dict[str, Any] | None) -> Save | None:
            if not cached:
                if raw is not None:  # stage 8 only
                    answer = record.CachedResponse(status, headers, raw, 0.0, "sse")
                    self._accountant.account(call, answer, "bypass", message, applied=applied)
                return None
            if lead is not None:
                lead.settle(retry=raw is None)  # a stream cut short: the leader's followers elect another
            kept, save = self._store.keep_stream(call, status, headers, raw, message)
            if kept.answer is not None:
                self._accountant.account(call, kept.answer, None, kept.document, applied=applied)
                if semantic is not None and semantic.shadow:
                    self._semantic.judge_later(
                        semantic, call, kept.answer, kept.document, self._accountant.shadow
                    )
            return save

        def stored(exc: Exception | None) -> None:
            self._store.saved(exc)
            if exc is None and semantic is not None:
                self._semantic.remember_later(semantic, call)

        return after, stored

    def _call(self, view: RequestView, control: Control, seen: Seen, key: str, partition: str) -> Call:
        """The keyed request; the semantic scope is only built for requests that may use it."""
        scope, binding = (
            self._keyer.semantic_scope(view, control, partition)
            if self._semantic.wants(control)
            else ((), None)
        )
        return Call(
            key, view.route, seen.form, control, seen.model, partition, scope, binding, verdict=seen.verdict
        )

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


def _tagged(
    response: Response, call: Call, shaped: Shaped, semantic: SemanticCall | None, bypass: str | None
) -> Response:
    """``response`` as it came from upstream, with the headers that say what the cache did."""
    changed = shaped.changed
    if bypass is not None:
        return respond.tag(response, "bypass", None, shaped.breakpoints, reason=bypass, changed=changed)
    refused = semantic.headers if semantic is not None else ()
    return respond.tag(response, "miss", call.key, shaped.breakpoints, refused, changed=changed)

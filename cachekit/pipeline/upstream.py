"""Stage 6, upstream with single-flight: a miss's lookup joins or leads the key's flight (identical
requests at once make one upstream call), then the leader (or a request the cache cannot answer)
goes upstream with its shaped body, and hands a 2xx answer to the store stage. A Chat stream the
caller asked without usage goes asking for it (:func:`asks_usage`), and reaches the caller without it.

Reads the view (its outgoing request, serialized once here) and the keyed call; writes nothing on
the view; yields :class:`~cachekit.pipeline.effects.Send`, :class:`~cachekit.pipeline.effects.Wait`,
:class:`~cachekit.pipeline.effects.Load` (a follower's read), :class:`~cachekit.pipeline.effects.Read`
and :class:`~cachekit.pipeline.effects.Tee` (a stream recorded as it passes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from cachekit._http import Response
from cachekit.pipeline import respond
from cachekit.pipeline.controls import Control
from cachekit.pipeline.effects import Exchange, Read, Send, Step, Tee, Wait, nothing
from cachekit.pipeline.exact import lookup
from cachekit.pipeline.flights import Flight, Flights, retry_of
from cachekit.pipeline.key import Call, Keyer
from cachekit.pipeline.pauses import GapStatistics
from cachekit.pipeline.record_cost import Accountant
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.semantic import SemanticCall, SemanticStage
from cachekit.pipeline.shape import KNOWN_PROVIDERS, Shaper
from cachekit.pipeline.store import Storer, semantic_headers, settle
from cachekit.pipeline.view import Form, RequestView, is_event_stream, is_json
from cachekit.providers import Route, sse
from cachekit.providers.registry import STREAM_USAGE
from cachekit.shape.lint import PrefixLintError
from cachekit.stores import record

__all__ = ["Upstream", "asks_usage"]

logger = logging.getLogger("cachekit.pipeline")

#: What the exact lookup with single-flight gives: the stored answer, or the flight this request leads.
Led = tuple[record.CachedResponse | None, Flight | None]


def asks_usage(route: Route, form: Form) -> bool:
    """Whether a request of ``form`` is sent asking for a usage the caller did not ask for: a Chat
    stream without ``stream_options.include_usage``, to a provider known to accept the option (a
    stored stream then carries its usage; the caller's stream is given without it)."""
    return (
        form.streaming
        and not form.include_usage
        and route.dialect == "openai_chat"
        and route.provider in STREAM_USAGE
    )


class Upstream:
    """Single-flight and the upstream call for one pipeline."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        flights: Flights,
        shaper: Shaper,
        keyer: Keyer,
        storer: Storer,
        accountant: Accountant,
        semantic: SemanticStage,
    ) -> None:
        self._rt = runtime
        self.flights = flights
        self._shaper = shaper
        self._keyer = keyer
        self._storer = storer
        self._accountant = accountant
        self._semantic = semantic
        self._gaps = GapStatistics(runtime, shaper)

    # -- single-flight around the exact lookup -----------------------------------------------------

    def find(self, call: Call, *, coalesce: bool) -> Step[Led]:
        """The stored answer, or ``None`` and the flight this request now leads (single-flight)."""
        served, failed, source = yield from lookup(
            self._rt, call.key, call.route.dialect, call.form, max_age=call.control.max_age
        )
        if served is not None or not coalesce or failed:
            if source is not None:
                self._hit(call, source)
            return served, None
        return (yield from self._coalesce(call))

    def _coalesce(self, call: Call) -> Step[Led]:
        """Single-flight for a miss: lead the key's flight (``None`` and the flight), or follow it and
        read its answer; ``None, None`` to go upstream alone. See :mod:`cachekit.pipeline.flights`."""
        key, dialect, form = call.key, call.route.dialect, call.form
        follower = self.flights.follower(key, self._rt.config.coalesce_timeout)
        replacing: Flight | None = None
        while True:
            flight, leading = self.flights.join(key, instead_of=replacing)
            if leading:
                return (yield from self._lead(call, flight))
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
                self._rt.stats.add("coalesced")
                self._hit(call, source)
                return served, None
            if step == "give up" or failed or not flight.retry:
                return None, None  # nothing to elect: this request goes upstream on its own
            # The leader failed in a way a retry may fix: join again, where the first to do so leads.

    def _lead(self, call: Call, flight: Flight) -> Step[Led]:
        """Lead ``flight`` after one more look (a leader may have landed between the first look and
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
            self.flights.land(call.key, flight)
            raise
        if served is not None and source is not None:  # both or neither
            flight.settle(retry=False)
            self.flights.land(call.key, flight)
            self._hit(call, source)
            return served, None
        return None, flight

    def _hit(self, call: Call, source: record.CachedResponse) -> None:
        self._rt.stats.add("hits")
        logger.debug(
            "hit provider=%s dialect=%s key=%s", call.route.provider, call.route.dialect, call.key[-16:]
        )
        self._accountant.account(call, source, "exact_hit")

    # -- the upstream call ------------------------------------------------------------------------

    def send(self, view: RequestView) -> Step[Response]:
        """Send the shaped request upstream (every path does it here, sync and async alike); the answer
        of a host outside the provider table may announce the caching rules it bills by."""
        response: Response = yield Send(view.outgoing())
        if view.route.provider not in KNOWN_PROVIDERS:
            self._shaper.learn_rules(view.route, response)
        return response

    def _refused(self, view: RequestView, exc: PrefixLintError) -> Response:
        """``lint="raise"``: the call is answered here with a 400 that names the findings (the SDKs
        raise their BadRequestError, and do not retry); nothing goes upstream."""
        self._rt.stats.add("lint_refusals")
        message = f"cachekit: {exc}"
        return respond.synthetic(
            view.request, view.route.dialect, 400, "invalid_request_error", message, reason="lint"
        )

    def fetch(
        self, view: RequestView, call: Call, flight: Flight | None, semantic: SemanticCall | None
    ) -> Exchange:
        """A miss: go upstream, store a complete 2xx answer, land the flight (if this request leads one)."""
        rt, key, route = self._rt, call.key, call.route
        refused = semantic_headers(semantic)
        handed_off = False
        try:
            rt.stats.add("misses")
            yield from self._gaps.load(view, call)  # the tenant's timing statistics, for the planner
            # Every stored answer carries its usage (it is priced, and serves every form): a Chat stream
            # the caller asked without it is asked with it, and handed over without it.
            asked = asks_usage(route, call.form) and view.ask_usage()
            try:
                shaped = self._shaper.shape(view, call.control, call.partition)
            except PrefixLintError as exc:
                settle(flight, retry=False)  # the same request would be refused again
                return self._refused(view, exc)
            applied, breakpoints = shaped.applied, shaped.breakpoints
            if shaped.changed is not None:
                call = replace(call, prefix_change=shaped.changed)
            changed = shaped.changed
            response = yield from self.send(view)
            content_type = response.headers.get("content-type")
            if not 200 <= response.status_code < 300:
                # Errors (429, 5xx, 4xx) are never stored; the SDK sees them untouched and retries.
                # Followers elect a new leader when a retry may succeed (after the provider's delay).
                settle(flight, *retry_of(response.status_code, response.headers))
                return respond.tag(response, "miss", key, breakpoints, refused, changed=changed)
            self._shaper.commit(applied)
            yield from self._gaps.save(call, applied)
            if call.form.streaming and is_event_stream(content_type):
                # The caller reads the stream as it arrives; the recorder keeps a copy and the entry is
                # stored only if the stream reaches its terminator with no error event.
                status, kept = response.status_code, respond.kept_headers(response)
                release: Callable[[], None] = (
                    (lambda: self.flights.land(key, flight)) if flight is not None else nothing
                )
                recorder = sse.StreamRecorder(route.dialect)
                rewrite = sse.UsageStripper() if asked else None
                if rewrite is not None:
                    response.headers.pop("content-length", None)  # the caller's stream is shorter
                replaced = yield Tee(
                    response,
                    recorder,
                    on_end=lambda raw: self._storer.stream_entry(
                        call, status, kept, raw, applied, flight=flight, message=recorder.message
                    ),
                    release=release,
                    stored=lambda exc: self._semantic.stream_stored(exc, call, semantic),
                    idle=flight.idle if flight is not None else nothing,
                    rewrite=rewrite,
                )
                if replaced is not None:
                    response = replaced
                handed_off = True
                if flight is not None:
                    flight.idle(True)  # the caller holds the stream from here; followers watch it
                return respond.tag(response, "miss", key, breakpoints, refused, changed=changed)
            if not is_json(content_type):
                settle(flight, retry=False)
                # Not JSON: never stored.
                return respond.tag(response, "miss", key, breakpoints, refused, changed=changed)
            yield Read(response)
            # The answer is in hand: followers read it, or (if it cannot be stored) ask for themselves.
            settle(flight, retry=False)
            return (
                yield from self._storer.keep_document(
                    view, call, response, applied=applied, breakpoints=breakpoints, semantic=semantic
                )
            )
        finally:
            # A stream's flight lands when the stream ends (see Tee); anything else lands here, whether
            # it succeeded, failed, or was cancelled.
            if flight is not None and not handed_off:
                self.flights.land(key, flight)

    def uncached(self, view: RequestView, control: Control, *, reason: str) -> Exchange:
        """Send a request the cache cannot answer (not keyable, cache off, bypassed, store secret
        unavailable, dependent on server state) — unless the caller said never to go upstream. The
        answer says ``reason`` in its bypass header; its cost is still recorded."""
        rt, route = self._rt, view.route
        if control.mode == "only-if-cached":
            rt.stats.add("misses")
            message = "cachekit: this request cannot be answered from the cache (x-cachekit: only-if-cached)"
            return respond.synthetic(view.request, route.dialect, 504, "api_error", message)
        rt.stats.add("bypasses")
        try:
            # A call without a cache key: its partition is derived only when shaping needs it.
            shaped = self._shaper.shape(view, control, lambda: self._keyer.plan_partition(view, control))
        except PrefixLintError as exc:
            return self._refused(view, exc)
        applied = shaped.applied
        response = yield from self.send(view)
        tagged = respond.tag(
            response, "bypass", None, shaped.breakpoints, reason=reason, changed=shaped.changed
        )
        if not 200 <= response.status_code < 300:
            return tagged
        self._shaper.commit(applied)
        if not self._accountant.wanted(applied):
            return tagged  # nothing to record or learn: the answer passes untouched
        call = Call("", route, Form(False, False), control, "", prefix_change=shaped.changed)
        content_type = response.headers.get("content-type")
        if is_event_stream(content_type):
            # Recorded as it passes, accounted when it ends; nothing is stored.
            status, kept = response.status_code, respond.kept_headers(response)

            def account(raw: bytes | None) -> None:
                if raw is not None:
                    answer = record.CachedResponse(status, kept, raw, 0.0, "sse")
                    self._accountant.account(call, answer, "bypass", applied=applied)

            yield Tee(
                response,
                sse.StreamRecorder(route.dialect),
                on_end=account,
                release=nothing,
                stored=nothing,
            )
        elif is_json(content_type):
            yield Read(response)
            self._accountant.account(
                call,
                record.CachedResponse(response.status_code, (), response.content, 0.0),
                "bypass",
                applied=applied,
            )
        return tagged

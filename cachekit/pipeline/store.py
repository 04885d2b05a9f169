"""Stage 7, store: a complete 2xx answer written under the request's key (without the prompt the
provider echoed, unless prompts may be stored), then indexed by the semantic layer; every answer
accounted, stored or not.

Reads the keyed call and the upstream answer; writes nothing on the view; yields
:class:`~cachekit.pipeline.effects.Save` (and the semantic layer's indexing
:class:`~cachekit.pipeline.effects.Offload`). A failed write is logged and counted, never raised.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import orjson

from cachekit._http import Response
from cachekit.pipeline import respond
from cachekit.pipeline.effects import Exchange, Save
from cachekit.pipeline.exact import unechoed
from cachekit.pipeline.flights import Flight
from cachekit.pipeline.key import Call
from cachekit.pipeline.record_cost import Accountant
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.semantic import SemanticCall, SemanticStage
from cachekit.pipeline.view import RequestView
from cachekit.providers import incomplete_answer
from cachekit.providers.answers import has_usage
from cachekit.shape.planner import Applied
from cachekit.stores import record

__all__ = ["Storer", "settle"]

logger = logging.getLogger("cachekit.pipeline")


def settle(flight: Flight | None, retry: bool, retry_after: float | None = None) -> None:
    """Record a leader's outcome on its flight (see :meth:`Flight.settle`), if it leads one."""
    if flight is not None:
        flight.settle(retry=retry, retry_after=retry_after)


def semantic_headers(semantic: SemanticCall | None) -> respond.Headers:
    """The semantic layer's headers on a miss (none when it was not asked)."""
    return semantic.headers if semantic is not None else ()


class Storer:
    """Writes the answers of one pipeline's misses."""

    def __init__(self, runtime: Runtime, accountant: Accountant, semantic: SemanticStage) -> None:
        self._rt = runtime
        self._accountant = accountant
        self._semantic = semantic

    def keep_document(
        self,
        view: RequestView,
        call: Call,
        response: Response,
        *,
        applied: Applied | None,
        breakpoints: str | None,
        semantic: SemanticCall | None,
    ) -> Exchange:
        """A 2xx JSON answer, read: stored when it is a complete answer of its dialect, accounted
        either way, and returned to the caller."""
        rt = self._rt
        key, route, ttl = call.key, call.route, call.control.ttl
        refused = semantic_headers(semantic)
        try:
            document = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            # Labelled JSON but not JSON (a proxy's error page with a 200): passed on, never stored.
            logger.warning("a 2xx answer labelled JSON is not JSON; not stored (key=%s)", key[-16:])
            return respond.tag(response, "miss", key, breakpoints, refused, changed=call.prefix_change)
        answer = record.CachedResponse(
            status=response.status_code,
            headers=respond.kept_headers(response),
            body=response.content,
            created_at=rt.clock(),
        )
        if (why := incomplete_answer(route.dialect, document)) is not None:
            # A 2xx that is not a complete answer (a gateway's {"error": ...}, a Responses status
            # other than completed): passed on untouched and accounted (it may be paid for),
            # never stored, so the next identical request asks again.
            rt.stats.add("incomplete_answers")
            logger.debug("not a complete %s answer (%s); not stored (key=%s)", route.dialect, why, key[-16:])
            self._accountant.account(call, answer, None, document, applied=applied)
            return respond.tag(response, "miss", key, breakpoints, refused, changed=call.prefix_change)
        stored = replace(
            answer, body=unechoed(rt, route.dialect, "json", answer.body), usage=has_usage(document)
        )
        if rt.breaker.allow():
            try:
                yield Save(key, record.encode(stored), ttl)
                rt.saved(None)
            except Exception as exc:  # a failing store must never fail the user's call
                rt.saved(exc)
            else:
                if semantic is not None:
                    yield from self._semantic.step(semantic, "remember", key, ttl)
        else:
            rt.stats.add("store_skips")
        self._accountant.account(call, stored, None, document, applied=applied)
        logger.debug("miss provider=%s dialect=%s key=%s", route.provider, route.dialect, key[-16:])
        extra = respond.miss_headers(breakpoints, refused, call.prefix_change)
        return respond.replay(view.request, answer, key, rt.clock, outcome="miss", extra=extra)

    def stream_entry(
        self,
        call: Call,
        status: int,
        headers: respond.Headers,
        raw: bytes | None,
        applied: Applied | None = None,
        *,
        flight: Flight | None = None,
        message: dict[str, Any] | None = None,
    ) -> Save | None:
        """The store write for a finished stream, or ``None`` when it must not be stored.
        ``message``: what the stream assembles, when the recorder kept it (read, not assembled again)."""
        rt = self._rt
        settle(flight, retry=raw is None)  # a stream cut short: the leader's followers elect another
        if raw is None:
            rt.stats.add("incomplete_streams")
            logger.debug("stream for key=%s ended incomplete or with an error; not stored", call.key[-16:])
            return None
        usage = None if message is None else has_usage(message)  # None: the exact stage looks itself
        answer = record.CachedResponse(status, headers, raw, rt.clock(), form="sse", usage=usage)
        # Paid for whether or not stored.
        self._accountant.account(call, answer, None, message, applied=applied)
        if not rt.breaker.allow():
            rt.stats.add("store_skips")
            return None
        entry = replace(answer, body=unechoed(rt, call.route.dialect, "sse", raw))
        return Save(call.key, record.encode(entry), call.control.ttl)

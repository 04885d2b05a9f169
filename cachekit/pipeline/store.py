"""Stage 7, store: a complete 2xx answer written under the request's key (without the prompt the
provider echoed, unless prompts may be stored).

Reads the keyed call and the upstream answer (a document read whole, or a stream's bytes once the
stream ended); writes nothing on the view; yields :class:`~cachekit.pipeline.effects.Save` (for a
stream it gives the Save for the transport to perform when the stream ends); gives what record cost
reads, and whether the answer was stored (then the semantic stage indexes it). A failed write is
logged and counted, never raised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import orjson

from cachekit._http import Response
from cachekit.pipeline import respond
from cachekit.pipeline.effects import Save, Step
from cachekit.pipeline.entries import unechoed
from cachekit.pipeline.key import Call
from cachekit.pipeline.runtime import Runtime
from cachekit.providers import incomplete_answer
from cachekit.providers.answers import has_usage
from cachekit.stores import record

__all__ = ["Kept", "Storer"]

logger = logging.getLogger("cachekit.pipeline")


@dataclass(frozen=True, slots=True)
class Kept:
    """What the store stage made of an answer."""

    #: The answer as it came, for record cost (and, when complete, to replay to the caller); ``None``
    #: for an answer with nothing to record (labelled JSON but not JSON, a stream cut short).
    answer: record.CachedResponse | None
    #: Its parsed body (a stream's assembled message), when read.
    document: dict[str, Any] | None = None
    #: A complete answer of its dialect (anything else is passed on as it came, never stored).
    complete: bool = False
    #: Written to the store: the semantic stage indexes it.
    stored: bool = False


class Storer:
    """Writes the answers of one pipeline's misses."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def keep_document(self, call: Call, response: Response) -> Step[Kept]:
        """A 2xx JSON answer, read: stored when it is a complete answer of its dialect."""
        rt = self._rt
        key, route, ttl = call.key, call.route, call.control.ttl
        try:
            document = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            # Labelled JSON but not JSON (a proxy's error page with a 200): passed on, never stored.
            logger.warning("a 2xx answer labelled JSON is not JSON; not stored (key=%s)", key[-16:])
            return Kept(None)
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
            return Kept(answer, document)
        entry = replace(
            answer, body=unechoed(rt, route.dialect, "json", answer.body), usage=has_usage(document)
        )
        stored = False
        if rt.breaker.allow():
            try:
                yield Save(key, record.encode(entry), ttl)
                rt.saved(None)
                stored = True
            except Exception as exc:  # a failing store must never fail the user's call
                rt.saved(exc)
        else:
            rt.stats.add("store_skips")
        logger.debug("miss provider=%s dialect=%s key=%s", route.provider, route.dialect, key[-16:])
        return Kept(answer, document, complete=True, stored=stored)

    def keep_stream(
        self,
        call: Call,
        status: int,
        headers: respond.Headers,
        raw: bytes | None,
        message: dict[str, Any] | None,
    ) -> tuple[Kept, Save | None]:
        """A finished stream (``raw``: its bytes, ``None`` when it was cut, errored or abandoned; its
        ``message``: what it assembles, when the recorder kept it): what record cost reads, and the
        store write for the transport to perform (``None`` when it must not be stored)."""
        rt = self._rt
        if raw is None:
            rt.stats.add("incomplete_streams")
            logger.debug("stream for key=%s ended incomplete or with an error; not stored", call.key[-16:])
            return Kept(None), None
        usage = None if message is None else has_usage(message)  # None: the exact stage looks itself
        answer = record.CachedResponse(status, headers, raw, rt.clock(), form="sse", usage=usage)
        kept = Kept(answer, message, complete=True)  # paid for whether or not stored
        if not rt.breaker.allow():
            rt.stats.add("store_skips")
            return kept, None
        entry = replace(answer, body=unechoed(rt, call.route.dialect, "sse", raw))
        return kept, Save(call.key, record.encode(entry), call.control.ttl)

    def saved(self, exc: Exception | None) -> None:
        """The outcome of a stream's store write, which the transport performed (``exc``: it failed)."""
        self._rt.saved(exc)

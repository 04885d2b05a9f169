"""Stored answers as the stages read and write them: an entry read under a key in the form the
request wants (:func:`lookup`; served only in a form whose fields it holds, :func:`lacks`), with the
prompt fields the provider echoed taken out before it is written (:func:`unechoed`) and put back
when it is served (:func:`reechoed`); and :class:`Hit`, a request answered from the cache.

Not a stage: the exact lookup (:mod:`~cachekit.pipeline.exact`), single-flight followers, the
semantic lookup (:mod:`~cachekit.pipeline.semantic`) and the store (:mod:`~cachekit.pipeline.store`)
all read and write entries through these, so one rule decides what an entry serves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import orjson

from cachekit._http import Response
from cachekit._types import Dialect
from cachekit.cost.ledger import Outcome
from cachekit.errors import CorruptEntryError
from cachekit.pipeline.effects import Load, Step
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.view import JSON_TYPE, SSE_TYPE, Form, RequestView
from cachekit.providers import echo, sse
from cachekit.providers.answers import carries_usage, has_usage
from cachekit.stores import record

__all__ = ["Found", "Hit", "in_form", "lacks", "lookup", "reechoed", "unechoed"]

logger = logging.getLogger("cachekit.pipeline")


@dataclass(frozen=True, slots=True)
class Hit:
    """A request answered from the cache (exact or semantic): what the caller gets, and what record
    cost reads."""

    #: The stored answer, replayed for this request (its echoed prompt put back, tagged).
    response: Response
    #: The stored answer to read the usage from (a document when the entry holds one).
    source: record.CachedResponse
    outcome: Outcome


#: A lookup's result: the answer to serve (or ``None``); whether the store failed; the stored form
#: to read the usage from.
Found = tuple[record.CachedResponse | None, bool, record.CachedResponse | None]


def in_form(cached: record.CachedResponse, dialect: Dialect, form: Form) -> record.CachedResponse:
    """``cached`` converted to the form the request wants (stream ↔ document), or as stored.

    Raises :class:`sse.StreamError` when a stored stream cannot be assembled (treated as corrupt).
    """
    if cached.form == "json" and not form.streaming:
        return cached
    if cached.form == "sse" and not form.streaming:
        body, content_type = orjson.dumps(sse.assemble(dialect, cached.body)), JSON_TYPE
    elif cached.form == "json":
        body, content_type = sse.synthesize(dialect, cached.body, include_usage=form.include_usage), SSE_TYPE
    else:
        body, content_type = sse.restream(dialect, cached.body, include_usage=form.include_usage), SSE_TYPE
    headers = tuple((k, v) for k, v in cached.headers if k.lower() != "content-type")
    return replace(
        cached,
        headers=(*headers, ("content-type", content_type)),
        body=body,
        form="sse" if form.streaming else "json",
    )


def lookup(
    rt: Runtime,
    key: str,
    dialect: Dialect,
    form: Form,
    *,
    again: bool = False,
    max_age: float | None = None,
) -> Step[Found]:
    """The stored answer under ``key`` in the form this request wants (or ``None``); whether the
    store failed (then the request goes upstream without coalescing: no second lookup); and the
    form of the answer to read its usage from (a JSON document when either form is one, so a
    streamed hit is not re-assembled just for the ledger). ``again``: the same request's second look
    (a new flight's leader), whose unusable entry the first look already counted and logged.

    An answer stored more than ``max_age`` seconds ago is not served (a miss, overwritten by the fresh
    answer): a request whose URLs the caller vouched for accepts nothing older than its ``url_ttl``,
    whoever stored the answer and for however long.
    """
    if not rt.breaker.allow():
        rt.unavailable("lookup", None)
        return None, True, None
    try:
        raw = yield Load(key)
    except Exception as exc:
        rt.unavailable("lookup", exc)
        return None, True, None
    rt.breaker.success()
    if raw is None:
        return None, False, None
    try:
        stored = record.decode(raw)
        if max_age is not None and rt.clock() - stored.created_at > max_age:
            return None, False, None  # older than the caller accepts: a miss, overwritten
        if (lacking := lacks(stored, dialect, form)) is not None:
            # Served in this form, the answer would lack a field the provider always sends in it: a
            # miss, and the fresh answer (asked with its usage) overwrites the entry.
            if not again:
                rt.stats.add("incomplete_entries")
                logger.debug("cache entry %s has no %s, which this form carries: a miss", key[-16:], lacking)
            return None, False, None
        served = in_form(stored, dialect, form)
    except (CorruptEntryError, sse.StreamError) as exc:
        # Treated as a miss; the fresh answer overwrites it under the same key.
        if not again:
            rt.stats.add("corrupt_entries")
            logger.warning("corrupt cache entry %s is ignored and will be overwritten: %s", key[-16:], exc)
        return None, False, None
    return served, False, served if served.form == "json" else stored


def lacks(stored: record.CachedResponse, dialect: Dialect, form: Form) -> str | None:
    """The field the provider always sends in ``form`` that ``stored`` does not hold (``"usage"``),
    or ``None`` when it can be served in that form. The one rule of what forms an entry serves: the
    exact lookup, single-flight followers and semantic hits all read entries through :func:`lookup`.

    A record written before cachekit kept the fact is looked at (raises what reading it raises:
    :class:`CorruptEntryError`, :class:`sse.StreamError`).
    """
    if not carries_usage(dialect, streaming=form.streaming, include_usage=form.include_usage):
        return None
    usage = stored.usage
    if usage is None:
        if stored.form == "sse":
            usage = has_usage(sse.assemble(dialect, stored.body))
        else:
            try:
                usage = has_usage(orjson.loads(stored.body))
            except orjson.JSONDecodeError as exc:
                raise CorruptEntryError("stored document is not JSON") from exc
    return None if usage else "usage"


def unechoed(rt: Runtime, dialect: Dialect, form: record.BodyForm, body: bytes) -> bytes:
    """``body`` without the prompt fields the provider echoed, when prompts must not be stored."""
    if rt.config.store_prompts or not echo.ECHOED_FIELDS[dialect]:
        return body
    return echo.strip_echo(dialect, form, body)


def reechoed(rt: Runtime, served: record.CachedResponse, view: RequestView) -> record.CachedResponse | None:
    """A hit with the echoed prompt fields put back from the request (see :mod:`cachekit.providers.echo`),
    or ``None`` when they cannot be (then the request is answered upstream)."""
    dialect = view.route.dialect
    if rt.config.store_prompts or not echo.ECHOED_FIELDS[dialect]:
        return served
    # The canonical body when built, else the caller's: the same fields either way.
    body = view.canonical if view.canonical is not None else view.parsed()
    if body is None:
        return served
    try:
        restored = echo.restore_echo(dialect, served.form, served.body, body)
    except (TypeError, ValueError, RecursionError) as exc:  # e.g. nesting deeper than orjson writes
        logger.warning("cannot restore the echoed prompt of a cached answer; going upstream: %s", exc)
        return None
    return replace(served, body=restored)

"""How answers leave the pipeline: a stored answer replayed, an upstream answer tagged with what the
cache did, or an answer made here (a refusal, a 504 for ``only-if-cached``). Pure functions: no state,
no effects."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from cachekit._http import Request, Response, build_response, library_of
from cachekit._types import CacheOutcome, Dialect
from cachekit.pipeline.controls import (
    BREAKPOINTS_HEADER,
    BYPASS_REASON_HEADER,
    CACHE_HEADER,
    INELIGIBLE_HEADER,
    KEY_HEADER,
    PREFIX_CHANGED_HEADER,
    REFUSED_HEADER,
)
from cachekit.providers import error_body
from cachekit.stores import record

__all__ = ["kept_headers", "miss_headers", "replay", "synthetic", "tag"]

Headers = tuple[tuple[str, str], ...]

# Response headers that describe one connection or one client rather than the answer. They are not
# stored: replaying a cookie or a transfer encoding to another caller would be wrong.
_UNSTORED_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",  # the stored body is already decoded
        "set-cookie",
        "proxy-authenticate",
        "proxy-connection",
        "upgrade",
        "trailer",
        "te",
        "age",
        CACHE_HEADER,
        KEY_HEADER,
        BYPASS_REASON_HEADER,
        BREAKPOINTS_HEADER,  # describes one upstream call, not the answer
        PREFIX_CHANGED_HEADER,
        REFUSED_HEADER,
        INELIGIBLE_HEADER,
    }
)


def kept_headers(response: Response) -> Headers:
    """The response headers worth replaying (raw names and values, in order)."""
    return tuple(
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in response.headers.raw
        if name.decode("latin-1").lower() not in _UNSTORED_HEADERS
    )


def miss_headers(breakpoints: str | None, semantic: Headers = (), changed: str | None = None) -> Headers:
    """What cachekit tells about an answer it fetched: the breakpoints it planned (or why none), what
    changed in the conversation's prefix since its previous call, and what the semantic layer says
    (the guards that refused similar questions, or why it could not serve the request)."""
    planned = () if breakpoints is None else ((BREAKPOINTS_HEADER, breakpoints),)
    prefix = () if changed is None else ((PREFIX_CHANGED_HEADER, changed),)
    return (*planned, *prefix, *semantic)


def _reason_header(reason: str | None) -> Headers:
    """The bypass-reason header, on a bypass only."""
    return () if reason is None else ((BYPASS_REASON_HEADER, reason),)


def replay(
    request: Request,
    cached: record.CachedResponse,
    key: str,
    clock: Callable[[], float],
    *,
    outcome: CacheOutcome = "hit",
    extra: Headers = (),
) -> Response:
    """``cached`` as a response to ``request``, tagged with the outcome and (on a hit) its age."""
    headers = [*cached.headers, (CACHE_HEADER, outcome), (KEY_HEADER, key[-16:]), *extra]
    if outcome in ("hit", "semantic"):
        headers.append(("age", str(max(0, int(clock() - cached.created_at)))))
    return build_response(library_of(request), cached.status, headers, cached.body)


def tag(
    response: Response,
    outcome: CacheOutcome,
    key: str | None,
    breakpoints: str | None = None,
    semantic: Headers = (),
    *,
    reason: str | None = None,
    changed: str | None = None,
) -> Response:
    """``response`` (from upstream) with the headers that say what the cache did."""
    response.headers[CACHE_HEADER] = outcome
    if key is not None:
        response.headers[KEY_HEADER] = key[-16:]
    for name, value in (*miss_headers(breakpoints, semantic, changed), *_reason_header(reason)):
        response.headers[name] = value
    return response


def synthetic(
    request: Request,
    dialect: Dialect,
    status: int,
    error_type: str,
    message: str,
    *,
    reason: str | None = None,
) -> Response:
    """An answer made here: a 504 miss (only-if-cached), or a refusal that bypasses the cache for
    ``reason`` (a bad control header, lint)."""
    # x-should-retry: false stops the SDKs from retrying an answer that cannot change.
    headers = [
        ("content-type", "application/json"),
        ("x-should-retry", "false"),
        (CACHE_HEADER, "bypass" if reason is not None else "miss"),
        *_reason_header(reason),
    ]
    content = orjson.dumps(error_body(dialect, error_type, message))
    return build_response(library_of(request), status, headers, content)

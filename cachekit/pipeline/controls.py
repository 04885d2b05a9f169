"""Stage 1, read controls: the per-request policy from ``x-cachekit-*`` headers, the call site's
policy (:mod:`cachekit.context`) and the configuration, and whether the request may use the cache.

Reads the view's headers (and, for a body never seen before, its parsed body); writes nothing on
the view; yields no effects. The header names cachekit reads and writes are defined here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from cachekit._http import Request
from cachekit._types import Dialect
from cachekit.config import MAX_TTL, MODES, CacheConfig, Mode, check_ttl
from cachekit.context import UNSET, CallPolicy
from cachekit.errors import ConfigError
from cachekit.pipeline.view import Seen
from cachekit.providers.state import Verdict, classify
from cachekit.shape.lifetimes import Expect, breakpoints_setting

__all__ = [
    "BREAKPOINTS_HEADER",
    "BYPASS_REASON_HEADER",
    "CACHE_HEADER",
    "CONTROL_PREFIX",
    "INELIGIBLE_HEADER",
    "KEY_HEADER",
    "PREFIX_CHANGED_HEADER",
    "REFUSED_HEADER",
    "SIMILARITY_HEADER",
    "URL_TTL_HEADER",
    "Admission",
    "Control",
    "admit",
    "bypass_reason",
    "read_control",
    "strip_control_headers",
]

CONTROL_PREFIX = "x-cachekit"
CACHE_HEADER = "x-cachekit-cache"
#: On a semantic hit: the cosine similarity between the question asked and the one answered.
SIMILARITY_HEADER = "x-cachekit-similarity"
#: On a semantic miss: why similar stored questions were not served (guard reasons, comma-separated).
REFUSED_HEADER = "x-cachekit-semantic-refused"
#: On a request the semantic layer could not serve at all: why (``sampling``, ``not_text``, ...).
INELIGIBLE_HEADER = "x-cachekit-semantic-ineligible"
KEY_HEADER = "x-cachekit-key"
#: On a bypass: why the cache was not used, as short stable tokens (comma-separated when several):
#: ``caller``, ``cache-off``, ``not-keyable``, ``store-unavailable``, ``bad-control``, ``lint``, or
#: what the request depends on outside its body (``server-state:conversation``, ``live-data:url``,
#: ...: :mod:`cachekit.providers.state`, docs/correctness.md).
BYPASS_REASON_HEADER = "x-cachekit-bypass-reason"
#: On a request: seconds the content it gives by URL (images, documents, files the provider fetches)
#: is taken as unchanged, so the request may use the cache; its answer then lives at most that long
#: (the call site's ``url_ttl``, :func:`cachekit.cached`, does the same for every call inside).
URL_TTL_HEADER = "x-cachekit-url-ttl"
#: On an answer from upstream: the cache_control markers cachekit added (``where=ttl/reason, ...``), the
#: ``prompt_cache_key`` it set, ``none`` (planned, nothing to place), or ``off; <why>`` (the reasons below).
BREAKPOINTS_HEADER = "x-cachekit-breakpoints"
#: On an answer from upstream: why the provider's prompt cache could not read this call's prefix as
#: far as the conversation's previous call would have let it, the first change in prefix order
#: (``messages_changed; at=messages.3``, ``tools_reordered; at=tools.0``, ``tool_choice_changed;
#: at=tool_choice``). The conversation is the one ``x-cachekit-conversation``, ``prompt_cache_key`` or
#: ``metadata.user_id`` names, else the one its first blocks start. Absent when nothing changed.
PREFIX_CHANGED_HEADER = "x-cachekit-prefix-changed"


@dataclass(frozen=True, slots=True)
class Control:
    """The effective per-request policy after headers, context and config are merged."""

    mode: Mode
    ttl: float | None
    #: The tenant label (for the ledger): the request's own, else the client's configured one.
    tenant: str | None
    namespace: str
    site: str | None
    #: The semantic cache for this request: on, off, or ``None`` (the client's setting).
    semantic: bool | None = None
    semantic_threshold: float | None = None
    #: Plan cache breakpoints (and OpenAI's prompt_cache_key) for this request.
    breakpoints: bool = True
    #: ``x-cachekit-conversation``: the conversation lint compares this request with.
    conversation: str | None = None
    #: The per-request tenant (header, else call site): it narrows the client's partition unless
    #: ``trust_tenant_header`` lets it select one (:func:`cachekit.stores.keys.partition_for`).
    request_tenant: str | None = None
    #: What the caller knows about its traffic (a fixed lifetime, an expected gap): config or header.
    expect: Expect | None = None
    #: Seconds the caller takes content given by URL as unchanged (``None``: URLs are live, so such a
    #: request bypasses the cache): ``x-cachekit-url-ttl``, else the call site's ``url_ttl``.
    url_ttl: float | None = None
    #: The oldest stored answer this request accepts, in seconds (``None``: any within its TTL); set
    #: by :func:`admit` to :attr:`url_ttl` for a request whose URLs the caller vouched for.
    max_age: float | None = None


class _BadControl(ValueError):
    """An ``x-cachekit-*`` header has a value cachekit cannot use."""


def read_control(headers: dict[str, str], config: CacheConfig, context: CallPolicy) -> Control:
    """The request's policy; raises :class:`_BadControl` for a header value cachekit cannot use."""
    mode: str = headers.get(CONTROL_PREFIX) or context.mode or "default"
    if mode not in MODES:
        raise _BadControl(f"x-cachekit must be one of {sorted(MODES - {'default'})}, not {mode!r}")
    ttl = config.ttl if context.ttl is UNSET else context.ttl
    if (raw_ttl := headers.get(CONTROL_PREFIX + "-ttl")) is not None:
        ttl = _seconds(CONTROL_PREFIX + "-ttl", raw_ttl)
    request_tenant = headers.get(CONTROL_PREFIX + "-tenant") or context.tenant or None
    namespace = headers.get(CONTROL_PREFIX + "-namespace") or context.namespace or config.namespace
    semantic, threshold = context.semantic, None
    if (raw_semantic := headers.get(CONTROL_PREFIX + "-semantic")) is not None:
        semantic, threshold = _semantic_header(raw_semantic)
    url_ttl = context.url_ttl
    if (raw_url_ttl := headers.get(URL_TTL_HEADER)) is not None:
        url_ttl = _seconds(URL_TTL_HEADER, raw_url_ttl)
    breakpoints, expect = breakpoints_setting(config.breakpoints)
    if (raw_breakpoints := headers.get(BREAKPOINTS_HEADER)) is not None:
        try:
            breakpoints, expect = breakpoints_setting(raw_breakpoints)
        except ValueError as exc:
            raise _BadControl(f"x-cachekit-breakpoints {exc}") from None
    return Control(
        mode,  # type: ignore[arg-type]
        ttl,  # type: ignore[arg-type]
        request_tenant or config.tenant,
        namespace,
        context.site,
        semantic,
        threshold,
        breakpoints,
        headers.get(CONTROL_PREFIX + "-conversation") or None,
        request_tenant=request_tenant,
        expect=expect,
        url_ttl=url_ttl,
    )


def _seconds(name: str, value: str) -> float:
    """A header's number of seconds in (0, :data:`~cachekit.config.MAX_TTL`]; :class:`_BadControl` for
    anything else. Refused, not clamped: a TTL past the bound is a caller's mistake the 400 points out."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan  # refused below, with the range
    try:
        return check_ttl(seconds, name, allow_none=False)  # type: ignore[return-value]
    except ConfigError:
        raise _BadControl(
            f"{name} must be a positive number of seconds, at most {MAX_TTL:.0f} (ten years), not {value!r}"
        ) from None


def _semantic_header(value: str) -> tuple[bool, float | None]:
    """``x-cachekit-semantic``: ``on``/``off`` (also true/false, yes/no), or a number: a cosine threshold
    in [-1, 1] for this request (which implies on; ``1`` is the strictest threshold, not "true")."""
    word = value.strip().lower()
    if word in ("on", "true", "yes"):
        return True, None
    if word in ("off", "false", "no"):
        return False, None
    try:
        threshold = float(word)
    except ValueError:
        threshold = math.nan
    if not -1.0 <= threshold <= 1.0:
        raise _BadControl(
            f"x-cachekit-semantic must be on, off or a cosine threshold in [-1, 1], not {value!r}"
        )
    return True, threshold


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a routed request may use the cache: why not (``None``: it may), what its body depends on
    outside itself, and the policy it runs under (its TTL bounded when the caller vouched for its URLs)."""

    reason: str | None
    #: The body's classification (``None`` when the request was not looked at: bypassed before, or
    #: not keyable).
    verdict: Verdict | None
    control: Control


def admit(
    config: CacheConfig, dialect: Dialect, control: Control, seen: Seen | None, body: dict[str, Any] | None
) -> Admission:
    """Decide, before any key is made, whether the request may use the cache (docs/correctness.md).

    A body already seen was classified then: its verdict is remembered with it. A request whose body
    depends on live data or server state bypasses the cache with those reasons, unless the only
    reason is content given by URL and the caller set ``url_ttl``: then it is cached, but its answer
    lives at most ``url_ttl`` seconds (the smaller of that and its TTL) and only an answer at most that
    old is served.
    """
    if not config.enabled:
        return Admission("cache-off", None, control)
    if control.mode == "bypass":
        return Admission("caller", None, control)
    if seen is not None:
        verdict = seen.verdict
    elif body is None:
        return Admission("not-keyable", None, control)
    else:
        verdict = classify(dialect, body)
    vouched = control.url_ttl
    if remaining := verdict.remaining(urls_vouched=vouched is not None):
        return Admission(", ".join(remaining), verdict, control)
    if vouched is not None and verdict.fetches_urls:
        ttl = vouched if control.ttl is None else min(control.ttl, vouched)
        control = replace(control, ttl=ttl, max_age=vouched)
    return Admission(None, verdict, control)


def bypass_reason(
    config: CacheConfig, dialect: Dialect, control: Control, seen: Seen | None, body: dict[str, Any] | None
) -> str | None:
    """Why a request skips the cache, before any key is made (``None``: it may use the cache); see
    :func:`admit`."""
    return admit(config, dialect, control, seen, body).reason


def strip_control_headers(request: Request, headers: dict[str, str]) -> None:
    """Remove the ``x-cachekit-*`` headers from ``request`` (``headers``: its snapshot, kept)."""
    for name in [n for n in headers if n.startswith(CONTROL_PREFIX)]:
        del request.headers[name]

"""Stage 1, read controls: the per-request policy from ``x-cachekit-*`` headers, the call site's
policy (:mod:`cachekit.context`) and the configuration, and whether the request may use the cache.

Reads the view's headers (and, for a body never seen before, its parsed body); writes nothing on
the view; yields no effects. The header names cachekit reads and writes are defined here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cachekit._http import Request
from cachekit._types import Dialect
from cachekit.config import MAX_TTL, MODES, CacheConfig, Mode, check_ttl
from cachekit.context import UNSET, CallPolicy
from cachekit.errors import ConfigError
from cachekit.gaps import Expect, breakpoints_setting
from cachekit.pipeline.view import Seen
from cachekit.providers import server_state

__all__ = [
    "BREAKPOINTS_HEADER",
    "BYPASS_REASON_HEADER",
    "CACHE_HEADER",
    "CONTROL_PREFIX",
    "INELIGIBLE_HEADER",
    "KEY_HEADER",
    "REFUSED_HEADER",
    "SIMILARITY_HEADER",
    "BadControl",
    "Control",
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
#: what the request depends on outside its body (``server-state:conversation``, ``live-data:web_search``,
#: ...: :mod:`cachekit.providers.state`).
BYPASS_REASON_HEADER = "x-cachekit-bypass-reason"
#: On an answer from upstream: the cache_control markers cachekit added (``where=ttl/reason, ...``), the
#: ``prompt_cache_key`` it set, ``none`` (planned, nothing to place), or ``off; <why>`` (the reasons below).
BREAKPOINTS_HEADER = "x-cachekit-breakpoints"


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
    #: ``trust_tenant_header`` lets it select one (:func:`cachekit.exact.keys.partition_for`).
    request_tenant: str | None = None
    #: What the caller knows about its traffic (a fixed lifetime, an expected gap): config or header.
    expect: Expect | None = None


class BadControl(ValueError):
    """An ``x-cachekit-*`` header has a value cachekit cannot use."""


def read_control(headers: dict[str, str], config: CacheConfig, context: CallPolicy) -> Control:
    """The request's policy; raises :class:`BadControl` for a header value cachekit cannot use."""
    mode: str = headers.get(CONTROL_PREFIX) or context.mode or "default"
    if mode not in MODES:
        raise BadControl(f"x-cachekit must be one of {sorted(MODES - {'default'})}, not {mode!r}")
    ttl = config.ttl if context.ttl is UNSET else context.ttl
    if (raw_ttl := headers.get(CONTROL_PREFIX + "-ttl")) is not None:
        try:
            seconds = float(raw_ttl)
        except ValueError:
            seconds = math.nan  # refused below, with the range
        try:
            ttl = check_ttl(seconds, "x-cachekit-ttl", allow_none=False)
        except ConfigError:
            # Refused, not clamped: a TTL past the bound is a caller's mistake the 400 points out.
            raise BadControl(
                f"x-cachekit-ttl must be a positive number of seconds, at most {MAX_TTL:.0f} (ten "
                f"years), not {raw_ttl!r}"
            ) from None
    request_tenant = headers.get(CONTROL_PREFIX + "-tenant") or context.tenant or None
    namespace = headers.get(CONTROL_PREFIX + "-namespace") or context.namespace or config.namespace
    semantic, threshold = context.semantic, None
    if (raw_semantic := headers.get(CONTROL_PREFIX + "-semantic")) is not None:
        semantic, threshold = _semantic_header(raw_semantic)
    breakpoints, expect = breakpoints_setting(config.breakpoints)
    if (raw_breakpoints := headers.get(BREAKPOINTS_HEADER)) is not None:
        try:
            breakpoints, expect = breakpoints_setting(raw_breakpoints)
        except ValueError as exc:
            raise BadControl(f"x-cachekit-breakpoints {exc}") from None
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
    )


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
        raise BadControl(
            f"x-cachekit-semantic must be on, off or a cosine threshold in [-1, 1], not {value!r}"
        )
    return True, threshold


def bypass_reason(
    config: CacheConfig, dialect: Dialect, control: Control, seen: Seen | None, body: dict[str, Any] | None
) -> str | None:
    """Why a request skips the cache, before any key is made (``None``: it may use the cache).

    Bytes already seen were keyed before, so they passed every test here (a request on server state
    is never remembered): only a new body is asked what it depends on.
    """
    if not config.enabled:
        return "cache-off"
    if control.mode == "bypass":
        return "caller"
    if seen is not None:
        return None
    if body is None:
        return "not-keyable"
    return ", ".join(server_state(dialect, body)) or None


def strip_control_headers(request: Request, headers: dict[str, str]) -> None:
    """Remove the ``x-cachekit-*`` headers from ``request`` (``headers``: its snapshot, kept)."""
    for name in [n for n in headers if n.startswith(CONTROL_PREFIX)]:
        del request.headers[name]

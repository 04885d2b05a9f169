"""Per-call policy carried in a context variable, so it follows threads' and tasks' call stacks.

The decorator :func:`cachekit.cached` and the context manager :func:`cachekit.policy` set it; the
transport reads it for every request made inside. A request's own ``x-cachekit-*`` headers win over
the context, which wins over the client's :class:`~cachekit.config.CacheConfig`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import cast

from cachekit.config import MODES, Mode, check_ttl
from cachekit.errors import ConfigError

__all__ = ["CallPolicy", "current_policy", "policy"]


class _Unset:
    """Marker for "not set here" (``None`` is a meaningful ttl: never expire)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """What the enclosing code asked for; fields left unset defer to the client's config."""

    tenant: str | None = None
    namespace: str | None = None
    ttl: float | _Unset | None = UNSET
    mode: Mode | None = None
    site: str | None = None
    #: Opt in to (``True``) or out of (``False``) the semantic cache; ``None`` defers to the client.
    semantic: bool | None = None
    #: Seconds the content requests give by URL is taken as unchanged (``None``: URLs are live, and
    #: such requests bypass the cache); see docs/correctness.md.
    url_ttl: float | None = None

    def merged(self, inner: CallPolicy) -> CallPolicy:
        """The policy in force when ``inner`` is entered inside ``self``: inner's set fields win."""
        return replace(
            self,
            tenant=inner.tenant if inner.tenant is not None else self.tenant,
            namespace=inner.namespace if inner.namespace is not None else self.namespace,
            ttl=self.ttl if isinstance(inner.ttl, _Unset) else inner.ttl,
            mode=inner.mode if inner.mode is not None else self.mode,
            site=inner.site if inner.site is not None else self.site,
            semantic=inner.semantic if inner.semantic is not None else self.semantic,
            url_ttl=inner.url_ttl if inner.url_ttl is not None else self.url_ttl,
        )


_EMPTY = CallPolicy()
_current: ContextVar[CallPolicy] = ContextVar("cachekit_policy", default=_EMPTY)


def current_policy() -> CallPolicy:
    """The policy in force here (an all-unset policy outside any decorator)."""
    return _current.get()


def make_policy(
    *,
    tenant: str | None,
    namespace: str | None,
    ttl: float | _Unset | None,
    bypass: bool,
    mode: str | None,
    site: str | None = None,
    semantic: bool | None = None,
    url_ttl: float | None = None,
) -> CallPolicy:
    """Validate decorator arguments into a :class:`CallPolicy`."""
    if bypass and mode not in (None, "bypass"):
        raise ConfigError("bypass=True conflicts with mode=" + repr(mode))
    chosen = "bypass" if bypass else mode
    if chosen is not None and chosen not in MODES:
        raise ConfigError(f"mode must be one of {sorted(MODES)}, not {chosen!r}")
    if not isinstance(ttl, _Unset):
        check_ttl(ttl)
    checked = cast("Mode | None", chosen)  # validated against MODES above
    if semantic is not None and not isinstance(semantic, bool):
        raise ConfigError(f"semantic must be True, False or None, not {semantic!r}")
    if url_ttl is not None:
        url_ttl = check_ttl(url_ttl, "url_ttl")
    return CallPolicy(
        tenant=tenant,
        namespace=namespace,
        ttl=ttl,
        mode=checked,
        site=site,
        semantic=semantic,
        url_ttl=url_ttl,
    )


@contextmanager
def policy(
    *,
    tenant: str | None = None,
    namespace: str | None = None,
    ttl: float | _Unset | None = UNSET,
    bypass: bool = False,
    mode: str | None = None,
    site: str | None = None,
    semantic: bool | None = None,
    url_ttl: float | None = None,
) -> Iterator[CallPolicy]:
    """Apply a cache policy to every LLM call made inside the ``with`` block (threads and tasks
    started inside inherit it through :mod:`contextvars`). ``site`` labels the calls in the cost
    ledger; ``semantic`` opts the calls in to (or out of) the semantic cache; ``url_ttl`` takes the
    content the calls give by URL as unchanged for that many seconds, so they may use the cache."""
    entered = _current.get().merged(
        make_policy(
            tenant=tenant,
            namespace=namespace,
            ttl=ttl,
            bypass=bypass,
            mode=mode,
            site=site,
            semantic=semantic,
            url_ttl=url_ttl,
        )
    )
    token = _current.set(entered)
    try:
        yield entered
    finally:
        _current.reset(token)

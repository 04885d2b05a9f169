"""What hosts outside the provider table say about the prompt-caching rules they bill by.

A host cachekit does not know (a gateway, ``cachekit serve``) may name its rules in a response
header, ``x-cachekit-rules: anthropic`` (a provider of the cache-rules table, or ``none`` for a host
that bills no prompt cache). cachekit's local backend announces them on every answer. The pipeline
feeds every answer of such a host to :meth:`HostRules.learn` and asks :meth:`HostRules.announced`
before planning the next request to it. The real providers announce nothing: they are known by host.

Announcements are remembered per base URL and API (``https://gw/anthropic`` Messages and
``https://gw/v1`` Chat are separate, since one server may bill its APIs by different rules). A later
announcement replaces an earlier one (a restarted server with other rules); an answer without one
changes nothing once the host has announced, since an error page of a proxy in front of it says
nothing about its billing.
"""

from __future__ import annotations

import functools

from cachekit import _fork
from cachekit.providers.registry import Route

__all__ = ["NO_PROMPT_CACHE", "RULES_HEADER", "HostRules"]

#: The response header that names the caching rules a host bills by.
RULES_HEADER = "x-cachekit-rules"
#: The announcement of a host that bills every prompt token as uncached.
NO_PROMPT_CACHE = "none"


@functools.cache
def _announceable() -> frozenset[str]:
    """The names a host may announce: the providers of the bundled cache-rules table, and ``none``."""
    from cachekit.providers.cache_rules import default_cache_rules

    return frozenset(default_cache_rules().providers) | {NO_PROMPT_CACHE}


def _where(route: Route) -> tuple[str, str]:
    # Messages and count_tokens are one API; Chat and Responses are each their own.
    api = "anthropic" if route.dialect.startswith("anthropic") else route.dialect
    return route.base_url, api


class HostRules:
    """The announced caching rules of the hosts one client talks to. Thread-safe."""

    def __init__(self) -> None:
        self._lock = _fork.lock(self)
        #: By base URL and API: the announced rules, or ``""`` for a host that answered silently.
        self._heard: dict[tuple[str, str], str] = {}
        self._silent_hosts: set[str] = set()

    def learn(self, route: Route, announced: str | None, *, answered: bool) -> bool:
        """Remember what an answer from ``route``'s host announced (``None``: nothing, or a name
        cachekit has no rules for). ``answered``: a 2xx, so that silence means something.

        Returns ``True`` exactly once per host (``route.provider``): the first time it answered
        without ever having announced rules, which is when the caller should warn.
        """
        where = _where(route)
        name = announced.strip().lower() if announced is not None else None
        if name is not None and name in _announceable():
            with self._lock:
                self._heard[where] = name
            return False
        if not answered or where in self._heard:  # the common case, without the lock
            return False
        with self._lock:
            if where in self._heard:
                return False
            self._heard[where] = ""
            if route.provider in self._silent_hosts:
                return False
            self._silent_hosts.add(route.provider)
            return True

    def announced(self, route: Route) -> str | None:
        """The rules ``route``'s host announced (a provider name or ``none``), or ``None``."""
        return self._heard.get(_where(route)) or None

    def answered(self, route: Route) -> bool:
        """Whether ``route``'s host has answered (with or without an announcement)."""
        return _where(route) in self._heard

"""Configuration: :class:`CacheConfig` (frozen) and where cachekit keeps its files.

Nothing is read from the environment unless asked: :meth:`CacheConfig.from_env` opts in, and the
drop-in clients call it only to fill what the caller did not say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cachekit._types import ToolOrder
from cachekit.errors import ConfigError
from cachekit.stores.base import AsyncStore, Store

if TYPE_CHECKING:
    from cachekit.cost.ledger import Ledger

__all__ = ["DEFAULT_TTL", "CacheConfig", "Mode", "cachekit_home"]

#: How one request uses the response cache (the ``x-cachekit`` header's values, plus ``default``).
#: ``bypass``: no lookup, no store. ``refresh``: no lookup, store the fresh answer.
#: ``only-if-cached``: never call upstream; a miss is a 504.
Mode = Literal["default", "bypass", "refresh", "only-if-cached"]

MODES: frozenset[str] = frozenset({"default", "bypass", "refresh", "only-if-cached"})

#: Entries live a week unless told otherwise: long enough for repeated agent runs and test suites,
#: short enough that a changed model behind an unchanged name is picked up.
DEFAULT_TTL = 7 * 24 * 3600.0


def cachekit_home() -> Path:
    """The folder cachekit keeps files in: ``$CACHEKIT_HOME``, else ``~/.cache/cachekit``."""
    configured = os.environ.get("CACHEKIT_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "cachekit"


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """How a client caches. Every field has a safe default; exact caching is on.

    Attributes:
        store: a store object, or a URL (``memory://``, ``sqlite:///path``); ``None`` means
            ``$CACHEKIT_CACHE_URL`` or else SQLite under :func:`cachekit_home`.
        enabled: turn the response cache off while keeping canonical bodies.
        ttl: seconds an entry lives (``None``: until evicted).
        namespace: a label that separates entries (per app, per test suite); part of every key.
        tenant: an explicit partition that replaces the credential's HMAC.
        share_across_credentials: let different API keys share entries (opt-in).
        tool_order: ``keep`` the caller's tool order, or ``sort`` tools by name.
        normalize_whitespace: opt-in CRLF → LF and trailing-whitespace stripping in prose.
        ignore_fields: top-level body fields left out of the key (opt-out; e.g. ``metadata``).
        credential_headers: more request headers that carry a credential (a gateway's own key header),
            HMAC'd into the partition with ``x-api-key``, ``authorization``, ``api-key`` and
            ``x-goog-api-key``. Names are lower-case.
        ledger: record every call's usage and cost: ``True`` (default) for the process's default ledger
            (SQLite at ``$CACHEKIT_HOME/ledger.sqlite3``, written off the request path), a
            :class:`cachekit.cost.Ledger` of your own, or ``False`` for none.
        coalesce_timeout: seconds a request waits for an identical one already upstream (single-flight)
            before going upstream itself; also the age after which a leader that never finished (a
            stream abandoned without being closed) stops holding its key.
    """

    store: Store | AsyncStore | str | None = None
    enabled: bool = True
    ttl: float | None = DEFAULT_TTL
    namespace: str = "default"
    tenant: str | None = None
    share_across_credentials: bool = False
    tool_order: ToolOrder = "keep"
    normalize_whitespace: bool = False
    ignore_fields: frozenset[str] = field(default_factory=frozenset)
    credential_headers: tuple[str, ...] = ()
    coalesce_timeout: float = 60.0
    ledger: Ledger | bool = True

    def __post_init__(self) -> None:
        if self.ttl is not None and not self.ttl > 0:
            raise ConfigError(f"ttl must be a positive number of seconds or None, not {self.ttl!r}")
        if self.tool_order not in ("keep", "sort"):
            raise ConfigError(f"tool_order must be 'keep' or 'sort', not {self.tool_order!r}")
        if not self.coalesce_timeout > 0:
            raise ConfigError(
                f"coalesce_timeout must be a positive number of seconds, not {self.coalesce_timeout!r}"
            )
        if not self.namespace:
            raise ConfigError("namespace must be a non-empty string")

    @classmethod
    def from_env(cls, **overrides: object) -> CacheConfig:
        """Build a config from ``CACHEKIT_*`` variables, then apply ``overrides``.

        Reads ``CACHEKIT_CACHE_URL`` (store), ``CACHEKIT_ENABLED`` (``0``/``false`` turns the cache off),
        ``CACHEKIT_TTL`` (seconds) and ``CACHEKIT_NAMESPACE``.
        """
        config = cls()
        env = os.environ
        if url := env.get("CACHEKIT_CACHE_URL"):
            config = replace(config, store=url)
        if (enabled := env.get("CACHEKIT_ENABLED")) is not None:
            config = replace(config, enabled=enabled.strip().lower() not in ("0", "false", "no", "off"))
        if ttl := env.get("CACHEKIT_TTL"):
            try:
                config = replace(config, ttl=float(ttl))
            except ValueError:
                raise ConfigError(f"CACHEKIT_TTL must be a number of seconds, not {ttl!r}") from None
        if namespace := env.get("CACHEKIT_NAMESPACE"):
            config = replace(config, namespace=namespace)
        return replace(config, **overrides)  # type: ignore[arg-type]  # checked by __post_init__

"""Configuration: :class:`CacheConfig` (frozen) and where cachekit keeps its files.

Nothing is read from the environment unless asked: :meth:`CacheConfig.from_env` opts in, and the
drop-in clients call it only to fill what the caller did not say.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from cachekit._home import cachekit_home
from cachekit._types import ToolOrder
from cachekit.errors import ConfigError
from cachekit.shape.lifetimes import breakpoints_setting
from cachekit.stores.base import AsyncStore, Store

if TYPE_CHECKING:
    from cachekit.cost.ledger import Ledger
    from cachekit.semantic.layer import SemanticConfig
    from cachekit.shape.lint import Finding

__all__ = [
    "DEFAULT_TTL",
    "MAX_TTL",
    "Breakpoints",
    "CacheConfig",
    "LintMode",
    "Mode",
    "OnCacheError",
    "cachekit_home",
    "check_ttl",
]

#: How one request uses the response cache (the ``x-cachekit`` header's values, plus ``default``).
#: ``bypass``: no lookup, no store. ``refresh``: no lookup, store the fresh answer.
#: ``only-if-cached``: never call upstream; a miss is a 504.
Mode = Literal["default", "bypass", "refresh", "only-if-cached"]

#: What a cache-path failure (store down, timeout, open circuit breaker) does to the request:
#: ``bypass`` logs, counts and goes upstream; ``raise`` raises
#: :class:`~cachekit.errors.CacheUnavailableError`.
OnCacheError = Literal["bypass", "raise"]

#: Breakpoint planning: ``auto`` places ``cache_control`` markers (and OpenAI's ``prompt_cache_key``)
#: with lifetimes learned from the traffic; ``"5m"`` / ``"1h"`` fixes their lifetime; a number is the
#: expected seconds between a conversation's requests; ``off`` plans nothing.
Breakpoints = Literal["auto", "off", "5m", "1h"] | float

#: What prefix lint does with a finding: log it, raise before the call, or nothing.
LintMode = Literal["warn", "raise", "off"]

MODES: frozenset[str] = frozenset({"default", "bypass", "refresh", "only-if-cached"})

#: Entries live a week unless told otherwise: long enough for repeated agent runs and test suites,
#: short enough that a changed model behind an unchanged name is picked up.
DEFAULT_TTL = 7 * 24 * 3600.0

#: The longest TTL cachekit accepts: ten years (315,360,000 seconds). A longer one is a mistake (a
#: week in milliseconds, given as seconds, is 19 years) or means "never expire", which is ``None``;
#: and every store keeps ten years exactly (Redis ``PEXPIRE`` milliseconds, the SQLite and memory
#: stores' float epoch seconds), where a number such as 1e308 overflowed the Redis store's
#: millisecond conversion and failed every write.
MAX_TTL = 10 * 365 * 24 * 3600.0


def check_ttl(value: object, name: str = "ttl", *, allow_none: bool = True) -> float | None:
    """``value`` as a TTL in seconds: a number in (0, :data:`MAX_TTL`], or ``None`` (never expires)
    where ``allow_none``. Raises :class:`ConfigError` naming ``name`` and the range otherwise (NaN,
    infinity, zero, negative, beyond ten years, a bool, anything that is not a number)."""
    if value is None and allow_none:
        return None
    # bool is an int subclass; True seconds is certainly a mistake. NaN fails the comparison.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL:
        never = ", or None for no expiry" if allow_none else ""
        raise ConfigError(
            f"{name} must be a positive number of seconds, at most {MAX_TTL:.0f} (ten years){never}; "
            f"got {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """How a client caches. Every field has a safe default; exact caching is on.

    Attributes:
        store: a store object, or a URL (``memory://``, ``sqlite:///path``); ``None`` means
            ``$CACHEKIT_CACHE_URL`` or else SQLite under :func:`cachekit_home`.
        enabled: turn the response cache off while keeping canonical bodies.
        ttl: seconds an entry lives (``None``: until evicted).
        namespace: a label that separates entries (per app, per test suite); part of every key.
        tenant: an explicit partition that replaces the credential's HMAC: the application's own
            choice, so every API key of this client shares its entries (and a revoked key still reads
            them). A per-request tenant only narrows it (see ``trust_tenant_header``).
        share_across_credentials: let different API keys share entries (opt-in).
        trust_tenant_header: let a per-request tenant (the ``x-cachekit-tenant`` header,
            ``cachekit.policy(tenant=...)``, ``@cachekit.cached(tenant=...)``) select the partition by
            itself, shared by every API key that names it (opt-in). By default (``False``) any code on
            the request path can set one, so it only narrows the partition this client's settings give
            (the credential's HMAC, ``tenant`` or ``shared``): it never reaches another key's or
            tenant's entries. Turn it on only when nothing untrusted can set the header (see
            docs/security.md).
        tool_order: ``keep`` the caller's tool order, or ``sort`` tools by name.
        normalize_whitespace: opt-in CRLF → LF and trailing-whitespace stripping in prose.
        ignore_fields: top-level body fields left out of the key (opt-out; e.g. ``metadata``).
        credential_headers: more request headers that carry a credential (a gateway's own key header),
            HMAC'd into the partition with ``x-api-key``, ``authorization``, ``api-key`` and
            ``x-goog-api-key``. Names are lower-case.
        credential_tenants: the operator's map of credentials to shared tenants: a credential's
            :func:`~cachekit.stores.keys.credential_fingerprint` (``sha256:<hex>``, so the map never
            holds a key) to a tenant label. Requests carrying a mapped credential share that tenant's
            partition; every other credential keeps its own.
        ledger: record every call's usage and cost: ``True`` (default) for the process's default ledger
            (SQLite at ``$CACHEKIT_HOME/ledger.sqlite3``, written off the request path), a
            :class:`cachekit.cost.Ledger` of your own, or ``False`` for none.
        coalesce_timeout: seconds a request waits for an identical one already upstream (single-flight)
            before going upstream itself; also the age after which a leader that never finished (a
            stream abandoned without being closed) stops holding its key.
        on_cache_error: ``bypass`` (default): a failing store is logged, counted and skipped, and the
            request goes upstream; ``raise``: the call fails with
            :class:`~cachekit.errors.CacheUnavailableError` (for callers who must not spend money
            when the cache is down, such as a test suite replaying recorded answers).
        breaker_threshold: consecutive store failures that open the circuit breaker (then the store
            is skipped without waiting for its timeout, and probed once per cooldown).
        breaker_cooldown: seconds the breaker stays open before its first probe (doubling after each
            failed probe, up to 30 s).
        store_prompts: ``False`` keeps prompt text that a provider echoes in its response (the
            Responses API's ``instructions`` and ``tools``) out of the store; it is put back from the
            request on replay. The exact cache never stores request bodies, only their digest; the
            semantic cache keeps each indexed question's text (its guards compare it), so the two
            cannot be combined.
        semantic: the semantic cache: ``False`` (default: off, though a request or call site may opt
            in), ``True`` (on, with the defaults: a memory index and the bundled all-MiniLM-L6-v2), or a
            :class:`cachekit.semantic.SemanticConfig` (index URL, threshold, ...). Needs the
            ``semantic`` extra.
        encryption_keys: encrypt stored responses at rest with AES-256-GCM: a mapping of key id to
            32-byte key (the first is current), or a spec ``"kid:base64key,kid2:..."``; needs the
            ``encryption`` extra. An entry that does not decrypt is a miss.
        price_as: the provider whose price table prices calls to a host cachekit does not know (a
            gateway, a proxy, or the local backend standing in for a provider), e.g. ``"anthropic"``,
            and whose caching rules plan their breakpoints (``"openai"`` never sets OpenAI's
            ``prompt_cache_key`` on another host). Keys are unaffected: an unknown host's entries never
            mix with a known provider's. Set, it takes precedence over what the host announces. Unset,
            a host that announces its rules (``x-cachekit-rules``, as the local backend does) is
            priced by them from its first answer on and planned from its second call on; any other
            host's calls are recorded with their token counts but no cost, get no breakpoints, and
            one warning per client names this option.
        breakpoints: ``auto`` (default): place ``cache_control`` breakpoints on requests to providers
            with explicit prompt caching (Anthropic, Bailian) and set ``prompt_cache_key`` on OpenAI
            requests that have none (see :mod:`cachekit.shape.planner`), with 1-hour lifetimes where
            the tenant's timing statistics say they pay (:mod:`cachekit.shape.lifetimes`); ``"5m"`` or
            ``"1h"``: the same markers, all with that lifetime; a positive number: the expected seconds
            between a conversation's requests, which decides the lifetime (1 hour for gaps between 5
            minutes and an hour); ``off``: send prompts as written. The header
            ``x-cachekit-breakpoints`` (any of these values) overrides it per request.
        lint: report volatile content in the cached prefix (timestamps, ids, reordered tools, a
            changed ``tool_choice``...) before each upstream call: ``warn`` (default: logged once per
            conversation and finding), ``raise`` (the request is not sent: it is answered with a 400
            ``invalid_request_error`` naming the findings, which the SDKs raise as their
            ``BadRequestError`` without retrying) or ``off``. The header ``x-cachekit-conversation``
            names the conversation a request belongs to.
        on_lint: called with each :class:`~cachekit.shape.lint.Finding` (for metrics, or a test that must
            keep prompts stable).
        volatile_patterns: extra regular expressions whose matches in tools or system prompts lint
            reports as volatile (and ``stable_first`` moves).
        stable_first: opt-in: move system blocks that lint finds volatile after the stable ones, so the
            stable ones stay a cacheable prefix (the model sees the same blocks in another order).
    """

    # Not in the repr: a store URL may carry a password (redis://user:password@host).
    store: Store | AsyncStore | str | None = field(default=None, repr=False)
    enabled: bool = True
    ttl: float | None = DEFAULT_TTL
    namespace: str = "default"
    tenant: str | None = None
    share_across_credentials: bool = False
    trust_tenant_header: bool = False
    tool_order: ToolOrder = "keep"
    normalize_whitespace: bool = False
    ignore_fields: frozenset[str] = field(default_factory=frozenset)
    credential_headers: tuple[str, ...] = ()
    credential_tenants: Mapping[str, str] = field(default_factory=dict, repr=False)
    coalesce_timeout: float = 60.0
    ledger: Ledger | bool = True
    on_cache_error: OnCacheError = "bypass"
    breaker_threshold: int = 3
    breaker_cooldown: float = 1.0
    store_prompts: bool = True
    semantic: SemanticConfig | bool = False
    encryption_keys: Mapping[str, bytes] | str | None = field(default=None, repr=False)
    price_as: str | None = None
    breakpoints: Breakpoints = "auto"
    lint: LintMode = "warn"
    on_lint: Callable[[Finding], None] | None = field(default=None, repr=False)
    volatile_patterns: tuple[str, ...] = ()
    stable_first: bool = False

    def __post_init__(self) -> None:
        check_ttl(self.ttl)
        if self.tool_order not in ("keep", "sort"):
            raise ConfigError(f"tool_order must be 'keep' or 'sort', not {self.tool_order!r}")
        if not self.coalesce_timeout > 0:
            raise ConfigError(
                f"coalesce_timeout must be a positive number of seconds, not {self.coalesce_timeout!r}"
            )
        if not self.namespace:
            raise ConfigError("namespace must be a non-empty string")
        if self.tenant is not None and not self.tenant:
            # "" would be an explicit tenant that every credential shares, while an empty
            # x-cachekit-tenant header or policy(tenant="") means "no tenant": refuse the ambiguity.
            raise ConfigError("tenant must be a non-empty string or None (None: partition by credential)")
        for fingerprint, label in self.credential_tenants.items():
            if not (isinstance(fingerprint, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", fingerprint)):
                raise ConfigError(
                    "credential_tenants maps credential fingerprints (sha256:<64 hex digits>, from "
                    "cachekit proxy --fingerprint) to tenants; an entry is not one (not shown: it may "
                    "be a key)"
                )
            if not isinstance(label, str) or not label:
                raise ConfigError(
                    f"credential_tenants: the tenant of {fingerprint} must be a non-empty string"
                )
        if not isinstance(self.trust_tenant_header, bool):
            raise ConfigError(f"trust_tenant_header must be True or False, not {self.trust_tenant_header!r}")
        if self.price_as is not None and (not isinstance(self.price_as, str) or not self.price_as.strip()):
            raise ConfigError(f"price_as must be a provider name such as 'anthropic', not {self.price_as!r}")
        try:
            breakpoints_setting(self.breakpoints)
        except ValueError as exc:
            raise ConfigError(f"breakpoints {exc}") from None
        if self.lint not in ("warn", "raise", "off"):
            raise ConfigError(f"lint must be 'warn', 'raise' or 'off', not {self.lint!r}")
        for pattern in self.volatile_patterns:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise ConfigError(
                    f"volatile_patterns: {pattern!r} is not a regular expression: {exc}"
                ) from None
        if self.on_cache_error not in ("bypass", "raise"):
            raise ConfigError(f"on_cache_error must be 'bypass' or 'raise', not {self.on_cache_error!r}")
        if not isinstance(self.breaker_threshold, int) or self.breaker_threshold < 1:
            raise ConfigError(f"breaker_threshold must be an integer >= 1, not {self.breaker_threshold!r}")
        if not 0 < self.breaker_cooldown <= 30:
            raise ConfigError(
                f"breaker_cooldown must be a number of seconds in (0, 30], not {self.breaker_cooldown!r}"
            )

    @classmethod
    def from_env(cls, **overrides: object) -> CacheConfig:
        """Build a config from ``CACHEKIT_*`` variables, then apply ``overrides``.

        Reads ``CACHEKIT_CACHE_URL`` (store), ``CACHEKIT_ENABLED`` (``0``/``false`` turns the cache off),
        ``CACHEKIT_TTL`` (seconds), ``CACHEKIT_NAMESPACE``, ``CACHEKIT_ON_CACHE_ERROR``,
        ``CACHEKIT_ENCRYPTION_KEYS`` (``kid:base64key,...``) and ``CACHEKIT_TRUST_TENANT_HEADER``
        (``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``; anything else is refused, as
        it widens who shares entries).
        """
        config = cls()
        env = os.environ
        if url := env.get("CACHEKIT_CACHE_URL"):
            config = replace(config, store=url)
        if (enabled := env.get("CACHEKIT_ENABLED")) is not None:
            config = replace(config, enabled=enabled.strip().lower() not in ("0", "false", "no", "off"))
        if ttl := env.get("CACHEKIT_TTL"):
            try:
                seconds = float(ttl)
            except ValueError:
                seconds = math.nan  # refused below, with the range
            config = replace(config, ttl=check_ttl(seconds, "CACHEKIT_TTL", allow_none=False))
        if namespace := env.get("CACHEKIT_NAMESPACE"):
            config = replace(config, namespace=namespace)
        if on_error := env.get("CACHEKIT_ON_CACHE_ERROR"):
            config = replace(config, on_cache_error=on_error.strip().lower())  # type: ignore[arg-type]
        if keys := env.get("CACHEKIT_ENCRYPTION_KEYS"):
            config = replace(config, encryption_keys=keys)
        if (trust := env.get("CACHEKIT_TRUST_TENANT_HEADER")) is not None:
            config = replace(config, trust_tenant_header=_env_flag("CACHEKIT_TRUST_TENANT_HEADER", trust))
        return replace(config, **overrides)  # type: ignore[arg-type]  # checked by __post_init__


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def _env_flag(name: str, value: str) -> bool:
    """A boolean environment variable, strictly: a typo must not silently pick either side."""
    word = value.strip().lower()
    if word not in _TRUE | _FALSE:
        raise ConfigError(f"{name} must be 1/true/yes/on or 0/false/no/off, not {value!r}")
    return word in _TRUE

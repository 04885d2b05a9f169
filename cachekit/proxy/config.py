"""The proxy's settings: :class:`ProxyConfig`, from a TOML file and the command line.

A config file (``cachekit proxy --config proxy.toml``) looks like::

    anthropic_base_url = "https://api.anthropic.com"
    openai_base_url = "https://api.openai.com/v1"
    store = "redis://redis:6379/0"          # shared by every worker and instance: stateless proxy
    namespace = "default"
    max_body = 33554432                     # bytes; a larger request body is a 413
    upstream_timeout = 600                  # seconds an upstream answer may take (between bytes)
    graceful_timeout = 120                  # seconds in-flight streams get on shutdown
    workers = 4
    semantic = false

    [tenants]                               # credentials (by fingerprint) mapped to a shared tenant
    "sha256:9f86d08..." = "team-a"

    [[keys]]                                # proxy-side keys: when any is set, every request needs one
    sha256 = "sha256:60303ae..."           # cachekit proxy --fingerprint prints it; never the key
    tenant = "team-b"                       # optional: its entries are that tenant's

    [upstream_keys]                         # what replaces a proxy key sent as the API key
    anthropic = "ANTHROPIC_API_KEY"         # the NAME of an environment variable, never the key
    openai = "OPENAI_API_KEY"

Keys appear only as SHA-256 fingerprints and environment variable names: the file holds no secret.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import orjson

from cachekit.errors import ConfigError

__all__ = ["ENV_CONFIG", "ProxyConfig", "ProxyKey"]

#: Where a worker process finds its settings: the parent serializes the config here (JSON).
ENV_CONFIG = "CACHEKIT_PROXY_CONFIG_JSON"

_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
_FAMILIES = ("anthropic", "openai")


@dataclass(frozen=True, slots=True)
class ProxyKey:
    """A key clients present to the proxy (as their API key, or in ``x-cachekit-proxy-key``)."""

    #: ``sha256:<hex>`` of the key (:func:`cachekit.stores.keys.credential_fingerprint`).
    sha256: str
    #: The tenant whose partition its requests use; ``None``: a partition of its own.
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """How ``cachekit proxy`` runs. Every field has a default that serves the real APIs on loopback.

    Attributes:
        host, port: where to listen.
        anthropic_base_url: the upstream of Anthropic-shaped requests, as an SDK's ``base_url`` (the
            real API, a compatible provider's Anthropic endpoint, or ``cachekit serve``).
        openai_base_url: the upstream of OpenAI-shaped requests, as an SDK's ``base_url`` (with
            ``/v1`` for OpenAI; a compatible provider's own base).
        store: the cache's store URL (``redis://...`` for several workers or instances; ``None``:
            ``$CACHEKIT_CACHE_URL`` or SQLite under ``$CACHEKIT_HOME``).
        namespace: the cache namespace.
        ttl: seconds an entry lives (``None``: the library's default).
        semantic: turn the semantic cache on for every request (requests may still opt in or out).
        lint: prefix lint (``warn``, ``off``): what feeds ``x-cachekit-prefix-changed``.
        tenants: credential fingerprint to tenant: those credentials share the tenant's partition.
        keys: proxy-side keys; when any is set, a request without one of them is refused (401).
        upstream_keys: family (``anthropic``, ``openai``) to the environment variable holding the
            upstream key that replaces a proxy key sent as the API key.
        max_body: the most bytes of a request body (413 beyond).
        body_timeout: seconds a client may stall mid-body (408 beyond).
        upstream_timeout: seconds the upstream may take to answer, and between two bytes of a stream.
        connect_timeout: seconds to connect upstream.
        graceful_timeout: on SIGTERM/SIGINT, seconds in-flight requests (streams) get to finish
            (``None``: as long as they take).
        keep_alive: seconds an idle client connection stays open.
        limit_concurrency: connections and requests in flight past which new ones get a 503.
        workers: worker processes (each with its own cache client; share a Redis store).
        metrics: serve Prometheus ``/metrics``.
        ledger: record every call's cost in the ledger (SQLite under ``$CACHEKIT_HOME``).
    """

    host: str = "127.0.0.1"
    port: int = 8787
    anthropic_base_url: str = "https://api.anthropic.com"
    openai_base_url: str = "https://api.openai.com/v1"
    store: str | None = field(default=None, repr=False)  # a URL may carry a password
    namespace: str = "default"
    ttl: float | None = None
    semantic: bool = False
    lint: str = "warn"
    tenants: Mapping[str, str] = field(default_factory=dict, repr=False)
    keys: tuple[ProxyKey, ...] = field(default=(), repr=False)
    upstream_keys: Mapping[str, str] = field(default_factory=dict)
    max_body: int = 32 * 1024 * 1024
    body_timeout: float = 60.0
    upstream_timeout: float = 600.0
    connect_timeout: float = 10.0
    graceful_timeout: float | None = 120.0
    keep_alive: int = 75
    limit_concurrency: int | None = None
    workers: int = 1
    metrics: bool = True
    ledger: bool = True

    def __post_init__(self) -> None:
        for name in ("anthropic_base_url", "openai_base_url"):
            url: str = getattr(self, name)
            if not re.match(r"https?://[^/]", url or ""):
                raise ConfigError(f"{name} must be an http(s):// URL, not {url!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in 0..65535, not {self.port!r}")
        for name in ("max_body", "workers", "keep_alive"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < (1 if name == "workers" else 0)
            ):
                raise ConfigError(
                    f"{name} must be a whole number >= {1 if name == 'workers' else 0}, not {value!r}"
                )
        for name in ("body_timeout", "upstream_timeout", "connect_timeout"):
            _positive(name, getattr(self, name))
        if self.graceful_timeout is not None:
            _positive("graceful_timeout", self.graceful_timeout)
        if self.limit_concurrency is not None and self.limit_concurrency < 1:
            raise ConfigError(f"limit_concurrency must be >= 1, not {self.limit_concurrency!r}")
        if self.lint not in ("warn", "off"):
            raise ConfigError(f"lint must be 'warn' or 'off', not {self.lint!r}")
        for key in self.keys:
            if not isinstance(key.sha256, str) or not _FINGERPRINT.fullmatch(key.sha256):
                raise ConfigError(
                    "each [[keys]] entry needs sha256 = the key's fingerprint (sha256:<64 hex digits>, "
                    "from cachekit proxy --fingerprint); one does not have it (not shown: it may be a key)"
                )
        for family, variable in self.upstream_keys.items():
            if family not in _FAMILIES:
                raise ConfigError(f"upstream_keys names {family!r}; use {' or '.join(_FAMILIES)}")
            if not isinstance(variable, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
                raise ConfigError(
                    f"upstream_keys.{family} must name an environment variable (the key stays out of the "
                    "file)"
                )

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> ProxyConfig:
        """The config from a TOML file (if any), then ``overrides`` (``None`` values are ignored:
        options the command line did not set)."""
        data: dict[str, Any] = {}
        if path is not None:
            data = _read_toml(Path(path))
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProxyConfig:
        """Build from plain data (a parsed file, or :meth:`to_json`'s output); unknown names are
        refused, so a typo is not silently ignored."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown proxy setting(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values = dict(data)
        raw_keys = values.get("keys", ())
        if not isinstance(raw_keys, list | tuple):
            raise ConfigError("keys must be a list of [[keys]] tables")
        keys = []
        for entry in raw_keys:
            if isinstance(entry, ProxyKey):
                keys.append(entry)
                continue
            if not isinstance(entry, Mapping) or set(entry) - {"sha256", "tenant"}:
                raise ConfigError("each [[keys]] entry takes sha256 and (optionally) tenant")
            keys.append(ProxyKey(str(entry.get("sha256", "")), entry.get("tenant")))
        values["keys"] = tuple(keys)
        for name in ("tenants", "upstream_keys"):
            if not isinstance(values.get(name, {}), Mapping):
                raise ConfigError(f"{name} must be a table")
            values[name] = dict(values.get(name, {}))
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"proxy settings: {exc}") from None

    def to_json(self) -> str:
        """The settings as JSON (for worker processes: :data:`ENV_CONFIG`). Holds no secret."""
        data = asdict(self)
        data["keys"] = [asdict(key) for key in self.keys]
        return orjson.dumps(data).decode()

    @classmethod
    def from_env(cls) -> ProxyConfig:
        """The settings a parent process left in :data:`ENV_CONFIG`."""
        raw = os.environ.get(ENV_CONFIG)
        if not raw:
            raise ConfigError(f"{ENV_CONFIG} is not set: start workers with `cachekit proxy`")
        return cls.from_dict(orjson.loads(raw))

    def with_(self, **changes: Any) -> ProxyConfig:
        """A copy with ``changes``."""
        return replace(self, **changes)


def _positive(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (value > 0 and math.isfinite(value))
    ):
        raise ConfigError(f"{name} must be a positive number of seconds, not {value!r}")


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found]
        except ImportError:
            from cachekit.errors import MissingExtraError

            raise MissingExtraError("tomli", "proxy", "reading a proxy config file on Python 3.10") from None
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read the proxy config {str(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the proxy config {str(path)!r} is not valid TOML: {exc}") from None
    return data

"""Open a store from a URL, as given in ``CacheConfig(store=...)`` or ``CACHEKIT_CACHE_URL``.

Supported::

    memory://                              a MemoryStore with the default budgets
    memory://?max_bytes=N&max_entries=N    ... with explicit budgets
    sqlite://                              a SQLiteStore at <home>/cache.sqlite3
    sqlite:///abs/path.db                  a SQLiteStore at /abs/path.db (everything after sqlite://)
    redis://[user:pass@]host[:port][/db]   a RedisStore on one server (rediss:// for TLS)
    redis+cluster://host[:port][,host...]  a RedisStore on a Redis Cluster (rediss+cluster:// for TLS)
        query parameters: prefix, timeout, connect_timeout, max_value_bytes, ssl_ca_certs
        (see :mod:`cachekit.stores.redis`; needs the ``redis`` extra)
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from cachekit.errors import ConfigError
from cachekit.stores._query import query_params
from cachekit.stores.base import Store
from cachekit.stores.memory import MemoryStore
from cachekit.stores.sqlite import SQLiteStore

__all__ = ["SUPPORTED_SCHEMES", "sqlite_path", "store_from_url"]

#: The schemes :func:`store_from_url` opens, in the order the error message lists them.
SUPPORTED_SCHEMES = ("memory", "sqlite", "redis", "rediss", "redis+cluster", "rediss+cluster")

_REDIS_SCHEMES = frozenset({"redis", "rediss", "redis+cluster", "rediss+cluster"})
_MEMORY_PARAMS = ("max_bytes", "max_entries")


def store_from_url(url: str, *, home: Path) -> Store:
    """Open the store that ``url`` names.

    Args:
        url: ``memory://`` (optional query ``max_bytes``, ``max_entries``), ``sqlite://``,
            ``sqlite:///absolute/path.db``, or a Redis URL (``redis://``, ``rediss://``,
            ``redis+cluster://``, ``rediss+cluster://``; see :class:`~cachekit.stores.redis.RedisStore`).
        home: cachekit's home directory; ``sqlite://`` without a path opens ``home / "cache.sqlite3"``.

    Raises:
        ConfigError: unknown scheme, a bad query parameter, or an unusable SQLite file.
        MissingExtraError: a Redis URL without the ``redis`` package installed.
        StoreError: the SQLite file cannot be opened. (A Redis store connects on first use.)
    """
    if not isinstance(url, str):
        raise ConfigError(f"a store URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.strip().lower()
    if not sep:
        raise ConfigError(f"{_redact(url)!r} is not a store URL; {_supported()}")
    if scheme in _REDIS_SCHEMES:
        # Imported here: the module is light, but keeping it out of `import cachekit` costs nothing.
        from cachekit.stores.redis import RedisStore

        return RedisStore(url)
    if scheme == "memory":
        return _memory(rest)
    if scheme == "sqlite":
        return _sqlite(rest, home)
    raise ConfigError(f"unknown store URL scheme {_redact(scheme) + '://'!r}; {_supported()}")


def _memory(rest: str) -> MemoryStore:
    location, _, query = rest.partition("?")
    if location not in ("", "/"):
        raise ConfigError(f"memory:// takes no host or path, got {location!r}; use memory://?max_bytes=N")
    params = query_params(query, _MEMORY_PARAMS, scheme="memory", shown=f"memory://?{query}")
    max_bytes = _positive_int(params, "max_bytes")
    max_entries = _positive_int(params, "max_entries")
    if max_bytes is None:
        return MemoryStore(max_entries=max_entries)
    return MemoryStore(max_bytes=max_bytes, max_entries=max_entries)


def _positive_int(params: dict[str, str], name: str) -> int | None:
    raw = params.get(name)
    if raw is None:
        return None
    # isdecimal() rather than int() alone: int() also accepts "1_000", "+5" and non-ASCII digits.
    value = raw.strip()
    if not (value.isascii() and value.isdecimal()) or int(value) <= 0:
        raise ConfigError(f"memory:// parameter {name} must be a positive integer, not {raw!r}")
    return int(value)


def sqlite_path(url: str, *, home: Path) -> Path | None:
    """The database file a ``sqlite://`` URL names (``None`` for any other scheme), without opening
    or creating it: for the operator's commands, which never make a store where a typo points.

    Raises:
        ConfigError: a ``sqlite://`` URL :func:`store_from_url` would refuse.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.strip().lower() != "sqlite":
        return None
    return _sqlite_file(rest, home)


def _sqlite(rest: str, home: Path) -> SQLiteStore:
    return SQLiteStore(_sqlite_file(rest, home))


def _sqlite_file(rest: str, home: Path) -> Path:
    location, _, query = rest.partition("?")
    if query:
        raise ConfigError(f"sqlite:// takes no query parameters, got {query!r}")
    if location == "":
        return Path(home) / "cache.sqlite3"
    if not location.startswith("/"):
        # sqlite://relative/x.db would silently depend on the working directory (and looks like a host).
        raise ConfigError(
            f"sqlite:// needs an absolute path (sqlite:///abs/path.db) or none at all, got {location!r}"
        )
    # Percent-decoding lets a path hold '?' or '#' (as %3F, %23).
    path = unquote(location)
    if path.endswith("/"):
        raise ConfigError(f"sqlite:// path {location!r} names a directory, not a database file")
    return Path(path)


def _supported() -> str:
    return "supported store URLs: " + ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES)


def _redact(url: str) -> str:
    """Never echo credentials: a mistyped URL may carry them (``user:password@host``)."""
    scheme, sep, rest = url.rpartition("://") if "://" in url else ("", "", url)
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    shown = scheme + sep + rest
    return shown if len(shown) <= 200 else shown[:200] + "..."

"""Drop-in SDK clients and :func:`wrap`.

``cachekit.Anthropic(cache=..., **sdk_kwargs)`` *is* an ``anthropic.Anthropic`` (a subclass built on
first use, so importing cachekit never imports an SDK): the SDK builds its own HTTP client exactly as it
always does (limits, keep-alive, proxies from the environment), then cachekit wraps that client's
transports. ``copy()`` and ``with_options()`` hand the same HTTP client to the new SDK object, so
caching carries over. A repeated call skips the SDK's own argument transformation where that is a
pure function of the arguments (:mod:`cachekit.clients.memo`).
"""

from __future__ import annotations

import functools
import importlib
from contextvars import ContextVar
from typing import Any, TypeVar

from cachekit import _fork
from cachekit._http import library_of
from cachekit.cache import Cache, CacheLike, as_cache
from cachekit.clients.memo import MEMOIZED_METHODS, RequestMemo, memoize_resources, record_post
from cachekit.errors import ConfigError, MissingExtraError
from cachekit.transport import AsyncCachingTransport, CachingTransport

__all__ = ["DROP_IN_CLIENTS", "cache_of", "drop_in_class", "install", "wrap"]

T = TypeVar("T")

#: cachekit name → (SDK module, SDK class, extra that installs it).
DROP_IN_CLIENTS: dict[str, tuple[str, str, str]] = {
    "Anthropic": ("anthropic", "Anthropic", "anthropic"),
    "AsyncAnthropic": ("anthropic", "AsyncAnthropic", "anthropic"),
    "OpenAI": ("openai", "OpenAI", "openai"),
    "AsyncOpenAI": ("openai", "AsyncOpenAI", "openai"),
}

_built: dict[str, type[Any]] = {}
#: What a copy() hands to the client it builds: the cache and the request memo.
_copying: ContextVar[tuple[Cache, RequestMemo] | None] = ContextVar("cachekit_copying", default=None)
_built_lock = _fork.lock()


def _http_client_of(client: Any) -> Any:
    """The httpx/httpx2 client behind an SDK client (or the client itself when it is one)."""
    candidate = getattr(client, "_client", client)
    try:
        library = library_of(candidate)
    except TypeError:
        raise TypeError(
            f"cannot add caching to {type(client).__name__}: expected an anthropic/openai SDK client "
            "or an httpx/httpx2 Client"
        ) from None
    if not isinstance(candidate, (library.Client, library.AsyncClient)):
        raise TypeError(
            f"cannot add caching to {type(client).__name__}: its HTTP client is not an httpx Client"
        )
    return candidate


def install(http_client: Any, cache: CacheLike = None) -> Cache:
    """Wrap every transport of an ``httpx``/``httpx2`` client (its default one and its proxy mounts)
    with one shared :class:`~cachekit.cache.Cache`.

    Installing again is a no-op when it names no cache or the same one; naming a different cache is a
    :class:`~cachekit.errors.ConfigError`, since silently keeping the first would leave the caller
    believing their second cache (its store, tenant, TTL) is the one in use.
    """
    current = http_client._transport
    if isinstance(current, (CachingTransport, AsyncCachingTransport)):
        if cache is None or cache is current.cache:
            return current.cache
        raise ConfigError(
            "this client already caches through another cachekit cache; wrap it once (cachekit.wrap() "
            "without cache= keeps the cache it has), or build a new client for a second cache"
        )
    shared, owned = as_cache(cache)
    wrapper = (
        AsyncCachingTransport
        if isinstance(http_client, library_of(http_client).AsyncClient)
        else CachingTransport
    )
    # The default transport owns the cache (closing the client closes the store once); mounts share it.
    http_client._transport = wrapper(current, cache=shared, owns_cache=owned)
    http_client._mounts = {
        pattern: None if transport is None else wrapper(transport, cache=shared, owns_cache=False)
        for pattern, transport in http_client._mounts.items()
    }
    return shared


def wrap(client: T, cache: CacheLike = None) -> T:
    """Add caching to an SDK client (or httpx client) built elsewhere, and return it.

    The client's HTTP client is changed in place, so every copy of the SDK client that shares it
    caches too.
    """
    install(_http_client_of(client), cache)
    return client


def cache_of(client: Any) -> Cache:
    """The :class:`~cachekit.cache.Cache` a wrapped client uses (for its ``stats``)."""
    transport = _http_client_of(client)._transport
    if not isinstance(transport, (CachingTransport, AsyncCachingTransport)):
        raise TypeError(f"{type(client).__name__} has no cachekit cache; use cachekit.wrap() first")
    return transport.cache


def _memoizing_resource(sdk_class: type[Any], module: str, attribute: str) -> functools.cached_property[Any]:
    """The SDK's ``client.<attribute>`` resource, with the memoized methods under it wrapped."""
    sdk_property = getattr(sdk_class, attribute)

    def resource(self: Any) -> Any:
        return memoize_resources(self, self._cachekit_memo, module, attribute, sdk_property.func(self))

    resource.__doc__ = sdk_property.__doc__
    return functools.cached_property(resource)  # type() names it when it builds the class


def drop_in_class(name: str) -> type[Any]:
    """Build (once) the cachekit subclass of an SDK client class, e.g. ``drop_in_class("Anthropic")``."""
    with _built_lock:
        if name in _built:
            return _built[name]
        module_name, class_name, extra = DROP_IN_CLIENTS[name]
        try:
            sdk_class: type[Any] = getattr(importlib.import_module(module_name), class_name)
        except ImportError as exc:
            raise MissingExtraError(module_name, extra, f"cachekit.{name}") from exc

        def __init__(self: Any, *args: Any, cache: CacheLike = None, **kwargs: Any) -> None:
            sdk_class.__init__(self, *args, **kwargs)
            inherited = _copying.get()
            self._cachekit_memo = RequestMemo() if inherited is None else inherited[1]
            if cache is None and inherited is not None:
                cache = inherited[0]
            self._cachekit_cache = install(self._client, cache)

        def copy(self: Any, *args: Any, **kwargs: Any) -> Any:
            """The SDK's ``copy()`` / ``with_options()``, keeping this client's cache."""
            # The SDK's copy() builds a new client through __init__, which cannot see this one's
            # cache; hand it over, so a copy with a new http_client still uses the same cache.
            token = _copying.set((self._cachekit_cache, self._cachekit_memo))
            try:
                return sdk_class.copy(self, *args, **kwargs)
            finally:
                _copying.reset(token)

        doc = (
            f"``{module_name}.{class_name}`` with a response cache: the SDK's own constructor plus "
            "``cache=`` (a Cache, a CacheConfig, a store object or a store URL; by default "
            "``$CACHEKIT_CACHE_URL`` or SQLite under ``$CACHEKIT_HOME``)."
        )

        def post(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            """The SDK's ``post()``; a memoized method's first call is recorded on its way through."""
            record_post(self, path, args, kwargs)
            return sdk_class.post(self, path, *args, **kwargs)

        namespace: dict[str, Any] = {
            "__init__": __init__,
            "copy": copy,
            "with_options": copy,  # the SDKs alias with_options = copy on their own class
            "post": post,
            "__module__": "cachekit",
            "__doc__": doc,
        }
        for path in MEMOIZED_METHODS[module_name]:
            namespace[path[0]] = _memoizing_resource(sdk_class, module_name, path[0])
        built = type(name, (sdk_class,), namespace)
        _built[name] = built
        return built

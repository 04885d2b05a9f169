"""``@cachekit.cached``: cache policy for the LLM calls made inside a function, and memoization.

The policy (tenant, namespace, ttl, bypass) travels in a context variable
(:mod:`cachekit.context`), so it reaches every cachekit transport the function's calls pass through,
in threads' and tasks' call stacks alike. With ``memoize=True`` the function's own JSON result is
cached, keyed by its arguments, which must be JSON values (see :func:`_argument_bytes`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import struct
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

import orjson

from cachekit import _fork
from cachekit.cache import Cache, CacheLike, as_cache
from cachekit.context import UNSET, CallPolicy, _current, _Unset, make_policy
from cachekit.errors import MemoizeError, MemoizeWarning
from cachekit.stores.keys import MEMO_KIND, digest_fields, store_key, tenant_partition

__all__ = ["cached"]

logger = logging.getLogger("cachekit.decorator")

F = TypeVar("F", bound=Callable[..., Any])

_MEMO_MAGIC = b"CKM1"
# v3: arguments are encoded with their JSON type (v2 dumped them with orjson, which wrote a
# dataclass, an enum or a date as the plain value it holds, and NaN as null).
_MEMO_DOMAIN = b"cachekit/memo/v3"


class _NotJSON(Exception):
    """A value that is not a JSON argument; ``path`` is where it sits, built while unwinding."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path: list[str] = []


def _encode(value: Any, out: bytearray) -> None:
    """Append ``value``'s typed, self-delimiting encoding to ``out`` (see :func:`_argument_bytes`)."""
    kind = type(value)
    if value is None:
        out += b"n"
    elif kind is bool:
        out += b"t" if value else b"f"
    elif kind is int:
        out += b"i%x;" % value  # hex: any size, and no int-to-decimal digit limit
    elif kind is float:
        if not math.isfinite(value):
            raise _NotJSON(f"{value!r} (JSON has no NaN or infinity)")
        out += b"d" + struct.pack(">d", value)  # the exact bits: 0.0 and -0.0 stay apart
    elif kind is str:
        data = value.encode("utf-8", "surrogatepass")
        out += b"s%d:" % len(data) + data
    elif kind is list or kind is tuple:
        out += b"l%d:" % len(value) if kind is list else b"u%d:" % len(value)
        for index, item in enumerate(value):
            try:
                _encode(item, out)
            except _NotJSON as exc:
                exc.path.append(f"[{index}]")
                raise
    elif kind is dict:
        for name in value:
            if type(name) is not str:
                raise _NotJSON(f"a dict with a key of type {_type_name(name)} (JSON keys are strings)")
        out += b"m%d:" % len(value)
        for name in sorted(value):  # key order means nothing in JSON
            _encode(name, out)
            try:
                _encode(value[name], out)
            except _NotJSON as exc:
                exc.path.append(f"[{name!r}]")
                raise
    else:
        raise _NotJSON(f"a {_type_name(value)}")


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _argument_bytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The memo key's bytes for a call: every argument with its JSON type, or :class:`_NotJSON`.

    A JSON argument is ``None``, a ``bool``, an ``int``, a finite ``float``, a ``str``, or a
    ``list``, ``tuple`` or ``dict`` with ``str`` keys of such values, of exactly these types (an
    ``IntEnum`` or a ``str`` subclass is not a plain value: the function may tell it apart). Each
    value is written with its type, so values that JSON would write alike stay apart: ``True``,
    ``1`` and ``1.0``; a tuple and a list; ``0.0`` and ``-0.0``. The encoding is self-delimiting
    (a type tag, then a length or a fixed width), so two different calls never give the same bytes.
    Keyword and dict key order are ignored.
    """
    # Positional and keyword arguments are counted apart: f(1) and f(x=1) are different calls.
    out = bytearray(b"%d:%d:" % (len(args), len(kwargs)))
    named: list[tuple[str, str | None, Any]] = [(f"argument {i}", None, v) for i, v in enumerate(args)]
    named += [(f"argument {name!r}", name, kwargs[name]) for name in sorted(kwargs)]
    for label, name, value in named:
        if name is not None:
            _encode(name, out)
        try:
            _encode(value, out)
        except _NotJSON as exc:
            raise _NotJSON(f"{label}{''.join(reversed(exc.path))} is {exc.what}") from None
        except RecursionError:
            raise _NotJSON(f"{label} is nested too deeply (or contains itself)") from None
    return bytes(out)


class _Memo:
    """The memoization half of one decorated function: its key scheme and its lazily opened cache."""

    def __init__(
        self, func: Callable[..., Any], cache: CacheLike, policy: CallPolicy, name: str | None
    ) -> None:
        qualified = f"{func.__module__}.{func.__qualname__}"
        if name is None and "<locals>" in func.__qualname__:
            # Closures made by one factory share a qualified name but not their captured values, so
            # their results must not share entries unless the caller names each one.
            raise MemoizeError(f"cannot memoize {qualified}: a nested function needs an explicit name=")
        self._name = name or qualified
        self._cache_arg = cache
        self._cache: Cache | None = None
        self._lock = _fork.lock(self)
        self._policy = policy

    def cache(self) -> Cache:
        # Opened on first call, not at decoration time: importing a module must not open a database.
        with self._lock:
            if self._cache is None:
                self._cache = as_cache(self._cache_arg)[0]
            return self._cache

    def key(self, policy: CallPolicy, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        try:
            arguments = _argument_bytes(args, kwargs)
        except _NotJSON as exc:
            raise MemoizeError(f"cannot memoize {self._name}: its arguments are not JSON ({exc})") from None
        cache = self.cache()
        namespace = policy.namespace or cache.config.namespace
        tenant = policy.tenant or cache.config.tenant
        partition = tenant_partition(tenant) if tenant else "shared"
        digest = digest_fields(
            (namespace.encode(), partition.encode(), self._name.encode(), arguments), domain=_MEMO_DOMAIN
        )
        return store_key(MEMO_KIND, namespace, partition, digest)

    def ttl(self, policy: CallPolicy) -> float | None:
        return self.cache().config.ttl if isinstance(policy.ttl, _Unset) else policy.ttl

    def decode(self, raw: bytes | None) -> tuple[bool, Any]:
        if raw is None or not raw.startswith(_MEMO_MAGIC):
            return False, None
        try:
            return True, orjson.loads(raw[len(_MEMO_MAGIC) :])
        except orjson.JSONDecodeError:
            logger.warning("corrupt memo entry for %s is ignored", self._name)
            return False, None

    def encode(self, result: Any) -> bytes | None:
        """The entry for ``result``, or ``None`` (with a :class:`MemoizeWarning`) when it is not JSON.

        Never raises: the function has run and its calls are paid for, so the result is returned
        whether or not it can be kept.
        """
        try:
            return _MEMO_MAGIC + orjson.dumps(result)
        except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
            warnings.warn(
                MemoizeWarning(
                    f"{self._name}: its result is not JSON, so it is returned but not memoized ({exc})"
                ),
                stacklevel=3,  # encode <- the wrapper <- the caller's line
            )
            return None

    # The memo shares its cache's circuit breaker: while the store is down, calls run the function
    # without waiting for the store's timeout. Failures are logged and counted, never raised.

    def _allowed(self) -> bool:
        return self.cache().pipeline.breaker.allow()

    def _outcome(self, what: str, exc: Exception | None) -> None:
        breaker = self.cache().pipeline.breaker
        if exc is None:
            breaker.success()
        else:
            breaker.failure()
            logger.warning("memo %s failed for %s: %s", what, self._name, type(exc).__name__)

    def load(self, key: str) -> tuple[bool, Any]:
        store = self.cache().sync_store
        if store is None or not self._allowed():
            return False, None
        try:
            raw = store.get(key)
        except Exception as exc:  # the cache path never fails the call
            self._outcome("lookup", exc)
            return False, None
        self._outcome("lookup", None)
        return self.decode(raw)

    def save(self, key: str, value: bytes | None, ttl: float | None) -> None:
        """Keep ``value`` (``None``: a result :meth:`encode` refused) under ``key``; a store failure is
        logged, never raised."""
        store = self.cache().sync_store
        if value is None or store is None or not self._allowed():
            return
        try:
            store.set(key, value, ttl=ttl)
        except Exception as exc:
            self._outcome("store", exc)
            return
        self._outcome("store", None)

    async def aload(self, key: str) -> tuple[bool, Any]:
        astore = self.cache().async_store
        if astore is None:
            return self.load(key)
        if not self._allowed():
            return False, None
        try:
            raw = await astore.aget(key)
        except Exception as exc:
            self._outcome("lookup", exc)
            return False, None
        self._outcome("lookup", None)
        return self.decode(raw)

    async def asave(self, key: str, value: bytes | None, ttl: float | None) -> None:
        """See :meth:`save`."""
        astore = self.cache().async_store
        if astore is None:
            self.save(key, value, ttl)
            return
        if value is None or not self._allowed():
            return
        try:
            await astore.aset(key, value, ttl=ttl)
        except Exception as exc:
            self._outcome("store", exc)
            return
        self._outcome("store", None)


@overload
def cached(func: F, /) -> F: ...


@overload
def cached(
    *,
    tenant: str | None = None,
    namespace: str | None = None,
    ttl: float | _Unset | None = UNSET,
    bypass: bool = False,
    mode: str | None = None,
    memoize: bool = False,
    cache: CacheLike = None,
    site: str | None = None,
    name: str | None = None,
    semantic: bool | None = None,
    url_ttl: float | None = None,
) -> Callable[[F], F]: ...


def cached(
    func: F | None = None,
    /,
    *,
    tenant: str | None = None,
    namespace: str | None = None,
    ttl: float | _Unset | None = UNSET,
    bypass: bool = False,
    mode: str | None = None,
    memoize: bool = False,
    cache: CacheLike = None,
    site: str | None = None,
    name: str | None = None,
    semantic: bool | None = None,
    url_ttl: float | None = None,
) -> F | Callable[[F], F]:
    """Set the cache policy for the LLM calls made inside the decorated function.

    Args:
        tenant: the partition for these calls (replaces the credential's HMAC).
        namespace: the key namespace for these calls.
        ttl: seconds entries written by these calls live (``None``: until evicted).
        bypass: neither read nor write the response cache (``mode="bypass"``).
        mode: ``bypass``, ``refresh`` or ``only-if-cached`` for every call inside.
        memoize: also cache the function's own result, keyed by its arguments. Arguments must be
            JSON values of exact types (``None``, ``bool``, ``int``, finite ``float``, ``str``, and
            ``list``/``tuple``/``dict`` with ``str`` keys of them), each keyed with its type; anything
            else raises :class:`~cachekit.errors.MemoizeError` before the function runs. The result
            must be JSON; a hit returns the JSON form (a tuple comes back as a list).
            A result that cannot be memoized is still returned: a non-JSON one with a
            :class:`~cachekit.errors.MemoizeWarning`, a store failure with a logged warning.
        cache: where memoized results go (same forms as the clients' ``cache=``).
        site: the call-site label of these calls in the cost ledger (default: the function's
            qualified name).
        name: the memo entries' function name (default: its qualified name); required for nested
            functions, whose qualified names do not tell closures apart.
        semantic: opt these calls in to (``True``) or out of (``False``) the semantic cache.
        url_ttl: seconds the content these calls give by URL (images, documents, files the provider
            fetches on each call) is taken as unchanged. Such calls bypass the cache by default, since
            the page behind a URL can change; with ``url_ttl`` they are cached, and an answer is kept
            and served for at most ``url_ttl`` seconds (docs/correctness.md). Live server tools (web
            search, code execution, MCP) still bypass.

    Works on sync and async functions; nested decorators combine (the inner one's settings win).
    """

    def decorate(fn: F) -> F:
        label = site if site is not None else f"{fn.__module__}.{fn.__qualname__}"
        policy = make_policy(
            tenant=tenant,
            namespace=namespace,
            ttl=ttl,
            bypass=bypass,
            mode=mode,
            site=label,
            semantic=semantic,
            url_ttl=url_ttl,
        )
        memo = _Memo(fn, cache, policy, name) if memoize else None

        def enter() -> tuple[CallPolicy, Any]:
            effective = _current.get().merged(policy)
            return effective, _current.set(effective)

        def memo_key(effective: CallPolicy, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
            if memo is None or effective.mode == "bypass":
                return None
            return memo.key(effective, args, kwargs)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                effective, token = enter()
                try:
                    key = memo_key(effective, args, kwargs)
                    if key is None or memo is None:
                        return await fn(*args, **kwargs)
                    if effective.mode != "refresh":
                        found, value = await memo.aload(key)
                        if found:
                            return value
                    result = await fn(*args, **kwargs)
                    await memo.asave(key, memo.encode(result), memo.ttl(effective))
                    return result
                finally:
                    _current.reset(token)

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            effective, token = enter()
            try:
                key = memo_key(effective, args, kwargs)
                if key is None or memo is None:
                    return fn(*args, **kwargs)
                if effective.mode != "refresh":
                    found, value = memo.load(key)
                    if found:
                        return value
                result = fn(*args, **kwargs)
                memo.save(key, memo.encode(result), memo.ttl(effective))
                return result
            finally:
                _current.reset(token)

        return cast(F, wrapper)

    # Validate now, so a bad argument fails at decoration time rather than at the first call.
    make_policy(tenant=tenant, namespace=namespace, ttl=ttl, bypass=bypass, mode=mode, url_ttl=url_ttl)
    if func is not None:
        return decorate(func)
    return decorate

"""Repeated calls skip the SDK's argument transformation (the drop-in clients' request memo).

A cache hit through the drop-in OpenAI client is mostly the SDK's own work before the transport
sees the request: ``chat.completions.create`` walks every message against its parameter types
(``maybe_transform``), about nine tenths of a hit on a 60-message request. That work is a pure
function of the call's arguments, and its whole result is the arguments it hands to the client's
public ``post()`` method. So the first call with given arguments records what ``create`` handed to
``post()``; a repeat with byte-identical arguments calls ``post()`` with those again and skips
``create``. Everything after that is the SDK's and cachekit's ordinary path: the request the SDK
builds is the one it would have built, so the cache key, the partition, the bypass rules, TTLs and
purges, the ledger, the ``x-cachekit-*`` headers, typed, raw and streamed responses, retries and
hooks are those of a call that did not use the memo. The memo stores no answers, only arguments.

Arguments are memoized only when they are plain data of exact types (dicts with string keys,
lists, tuples, strings, ints, floats, bools, ``None``): a value of any other type (a generator, a
pydantic model, an enum, a date, a subclass) may be transformed by the SDK in ways its bytes do not
show, so such a call goes through ``create`` every time. Why the memo stops at ``post()`` (and
skips nothing for Anthropic) is in ``docs/exact.md``, "Hits and the SDKs' own work".
"""

from __future__ import annotations

import functools
import hashlib
import logging
import marshal
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson

from cachekit import _fork

__all__ = ["MEMOIZED_METHODS", "RequestMemo", "memoize_resources", "record_post"]

logger = logging.getLogger("cachekit.request_memo")

#: SDK module → the resource paths whose ``create`` the drop-in clients memoize. Only methods whose
#: whole work before ``post()`` is a pure function of their arguments are listed. Anthropic's
#: ``messages.create`` is not: it hands its arguments to ``post()`` untransformed (nothing to save)
#: and warns on each call with a deprecated model, which skipping it would silence.
MEMOIZED_METHODS: dict[str, tuple[tuple[str, ...], ...]] = {
    "openai": (("chat", "completions"), ("responses",)),
    "anthropic": (),
}

# Version 2 writes no back-references, so equal values give equal bytes whatever their reference
# counts; marshal refuses every type that is not exactly a builtin one (subclasses, enums, UUIDs).
_MARSHAL_VERSION = 2
# orjson refuses what marshal takes but JSON cannot hold (bytes, sets, non-string keys, big ints);
# with these options it refuses subclasses, dates and dataclasses instead of converting them.
_STRICT_JSON = (
    orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)
# post() arguments that are classes, not data: kept as they are (the SDK's response types).
_CLASS_ARGUMENTS = ("cast_to", "stream_cls")

_DEFAULT_ENTRIES = 1024
_DEFAULT_BYTES = 64 << 20


def _plain(value: object) -> bytes | None:
    """``value``'s exact bytes when it is plain JSON-like data of exact builtin types, else ``None``."""
    try:
        orjson.dumps(value, option=_STRICT_JSON)
        return marshal.dumps(value, _MARSHAL_VERSION)  # type: ignore[arg-type]  # refused at run time
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        return None


@dataclass(frozen=True, slots=True)
class _Post:
    """One recorded ``post()`` call: its path, its class arguments, and the rest as marshal bytes
    (loaded afresh for each replay, so nothing the SDK or the caller mutates is shared)."""

    path: str
    classes: tuple[tuple[str, Any], ...]
    data: bytes
    #: What ``create`` may have read from the client (see :meth:`RequestMemo.fingerprint`).
    fingerprint: tuple[object, ...]

    def arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = marshal.loads(self.data)
        arguments.update(self.classes)
        return arguments


class _Slot:
    """What ``post()`` was called with during one memoized ``create`` (learned only if exactly once)."""

    __slots__ = ("calls", "post")

    def __init__(self) -> None:
        self.calls = 0
        self.post: _Post | None = None


_learning: ContextVar[_Slot | None] = ContextVar("cachekit_request_memo", default=None)


class RequestMemo:
    """Bounded, thread-safe map from a method's exact arguments to the ``post()`` call they produce.

    One memo is shared by a drop-in client and its ``copy()``/``with_options()`` copies: the
    recorded calls depend only on the arguments (and the :meth:`fingerprint` checked on replay),
    while ``post()`` itself reads each copy's own options, headers and credentials.
    """

    def __init__(self, *, max_entries: int = _DEFAULT_ENTRIES, max_bytes: int = _DEFAULT_BYTES) -> None:
        self._entries: OrderedDict[bytes, _Post] = OrderedDict()
        self._bytes = 0
        self._lock = _fork.lock(self)
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def fingerprint(client: Any) -> tuple[object, ...]:
        """The client settings an SDK method may read before ``post()`` (Anthropic's ``create`` reads
        the timeout): a replay needs the same ones."""
        return (repr(client.timeout), client.max_retries)

    @staticmethod
    def key(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes | None:
        """The memo key of a call, or ``None`` when its arguments are not plain data (or positional:
        the SDK methods take keywords only, so a positional argument is a call to leave alone)."""
        if args:
            return None
        data = _plain(sorted(kwargs.items()))  # keyword order means nothing; nested order does
        if data is None:
            return None
        return hashlib.sha256(method.encode() + b"\0" + data).digest()

    def get(self, key: bytes, fingerprint: tuple[object, ...]) -> _Post | None:
        """The ``post()`` call recorded under ``key``, if it was recorded with these client settings."""
        with self._lock:
            post = self._entries.get(key)
            if post is None:
                return None
            if post.fingerprint != fingerprint:
                return None
            self._entries.move_to_end(key)
            return post

    def put(self, key: bytes, post: _Post) -> None:
        """Remember ``post`` under ``key``, evicting the least recently used calls beyond the bounds."""
        size = len(post.data)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old.data)
            self._entries[key] = post
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted.data)

    def clear(self) -> None:
        """Forget every recorded call."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @contextmanager
    def learning(self, key: bytes | None, fingerprint: tuple[object, ...]) -> Iterator[None]:
        """Record the one ``post()`` call made inside the block under ``key`` (nothing when ``key`` is
        ``None``, when there were none or several, or when its arguments are not plain data)."""
        if key is None:
            yield
            return
        slot = _Slot()
        token = _learning.set(slot)
        try:
            yield
        finally:
            # Recorded even when post() raised: what create handed it does not depend on the answer.
            _learning.reset(token)
            # Settings changed during the call: what create read is unknown, so nothing is learned.
            if slot.calls == 1 and slot.post is not None and slot.post.fingerprint == fingerprint:
                self.put(key, slot.post)

    def wrap(self, client: Any, method: str, original: Callable[..., Any], *, is_async: bool) -> Any:
        """``original`` (a bound SDK method) that replays the recorded ``post()`` call on a repeat."""

        def recorded(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes | None, _Post | None]:
            key = self.key(method, args, kwargs)
            return key, (self.get(key, self.fingerprint(client)) if key is not None else None)

        if is_async:

            @functools.wraps(original)
            async def amemoized(*args: Any, **kwargs: Any) -> Any:
                key, post = recorded(args, kwargs)
                if post is not None:
                    return await client.post(post.path, **post.arguments())
                with self.learning(key, self.fingerprint(client)):
                    return await original(*args, **kwargs)

            return amemoized

        @functools.wraps(original)
        def memoized(*args: Any, **kwargs: Any) -> Any:
            key, post = recorded(args, kwargs)
            if post is not None:
                return client.post(post.path, **post.arguments())
            with self.learning(key, self.fingerprint(client)):
                return original(*args, **kwargs)

        return memoized


def record_post(client: Any, path: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Called by the drop-in clients' ``post()``: note the call for the memoized method in progress."""
    slot = _learning.get()
    if slot is None:
        return
    slot.calls += 1
    if slot.calls > 1 or args or not isinstance(path, str):
        slot.post = None
        return
    data = {k: v for k, v in kwargs.items() if k not in _CLASS_ARGUMENTS}
    encoded = _plain(data)
    slot.post = (
        None
        if encoded is None
        else _Post(
            path,
            tuple((k, kwargs[k]) for k in _CLASS_ARGUMENTS if k in kwargs),
            encoded,
            RequestMemo.fingerprint(client),
        )
    )


def memoize_resources(client: Any, memo: RequestMemo, module: str, attribute: str, resource: Any) -> Any:
    """Wrap ``create`` on the resources under ``client.<attribute>`` that :data:`MEMOIZED_METHODS`
    names for ``module``; returns ``resource`` (the SDK's value of ``client.<attribute>``)."""
    is_async = type(client).__name__.startswith("Async")
    for path in MEMOIZED_METHODS[module]:
        if path[0] != attribute:
            continue
        target = resource
        for name in path[1:]:
            target = getattr(target, name)
        method = ".".join((*path, "create"))
        # An instance attribute: the SDK's raw/streaming wrappers, built later from target.create,
        # call through it, with their marker header among the arguments (so they are keyed apart).
        target.create = memo.wrap(client, method, target.create, is_async=is_async)
    return resource

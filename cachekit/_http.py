"""The two HTTP libraries cachekit sits between.

The official SDKs moved from ``httpx`` to its fork ``httpx2`` (same API, separate classes); raw
``httpx`` users and older SDK releases still use ``httpx``. cachekit serves both with one code path.
Its transports subclass ``httpx2``'s base classes (so the SDKs accept and type-check them), which
``httpx`` clients accept too, since they never check a transport's class; and every request is
answered with objects of the library the request came from. ``Request``/``Response`` below are
therefore ``Any``-typed aliases: the values are ``httpx`` or ``httpx2`` objects, whose APIs are
identical.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import AsyncIterable, Iterable, Sequence
from types import ModuleType
from typing import Any, TypeAlias

from cachekit import _fork

__all__ = ["Request", "Response", "build_response", "library_of", "rebuild_request"]

Request: TypeAlias = Any
Response: TypeAlias = Any

_LIBRARIES = ("httpx", "httpx2")


_library_cache: dict[type, ModuleType] = {}
_library_lock = _fork.lock()


def library_of(obj: object) -> ModuleType:
    """The HTTP library (``httpx`` or ``httpx2`` module) that ``obj``'s class belongs to."""
    cls = type(obj)
    library = _library_cache.get(cls)  # a dict read is atomic; writes take the lock
    if library is None:
        # Walk the MRO: the SDKs subclass the library's Client (anthropic's SyncHttpxClientWrapper).
        names = [c.__module__.partition(".")[0] for c in cls.__mro__]
        name = next((n for n in names if n in _LIBRARIES), None)
        if name is None:
            raise TypeError(f"expected an httpx or httpx2 object, got {cls.__module__}.{cls.__qualname__}")
        with _library_lock:
            library = _library_cache.setdefault(cls, importlib.import_module(name))
    return library


def build_response(
    library: ModuleType,
    status: int,
    headers: Sequence[tuple[str, str]],
    content: bytes | Iterable[bytes] | AsyncIterable[bytes],
) -> Response:
    """A response of ``library``'s type: complete in memory (bytes), or streamed from an iterator."""
    return library.Response(
        status,
        headers=headers,
        content=content,
        extensions={"http_version": b"HTTP/1.1", "reason_phrase": _reason(library, status)},
    )


@functools.cache
def _reason(library: ModuleType, status: int) -> bytes:
    return str(library.codes.get_reason_phrase(status)).encode("ascii")


def rebuild_request(request: Request, content: bytes, add: tuple[tuple[str, str], ...] = ()) -> Request:
    """A copy of ``request`` with a new body (and a matching ``Content-Length``), and the ``add``
    headers it does not have yet (a caller's own value is kept)."""
    headers = request.headers.copy()
    headers.pop("content-length", None)
    headers.pop("transfer-encoding", None)
    for name, value in add:
        headers.setdefault(name, value)
    return library_of(request).Request(
        request.method, request.url, headers=headers, content=content, extensions=request.extensions
    )

"""The one on-store format of a cached response, shared by every store.

Layout: ``b"CKR1"``, a 4-byte big-endian length, a JSON header (status, headers, creation time, form,
whether the answer carries its usage, body length and a BLAKE2b digest of the body), then the body
bytes. Decoding checks all of it, so a truncated, tampered or foreign value is a
:class:`~cachekit.errors.CorruptEntryError` (a miss), never a wrong answer. JSON only: nothing is ever
unpickled.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import orjson

from cachekit.errors import CorruptEntryError

__all__ = ["CachedResponse", "decode", "encode"]

_MAGIC = b"CKR1"
_HEADER_LEN = 4

#: How the body is framed: a JSON document, or a recorded server-sent-event stream.
BodyForm = Literal["json", "sse"]


@dataclass(frozen=True, slots=True)
class CachedResponse:
    """A complete 2xx response as stored: status, headers worth replaying, decoded body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    created_at: float
    form: BodyForm = "json"
    #: Whether the answer carries its call's usage, as found when it was stored; ``None``: not known
    #: (a record written before cachekit kept this fact), then the body says.
    usage: bool | None = None


def _body_digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def encode(response: CachedResponse) -> bytes:
    """Serialize ``response`` for a store."""
    header = orjson.dumps(
        {
            "status": response.status,
            "headers": response.headers,
            "created_at": response.created_at,
            "form": response.form,
            **({} if response.usage is None else {"usage": response.usage}),
            "length": len(response.body),
            "digest": _body_digest(response.body),
        }
    )
    return b"".join((_MAGIC, len(header).to_bytes(_HEADER_LEN, "big"), header, response.body))


def decode(value: bytes) -> CachedResponse:
    """Parse and verify a stored value; raise :class:`CorruptEntryError` on anything unexpected."""
    if not value.startswith(_MAGIC):
        raise CorruptEntryError("not a cachekit record (bad magic)")
    start = len(_MAGIC) + _HEADER_LEN
    size = int.from_bytes(value[len(_MAGIC) : start], "big")
    try:
        header = orjson.loads(value[start : start + size])
        status = header["status"]
        headers = tuple((str(k), str(v)) for k, v in header["headers"])
        created_at = float(header["created_at"])
        form = header["form"]
        length = header["length"]
        digest = header["digest"]
        usage = header.get("usage")  # absent from records written before it was kept
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptEntryError(f"unreadable record header: {type(exc).__name__}") from exc
    body = value[start + size :]
    if not isinstance(status, int) or not 200 <= status < 300:
        raise CorruptEntryError("record status is not a 2xx integer")
    if form not in ("json", "sse"):
        raise CorruptEntryError("unknown record form")
    if length != len(body) or digest != _body_digest(body):
        raise CorruptEntryError("record body does not match its digest (truncated or altered)")
    if usage is not None and not isinstance(usage, bool):
        raise CorruptEntryError("record usage flag is not a boolean")
    return CachedResponse(status, headers, body, created_at, form, usage)

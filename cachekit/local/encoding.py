"""Compressed request bodies: ``Content-Encoding`` decoded, never past a cap.

Clients compress large requests (an agent's long conversation): ``gzip``, ``deflate`` and ``zstd``
are decoded, codings listed in the order applied (``gzip, zstd`` is undone zstd first). The decoded
body never grows past the cap, however small the compressed one (a decompression bomb is a 413
after at most ``cap`` bytes were produced); a body that is not what its coding says is a 400; a coding
the backend cannot decode a 415. ``zstd`` needs Python 3.14's ``compression.zstd`` or the
``zstandard`` package.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Mapping
from typing import Any

from cachekit.errors import RequestRefusedError

__all__ = ["MAX_DECODED", "decoded_body"]

#: The most bytes a decoded request body may take (the server's cap on a body on the wire).
MAX_DECODED = 64 * 1024 * 1024
_TOO_LARGE = "Request exceeds the maximum allowed number of bytes."
_CHUNK = 256 * 1024


def decoded_body(headers: Mapping[str, str], body: bytes, cap: int = MAX_DECODED) -> bytes:
    """``body`` with its ``content-encoding`` (``headers``: lower-case names) undone, at most ``cap``
    bytes; raises :class:`~cachekit.errors.RequestRefusedError` (413, 400 or 415)."""
    codings = [c.strip().lower() for c in headers.get("content-encoding", "").split(",") if c.strip()]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip", "deflate"):
            body = _zlib(body, coding, cap)
        elif coding == "zstd":
            body = _zstd(body, cap)
        else:
            raise RequestRefusedError(
                f"Unsupported Content-Encoding: '{coding}' (gzip, deflate and zstd are decoded).", status=415
            )
    return body


def _bad(coding: str) -> RequestRefusedError:
    return RequestRefusedError(f"The request body is not valid {coding} data.")


def _zlib(body: bytes, coding: str, cap: int) -> bytes:
    # 16 + MAX_WBITS: a gzip member; MAX_WBITS: deflate as HTTP means it (zlib-wrapped).
    wbits = 16 + zlib.MAX_WBITS if coding != "deflate" else zlib.MAX_WBITS
    out = bytearray()
    data = body
    try:
        while True:  # gzip allows several members one after another
            inflater = zlib.decompressobj(wbits)
            while data:
                out += inflater.decompress(data, cap + 1 - len(out))
                if len(out) > cap:
                    raise RequestRefusedError(_TOO_LARGE, status=413)
                data = inflater.unconsumed_tail
            if not inflater.eof:
                raise _bad(coding)
            data = inflater.unused_data
            if not data or coding == "deflate":
                break
    except zlib.error:
        raise _bad(coding) from None
    if data:
        raise _bad(coding)  # bytes after the deflate stream
    return bytes(out)


def _zstd_reader(body: bytes) -> Any:
    """A reader of the decompressed stream, from whichever zstd implementation is installed."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

        return zstd.ZstdFile(io.BytesIO(body))
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise RequestRefusedError(
            "Content-Encoding 'zstd' needs Python 3.14 or the zstandard package (pip install zstandard).",
            status=415,
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True)


def _zstd(body: bytes, cap: int) -> bytes:
    reader = _zstd_reader(body)
    out = bytearray()
    try:
        while len(out) <= cap:
            piece = reader.read(min(_CHUNK, cap + 1 - len(out)))
            if not piece:
                break
            out += piece
    except Exception:  # each implementation raises its own error type for corrupt data
        raise _bad("zstd") from None
    if len(out) > cap:
        raise RequestRefusedError(_TOO_LARGE, status=413)
    if body and not out and not _empty_frame(body):
        raise _bad("zstd")
    return bytes(out)


def _empty_frame(body: bytes) -> bool:
    # A zstd frame starts with the magic number 0xFD2FB528 (little-endian).
    return body[:4] == b"\x28\xb5\x2f\xfd"

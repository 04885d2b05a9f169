"""Chained block hashes: the content address of every block of a prompt's KV cache.

A prompt's token ids are cut into fixed blocks; block ``i`` is keyed by
``H(hash of block i-1, tokens of block i, extra)``, so a block's hash names its whole prefix and two
prompts share a block exactly when they share everything up to and including it. The chain starts at a
root bound to everything that changes the keys and values a block holds (model, revision, tokenizer,
dtype, block size), so a cache written under one of those is never read under another.

The hashes are SHA-256 over a fixed byte layout (never Python's ``hash``), so they are stable across
processes and releases and can name blocks persisted to disk:

* root: ``b"cachekit.kv.root.v1\\0"``, then each of model, revision, tokenizer, dtype as a uint32 LE
  byte length and its UTF-8 bytes, then block_size as uint32 LE;
* block: ``b"cachekit.kv.block.v1\\0"``, the 32-byte parent, the token count as uint32 LE, each token
  id as uint32 LE, the length of ``extra`` as uint32 LE, then ``extra``.

The NUL-terminated tags keep the two preimage kinds apart, and every variable-length field is length
prefixed, so no two different inputs share a preimage.
"""

from __future__ import annotations

import hashlib
import operator
import struct
from collections.abc import Sequence
from typing import NewType

__all__ = ["BlockHash", "block_hashes", "chain_hash", "root_hash"]

BlockHash = NewType("BlockHash", bytes)
"""A 32-byte SHA-256 digest naming one block of KV cache and, through the chain, its whole prefix."""

_ROOT_TAG = b"cachekit.kv.root.v1\x00"
_BLOCK_TAG = b"cachekit.kv.block.v1\x00"
_DIGEST_SIZE = 32
_UINT32_LIMIT = 2**32
_U32 = struct.Struct("<I")


def _u32(value: int, what: str) -> bytes:
    if not 0 <= value < _UINT32_LIMIT:
        raise ValueError(f"{what} must be in [0, 2**32), got {value}")
    return _U32.pack(value)


def _field(value: bytes, what: str) -> bytes:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") never hash alike.
    return _u32(len(value), f"length of {what}") + value


def _describe_bad_token(ids: Sequence[object]) -> str:
    for position, token in enumerate(ids):
        try:
            value = operator.index(token)  # type: ignore[arg-type]
        except TypeError:
            return f"token ids must be integers, got {type(token).__name__} at position {position}"
        if not 0 <= value < _UINT32_LIMIT:
            return f"token ids must be in [0, 2**32), got {value} at position {position}"
    return "token ids must be integers in [0, 2**32)"


def _check_block_size(block_size: int) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")


def root_hash(*, model: str, revision: str, tokenizer: str, dtype: str, block_size: int) -> BlockHash:
    """The chain's root, bound to everything that changes a block's keys and values (never a random seed).

    A random root would make every restart a cold cache; a root bound to these five values lets a
    persisted block be reused exactly when it is still valid.
    """
    _check_block_size(block_size)
    parts = [_ROOT_TAG]
    for name, text in (("model", model), ("revision", revision), ("tokenizer", tokenizer), ("dtype", dtype)):
        parts.append(_field(text.encode("utf-8"), name))
    parts.append(_u32(block_size, "block_size"))
    return BlockHash(hashlib.sha256(b"".join(parts)).digest())


def chain_hash(parent: BlockHash, tokens: Sequence[int], extra: bytes = b"") -> BlockHash:
    """H(parent, block_tokens, extra): domain-separated, length-prefixed, token ids as uint32 LE.

    Raises :class:`ValueError` when ``parent`` is not a 32-byte digest or a token id is not an
    integer in ``[0, 2**32)``.
    """
    if len(parent) != _DIGEST_SIZE:
        raise ValueError(f"parent must be a {_DIGEST_SIZE}-byte digest, got {len(parent)} bytes")
    ids = list(tokens)
    try:
        packed = struct.pack(f"<{len(ids)}I", *ids)
    except struct.error:
        # struct's own message does not say which id failed; find it only on this slow path.
        raise ValueError(_describe_bad_token(ids)) from None
    preimage = b"".join(
        (_BLOCK_TAG, parent, _u32(len(ids), "token count"), packed, _field(bytes(extra), "extra"))
    )
    return BlockHash(hashlib.sha256(preimage).digest())


def block_hashes(
    root: BlockHash, tokens: Sequence[int], block_size: int, *, salt: bytes = b""
) -> list[BlockHash]:
    """The hashes of the FULL blocks of `tokens` (a trailing partial block gets none); `salt`
    (the tenant) is the first block's `extra`, so two tenants never share a block.

    Salting only the first block suffices: every later hash chains through it.
    """
    _check_block_size(block_size)
    hashes: list[BlockHash] = []
    parent = root
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = chain_hash(parent, tokens[start : start + block_size], salt if start == 0 else b"")
        hashes.append(parent)
    return hashes

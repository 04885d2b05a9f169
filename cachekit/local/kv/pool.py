"""The block pool: which KV blocks stay in memory, who holds them, and which go first.

Blocks are content-addressed by their chained hash (:mod:`cachekit.local.kv.hashing`), so a lookup is a
dict probe and a shared prefix is one set of blocks however many sequences use it. Each block counts the
references that running sequences hold on it; a block nobody references stays cached but becomes
*evictable*, queued least-recently-freed first. When an insert needs room, evictable blocks leave from the
front of that queue; referenced blocks never leave. An optional second tier (:class:`Spill`) receives
evicted blocks and gives them back to :meth:`BlockPool.match`, so a restart or a memory squeeze costs a
load instead of a prefill.

The payload is opaque here (the torch engine stores per-layer K/V tensors); the pool only asks its size.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from cachekit import _fork
from cachekit.local.kv.hashing import BlockHash

__all__ = ["Block", "BlockPool", "PoolStats", "Spill"]

_log = logging.getLogger("cachekit.local.kv.pool")

P = TypeVar("P")


class Block(Generic[P]):
    """A cached block: its ``hash``, the opaque ``payload``, its size ``nbytes`` and its ``ref_count``.

    The pool owns ``ref_count``; callers change it only through :meth:`BlockPool.match`,
    :meth:`BlockPool.insert` and :meth:`BlockPool.release`.
    """

    __slots__ = ("hash", "nbytes", "payload", "ref_count")

    def __init__(self, block_hash: BlockHash, payload: P, nbytes: int) -> None:
        self.hash = block_hash
        self.payload = payload
        self.nbytes = nbytes
        self.ref_count = 0

    def __repr__(self) -> str:
        return f"Block(hash={self.hash.hex()[:16]}…, nbytes={self.nbytes}, ref_count={self.ref_count})"


class Spill(Protocol[P]):
    """A second, slower tier that evicted blocks go to and come back from (e.g. files on disk)."""

    def save(self, block_hash: BlockHash, payload: P) -> None:
        """Store ``payload`` under ``block_hash`` (overwriting is allowed: the content is the same)."""

    def load(self, block_hash: BlockHash) -> P | None:
        """The payload stored under ``block_hash``, or None when it is missing or unreadable."""

    def __contains__(self, block_hash: object) -> bool:
        """Whether a payload is stored under ``block_hash``."""


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of a pool's counters.

    ``blocks`` and ``used_bytes`` describe memory now. ``hits`` counts blocks :meth:`BlockPool.match`
    returned (from either tier), ``misses`` the matches that stopped at a block neither tier could give
    (at most one per call), ``loaded`` the hits that came from the spill tier, ``evictions`` the blocks
    dropped from memory, and ``spilled`` the saves to the spill tier (by eviction or by flush).
    """

    blocks: int
    used_bytes: int
    budget_bytes: int
    hits: int
    misses: int
    evictions: int
    spilled: int
    loaded: int


class BlockPool(Generic[P]):
    """Reference-counted, content-addressed KV blocks under a byte budget, with LRU eviction of free ones.

    Thread-safe: every public method holds one lock for its whole duration, spill I/O included, so the
    pool is never seen half-updated.
    """

    def __init__(
        self, *, budget_bytes: int, size_of: Callable[[P], int], spill: Spill[P] | None = None
    ) -> None:
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self._budget = budget_bytes
        self._size_of = size_of
        self._spill = spill
        self._lock = _fork.lock(self)
        self._blocks: dict[BlockHash, Block[P]] = {}
        # Unreferenced blocks, least recently freed first: the eviction order. An OrderedDict gives O(1)
        # append, removal from the middle (a re-matched block) and pop from the front.
        self._free: OrderedDict[BlockHash, Block[P]] = OrderedDict()
        self._used = 0
        self._free_bytes = 0  # bytes of the blocks in self._free: what eviction could reclaim
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._spilled = 0
        self._loaded = 0

    def match(self, hashes: Sequence[BlockHash]) -> list[Block[P]]:
        """The longest cached prefix of `hashes` (memory first, then the spill tier, whose blocks are
        loaded back into memory); stops at the first miss; takes a reference on every returned block.

        A spilled block that cannot fit in memory (everything else referenced) ends the prefix like a miss.
        """
        matched: list[Block[P]] = []
        with self._lock:
            for block_hash in hashes:
                block = self._blocks.get(block_hash)
                if block is not None:
                    self._take(block)
                else:
                    block = self._load(block_hash)
                    if block is None:
                        self._misses += 1
                        break
                matched.append(block)
            self._hits += len(matched)
        return matched

    def insert(self, block_hash: BlockHash, payload: P) -> Block[P] | None:
        """Cache a block and take a reference on it (an existing block with that hash is returned
        instead, with a new reference). Evicts least-recently-freed unreferenced blocks to stay within
        the budget; returns None (nothing cached) when it cannot fit."""
        with self._lock:
            block = self._blocks.get(block_hash)
            if block is None:
                return self._admit(block_hash, payload)
            self._take(block)
            return block

    def release(self, blocks: Sequence[Block[P]]) -> None:
        """Drop one reference on each block; blocks reaching zero become evictable, queued in REVERSE
        order (a sequence's tail is evicted before its head, so a prefix outlives its extensions).
        Releasing an unreferenced block raises ValueError."""
        with self._lock:
            # Check everything before changing anything, so a bad call leaves the pool as it was.
            for block, count in Counter(blocks).items():
                if self._blocks.get(block.hash) is not block or block.ref_count < count:
                    raise ValueError(f"release of an unreferenced block: {block!r} released {count} time(s)")
            for block in reversed(blocks):
                block.ref_count -= 1
                if block.ref_count == 0:
                    self._free[block.hash] = block
                    self._free_bytes += block.nbytes

    def flush(self) -> int:
        """Save every block held in memory to the spill tier (at shutdown); returns how many were saved.

        Blocks the spill tier already holds are skipped (a hash names its content), so they are not
        counted. Without a spill tier nothing is saved and the result is 0.
        """
        with self._lock:
            spill = self._spill
            if spill is None:
                return 0
            saved = 0
            for block_hash, block in self._blocks.items():
                if block_hash not in spill:
                    spill.save(block_hash, block.payload)
                    saved += 1
            self._spilled += saved
            return saved

    @property
    def stats(self) -> PoolStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            return PoolStats(
                blocks=len(self._blocks),
                used_bytes=self._used,
                budget_bytes=self._budget,
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                spilled=self._spilled,
                loaded=self._loaded,
            )

    def __len__(self) -> int:
        """The number of blocks held in memory."""
        with self._lock:
            return len(self._blocks)

    def __contains__(self, block_hash: object) -> bool:
        """Whether a block with this hash is held in memory (the spill tier is not consulted)."""
        with self._lock:
            return block_hash in self._blocks

    # --- internals; the caller holds self._lock ---

    def _take(self, block: Block[P]) -> None:
        """Add a reference to a block already in memory."""
        if block.ref_count == 0:
            # A free block that is used again is no longer evictable.
            del self._free[block.hash]
            self._free_bytes -= block.nbytes
        block.ref_count += 1

    def _load(self, block_hash: BlockHash) -> Block[P] | None:
        if self._spill is None or block_hash not in self._spill:
            return None
        payload = self._spill.load(block_hash)
        if payload is None:
            return None
        block = self._admit(block_hash, payload)
        if block is not None:
            self._loaded += 1
        return block

    def _admit(self, block_hash: BlockHash, payload: P) -> Block[P] | None:
        """Put a new block in memory with one reference, evicting as needed; None if it cannot fit."""
        nbytes = self._size_of(payload)
        if nbytes < 0:
            raise ValueError(f"size_of returned a negative size: {nbytes}")
        # Decide before evicting anything: a block that cannot fit must not cost the cache its free blocks.
        if nbytes > self._budget - self._used + self._free_bytes:
            _log.debug("block of %d bytes does not fit (used %d of %d)", nbytes, self._used, self._budget)
            return None
        while self._used + nbytes > self._budget:
            self._evict_oldest()
        block = Block(block_hash, payload, nbytes)
        block.ref_count = 1
        self._blocks[block_hash] = block
        self._used += nbytes
        return block

    def _evict_oldest(self) -> None:
        block_hash, block = next(iter(self._free.items()))
        # Save before dropping: if the save raises, the block is still cached and the pool consistent.
        if self._spill is not None and block_hash not in self._spill:
            self._spill.save(block_hash, block.payload)
            self._spilled += 1
        del self._free[block_hash]
        del self._blocks[block_hash]
        self._free_bytes -= block.nbytes
        self._used -= block.nbytes
        self._evictions += 1

"""The prefix KV cache's bookkeeping: chained block hashes and the reference-counted block pool.

Pure Python (no torch): the engine that owns the tensors stores them as opaque block payloads.
"""

from __future__ import annotations

from cachekit.local.kv.hashing import BlockHash, block_hashes, chain_hash, root_hash
from cachekit.local.kv.pool import Block, BlockPool, PoolStats, Spill

__all__ = [
    "Block",
    "BlockHash",
    "BlockPool",
    "PoolStats",
    "Spill",
    "block_hashes",
    "chain_hash",
    "root_hash",
]

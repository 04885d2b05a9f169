"""The prefix KV cache's chained block hashes and block pool (cachekit.local.kv), without torch."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cachekit.local import kv
from cachekit.local.kv import Block, BlockHash, BlockPool, PoolStats, block_hashes, chain_hash, root_hash

ROOT_ARGS = {
    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "revision": "main",
    "tokenizer": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "dtype": "float32",
    "block_size": 16,
}


def root() -> BlockHash:
    return root_hash(**ROOT_ARGS)  # type: ignore[arg-type]


def h(i: int) -> BlockHash:
    """A distinct 32-byte hash per small integer, for pool tests that do not care how hashes are made."""
    return BlockHash(bytes([i]) * 32)


def payload(i: int, size: int = 10) -> bytes:
    return bytes([i]) * size


class DictSpill:
    """The test double of the other tier: a dict, counting saves so tests can see what was written."""

    def __init__(self) -> None:
        self.data: dict[BlockHash, bytes] = {}
        self.saves: list[BlockHash] = []

    def save(self, block_hash: BlockHash, payload: bytes) -> None:
        self.saves.append(block_hash)
        self.data[block_hash] = payload

    def load(self, block_hash: BlockHash) -> bytes | None:
        return self.data.get(block_hash)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self.data


def new_pool(budget: int, spill: DictSpill | None = None) -> BlockPool[bytes]:
    return BlockPool(budget_bytes=budget, size_of=len, spill=spill)


def resident(pool: BlockPool[bytes], count: int = 16) -> set[int]:
    """Which of h(0)..h(count-1) are in memory."""
    return {i for i in range(count) if h(i) in pool}


# --- hashing ---------------------------------------------------------------------------------------


def test_public_names_are_reexported_sorted() -> None:
    assert kv.__all__ == sorted(kv.__all__)
    assert set(kv.__all__) == {
        "Block",
        "BlockHash",
        "BlockPool",
        "PoolStats",
        "Spill",
        "block_hashes",
        "chain_hash",
        "root_hash",
    }


def test_hash_layout_is_the_documented_one() -> None:
    # Built by hand from the documented byte layout: persisted blocks depend on it never drifting.
    def field(text: str) -> bytes:
        return struct.pack("<I", len(text.encode())) + text.encode()

    expected_root = hashlib.sha256(
        b"cachekit.kv.root.v1\x00"
        + field("m")
        + field("r")
        + field("t")
        + field("bf16")
        + struct.pack("<I", 4)
    ).digest()
    got_root = root_hash(model="m", revision="r", tokenizer="t", dtype="bf16", block_size=4)
    assert got_root == expected_root
    expected_block = hashlib.sha256(
        b"cachekit.kv.block.v1\x00"
        + expected_root
        + struct.pack("<I", 3)
        + struct.pack("<3I", 1, 70000, 2**32 - 1)
        + struct.pack("<I", 2)
        + b"xy"
    ).digest()
    assert chain_hash(got_root, [1, 70000, 2**32 - 1], b"xy") == expected_block
    assert len(expected_block) == 32


def test_chain_hash_is_deterministic() -> None:
    assert chain_hash(root(), [1, 2, 3], b"e") == chain_hash(root(), (1, 2, 3), b"e")


@pytest.mark.parametrize(
    ("parent", "tokens", "extra"),
    [
        pytest.param(h(9), [1, 2, 3], b"e", id="parent"),
        pytest.param(None, [1, 2, 4], b"e", id="a-token"),
        pytest.param(None, [3, 2, 1], b"e", id="token-order"),
        pytest.param(None, [1, 2, 3, 0], b"e", id="extra-token"),
        pytest.param(None, [1, 2, 3], b"f", id="extra"),
        pytest.param(None, [1, 2, 3], b"", id="no-extra"),
    ],
)
def test_chain_hash_changes_with_any_input(parent: BlockHash | None, tokens: list[int], extra: bytes) -> None:
    assert chain_hash(parent or root(), tokens, extra) != chain_hash(root(), [1, 2, 3], b"e")


def test_tokens_and_extra_cannot_be_confused() -> None:
    # Without length prefixes, token 1 (01 00 00 00) and extra b"\x01\x00\x00\x00" would share a preimage.
    assert chain_hash(root(), [1], b"") != chain_hash(root(), [], b"\x01\x00\x00\x00")


@pytest.mark.parametrize(
    "change",
    [
        {"model": "HuggingFaceTB/SmolLM2-360M-Instruct"},
        {"revision": "12345abc"},
        {"tokenizer": "gpt2"},
        {"dtype": "bfloat16"},
        {"block_size": 32},
    ],
    ids=lambda change: next(iter(change)),
)
def test_root_is_bound_to_each_field(change: dict[str, object]) -> None:
    assert root_hash(**{**ROOT_ARGS, **change}) != root()  # type: ignore[arg-type]


def test_root_fields_do_not_run_together() -> None:
    a = root_hash(model="ab", revision="c", tokenizer="t", dtype="d", block_size=16)
    b = root_hash(model="a", revision="bc", tokenizer="t", dtype="d", block_size=16)
    assert a != b


_CHILD = (
    "from cachekit.local.kv import block_hashes, root_hash\n"
    "r = root_hash(model='m', revision='r', tokenizer='t', dtype='float16', block_size=4)\n"
    "print(r.hex(), *(x.hex() for x in block_hashes(r, list(range(10)), 4, salt=b'tenant')))\n"
)


def test_hashes_are_stable_across_processes() -> None:
    outputs = []
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True, timeout=60
        )
        outputs.append(done.stdout.split())
    r = root_hash(model="m", revision="r", tokenizer="t", dtype="float16", block_size=4)
    here = [r.hex(), *(x.hex() for x in block_hashes(r, list(range(10)), 4, salt=b"tenant"))]
    assert outputs[0] == outputs[1] == here
    assert len(here) == 3  # the root and two full blocks of 4 out of 10 tokens


def test_only_full_blocks_get_hashes() -> None:
    tokens = list(range(100, 135))  # two full blocks of 16 and a partial one of 3
    hashes = block_hashes(root(), tokens, 16)
    assert len(hashes) == 2
    assert hashes == block_hashes(root(), tokens[:32], 16)
    assert block_hashes(root(), tokens[:15], 16) == []
    assert block_hashes(root(), [], 16) == []


def test_block_hashes_chain_through_the_parent() -> None:
    tokens = list(range(48))
    hashes = block_hashes(root(), tokens, 16, salt=b"t1")
    first = chain_hash(root(), tokens[:16], b"t1")
    second = chain_hash(first, tokens[16:32])
    third = chain_hash(second, tokens[32:48])
    assert hashes == [first, second, third]


def test_a_changed_token_changes_its_block_and_every_later_one() -> None:
    tokens = list(range(48))
    changed = [*tokens[:20], 999, *tokens[21:]]
    before, after = block_hashes(root(), tokens, 16), block_hashes(root(), changed, 16)
    assert before[0] == after[0]
    assert before[1] != after[1]
    assert before[2] != after[2]


def test_salt_separates_tenants() -> None:
    tokens = list(range(64))
    a = block_hashes(root(), tokens, 16, salt=b"tenant-a")
    b = block_hashes(root(), tokens, 16, salt=b"tenant-b")
    unsalted = block_hashes(root(), tokens, 16)
    assert len(a) == len(b) == len(unsalted) == 4
    assert not set(a) & set(b)
    assert not set(a) & set(unsalted)
    assert a == block_hashes(root(), tokens, 16, salt=b"tenant-a")


@pytest.mark.parametrize("block_size", [0, -1])
def test_bad_block_size_is_refused(block_size: int) -> None:
    with pytest.raises(ValueError, match="block_size"):
        block_hashes(root(), [1, 2, 3], block_size)
    with pytest.raises(ValueError, match="block_size"):
        root_hash(**{**ROOT_ARGS, "block_size": block_size})  # type: ignore[arg-type]


@pytest.mark.parametrize(("bad", "shown"), [(-1, "-1"), (2**32, "4294967296"), (2**40, "1099511627776")])
def test_out_of_range_token_ids_are_refused(bad: int, shown: str) -> None:
    with pytest.raises(ValueError, match=rf"token ids must be in \[0, 2\*\*32\), got {shown} at position 2"):
        chain_hash(root(), [1, 2, bad])
    with pytest.raises(ValueError, match=r"2\*\*32"):
        block_hashes(root(), [1, 2, bad, 4], 2)


def test_non_integer_token_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="must be integers, got float at position 1"):
        chain_hash(root(), [1, 2.0, 3])  # type: ignore[list-item]


def test_parent_must_be_a_digest() -> None:
    with pytest.raises(ValueError, match="32-byte"):
        chain_hash(BlockHash(b"short"), [1])


# --- pool ------------------------------------------------------------------------------------------


def test_eviction_takes_the_least_recently_freed_first() -> None:
    pool = new_pool(30)
    a, b, c = (pool.insert(h(i), payload(i)) for i in range(3))
    assert a is not None
    assert b is not None
    assert c is not None
    pool.release([a])
    pool.release([c])
    pool.release([b])
    assert pool.insert(h(3), payload(3)) is not None
    assert resident(pool) == {1, 2, 3}  # a went first
    assert pool.insert(h(4), payload(4)) is not None
    assert resident(pool) == {1, 3, 4}  # then c
    assert pool.insert(h(5), payload(5)) is not None
    assert resident(pool) == {3, 4, 5}  # then b
    assert pool.stats.evictions == 3


def test_a_released_sequence_loses_its_tail_before_its_head() -> None:
    pool = new_pool(30)
    sequence = [pool.insert(h(i), payload(i)) for i in range(3)]
    assert all(block is not None for block in sequence)
    pool.release([block for block in sequence if block is not None])
    pool.insert(h(3), payload(3))
    assert resident(pool) == {0, 1, 3}
    pool.insert(h(4), payload(4))
    assert resident(pool) == {0, 3, 4}  # the head, the shared prefix, outlives its extensions


def test_a_block_matched_again_is_not_evicted_while_referenced() -> None:
    pool = new_pool(30)
    blocks = [pool.insert(h(i), payload(i)) for i in range(3)]
    pool.release([block for block in blocks if block is not None])  # free queue: 2, 1, 0
    [again] = pool.match([h(2)])
    assert again is blocks[2]
    assert again.ref_count == 1
    pool.insert(h(3), payload(3))
    pool.insert(h(4), payload(4))
    assert resident(pool) == {2, 3, 4}  # 1 and 0 went; 2, the oldest free block, was taken back
    assert pool.insert(h(5), payload(5)) is None  # everything left is referenced
    assert resident(pool) == {2, 3, 4}
    pool.release([again])
    assert pool.insert(h(5), payload(5)) is not None
    assert resident(pool) == {3, 4, 5}


def test_reference_counts_through_match_insert_and_release() -> None:
    pool = new_pool(100)
    block = pool.insert(h(0), payload(0))
    assert block is not None
    assert (block.hash, block.payload, block.nbytes, block.ref_count) == (h(0), payload(0), 10, 1)
    assert pool.match([h(0)]) == [block]
    assert block.ref_count == 2
    same = pool.insert(h(0), payload(7, 20))
    assert same is block
    assert block.ref_count == 3
    assert block.payload == payload(0)  # the cached payload is kept; the hash says they are equal
    assert pool.stats.used_bytes == 10
    pool.release([block, block])
    assert block.ref_count == 1
    pool.release([block])
    assert block.ref_count == 0
    assert h(0) in pool  # unreferenced blocks stay cached until space is needed


def test_releasing_an_unreferenced_block_raises_and_changes_nothing() -> None:
    pool = new_pool(100)
    a, b = pool.insert(h(0), payload(0)), pool.insert(h(1), payload(1))
    assert a is not None
    assert b is not None
    with pytest.raises(ValueError, match="unreferenced"):
        pool.release([b, a, a])  # a holds one reference, not two
    assert (a.ref_count, b.ref_count) == (1, 1)
    pool.release([a])
    with pytest.raises(ValueError, match="unreferenced"):
        pool.release([a])


def test_releasing_a_stale_block_raises() -> None:
    pool = new_pool(10)
    old = pool.insert(h(0), payload(0))
    assert old is not None
    pool.release([old])
    new = pool.insert(h(1), payload(1))  # evicts old
    assert new is not None
    pool.release([new])
    fresh = pool.insert(h(0), payload(0))
    assert fresh is not None
    assert fresh is not old
    with pytest.raises(ValueError, match="unreferenced"):
        pool.release([old])
    assert fresh.ref_count == 1


def test_an_insert_that_cannot_fit_returns_none_and_evicts_nothing() -> None:
    pool = new_pool(30)
    held = pool.insert(h(0), payload(0))
    free = pool.insert(h(1), payload(1))
    assert held is not None
    assert free is not None
    pool.release([free])
    assert pool.insert(h(2), payload(2, 31)) is None  # over the whole budget
    assert pool.insert(h(2), payload(2, 21)) is None  # over what evicting every free block would give
    assert resident(pool) == {0, 1}
    assert pool.stats.evictions == 0
    assert pool.stats.used_bytes == 20
    assert pool.insert(h(2), payload(2, 20)) is not None  # exactly what evicting block 1 gives
    assert resident(pool) == {0, 2}
    assert pool.stats.used_bytes == 30


def test_the_budget_is_never_exceeded() -> None:
    pool = new_pool(50)
    for i in range(40):
        block = pool.insert(h(i), payload(i, 7 + i % 5))
        assert pool.stats.used_bytes <= 50
        if block is not None and i % 3:
            pool.release([block])
    assert pool.stats.used_bytes <= 50


def test_match_stops_at_the_first_miss() -> None:
    pool = new_pool(100)
    a, c = pool.insert(h(0), payload(0)), pool.insert(h(2), payload(2))
    assert a is not None
    assert c is not None
    assert pool.match([h(0), h(1), h(2)]) == [a]
    assert (a.ref_count, c.ref_count) == (2, 1)
    assert pool.match([h(5), h(0)]) == []
    assert a.ref_count == 2
    assert pool.match([]) == []
    stats = pool.stats
    assert (stats.hits, stats.misses) == (1, 2)


def test_evicted_blocks_spill_and_come_back_through_match() -> None:
    spill = DictSpill()
    pool = new_pool(20, spill)
    a, b = pool.insert(h(0), payload(0)), pool.insert(h(1), payload(1))
    assert a is not None
    assert b is not None
    pool.release([a, b])  # free queue: b, a
    c = pool.insert(h(2), payload(2))
    assert c is not None
    pool.release([c])
    assert resident(pool) == {0, 2}
    assert spill.data == {h(1): payload(1)}
    matched = pool.match([h(0), h(1), h(3)])
    assert [block.hash for block in matched] == [h(0), h(1)]
    assert matched[0] is a
    assert matched[1].payload == payload(1)
    assert matched[1].ref_count == 1
    assert resident(pool) == {0, 1}  # loading b back evicted the free block 2, which spilled in turn
    assert spill.data == {h(1): payload(1), h(2): payload(2)}
    assert pool.stats == PoolStats(
        blocks=2, used_bytes=20, budget_bytes=20, hits=2, misses=1, evictions=2, spilled=2, loaded=1
    )


def test_a_block_the_spill_already_holds_is_not_saved_again() -> None:
    spill = DictSpill()
    pool = new_pool(10, spill)
    a = pool.insert(h(0), payload(0))
    assert a is not None
    pool.release([a])
    b = pool.insert(h(1), payload(1))  # evicts and saves a
    assert b is not None
    pool.release([b])
    [back] = pool.match([h(0)])  # evicts and saves b, loads a
    pool.release([back])
    pool.insert(h(2), payload(2))  # evicts a again: the spill has it already
    assert spill.saves == [h(0), h(1)]
    assert pool.stats.spilled == 2
    assert pool.stats.evictions == 3


def test_a_spilled_block_that_cannot_fit_ends_the_match() -> None:
    spill = DictSpill()
    spill.save(h(1), payload(1, 30))
    pool = new_pool(20, spill)
    a = pool.insert(h(0), payload(0))
    assert a is not None
    assert pool.match([h(0), h(1)]) == [a]
    assert h(1) not in pool
    assert (pool.stats.loaded, pool.stats.misses, pool.stats.hits) == (0, 1, 1)


def test_a_spill_that_cannot_load_is_a_miss() -> None:
    class Lossy(DictSpill):
        def load(self, block_hash: BlockHash) -> bytes | None:
            return None

    spill = Lossy()
    spill.save(h(0), payload(0))
    pool = new_pool(100, spill)
    assert pool.match([h(0)]) == []
    assert (pool.stats.misses, pool.stats.loaded) == (1, 0)


def test_flush_saves_every_block_in_memory() -> None:
    spill = DictSpill()
    pool = new_pool(100, spill)
    held = pool.insert(h(0), payload(0))
    free = pool.insert(h(1), payload(1))
    assert held is not None
    assert free is not None
    pool.release([free])
    spill.save(h(9), payload(9))
    assert pool.flush() == 2
    assert spill.data == {h(0): payload(0), h(1): payload(1), h(9): payload(9)}
    assert pool.flush() == 0  # nothing new to save
    assert resident(pool) == {0, 1}  # flushing keeps the blocks in memory
    assert pool.stats.spilled == 2
    assert new_pool(100).flush() == 0


def test_stats_count_exactly() -> None:
    spill = DictSpill()
    pool = new_pool(30, spill)
    assert pool.stats == PoolStats(
        blocks=0, used_bytes=0, budget_bytes=30, hits=0, misses=0, evictions=0, spilled=0, loaded=0
    )
    blocks = [pool.insert(h(i), payload(i)) for i in range(3)]
    pool.release([block for block in blocks if block is not None])  # free queue: 2, 1, 0
    got = pool.match([h(0), h(1), h(7)])  # 2 hits, 1 miss
    pool.insert(h(3), payload(3))  # evicts 2 (spilled)
    pool.release(got)  # free queue: 1, 0
    assert [block.hash for block in pool.match([h(2)])] == [h(2)]  # loaded, evicting 1 (spilled)
    assert pool.insert(h(4), payload(4, 31)) is None
    assert len(pool) == 3
    assert pool.stats == PoolStats(
        blocks=3, used_bytes=30, budget_bytes=30, hits=3, misses=1, evictions=2, spilled=2, loaded=1
    )


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="budget_bytes"):
        new_pool(-1)
    pool: BlockPool[bytes] = BlockPool(budget_bytes=10, size_of=lambda _: -1)
    with pytest.raises(ValueError, match="negative"):
        pool.insert(h(0), b"")
    assert len(pool) == 0


def test_concurrent_use_keeps_the_books_straight() -> None:
    pool = new_pool(200)
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for step in range(300):
                hashes = [h((offset + step + k) % 40) for k in range(3)]
                got = pool.match(hashes)
                extra = pool.insert(hashes[len(got)], payload(offset, 10)) if len(got) < 3 else None
                pool.release(got + ([extra] if extra is not None else []))
        except BaseException as exc:  # collected so the main thread fails the test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n * 7,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = pool.stats
    assert stats.used_bytes <= 200
    assert stats.used_bytes == 10 * stats.blocks
    # Every reference was released, so every cached block is evictable: a full-budget block fits.
    assert pool.insert(h(99), payload(99, 200)) is not None
    assert len(pool) == 1


# --- model-based state machine ---------------------------------------------------------------------

BUDGET = 40
UNIVERSE = 8


class PoolMachine(RuleBasedStateMachine):
    """The pool against a plain reference model of the same rules (dicts and a list)."""

    def __init__(self) -> None:
        super().__init__()
        self.spill = DictSpill()
        self.pool = new_pool(BUDGET, self.spill)
        # The reference model.
        self.size: dict[BlockHash, int] = {}  # in memory: hash -> nbytes
        self.refs: dict[BlockHash, int] = {}
        self.free: list[BlockHash] = []  # eviction order
        self.spilled: dict[BlockHash, int] = {}
        self.evictions = 0
        self.saves = 0
        # What the "engine" holds: one list of blocks per match or insert, released as a unit.
        self.held: list[list[Block[bytes]]] = []
        self.seen: list[Block[bytes]] = []

    # The model's rules, written independently of the pool's code.
    def _admit(self, block_hash: BlockHash, nbytes: int) -> bool:
        used = sum(self.size.values())
        if nbytes > BUDGET - used + sum(self.size[f] for f in self.free):
            return False
        while used + nbytes > BUDGET:
            victim = self.free.pop(0)
            if victim not in self.spilled:
                self.spilled[victim] = self.size[victim]
                self.saves += 1
            used -= self.size.pop(victim)
            del self.refs[victim]
            self.evictions += 1
        self.size[block_hash] = nbytes
        self.refs[block_hash] = 1
        return True

    def _take(self, block_hash: BlockHash) -> None:
        if self.refs[block_hash] == 0:
            self.free.remove(block_hash)
        self.refs[block_hash] += 1

    def _hold(self, blocks: list[Block[bytes]]) -> None:
        if blocks:
            self.held.append(blocks)
            self.seen.extend(blocks)

    @rule(
        indices=st.lists(st.integers(0, UNIVERSE - 1), min_size=1, max_size=4, unique=True),
        nbytes=st.integers(0, 15),
    )
    def insert(self, indices: list[int], nbytes: int) -> None:
        # Like a prefill: a sequence inserts its blocks in order, stops at the first that does not fit,
        # and later releases them together.
        inserted = []
        for i in indices:
            block_hash = h(i)
            if block_hash in self.size:
                self._take(block_hash)
                expected = True
            else:
                expected = self._admit(block_hash, nbytes)
            block = self.pool.insert(block_hash, payload(i, nbytes))
            assert (block is not None) == expected
            if block is None:
                break
            assert block.hash == block_hash
            assert block.nbytes == self.size[block_hash]
            inserted.append(block)
        self._hold(inserted)

    @rule(indices=st.lists(st.integers(0, UNIVERSE - 1), max_size=5, unique=True))
    def match(self, indices: list[int]) -> None:
        expected = []
        for i in indices:
            if h(i) in self.size:
                self._take(h(i))
            elif h(i) not in self.spilled or not self._admit(h(i), self.spilled[h(i)]):
                break
            expected.append(h(i))
        got = self.pool.match([h(i) for i in indices])
        assert [block.hash for block in got] == expected
        assert all(block.payload == payload(block.hash[0], block.nbytes) for block in got)
        self._hold(got)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        blocks = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        for block in reversed(blocks):
            self.refs[block.hash] -= 1
            if self.refs[block.hash] == 0:
                self.free.append(block.hash)
        self.pool.release(blocks)

    @rule()
    def flush(self) -> None:
        missing = [f for f in self.size if f not in self.spilled]
        for f in missing:
            self.spilled[f] = self.size[f]
        self.saves += len(missing)
        assert self.pool.flush() == len(missing)

    @invariant()
    def within_budget(self) -> None:
        stats = self.pool.stats
        assert stats.used_bytes <= BUDGET
        assert stats.used_bytes == sum(self.size.values())
        assert stats.evictions == self.evictions
        assert stats.spilled == len(self.spill.saves) == self.saves

    @invariant()
    def same_blocks_as_the_model(self) -> None:
        assert {h(i) for i in range(UNIVERSE) if h(i) in self.pool} == set(self.size)
        assert set(self.spill.data) == set(self.spilled)

    @invariant()
    def ref_counts_equal_references_held(self) -> None:
        # Every block the pool ever made was returned at least once, so `seen` covers them all; evicted
        # ones keep ref_count 0. Count each object once, however often it was returned.
        distinct = {id(block): block for block in self.seen}.values()
        assert sum(block.ref_count for block in distinct) == sum(len(blocks) for blocks in self.held)

    @invariant()
    def referenced_blocks_are_in_memory(self) -> None:
        for blocks in self.held:
            for block in blocks:
                assert block.hash in self.pool
                assert block.ref_count == self.refs[block.hash] > 0


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_pool_state_machine = PoolMachine.TestCase

"""The transformers engine and its prefix KV cache, on real models.

Parity is the point: greedy decoding from a reused prefix must give exactly the tokens of a full prefill,
with first-step logits that agree to float32 rounding, in every case the block arithmetic has (a prompt
shorter than a block, longer, on a block boundary, a full hit, after eviction, after a restart from the
spill folder), for two architectures (the random "tiny" Llama and "tiny-qwen2") and for SmolLM2. The
baseline is always ``greedy(..., reuse=False)``: a full prefill that neither reads nor writes the cache.

Logit tolerance: 1e-4 absolute for SmolLM2 (logits up to ~30; measured worst 5e-5). The tiny models'
weights are drawn with ``initializer_range=1.0``, so their logits reach ~40 and float32 rounding alone
moves them by up to 1.2e-4 (measured over 40 random prompts); in float32 their bound is relative,
1e-5 of the largest logit (~4e-4), still 3x the worst measured, and in float64 (where rounding is
negligible) the same cases meet 1e-4 absolute.

Models are built once into cachekit's model cache (``$CACHEKIT_MODEL_CACHE``, which the suite points at
the user's own cache, so later runs reuse them); tests with SmolLM2 are marked slow (the first run
converts its GGUF, about half a minute).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cachekit.local.engine import Engine, Prompt, ToolCall, ToolSpec, Turn
from cachekit.local.kv.hashing import block_hashes
from cachekit.local.kv.tensors import KVCodec
from cachekit.local.models import MODEL_CACHE_ENV, models_dir, resolve_model, smollm2_gguf
from cachekit.local.transformers_engine import (
    IncrementalDecoder,
    StopMatcher,
    TransformersEngine,
)

BLOCK = 16
# The two random architectures, and SmolLM2 (slow: 135M parameters on a CPU).
MODELS = ["tiny", "tiny-qwen2", pytest.param("smollm2", marks=pytest.mark.slow)]
CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")],
)
DEVICES = ["cpu", CUDA]


# --- helpers ---------------------------------------------------------------------------------------------


def random_ids(seed: int, count: int) -> list[int]:
    """Token ids drawn uniformly from the ordinary (non-special) part of SmolLM2's vocabulary."""
    rng = random.Random(seed)
    return [rng.randrange(17, 49152) for _ in range(count)]


def model_shape(model: str) -> tuple[int, int, int]:
    """(layers, kv heads, head dim), read from the model's config.json, not from the engine."""
    config = json.loads((resolve_model(model, progress=False).path / "config.json").read_text())
    heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return config["num_hidden_layers"], heads, dim


def float32_block_bytes(model: str) -> int:
    layers, heads, dim = model_shape(model)
    return layers * 2 * heads * BLOCK * dim * 4


def assert_logits_close(got: torch.Tensor, want: torch.Tensor, *, model: str) -> None:
    worst = float((got - want).abs().max())
    bound = 1e-4 if model == "smollm2" else 1e-5 * float(want.abs().max())
    assert worst <= bound, f"first-step logits differ by {worst:.3g} (bound {bound:.3g})"


def assert_parity(
    engine: TransformersEngine,
    ids: list[int],
    *,
    reused: int,
    model: str,
    salt: bytes = b"",
    new_tokens: int = 12,
) -> None:
    """Greedy from the cache equals greedy from a full prefill, and ``reused`` tokens came from the cache."""
    want_tokens, want_logits = engine.greedy(ids, new_tokens, salt=salt, reuse=False)
    got_tokens, got_logits = engine.greedy(ids, new_tokens, salt=salt)
    run = engine.last_run
    assert run is not None
    assert (run.prompt_tokens, run.reused_tokens, run.prefilled_tokens) == (
        len(ids),
        reused,
        len(ids) - reused,
    )
    assert got_tokens == want_tokens
    assert_logits_close(got_logits, want_logits, model=model)


def expected_reuse(cached_blocks: int, shared: int, length: int) -> int:
    """The block arithmetic: whole blocks inside both the cached part and the shared prefix, and never
    the whole prompt (the last token is always recomputed)."""
    blocks = min(cached_blocks, shared // BLOCK)
    return min(blocks * BLOCK, length - 1)


def chat(*turns: Turn, **fields: Any) -> Prompt:
    return Prompt(model="local", turns=turns, **fields)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection fails the test."""

    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"network access attempted: {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture(scope="module")
def shared_engines() -> Iterator[dict[tuple[str, str], TransformersEngine]]:
    """Engines loaded once for the module, by (model, device); see :func:`engine_for`."""
    engines: dict[tuple[str, str], TransformersEngine] = {}
    yield engines
    for engine in engines.values():
        engine.close()


def engine_for(
    shared: dict[tuple[str, str], TransformersEngine], model: str, device: str
) -> TransformersEngine:
    """One engine per (model, device) for the module; tests keep apart by salting their prompts."""
    if (model, device) not in shared:
        shared[model, device] = TransformersEngine(model, device=device)
    return shared[model, device]


# --- parity ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    ("case", "warm", "probe", "reused"),
    [
        ("shorter than a block", 10, 10, 0),
        ("longer than a block", 40, 45, 32),
        ("exact block boundary", 48, 53, 48),
        ("full hit", 48, 48, 47),
    ],
)
def test_reuse_gives_the_tokens_of_a_full_prefill(
    shared_engines: dict[tuple[str, str], TransformersEngine],
    model: str,
    device: str,
    case: str,
    warm: int,
    probe: int,
    reused: int,
) -> None:
    engine = engine_for(shared_engines, model, device)
    salt = f"{case}/{model}/{device}".encode()  # a tenant of its own: no other test's blocks
    ids = random_ids(len(case), 64)
    engine.greedy(ids[:warm], 1, salt=salt)
    assert engine.last_run is not None
    assert engine.last_run.reused_tokens == 0  # a cold cache for this tenant
    assert_parity(engine, ids[:probe], reused=reused, model=model, salt=salt)


@pytest.mark.parametrize("model", ["tiny", "tiny-qwen2"])
def test_tiny_models_agree_within_1e4_in_float64(model: str) -> None:
    """Every block case of the test above, in float64: the logits of a reused prefix within 1e-4 absolute."""
    engine = TransformersEngine(model, device="cpu", dtype="float64")
    try:
        for case, (warm, probe, reused) in enumerate([(10, 10, 0), (40, 45, 32), (48, 53, 48), (48, 48, 47)]):
            salt = f"float64/{case}".encode()
            ids = random_ids(100 + case, 64)
            engine.greedy(ids[:warm], 1, salt=salt)
            want_tokens, want_logits = engine.greedy(ids[:probe], 12, salt=salt, reuse=False)
            got_tokens, got_logits = engine.greedy(ids[:probe], 12, salt=salt)
            assert engine.last_run is not None
            assert engine.last_run.reused_tokens == reused
            assert got_tokens == want_tokens
            worst = float((got_logits - want_logits).abs().max())
            assert worst <= 1e-4, f"case {case}: first-step logits differ by {worst:.3g}"
    finally:
        engine.close()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", MODELS)
def test_parity_after_eviction(model: str, device: str) -> None:
    engine = TransformersEngine(model, device=device, kv_budget_bytes=4 * float32_block_bytes(model))
    first, second = random_ids(1, 64), random_ids(2, 32)
    engine.greedy(first, 1)
    assert len(engine.pool) == 4  # the budget, exactly
    engine.greedy(second, 1)
    # LRU of free blocks, tail first: the first prompt lost its last two blocks and kept its head.
    assert engine.pool.stats.evictions == 2
    assert_parity(engine, first, reused=32, model=model)
    engine.close()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", MODELS)
def test_parity_after_a_restart_from_the_spill_folder(model: str, device: str, tmp_path: Path) -> None:
    ids = random_ids(3, 50)
    with TransformersEngine(model, device=device, spill_dir=tmp_path) as before:
        before.greedy(ids, 1)
        assert list(tmp_path.rglob("*.safetensors")) == []  # nothing spilled before close
    assert len(list(tmp_path.rglob("*.safetensors"))) == 3  # close() flushed the three full blocks
    with TransformersEngine(model, device=device, spill_dir=tmp_path) as after:
        assert len(after.pool) == 0
        assert_parity(after, ids, reused=48, model=model)
        assert after.pool.stats.loaded == 3


def test_evicted_blocks_come_back_from_the_spill_folder(tmp_path: Path) -> None:
    engine = TransformersEngine("tiny", kv_budget_bytes=2 * float32_block_bytes("tiny"), spill_dir=tmp_path)
    first, second = random_ids(4, 32), random_ids(5, 32)
    engine.greedy(first, 1)
    engine.greedy(second, 1)  # evicts both blocks of the first prompt, to disk
    assert engine.pool.stats.evictions == 2
    assert engine.pool.stats.spilled == 2
    assert_parity(engine, [*first, 7, 8, 9], reused=32, model="tiny")
    assert engine.pool.stats.loaded == 2
    engine.close()


@pytest.mark.slow
def test_smollm2_parity_on_a_chat_prompt(shared_engines: dict[tuple[str, str], TransformersEngine]) -> None:
    engine = engine_for(shared_engines, "smollm2", "cpu")
    system = Turn("system", "You are a terse assistant who answers in one short sentence.")
    first = engine.encode_prompt(chat(system, Turn("user", "What is the capital of France?")))
    second = engine.encode_prompt(chat(system, Turn("user", "What is the capital of Italy?")))
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    cached = len(first) // BLOCK
    salt = b"smollm2-parity"
    check = functools.partial(assert_parity, engine, model="smollm2", salt=salt, new_tokens=4)
    check(first, reused=0)  # cold
    check(first, reused=expected_reuse(cached, len(first), len(first)))  # warm
    check(second, reused=expected_reuse(cached, shared, len(second)))  # another question, same system turn
    check(first[: 2 * BLOCK], reused=2 * BLOCK - 1)  # a full hit on a block boundary
    check(first[: 2 * BLOCK] + second[2 * BLOCK :], reused=2 * BLOCK)  # a prompt continuing on the boundary


# --- what was reused, and for whom ---------------------------------------------------------------------


EXAMPLES = itertools.count()


@settings(max_examples=25, deadline=None)
@given(
    first_len=st.integers(1, 70),
    second_len=st.integers(1, 70),
    shared=st.integers(0, 70),
    seed=st.integers(0, 2**32),
)
def test_reused_tokens_follow_the_block_arithmetic(
    shared_engines: dict[tuple[str, str], TransformersEngine],
    first_len: int,
    second_len: int,
    shared: int,
    seed: int,
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    salt = f"arithmetic/{next(EXAMPLES)}".encode()  # every example a fresh tenant: a cold cache
    first = random_ids(seed, first_len)
    shared = min(shared, first_len, second_len)
    tail = random_ids(seed + 1, second_len - shared)
    if shared < first_len and tail and tail[0] == first[shared]:
        tail[0] = 17 if first[shared] != 17 else 18  # the prompts part exactly at `shared`
    second = first[:shared] + tail
    engine.greedy(first, 1, salt=salt)
    assert engine.last_run is not None
    assert engine.last_run.reused_tokens == 0
    engine.greedy(second, 1, salt=salt)
    assert engine.last_run.reused_tokens == expected_reuse(first_len // BLOCK, shared, second_len)


def test_tenants_never_share_blocks(shared_engines: dict[tuple[str, str], TransformersEngine]) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    ids = random_ids(6, 40)
    engine.greedy(ids, 1, salt=b"tenant-a")
    engine.greedy(ids, 1, salt=b"tenant-b")
    assert engine.last_run is not None
    assert engine.last_run.reused_tokens == 0  # same tokens, other tenant: nothing reused
    engine.greedy(ids, 1, salt=b"tenant-a")
    assert engine.last_run.reused_tokens == 32
    mine = set(block_hashes(engine.root, ids, BLOCK, salt=b"tenant-a"))
    theirs = set(block_hashes(engine.root, ids, BLOCK, salt=b"tenant-b"))
    assert not mine & theirs
    assert all(h in engine.pool for h in mine | theirs)  # two copies of the same prefix, one per tenant


def test_a_baseline_run_neither_reads_nor_writes_the_cache(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    ids = random_ids(7, 40)
    before = engine.pool.stats
    engine.greedy(ids, 1, salt=b"baseline", reuse=False)
    after = engine.pool.stats
    assert (after.blocks, after.hits, after.misses) == (before.blocks, before.hits, before.misses)
    assert engine.last_run is not None
    assert engine.last_run.reused_tokens == 0


# --- quantized blocks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("scheme", "levels"), [("int8", 127), ("int4", 7)])
def test_quantized_blocks_round_trip_within_half_a_step(
    shared_engines: dict[tuple[str, str], TransformersEngine], scheme: str, levels: int
) -> None:
    """The codec's own guarantee, on real keys and values: every element comes back within half a
    quantization step (absmax / levels / 2) of its channel (keys) or token (values)."""
    engine = engine_for(shared_engines, "tiny", "cpu")
    codec = KVCodec(scheme, shape=engine.codec.shape, dtype=torch.float32, device=torch.device("cpu"))  # type: ignore[arg-type]
    ids = random_ids(9, 48)
    engine.greedy(ids, 1, salt=b"quantized")
    for block in engine.pool.match(block_hashes(engine.root, ids, BLOCK, salt=b"quantized")):
        original = block.payload.data
        restored = codec.decode(codec.encode(original))
        keys, values = original[:, 0], original[:, 1]
        key_step = keys.abs().amax(dim=2, keepdim=True) / levels
        value_step = values.abs().amax(dim=3, keepdim=True) / levels
        assert ((restored[:, 0] - keys).abs() <= key_step / 2 + 1e-6).all()
        assert ((restored[:, 1] - values).abs() <= value_step / 2 + 1e-6).all()
        engine.pool.release([block])


@pytest.mark.parametrize(("scheme", "data_bytes"), [("int8", 1.0), ("int4", 0.5)])
def test_quantized_blocks_are_smaller_by_what_the_layout_says(scheme: str, data_bytes: float) -> None:
    layers, heads, dim = model_shape("tiny")
    engine = TransformersEngine("tiny", quantize=scheme)
    elements = layers * 2 * heads * BLOCK * dim
    scales = layers * heads * dim + layers * heads * BLOCK  # keys per channel, values per token; float32
    assert engine.codec.block_nbytes() == int(elements * data_bytes) + 4 * scales
    assert engine.codec.block_nbytes() < elements * 4 / 3  # at least three times smaller than float32
    engine.close()


def test_quantized_blocks_survive_a_restart_unchanged(tmp_path: Path) -> None:
    ids = random_ids(10, 40)
    with TransformersEngine("tiny", quantize="int4", spill_dir=tmp_path) as before:
        before.greedy(ids, 1)
        hashes = block_hashes(before.root, ids, BLOCK)
        kept = [block.payload for block in before.pool.match(hashes)]
    with TransformersEngine("tiny", quantize="int4", spill_dir=tmp_path) as after:
        assert after.root == before.root
        loaded = [block.payload for block in after.pool.match(hashes)]
        assert len(loaded) == len(kept) == 2
        for a, b in zip(kept, loaded, strict=True):
            assert torch.equal(a.data, b.data)
            assert a.k_scale is not None
            assert b.k_scale is not None
            assert torch.equal(a.k_scale, b.k_scale)
        after.greedy(ids, 1)
        assert after.last_run is not None
        assert after.last_run.reused_tokens == 32


def test_quantized_and_full_blocks_never_mix(tmp_path: Path) -> None:
    with (
        TransformersEngine("tiny", spill_dir=tmp_path) as full,
        TransformersEngine("tiny", quantize="int8", spill_dir=tmp_path) as int8,
    ):
        assert full.root != int8.root


# Measured on SmolLM2 (a chat prompt of 63-69 tokens, its cached blocks reused, 24 greedy tokens; 5 prompts):
#   int8: max |d logit| 0.10-0.22 (logits up to ~30); greedy output identical on 5 of 5 prompts.
#   int4: max |d logit| 1.6-2.5; greedy output identical on 2 of 5, diverging from the first token on one.
# So int8 is close to lossless here and int4 is not: the bounds below are about twice the worst measured,
# and only int8 is held to the same tokens.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("scheme", "max_logit_diff", "same_tokens"), [("int8", 0.5, True), ("int4", 5.0, False)]
)
def test_smollm2_quality_with_quantized_blocks(scheme: str, max_logit_diff: float, same_tokens: bool) -> None:
    engine = TransformersEngine("smollm2", quantize=scheme)
    system = Turn(
        "system",
        "You are a helpful assistant. Answer the question accurately and concisely, in one sentence.",
    )
    ids = engine.encode_prompt(chat(system, Turn("user", "What is the capital of France?")))
    engine.greedy(ids, 1)
    want_tokens, want_logits = engine.greedy(ids, 8, reuse=False)
    got_tokens, got_logits = engine.greedy(ids, 8)
    assert engine.last_run is not None
    assert engine.last_run.reused_tokens == expected_reuse(len(ids) // BLOCK, len(ids), len(ids))
    assert float((got_logits - want_logits).abs().max()) <= max_logit_diff
    if same_tokens:
        assert got_tokens == want_tokens
    engine.close()


# --- generation through the Engine protocol ---------------------------------------------------------------


def test_the_engine_satisfies_the_protocol(shared_engines: dict[tuple[str, str], TransformersEngine]) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    assert isinstance(engine, Engine)
    assert engine.context_window == 2048
    prompt = chat(Turn("user", "Hello there"))
    assert engine.prompt_tokens(prompt) == len(engine.tokenizer.encode(engine.render(prompt)))


def test_streamed_text_is_the_greedy_answer(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny-qwen2", "cpu")
    prompt = chat(Turn("user", "Tell me a story about a café in 東京."), max_tokens=20, salt=b"stream")
    tokens, _ = engine.greedy(engine.encode_prompt(prompt), 20, salt=b"stream")
    generation = engine.generate(prompt)
    assert generation.tool_call is None
    pieces = list(generation)
    assert len(pieces) > 1  # streamed, not one blob
    assert "".join(pieces) == engine.tokenizer.decode(tokens)
    assert generation.finish_reason == "length"
    assert generation.output_tokens == 20
    assert engine.last_run is not None
    assert engine.last_run.output_tokens == 20


def test_a_stop_sequence_ends_the_answer_before_it(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    prompt = chat(Turn("user", "Say something."), max_tokens=30, salt=b"stop")
    text = "".join(engine.generate(prompt))
    stop = text[12:15]
    cut = text.find(stop)
    generation = engine.generate(
        chat(Turn("user", "Say something."), max_tokens=30, salt=b"stop", stop=("\x00never", stop))
    )
    assert "".join(generation) == text[:cut]
    assert generation.finish_reason == "stop_sequence"
    assert generation.stop_sequence == stop
    assert generation.output_tokens < 30


def test_a_generation_runs_once_and_reports_only_when_done(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    generation = engine.generate(chat(Turn("user", "Hi"), max_tokens=3, salt=b"once"))
    with pytest.raises(RuntimeError):
        _ = generation.finish_reason
    list(generation)
    assert generation.finish_reason == "length"
    with pytest.raises(RuntimeError):
        iter(generation)


def held_references(engine: TransformersEngine, ids: list[int], salt: bytes) -> list[int]:
    """The reference counts on the prompt's cached blocks, not counting the one this lookup takes."""
    blocks = engine.pool.match(block_hashes(engine.root, ids, BLOCK, salt=salt))
    counts = [block.ref_count - 1 for block in blocks]
    engine.pool.release(blocks)
    return counts


def test_references_are_released_when_the_caller_stops_early(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    prompt = chat(Turn("user", "A long question " * 4), max_tokens=50, salt=b"early")
    ids = engine.encode_prompt(prompt)
    generation = engine.generate(prompt)
    for _ in generation:
        assert held_references(engine, ids, b"early") == [1] * (len(ids) // BLOCK)  # held while running
        break
    assert held_references(engine, ids, b"early") == [0] * (len(ids) // BLOCK)

    kept = engine.generate(prompt)
    iterator = iter(kept)
    next(iterator)
    kept.close()  # an iterator the caller keeps but stops using
    assert held_references(engine, ids, b"early") == [0] * (len(ids) // BLOCK)


def test_references_are_released_when_a_generation_fails(tmp_path: Path) -> None:
    engine = TransformersEngine("tiny")
    prompt = chat(Turn("user", "A long question " * 4), max_tokens=50)
    ids = engine.encode_prompt(prompt)
    iterator = iter(engine.generate(prompt))
    next(iterator)
    engine.close()  # the next decode step fails
    with pytest.raises(RuntimeError, match="closed"):
        list(iterator)
    assert held_references(engine, ids, b"") == [0] * (len(ids) // BLOCK)


def test_generations_in_threads_match_sequential_ones(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    prompts = [
        chat(Turn("user", f"Question number {i}, with a shared preamble."), max_tokens=12, salt=b"threads")
        for i in range(4)
    ]
    sequential = ["".join(engine.generate(p)) for p in prompts]
    results: dict[int, str] = {}

    def run(index: int) -> None:
        results[index] = "".join(engine.generate(prompts[index]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[i] for i in range(len(prompts))] == sequential


def test_a_prompt_beyond_the_context_window_is_refused(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    with pytest.raises(ValueError, match="context window"):
        engine.greedy(random_ids(8, 2048), 1)
    tokens, _ = engine.greedy(random_ids(8, 2040), 50, salt=b"window")
    assert len(tokens) <= 8  # capped by the window, not by the 50 asked for


@pytest.mark.slow
def test_smollm2_answers_and_ends_at_eos(shared_engines: dict[tuple[str, str], TransformersEngine]) -> None:
    engine = engine_for(shared_engines, "smollm2", "cpu")
    generation = engine.generate(chat(Turn("user", "What is the capital of France?"), max_tokens=64))
    text = "".join(generation)
    assert "Paris" in text
    assert generation.finish_reason == "end"
    assert generation.output_tokens < 64


# --- detokenization and stop sequences --------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40))
def test_streamed_pieces_never_split_a_character(
    shared_engines: dict[tuple[str, str], TransformersEngine], text: str
) -> None:
    tokenizer = engine_for(shared_engines, "tiny", "cpu").tokenizer
    tokens = tokenizer.encode(text)
    decoder = IncrementalDecoder(tokenizer)
    pieces = [decoder.add(token) for token in tokens] + [decoder.flush()]
    whole = tokenizer.decode(tokens)
    assert "".join(pieces) == whole
    if "\ufffd" not in whole:  # (a few unassigned code points do not survive this tokenizer at all)
        assert not any("\ufffd" in piece for piece in pieces)


def first_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """Oracle: the stop that completes first while the text streams (the longest, if two end together)."""
    for end in range(1, len(text) + 1):
        done = [stop for stop in stops if stop and text[:end].endswith(stop)]
        if done:
            stop = max(done, key=len)
            return text[: end - len(stop)], stop
    return text, None


@settings(max_examples=300)
@given(
    text=st.text("abc", max_size=30),
    stops=st.lists(st.text("abc", min_size=1, max_size=4), max_size=3),
    cuts=st.lists(st.integers(0, 30), max_size=10),
)
def test_stop_matching_does_not_depend_on_how_the_text_streams(
    text: str, stops: list[str], cuts: list[int]
) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    matcher = StopMatcher(stops)
    out, found = "", None
    for start, end in itertools.pairwise(bounds):
        piece, found = matcher.feed(text[start:end])
        out += piece
        if found is not None:
            break
    if found is None:
        out += matcher.flush()
    assert (out, found) == first_stop(text, stops)


# --- chat rendering --------------------------------------------------------------------------------------


def test_the_chat_rendering_carries_system_tools_calls_and_results(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")  # SmolLM2's tokenizer and chat template
    prompt = chat(
        Turn("system", "You are a weather bot."),
        Turn("user", "Weather in Paris?"),
        Turn(
            "assistant",
            "Let me check.",
            tool_calls=(ToolCall("get_weather", {"city": "Paris"}, id="call-1"),),
        ),
        Turn("tool", '{"temp_c": 21}', tool_call_id="call-1"),
        Turn("user", "Thanks <|im_end|>"),
        tools=(
            ToolSpec(
                "get_weather",
                "Current weather for a city",
                {"type": "object", "properties": {"city": {"type": "string"}}},
            ),
        ),
    )
    text = engine.render(prompt)
    assert text.startswith("<|im_start|>system\n")
    assert "You are a weather bot." in text
    tools = json.loads(re.search(r"<tools>(\[.*\])</tools>", text).group(1))  # type: ignore[union-attr]
    assert tools == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    call = '<tool_call>[{"arguments": {"city": "Paris"}, "name": "get_weather"}]</tool_call>'
    assert f"<|im_start|>assistant\nLet me check.\n{call}<|im_end|>" in text
    assert '<|im_start|>user\n<tool_response>\n{"temp_c": 21}\n</tool_response><|im_end|>' in text
    assert text.endswith("<|im_start|>assistant\n")
    # The caller's "<|im_end|>" is text, not the control token that ends a turn.
    im_end = engine.hf_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert isinstance(im_end, int)
    assert engine.encode_prompt(prompt).count(im_end) == 5  # one per rendered turn


def test_a_prompt_without_a_system_turn_gets_the_templates_default(
    shared_engines: dict[tuple[str, str], TransformersEngine],
) -> None:
    engine = engine_for(shared_engines, "tiny", "cpu")
    text = engine.render(chat(Turn("user", "Hi")))
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


# --- models ---------------------------------------------------------------------------------------------


def test_an_unknown_model_is_never_downloaded(no_network: None) -> None:
    with pytest.raises(FileNotFoundError, match="never downloaded"):
        resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_a_model_folder_is_identified_by_its_content(tmp_path: Path, no_network: None) -> None:
    built = resolve_model("tiny", progress=False)
    assert resolve_model(str(built.path)).revision == built.revision  # our own folder: its recorded revision
    copy = tmp_path / "my-model"
    shutil.copytree(built.path, copy, ignore=shutil.ignore_patterns("cachekit-model.json"))
    first = resolve_model(str(copy), home=tmp_path)
    assert first.name == "my-model"
    assert resolve_model(str(copy), home=tmp_path).revision == first.revision
    config = json.loads((copy / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5
    (copy / "config.json").write_text(json.dumps(config))
    assert resolve_model(str(copy), home=tmp_path).revision != first.revision


def test_two_processes_building_a_model_at_once_both_get_it(tmp_path: Path) -> None:
    # Start from a home that already has the GGUF's tokenizer and digest, so the race is on the model build.
    real = models_dir()
    resolve_model("tiny", progress=False)
    for item in real.iterdir():
        if (item.name.startswith("smollm2-tokenizer-") and item.is_dir()) or item.name == "digests":
            shutil.copytree(item, tmp_path / "models" / item.name)
    script = (
        "from cachekit.local.models import resolve_model; print(resolve_model('tiny', progress=False).path)"
    )
    env = {**os.environ, MODEL_CACHE_ENV: str(tmp_path / "models")}  # not the shared cache: a fresh build
    runs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    paths = {run.communicate(timeout=120)[0].strip() for run in runs}
    assert all(run.returncode == 0 for run in runs)
    assert len(paths) == 1
    built = Path(paths.pop())
    assert (built / "model.safetensors").is_file()
    assert [p.name for p in built.parent.iterdir() if ".tmp-" in p.name] == []  # no half-built leftovers


@pytest.mark.slow
def test_smollm2_is_converted_once_from_the_packaged_gguf(no_network: None) -> None:
    resolved = resolve_model("smollm2", progress=False)
    digest = hashlib.sha256(smollm2_gguf().read_bytes()).hexdigest()
    assert resolved.revision == digest
    assert digest[:16] in resolved.path.name
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in resolved.path.iterdir()}
    stamp = (resolved.path / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("smollm2", progress=False) == resolved
    assert (resolved.path / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt

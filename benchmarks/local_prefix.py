"""The local backend's prefix KV cache: what reuse saves, what the lookup costs, what quantization loses.

1. Time to first token for one prompt of ``--tokens`` tokens whose first 0%, 50%, 90% and 99% are
   already cached (whole blocks), with reuse and with a full prefill, measured side by side (the two
   alternate, so drift in the machine's load hits both), medians of ``--runs``. Every run has a fresh
   suffix, so only the intended share is cached. The saving is reported as a fraction of the ideal,
   ``cached share x full-prefill time``; the aim is 80% or more.
2. The block pool's lookup cost per request: hashing the prompt's blocks, and matching them (plus the
   release), in microseconds.
3. Quantized blocks (int8, int4): the memory of a block, and the quality cost on SmolLM2 chat prompts
   whose cached prefix is reused: the largest first-step logit difference from a full prefill, and
   greedy agreement over ``--quality-tokens`` tokens.

Runs on the CPU, and on CUDA too when there is a device.

    python benchmarks/local_prefix.py [--model smollm2] [--tokens 1600] [--runs 5] [--devices cpu,cuda]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from cachekit.local.engine import Prompt, Turn
from cachekit.local.kv.hashing import block_hashes
from cachekit.local.transformers_engine import TransformersEngine

SHARES = (0.0, 0.5, 0.9, 0.99)
BLOCK = 16
QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "What is 12 times 12?",
    "Who wrote Hamlet?",
    "Give me a synonym for happy.",
)
SYSTEM = (
    "You are a helpful assistant for a travel company. Answer the user's question accurately and "
    "concisely, in one or two sentences. If you do not know, say so. Never invent facts. "
)


def ordinary_ids(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(17, 49152) for _ in range(count)]


def ttft(engine: TransformersEngine, ids: list[int], *, reuse: bool) -> float:
    engine.greedy(ids, 1, reuse=reuse)
    assert engine.last_run is not None
    return engine.last_run.time_to_first_token_s


def reuse_table(engine: TransformersEngine, tokens: int, runs: int) -> None:
    rng = random.Random(0)
    for _ in range(2):  # warm up the kernels (the first calls pay one-off setup)
        ttft(engine, ordinary_ids(rng, tokens), reuse=False)
    print(f"  prompt of {tokens} tokens, medians of {runs} runs, time to first token:")
    header = ("cached", "full prefill", "with reuse", "saved", "ideal", "of ideal", "lookup")
    print("  " + " ".join(f"{h:>{w}}" for h, w in zip(header, (8, 13, 11, 9, 9, 9, 9), strict=True)))
    for share in SHARES:
        cached = int(share * tokens) // BLOCK * BLOCK
        prefix = ordinary_ids(rng, cached)
        if cached:
            engine.greedy(prefix, 1)  # caches exactly the prefix's blocks
        full_times, reuse_times, lookups = [], [], []
        for run in range(runs):
            ids = prefix + ordinary_ids(rng, tokens - cached)
            order = (True, False) if run % 2 == 0 else (False, True)
            for reuse in order:
                elapsed = ttft(engine, ids, reuse=reuse)
                if reuse:
                    assert engine.last_run is not None
                    assert engine.last_run.reused_tokens == cached, engine.last_run
                    reuse_times.append(elapsed)
                    lookups.append(engine.last_run.lookup_s)
                else:
                    full_times.append(elapsed)
        full, reused = statistics.median(full_times), statistics.median(reuse_times)
        actual = cached / tokens
        ideal = actual * full
        saved = full - reused
        fraction = f"{saved / ideal:8.0%}" if ideal else f"{'-':>8}"
        print(
            f"  {actual:8.1%} {full * 1e3:10.1f} ms {reused * 1e3:8.1f} ms {saved * 1e3:6.1f} ms "
            f"{ideal * 1e3:6.1f} ms {fraction} {statistics.median(lookups) * 1e6:6.0f} us"
        )


def lookup_cost(engine: TransformersEngine, tokens: int) -> None:
    rng = random.Random(1)
    ids = ordinary_ids(rng, tokens)
    engine.greedy(ids, 1)  # every full block cached
    repeats = 200
    start = time.perf_counter()
    for _ in range(repeats):
        hashes = block_hashes(engine.root, ids, BLOCK)
    hash_us = (time.perf_counter() - start) / repeats * 1e6
    start = time.perf_counter()
    for _ in range(repeats):
        engine.pool.release(engine.pool.match(hashes))
    match_us = (time.perf_counter() - start) / repeats * 1e6
    print(
        f"  block-pool lookup for {tokens} tokens ({len(hashes)} blocks): hash {hash_us:.0f} us, "
        f"match + release {match_us:.0f} us, total {hash_us + match_us:.0f} us per request"
    )


def quality(model: str, device: str, new_tokens: int) -> None:
    full_bytes = None
    for scheme in (None, "int8", "int4"):
        engine = TransformersEngine(model, device=device, quantize=scheme)
        nbytes = engine.codec.block_nbytes()
        full_bytes = full_bytes or nbytes
        label = scheme or "float32"
        line = f"  {label:>7}: {nbytes / 1024:7.1f} KiB per block ({nbytes / full_bytes:4.0%}), "
        line += f"{(1 << 30) // nbytes * BLOCK:>7} tokens per GiB"
        if scheme is None:
            print(line)
            engine.close()
            continue
        worst, agreement, identical, first_same = 0.0, [], 0, 0
        for question in QUESTIONS:
            ids = engine.encode_prompt(
                Prompt(model=model, turns=(Turn("system", SYSTEM), Turn("user", question)))
            )
            engine.greedy(ids, 1)
            want, want_logits = engine.greedy(ids, new_tokens, reuse=False)
            got, got_logits = engine.greedy(ids, new_tokens)
            worst = max(worst, float((got_logits - want_logits).abs().max()))
            same = sum(a == b for a, b in zip(got, want, strict=False))
            agreement.append(same / max(len(got), len(want)))
            identical += got == want
            first_same += got[0] == want[0]
        print(
            f"{line}; max |d logit| {worst:.3f}, greedy agreement {statistics.mean(agreement):.0%} over "
            f"{new_tokens} tokens, {identical}/{len(QUESTIONS)} answers identical, "
            f"first token same {first_same}/{len(QUESTIONS)}"
        )
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=1600, help="prompt length (1600: 99%% is whole blocks)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quality-tokens", type=int, default=32)
    parser.add_argument("--devices", default="cpu,cuda")
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()
    devices = [d for d in args.devices.split(",") if d != "cuda" or torch.cuda.is_available()]
    print(f"model {args.model}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    for device in devices:
        print(f"\n== {device} ==")
        engine = TransformersEngine(args.model, device=device)
        reuse_table(engine, args.tokens, args.runs)
        lookup_cost(engine, args.tokens)
        engine.close()
        if not args.skip_quality:
            print("  quantized blocks (quality vs a full prefill, on chat prompts with a reused prefix):")
            quality(args.model, device, args.quality_tokens)


if __name__ == "__main__":
    main()

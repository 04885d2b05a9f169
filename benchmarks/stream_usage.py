"""What taking the usage cachekit asked for out of a Chat stream costs, per chunk.

A Chat stream the caller asked without ``stream_options.include_usage`` goes upstream asking for it,
and the caller gets the stream without it (``cachekit.providers.sse.UsageStripper``): on a miss, chunk by
chunk as the stream passes; on a hit, over the stored stream (``restream``). For comparison, what
assembling the same stream into one document costs (every stream miss pays it once, in the recorder's
completeness check). Prints the best of several rounds, in microseconds per chunk.

    python benchmarks/stream_usage.py [--chunks 2000]
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import orjson

from cachekit.providers import sse

HEAD = {
    "id": "chatcmpl-bench",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "gpt-4.1-mini",
    "service_tier": "default",
    "system_fingerprint": "fp_bench",
}


def stream(chunks: int) -> list[bytes]:
    """A stream asked for usage, one event per chunk as OpenAI sends it."""
    delta = {"index": 0, "delta": {"content": "word "}, "logprobs": None, "finish_reason": None}
    events = [orjson.dumps({**HEAD, "choices": [delta], "usage": None}) for _ in range(chunks)]
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": chunks + 10}
    events.append(orjson.dumps({**HEAD, "choices": [], "usage": usage}))
    return [b"data: " + event + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    args = parser.parse_args()
    chunks = stream(args.chunks)
    raw = b"".join(chunks)

    def live() -> bytes:
        stripper = sse.UsageStripper()
        return b"".join(stripper.feed(chunk) for chunk in chunks) + stripper.flush()

    cases: list[tuple[str, Callable[[], object]]] = [
        ("live, as the stream passes", live),
        ("restream, a hit", lambda: sse.restream("openai_chat", raw, include_usage=False)),
        ("assemble, for comparison", lambda: sse.assemble("openai_chat", raw)),
    ]
    for name, case in cases:
        best = min(timeit.repeat(case, number=5, repeat=7)) / 5
        print(f"{name:28} {best / len(chunks) * 1e6:6.2f} us/chunk  ({best * 1e3:.1f} ms per stream)")


if __name__ == "__main__":
    main()

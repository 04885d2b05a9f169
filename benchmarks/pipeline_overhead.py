"""cachekit's own cost per call, without the SDK: the caching transport alone over an instant upstream.

The SDK's own work (building the request, parsing the answer) is most of a call and varies with the
machine's load; this measures only what cachekit adds. A canned, complete Anthropic answer comes
back at once from ``httpx2.MockTransport``; each round times the inner transport alone, a miss (a
request never seen, as in ``overhead.py``) and a hit, for the 60- and 200-message requests of
``overhead.py``, with the default configuration (memory store; ``--no-ledger`` turns the cost ledger
off). Prints the medians of what the miss and the hit add over the inner transport.

    python benchmarks/pipeline_overhead.py [--rounds 300] [--no-ledger]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx2
import orjson
from overhead import DEFAULT_TRACES, agent_request

import cachekit
from cachekit.stores import MemoryStore

ANSWER = orjson.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
)
HEADERS = {"content-type": "application/json", "x-api-key": "sk-bench", "anthropic-version": "2023-06-01"}


def answer(_: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "application/json"}, content=ANSWER)


def measure(messages: int, rounds: int, *, ledger: bool) -> tuple[float, float]:
    """Medians (ms) of what a miss and a hit add over the inner transport."""
    body = agent_request(DEFAULT_TRACES, messages)

    def request(user: str | None) -> httpx2.Request:
        sent = body if user is None else {**body, "metadata": {"user_id": user}}
        return httpx2.Request(
            "POST", "https://api.anthropic.com/v1/messages", headers=HEADERS, content=orjson.dumps(sent)
        )

    inner = httpx2.MockTransport(answer)
    config = cachekit.CacheConfig(store=MemoryStore(max_bytes=1 << 30), ledger=ledger)
    cached = cachekit.CachingTransport(inner, cache=config)

    def timed(transport: Any, req: httpx2.Request) -> float:
        start = time.perf_counter()
        transport.handle_request(req).read()
        return (time.perf_counter() - start) * 1e3

    for i in range(20):  # warm up: imports, the planner's and lint's memories, the hit's entry
        timed(cached, request(f"warm-{i}"))
        timed(cached, request(None))
    samples: dict[str, list[float]] = {"inner": [], "miss": [], "hit": []}
    runs: list[tuple[str, Any, Callable[[int], str | None]]] = [
        ("inner", inner, lambda i: f"round-{i}"),
        ("miss", cached, lambda i: f"round-{i}"),
        ("hit", cached, lambda i: None),
    ]
    for i in range(rounds):
        for name, transport, user in runs:
            samples[name].append(timed(transport, request(user(i))))
    cached.close()
    inner_ms = statistics.median(samples["inner"])
    return statistics.median(samples["miss"]) - inner_ms, statistics.median(samples["hit"]) - inner_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--no-ledger", action="store_true", help="CacheConfig(ledger=False)")
    args = parser.parse_args()
    ledger = not args.no_ledger
    # Each round is a new user (metadata.user_id), so prefix lint, which names a conversation by it,
    # reports the trace's volatile system prompt once per round: its log lines would be timed too.
    logging.getLogger("cachekit.lint").setLevel(logging.ERROR)
    print(f"cachekit {cachekit.__file__}; ledger {'on' if ledger else 'off'}; {args.rounds} rounds")
    for messages in (60, 200):
        miss, hit = measure(messages, args.rounds, ledger=ledger)
        print(
            f"{messages:>4} messages: a miss adds {miss:.3f} ms, a hit {hit:.3f} ms over the inner transport"
        )


if __name__ == "__main__":
    main()

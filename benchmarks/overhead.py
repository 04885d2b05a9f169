"""What cachekit adds to one call: the raw SDK, the cachekit miss path and the hit path, side by side.

Non-streaming calls, then streamed ones (time to the first event and to the end of the stream).

Builds a 60-message agent request from recorded agent traces (system prompt, tools and the first 60
messages of the longest conversation; by default ``tests/fixtures/traces-sample.jsonl``) and sends it
through the real ``anthropic`` SDK to an instant in-process upstream
(:class:`cachekit.testing.FakeUpstream`), interleaving the variants round by round so machine noise
hits them alike. Prints medians, p90s and the ratios. Then the same for a 200-message request (the
60 messages said three times over, then 20 more: a long agent session).

``--sdk-hits`` measures only the hit paths of both SDKs instead (``sdk_hits`` below).

    python benchmarks/overhead.py [--rounds 400] [--traces PATH] [--long-rounds N] [--sdk-hits]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import httpx2
import orjson
from anthropic import Anthropic

import cachekit
from cachekit.stores import MemoryStore, SQLiteStore
from cachekit.testing import FakeUpstream

# The development set's longest conversation is in the tests' sample (tests/fixtures/README.md): the
# same requests as on the whole set, from the repository itself. --traces takes any file of that layout.
DEFAULT_TRACES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "traces-sample.jsonl"


def agent_request(traces: Path, messages: int = 60) -> dict[str, Any]:
    conversations = [orjson.loads(line) for line in traces.read_bytes().splitlines() if line.strip()]
    longest = max(conversations, key=lambda c: len(c["messages"]))
    if len(longest["messages"]) < 60:
        raise SystemExit(f"no conversation in {traces} has 60 messages")
    # Longer requests repeat the first 60 messages (user first, assistant last: the turns still alternate).
    turns = longest["messages"][:60] * (messages // 60 + 1)
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": longest["system"],
        "tools": longest["tools"],
        "messages": turns[:messages],
    }


def client(cache: Any | None, upstream: FakeUpstream | None = None) -> Anthropic:
    http = httpx2.Client(transport=upstream or FakeUpstream())
    if cache is None:
        return Anthropic(api_key="sk-bench", http_client=http, max_retries=0)
    return cachekit.Anthropic(api_key="sk-bench", http_client=http, max_retries=0, cache=cache)


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--sdk-hits", action="store_true", help="only the hit paths of both SDKs")
    parser.add_argument("--long-rounds", type=int, default=None, help="rounds of the 200-message request")
    args = parser.parse_args()
    if args.sdk_hits:
        sdk_hits(args.traces, args.rounds)
        return

    body = agent_request(args.traces)
    calls(body, args.rounds)
    streams(body, args.rounds // 4)
    print()
    calls(agent_request(args.traces, 200), args.rounds if args.long_rounds is None else args.long_rounds)


def calls(body: dict[str, Any], rounds: int) -> None:
    """Non-streamed calls of ``body``: raw, miss and hit, memory and SQLite stores, interleaved."""
    size = len(orjson.dumps(body))
    tmp = Path(__import__("tempfile").mkdtemp())
    raw = client(None)
    memory = client(MemoryStore(max_bytes=1 << 30))
    sqlite = client(SQLiteStore(tmp / "bench.sqlite3"))

    def call(sdk: Anthropic, **extra: Any) -> None:
        sdk.messages.create(**body, **extra)

    # Warm up each path (imports, connection set-up, the first entry for the hit path).
    for sdk in (raw, memory, sqlite):
        for _ in range(20):
            call(sdk)

    samples: dict[str, list[float]] = {
        k: [] for k in ("raw", "miss-memory", "miss-sqlite", "hit-memory", "hit-sqlite")
    }
    for i in range(rounds):
        unique = {"metadata": {"user_id": f"round-{i}"}}  # same size as a real request, never cached before
        samples["raw"].append(timed(lambda u=unique: call(raw, **u)))
        samples["miss-memory"].append(timed(lambda u=unique: call(memory, **u)))
        samples["miss-sqlite"].append(timed(lambda u=unique: call(sqlite, **u)))
        samples["hit-memory"].append(timed(lambda: call(memory)))
        samples["hit-sqlite"].append(timed(lambda: call(sqlite)))

    med = {k: statistics.median(v) for k, v in samples.items()}
    p90 = {k: statistics.quantiles(v, n=10)[-1] for k, v in samples.items()}
    print(
        f"request: {len(body['messages'])} messages, {len(body['tools'])} tools, {size / 1024:.0f} KiB JSON; "
        f"{rounds} rounds"
    )
    print(f"{'path':<14}{'median ms':>11}{'p90 ms':>9}{'vs raw':>9}")
    for name in samples:
        print(f"{name:<14}{med[name]:>11.3f}{p90[name]:>9.3f}{med[name] / med['raw']:>8.2f}x")
    for store in ("memory", "sqlite"):
        added = med[f"miss-{store}"] - med["raw"]
        print(
            f"miss path adds {added:+.3f} ms per call ({store}); "
            f"hit costs {med[f'hit-{store}'] / med['raw']:.2f}x a raw call"
        )
    for sdk in (raw, memory, sqlite):
        sdk.close()


def streams(body: dict[str, Any], rounds: int) -> None:
    """Streamed calls: the upstream sends each event 1 ms apart, as a provider streams tokens."""
    raw = client(None, FakeUpstream(chunk_delay=0.001))
    cached = client(MemoryStore(max_bytes=1 << 30), FakeUpstream(chunk_delay=0.001))

    def stream(sdk: Anthropic, **extra: Any) -> tuple[float, float]:
        start = time.perf_counter()
        first = 0.0
        with sdk.messages.stream(**body, **extra) as events:
            for i, _ in enumerate(events):
                if i == 0:
                    first = time.perf_counter() - start
        return first * 1e3, (time.perf_counter() - start) * 1e3

    for sdk in (raw, cached):
        for _ in range(5):
            stream(sdk)
    samples: dict[str, list[tuple[float, float]]] = {"raw": [], "miss": [], "hit": []}
    for i in range(rounds):
        unique = {"metadata": {"user_id": f"stream-{i}"}}
        samples["raw"].append(stream(raw, **unique))
        samples["miss"].append(stream(cached, **unique))
        samples["hit"].append(stream(cached))
    print(f"\nstreamed ({rounds} rounds; upstream events 1 ms apart)")
    print(f"{'path':<14}{'first event ms':>16}{'whole stream ms':>17}")
    for name, values in samples.items():
        ttfb = statistics.median(v[0] for v in values)
        total = statistics.median(v[1] for v in values)
        print(f"{name:<14}{ttfb:>16.3f}{total:>17.3f}")
    for sdk in (raw, cached):
        sdk.close()


def openai_request(body: dict[str, Any]) -> dict[str, Any]:
    """The same conversation as an OpenAI Chat Completions request (tool calls and results too)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": body["system"]}]
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            messages.append({"role": message["role"], "content": content})
            continue
        text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        calls = [b for b in content if b.get("type") == "tool_use"]
        if calls:
            messages.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": orjson.dumps(c["input"]).decode()},
                        }
                        for c in calls
                    ],
                }
            )
        for result in (b for b in content if b.get("type") == "tool_result"):
            output = result.get("content")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": result["tool_use_id"],
                    "content": output if isinstance(output, str) else orjson.dumps(output).decode(),
                }
            )
        if text and not calls:
            messages.append({"role": message["role"], "content": text})
    tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
        }
        for t in body["tools"]
    ]
    return {"model": "gpt-4.1", "max_completion_tokens": 1024, "messages": messages, "tools": tools}


def sdk_hits(traces: Path, rounds: int) -> None:
    """The hit path of each SDK as a ratio to its raw call, on the 60-message request and on a
    one-message one: a plain client wrapped with ``cachekit.wrap`` (the SDK does all its own work on
    every call) against the drop-in client (a repeat skips the SDK's argument transformation)."""
    import openai

    long = agent_request(traces)
    first = next(m for m in long["messages"] if isinstance(m["content"], str))
    short = {"model": long["model"], "max_tokens": 1024, "messages": [first]}
    cases = {
        ("anthropic", "60 messages"): long,
        ("anthropic", "1 message"): short,
        ("openai", "60 messages"): openai_request(long),
        ("openai", "1 message"): {"model": "gpt-4.1", "max_completion_tokens": 1024, "messages": [first]},
    }
    sdks = {"anthropic": (Anthropic, cachekit.Anthropic), "openai": (openai.OpenAI, cachekit.OpenAI)}
    print(f"hit paths ({rounds} rounds, memory store; ratios to the raw SDK call)")
    print(f"{'sdk':<11}{'request':<13}{'raw ms':>9}{'wrap() hit':>12}{'drop-in hit':>13}")
    for (name, size), body in cases.items():
        plain_cls, dropin_cls = sdks[name]

        def make(cls: Any, cache: Any = None) -> Any:
            kwargs = {
                "api_key": "sk-bench",
                "http_client": httpx2.Client(transport=FakeUpstream()),
                "max_retries": 0,
            }
            return cls(**kwargs) if cache is None else cls(**kwargs, cache=cache)

        raw = make(plain_cls)
        wrapped = cachekit.wrap(make(plain_cls), MemoryStore(max_bytes=1 << 30))
        dropin = make(dropin_cls, MemoryStore(max_bytes=1 << 30))
        create = (
            (lambda c: c.messages.create) if name == "anthropic" else (lambda c: c.chat.completions.create)
        )
        for sdk in (raw, wrapped, dropin):
            for _ in range(10):
                create(sdk)(**body)
        samples: dict[str, list[float]] = {"raw": [], "wrap": [], "dropin": []}
        for _ in range(rounds):
            for label, sdk in (("raw", raw), ("wrap", wrapped), ("dropin", dropin)):
                samples[label].append(timed(lambda s=sdk, f=create, b=body: f(s)(**b)))
        med = {k: statistics.median(v) for k, v in samples.items()}
        print(
            f"{name:<11}{size:<13}{med['raw']:>9.3f}{med['wrap'] / med['raw']:>11.2f}x"
            f"{med['dropin'] / med['raw']:>12.2f}x"
        )
        for sdk in (raw, wrapped, dropin):
            sdk.close()


if __name__ == "__main__":
    main()

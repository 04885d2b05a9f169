"""What breakpoint planning and prefix lint add to a request of 100 messages, side by side.

Builds 100-message agent requests from recorded agent traces (by default
``tests/fixtures/traces-sample.jsonl``: the system prompt and tools of the longest conversation, its
messages repeated to 100) and measures, interleaved round by round so machine noise hits the
variants alike:

* ``plan``: :meth:`cachekit.shape.planner.Planner.apply` alone, as a conversation grows by one turn per
  request (token counts of earlier blocks are remembered: the steady state), and ``plan-cold`` with a
  fresh planner each time (every block counted);
* ``lint``: :meth:`cachekit.shape.lint.PrefixLinter.check` on the same requests;
* the whole miss path through ``cachekit.Anthropic`` to an instant in-process upstream with planning
  and lint on, and with both off (the difference is what they cost a call, parsing included).

    python benchmarks/planner.py [--rounds 300] [--traces PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import orjson

import cachekit
from cachekit.shape.lint import PrefixLinter
from cachekit.shape.planner import Planner
from cachekit.testing import FakeUpstream

# The development set's longest conversation is in the tests' sample (tests/fixtures/README.md): the
# same requests as on the whole set, from the repository itself. --traces takes any file of that layout.
DEFAULT_TRACES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "traces-sample.jsonl"


def requests(traces: Path, count: int, messages: int = 100) -> list[dict[str, Any]]:
    """``count`` requests of one conversation: the last has ``messages`` messages, each one turn more."""
    conversations = [orjson.loads(line) for line in traces.read_bytes().splitlines() if line.strip()]
    longest = max(conversations, key=lambda c: len(c["messages"]))
    pool = longest["messages"]
    history = [pool[i % len(pool)] for i in range(messages + 2 * count)]
    if history[0]["role"] != "user":
        raise SystemExit("the longest conversation does not start with a user message")
    bodies = []
    for k in range(count):
        end = messages - 2 * (count - 1 - k)
        bodies.append(
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 1024,
                "system": longest["system"],
                "tools": longest["tools"],
                "messages": history[: max(end, 1)],
            }
        )
    return bodies


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    args = parser.parse_args()
    bodies = requests(args.traces, args.rounds)
    warm = Planner()
    linter = PrefixLinter()
    upstream = FakeUpstream()

    def client(on: bool) -> Any:
        config = cachekit.CacheConfig(
            store="memory://",
            enabled=False,
            ledger=False,
            breakpoints="auto" if on else "off",
            lint="warn" if on else "off",
        )
        return cachekit.Anthropic(
            api_key="sk-bench", http_client=httpx2.Client(transport=upstream), max_retries=0, cache=config
        )

    planned, plain = client(True), client(False)
    for body in bodies[:20]:  # warm-up: imports, tiktoken, connection objects
        planned.messages.create(**body)
        plain.messages.create(**body)
    names = ("plan", "plan-cold", "lint", "call+plan+lint", "call")
    times: dict[str, list[float]] = {name: [] for name in names}
    for i, body in enumerate(bodies):
        now = float(i * 5)
        cold = Planner(estimator=type(warm.estimator)(warm.estimator.counter))
        steps = (
            partial(warm.apply, "anthropic", "anthropic_messages", body, now=now),
            partial(cold.apply, "anthropic", "anthropic_messages", body, now=now),
            partial(linter.check, "anthropic_messages", body),
            partial(planned.messages.create, **body),
            partial(plain.messages.create, **body),
        )
        for name, step in zip(names, steps, strict=True):
            times[name].append(timed(step))
    last = bodies[-1]
    print(
        f"{args.rounds} rounds; requests of up to {len(last['messages'])} messages, "
        f"{len(last['tools'])} tools, a {len(last['system'])}-character system prompt"
    )
    print(f"{'variant':<16}{'median ms':>11}{'p90 ms':>9}")
    for name, values in times.items():
        ordered = sorted(values)
        print(f"{name:<16}{statistics.median(values):>11.3f}{ordered[int(0.9 * len(ordered))]:>9.3f}")
    added = statistics.median(times["call+plan+lint"]) - statistics.median(times["call"])
    print(f"planning + lint add {added:.3f} ms to a call (median difference, same run)")


if __name__ == "__main__":
    main()

"""Every shared structure on the request path holds under many threads, while it evicts.

Many threads make real-SDK calls through cachekit clients that share one cache (one pipeline),
against an in-process upstream. Every bounded structure is made small, so each one evicts all the
time while the others read and write it: the pipeline's memory of seen bodies, the planner's prefix
memory and its token counts, the prefix linter's conversations and scans, the exact store, the
single-flight table (identical requests run at once), and the canonicalizer (600 different tool
lists, more than any cache of them would hold). No call may fail, and every answer must be the
answer to its own question.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import cachekit
from cachekit.pipeline import view as pipeline_module
from cachekit.shape import canonical
from cachekit.shape.lint import PrefixLinter
from cachekit.shape.planner import PlanMemory, Planner
from cachekit.shape.tokens import TokenEstimator
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client

THREADS = 8
CALLS = 150  # per thread
VARIANTS = 600
# Long enough for the planner to place breakpoints (and so to remember prefixes and count tokens).
PREAMBLE = "You answer questions about the variants of a product catalogue. " * 40


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so races show in a few thousand calls."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def in_threads(work: Callable[[int], None]) -> None:
    """Run ``work(0)`` ... ``work(THREADS - 1)`` at once, each in its own thread; re-raise any error."""
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(work, range(THREADS)))


def question(variant: int) -> str:
    return f"What is special about variant {variant}?"


def anthropic_request(variant: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {f"field_{variant}": {"type": "string"}}}
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "system": [{"type": "text", "text": PREAMBLE + f"Catalogue {variant % 7}."}],
        "tools": [{"name": f"lookup_{variant}", "description": "Look a variant up.", "input_schema": schema}],
        "messages": [{"role": "user", "content": question(variant)}],
    }


def chat_request(variant: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {f"field_{variant}": {"type": "string"}}}
    return {
        "model": "gpt-4.1-mini",
        "tools": [{"type": "function", "function": {"name": f"lookup_{variant}", "parameters": schema}}],
        "messages": [
            {"role": "system", "content": PREAMBLE},
            {"role": "user", "content": question(variant)},
        ],
    }


def responses_request(variant: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {f"field_{variant}": {"type": "string"}}}
    return {
        "model": "gpt-4.1-mini",
        "instructions": PREAMBLE,
        "tools": [{"type": "function", "name": f"lookup_{variant}", "parameters": schema}],
        "input": question(variant),
    }


def answer_text(provider: str, answer: Any) -> str:
    if provider == "anthropic":
        return str(answer.content[0].text)
    if hasattr(answer, "choices"):
        return str(answer.choices[0].message.content)
    return str(answer.output_text)


def small_everything(cache: cachekit.Cache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrink every bounded structure of the pipeline so that each one evicts on most calls."""
    monkeypatch.setattr(pipeline_module, "_SEEN_SIZE", 16)
    pipeline = cache.pipeline
    pipeline.planner = Planner(estimator=TokenEstimator(cache_size=8), memory=PlanMemory(capacity=8))
    pipeline._linter = PrefixLinter(capacity=8)  # conversations; its block scans keep 1024


def test_many_threads_through_one_cache(monkeypatch: pytest.MonkeyPatch, fast_switching: None) -> None:
    upstream = FakeUpstream()
    cache = cachekit.Cache(cachekit.CacheConfig(store=MemoryStore(max_entries=32), ledger=False))
    small_everything(cache, monkeypatch)
    anthropic_client = sdk_client("anthropic", transport=upstream, api_key="sk-test", cache=cache)
    openai_client = sdk_client("openai", transport=upstream, api_key="sk-test", cache=cache)
    calls: list[tuple[str, Callable[..., Any], Callable[[int], dict[str, Any]]]] = [
        ("anthropic", anthropic_client.messages.create, anthropic_request),
        ("openai", openai_client.chat.completions.create, chat_request),
        ("openai", openai_client.responses.create, responses_request),
    ]
    start = threading.Barrier(THREADS)
    failures: list[str] = []
    wrong: list[str] = []
    answered = [0] * THREADS

    def work(thread: int) -> None:
        start.wait()
        # Half the threads walk the requests in step (identical requests at once: single flight), the
        # other half three steps behind (the same requests again: answers from the store).
        lag = 3 * (thread % 2)
        for step in range(-lag, CALLS - lag):
            variant = (step * 7) % VARIANTS
            provider, create, build = calls[step % len(calls)]
            try:
                text = answer_text(provider, create(**build(variant)))
            except Exception as exc:  # every failure is reported, not only the first
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            if f"variant {variant}?" not in text:
                wrong.append(f"variant {variant} answered with {text!r}")
            answered[thread] += 1

    in_threads(work)
    anthropic_client.close()
    openai_client.close()

    assert failures == []
    assert wrong == []
    assert sum(answered) == THREADS * CALLS
    stats = cache.stats
    # The run did what it is for: answers came from the store and from upstream, leaders were
    # followed, and the store evicted (more entries were written than it holds).
    assert stats.hits > 0
    assert stats.coalesced > 0
    assert upstream.calls > 32


def test_the_canonicalizer_under_threads(fast_switching: None) -> None:
    """The canonicalizer alone, as hard as threads can call it: it keeps no state that can race (an
    earlier version's cache of sorted tool lists raised ``KeyError`` when two threads evicted its
    oldest entry at once, about once in 20,000 calls here)."""
    bodies = [anthropic_request(variant) for variant in range(VARIANTS)]
    start = threading.Barrier(THREADS)
    failures: list[str] = []
    wrong: list[int] = []

    def work(thread: int) -> None:
        start.wait()
        for i in range(15_000):
            variant = (i * 7 + thread) % VARIANTS
            try:
                result = canonical.canonicalize(bodies[variant], "anthropic_messages")
                if result.body != bodies[variant]:  # nothing in these bodies is rewritten
                    wrong.append(variant)
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

    in_threads(work)
    assert failures == []
    assert wrong == []

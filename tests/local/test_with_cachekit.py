"""cachekit's own layers on top of the local backend: the cost ledger reads the usage the backend bills.

The backend writes each provider's usage fields; cachekit's cost layer normalizes them. These tests
run the drop-in clients against the backend and check the ledger's token kinds against counts made
here with tiktoken directly.
"""

from __future__ import annotations

from typing import Any

import pytest
import tiktoken

import cachekit
from cachekit.cost import Ledger, MemorySink
from cachekit.local import LocalBackend, LocalTransport
from cachekit.shape.tokens import encoding
from cachekit.stores import MemoryStore
from tests.conftest import sdk_client

SYSTEM = " ".join(f"Policy {i}: keep answers short and cite clause {i}." for i in range(200))


@pytest.fixture(scope="module")
def o200k() -> Any:
    encoding("o200k_base")
    return tiktoken.get_encoding("o200k_base")


def _client(kind: str, backend: LocalBackend, sink: MemorySink, price_as: str | None = None) -> Any:
    ledger = Ledger([sink])
    return sdk_client(
        kind,
        transport=LocalTransport(backend),
        api_key="k",
        base_url="http://local.test" + ("/v1" if kind == "openai" else ""),
        # The caller's markers only: these tests count what they write (the planner has its own tests).
        cache=cachekit.CacheConfig(
            store=MemoryStore(), ledger=ledger, price_as=price_as or kind, breakpoints="off"
        ),
    )


def test_anthropic_breakpoint_reads_reach_the_ledger(o200k: Any) -> None:
    sink = MemorySink()
    client = _client("anthropic", LocalBackend(), sink)
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    n_system = len(o200k.encode(SYSTEM))
    for question in ("First?", "Second?", "Second?"):
        client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=32,
            system=system,
            messages=[{"role": "user", "content": question}],
        )
    write, read, hit = sink.read()
    assert (write.usage.cache_write_1h, write.usage.cache_read) == (n_system, 0)
    assert write.usage.uncached_input == len(o200k.encode("First?"))
    assert (read.usage.cache_write_1h, read.usage.cache_read) == (0, n_system)
    assert read.cost is not None
    assert write.cost is not None
    assert read.cost < write.cost  # priced as Anthropic's model (price_as): a read costs 0.1x
    assert hit.outcome == "exact_hit"  # the exact cache answered the repeat: no backend call
    assert hit.saving is not None
    assert hit.saving > 0


def test_openai_automatic_reads_reach_the_ledger(o200k: Any) -> None:
    sink = MemorySink()
    backend = LocalBackend()
    client = _client("openai", backend, sink)
    for question in ("One?", "Two?"):
        client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        )
    first, second = sink.read()
    n_system = len(o200k.encode(SYSTEM))
    assert first.usage.cache_read == 0
    assert second.usage.cache_read == n_system - n_system % 128
    assert second.usage.uncached_input is not None
    assert second.usage.cache_read + second.usage.uncached_input == n_system + len(o200k.encode("Two?"))
    assert backend.stats.cache_read_tokens == second.usage.cache_read


def test_explicit_markers_on_chat_are_billed_like_model_studio(o200k: Any) -> None:
    """``rules="anthropic"``: Anthropic-style markers on the OpenAI-compatible API, Bailian's usage shape."""
    sink = MemorySink()
    client = _client("openai", LocalBackend(rules="anthropic", models=["qwen-plus"]), sink)
    system = {
        "role": "system",
        "content": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
    }
    for question in ("Alpha?", "Beta?"):
        client.chat.completions.create(
            model="qwen-plus", messages=[system, {"role": "user", "content": question}]
        )
    first, second = sink.read()
    n_system = len(o200k.encode(SYSTEM))
    assert (first.usage.cache_write_5m, first.usage.cache_read) == (n_system, 0)
    assert (second.usage.cache_write_5m, second.usage.cache_read) == (0, n_system)

"""The semantic cache end to end: real SDKs, the real MiniLM model, memory and Redis 8 indexes.

Every hit must stay inside its exact partition, carry ``x-cachekit-cache: semantic`` and the similarity,
and every failure of the semantic layer must leave the call succeeding with its upstream answer.
"""

from __future__ import annotations

import asyncio
import copy
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cachekit
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.pipeline.flights import Flight, WaitResult
from cachekit.semantic import SemanticConfig, SemanticError
from cachekit.semantic.embedders import default_embedder
from cachekit.semantic.index_memory import MemoryVectorIndex
from cachekit.semantic.index_redis import RedisVectorIndex
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.redis_servers import RedisCluster3, RedisServer, free_port, redis8_binary, redis8_server  # noqa: F401
from tests.redis_time import age_keys

pytestmark = pytest.mark.slow

CHAT = "https://api.openai.com/v1/chat/completions"
MESSAGES = "https://api.anthropic.com/v1/messages"
QUESTION = "How do I reset my account password?"
PARAPHRASE = "How can I reset the password of my account?"


def state(breaker: CircuitBreaker) -> str:
    """The breaker's state, read anew (an assertion on the property would narrow its type for good)."""
    return breaker.state


def chat(question: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4.1-mini",
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "You are the help desk of Example Corp."},
            {"role": "user", "content": question},
        ],
    }
    body.update(extra)
    return body


class World:
    """A sync client on one upstream, an exact memory store and a semantic layer."""

    def __init__(
        self,
        semantic: Any = True,
        store: MemoryStore | None = None,
        clock: Callable[[], float] = time.time,
        **config: Any,
    ) -> None:
        self.upstream = FakeUpstream()
        self.store = store if store is not None else MemoryStore(clock=clock)
        self.cache = cachekit.Cache(
            cachekit.CacheConfig(store=self.store, ledger=False, semantic=semantic, **config), clock=clock
        )
        self.client = httpx2.Client(transport=cachekit.CachingTransport(self.upstream, cache=self.cache))

    def ask(self, body: dict[str, Any], url: str = CHAT, **headers: str) -> httpx2.Response:
        response = self.client.post(url, json=body, headers={"authorization": "Bearer sk-1", **headers})
        assert response.status_code == 200, response.text
        return response

    def close(self) -> None:
        self.client.close()
        self.cache.close()


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.close()


def outcome(response: httpx2.Response) -> str:
    return response.headers["x-cachekit-cache"]


def test_a_paraphrase_is_a_semantic_hit_with_its_similarity(world: World) -> None:
    first = world.ask(chat(QUESTION))
    assert outcome(first) == "miss"
    second = world.ask(chat(PARAPHRASE))
    assert outcome(second) == "semantic"
    assert second.json()["choices"] == first.json()["choices"]
    similarity = float(second.headers["x-cachekit-similarity"])
    vectors = default_embedder().embed([QUESTION, PARAPHRASE])
    assert similarity == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-3)
    assert world.upstream.calls == 1
    assert world.cache.stats.semantic_hits == 1
    layer = world.cache.pipeline.semantic
    assert layer is not None
    assert layer.stats.hits == 1


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("Is the API rate limited?", "Is the API not rate limited?"),
        ("What is 15% of 200?", "What is 15% of 300?"),
        ("How much does the annual plan cost?", "How much does the monthly plan cost?"),
        ("What is the weather like in Paris today?", "What is the weather like in London today?"),
    ],
)
def test_near_misses_are_not_served(world: World, stored: str, asked: str) -> None:
    world.ask(chat(stored))
    refused = world.ask(chat(asked))
    assert outcome(refused) == "miss"
    assert world.upstream.calls == 2
    # Whatever refused it (a guard, or a similarity under the threshold) is visible to the caller.
    layer = world.cache.pipeline.semantic
    assert layer is not None
    reasons = sorted(reason for reason, count in layer.matcher.stats().items() if count)
    assert refused.headers.get("x-cachekit-semantic-refused", "") == ", ".join(reasons)


def test_a_refused_negation_names_its_guard(world: World) -> None:
    world.ask(chat("Is the API rate limited?"))
    refused = world.ask(chat("Is the API not rate limited?"))
    assert refused.headers["x-cachekit-semantic-refused"] == "negation"
    assert "x-cachekit-semantic-refused" not in world.ask(chat("Is the API not rate limited?")).headers


PARTITION_CHANGES: dict[str, Any] = {
    "model": lambda b: b.update(model="gpt-4.1"),
    "system": lambda b: b["messages"][0].update(content="You are the billing desk of Example Corp."),
    "earlier turn": lambda b: (
        b["messages"].insert(1, {"role": "user", "content": "Hi"})
        or b["messages"].insert(2, {"role": "assistant", "content": "Hello!"})
    ),
    "tools": lambda b: b.update(
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    ),
    "tool_choice": lambda b: b.update(tool_choice="none"),
    "max_tokens": lambda b: b.update(max_tokens=17),
    "top_p": lambda b: b.update(top_p=0.5),
    "response_format": lambda b: b.update(response_format={"type": "json_object"}),
    "seed": lambda b: b.update(seed=7),
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(st.sampled_from(sorted(PARTITION_CHANGES)), min_size=1, max_size=3, unique=True),
    also_scope=st.sampled_from(["none", "tenant", "namespace", "credential"]),
)
def test_changing_any_partition_field_loses_the_hit(changes: list[str], also_scope: str) -> None:
    world = World()
    try:
        world.ask(chat(QUESTION))
        body = chat(PARAPHRASE)
        for name in changes:
            PARTITION_CHANGES[name](body)
        headers = {
            "none": {},
            "tenant": {"x-cachekit-tenant": "other"},
            "namespace": {"x-cachekit-namespace": "other"},
            "credential": {"authorization": "Bearer sk-2"},
        }[also_scope]
        assert outcome(world.ask(body, **headers)) == "miss"
        # ... and the unchanged paraphrase still hits, so the miss above is the partition's doing.
        assert outcome(world.ask(chat(PARAPHRASE))) == "semantic"
    finally:
        world.close()


def test_tenants_never_see_each_others_entries(world: World) -> None:
    world.ask(chat(QUESTION), **{"x-cachekit-tenant": "acme"})
    assert outcome(world.ask(chat(PARAPHRASE), **{"x-cachekit-tenant": "globex"})) == "miss"
    assert outcome(world.ask(chat(PARAPHRASE), **{"x-cachekit-tenant": "acme"})) == "semantic"


@pytest.mark.parametrize(
    ("first", "then", "reason"),
    [
        ({"temperature": 1.5}, {"temperature": 1.5}, "sampling"),
        ({"temperature": 2}, {"temperature": 2}, "sampling"),
    ],
)
def test_sampling_requests_are_not_served_unless_opted_in(
    first: dict[str, Any], then: dict[str, Any], reason: str
) -> None:
    def body(question: str, fields: dict[str, Any]) -> dict[str, Any]:
        b = chat(question)
        for k, v in fields.items():
            if v is None:
                b.pop(k)
            else:
                b[k] = v
        return b

    world = World()
    try:
        world.ask(body(QUESTION, first))
        assert outcome(world.ask(body(PARAPHRASE, then))) == "miss"
        layer = world.cache.pipeline.semantic
        assert layer is not None
        assert layer.stats.ineligible[reason] == 2
    finally:
        world.close()
    opted = World(SemanticConfig(allow_sampling=True))
    try:
        opted.ask(body(QUESTION, first))
        assert outcome(opted.ask(body(PARAPHRASE, then))) == "semantic"
    finally:
        opted.close()


def test_tool_results_and_images_in_the_last_turn_are_not_served(world: World) -> None:
    image = [
        {"type": "text", "text": QUESTION},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    world.ask(chat(QUESTION))
    body = chat(PARAPHRASE)
    body["messages"][-1]["content"] = image
    assert outcome(world.ask(body)) == "miss"
    tool = chat(QUESTION)
    tool["messages"].append(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    )
    tool["messages"].append({"role": "tool", "tool_call_id": "c1", "content": PARAPHRASE})
    assert outcome(world.ask(tool)) == "miss"
    layer = world.cache.pipeline.semantic
    assert layer is not None
    assert layer.stats.ineligible["not_text"] == 1
    assert layer.stats.ineligible["no_user_turn"] == 1


def test_anthropic_messages_and_streams() -> None:
    world = World()
    try:
        body: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "temperature": 0,
            "system": "You are the help desk of Example Corp.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
        }
        headers = {"x-api-key": "sk-ant-1", "anthropic-version": "2023-06-01"}
        first = world.client.post(MESSAGES, json=body, headers=headers)
        assert outcome(first) == "miss"
        again = copy.deepcopy(body)
        again["messages"][0]["content"][0]["text"] = PARAPHRASE
        again["stream"] = True
        streamed = world.client.post(MESSAGES, json=again, headers=headers)
        assert outcome(streamed) == "semantic"
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert b"message_stop" in streamed.content
        assert world.upstream.calls == 1
    finally:
        world.close()


def test_opt_in_per_request_and_per_call_site_and_opt_out() -> None:
    off = World(semantic=False)
    try:
        off.ask(chat(QUESTION), **{"x-cachekit-semantic": "on"})
        assert outcome(off.ask(chat(PARAPHRASE))) == "miss"  # not opted in: exact only
        opted = off.ask(chat("How could I reset my account's password?"), **{"x-cachekit-semantic": "on"})
        assert outcome(opted) == "semantic"
        with cachekit.policy(semantic=True):
            assert outcome(off.ask(chat("How should I reset my account password?"))) == "semantic"
        # A stricter threshold than this pair's similarity turns the hit into a miss.
        strict = off.ask(chat("How can I reset my account password?"), **{"x-cachekit-semantic": "0.9999"})
        assert outcome(strict) == "miss"
    finally:
        off.close()
    on = World()
    try:
        on.ask(chat(QUESTION))
        assert outcome(on.ask(chat(PARAPHRASE), **{"x-cachekit-semantic": "off"})) == "miss"
        bad = on.client.post(CHAT, json=chat(PARAPHRASE), headers={"x-cachekit-semantic": "maybe"})
        assert bad.status_code == 400
    finally:
        on.close()


def test_an_expired_answer_is_dropped_from_the_index() -> None:
    world = World()
    try:
        world.ask(chat(QUESTION), **{"x-cachekit-ttl": "600"})
        world.store.clear()  # the stored answer is gone (evicted), the index still points at it
        assert outcome(world.ask(chat(PARAPHRASE))) == "miss"
        layer = world.cache.pipeline.semantic
        assert layer is not None
        assert layer.stats.stale == 1
        assert outcome(world.ask(chat("How could I reset my account's password?"))) == "semantic"
    finally:
        world.close()


class BrokenEmbedder:
    model_id = "broken"
    dimension = 384

    def embed(self, texts: Sequence[str]) -> Any:
        raise SemanticError("the embedding service is down")


class OtherDimension:
    """Claims the default model's id but returns vectors of another size (a model swapped in place)."""

    def __init__(self) -> None:
        self.model_id = default_embedder().model_id
        self.dimension = 8

    def embed(self, texts: Sequence[str]) -> Any:
        rows = np.ones((len(texts), 8), dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_an_embedder_failure_is_a_miss_and_the_call_succeeds() -> None:
    world = World(SemanticConfig(embedder=BrokenEmbedder()))
    try:
        assert outcome(world.ask(chat(QUESTION))) == "miss"
        assert outcome(world.ask(chat(QUESTION))) == "hit"  # the exact layer is unaffected
        assert world.cache.stats.semantic_errors >= 1
    finally:
        world.close()


def test_a_dimension_mismatch_is_refused_not_mixed(caplog: pytest.LogCaptureFixture) -> None:
    index, store = MemoryVectorIndex(), MemoryStore()  # one store: one secret, so the same partitions
    good = World(SemanticConfig(index=index), store=store)
    bad = World(SemanticConfig(index=index, embedder=OtherDimension()), store=store)
    try:
        good.ask(chat(QUESTION))
        assert outcome(bad.ask(chat(PARAPHRASE))) == "miss"
        assert bad.cache.stats.semantic_errors >= 1
        assert any("dimension" in r.getMessage().lower() for r in caplog.records)
        # The index still holds only 384-d vectors and answers the right model's paraphrase.
        assert outcome(good.ask(chat("How could I reset my account's password?"))) == "semantic"
    finally:
        good.close()
        bad.close()


def test_the_default_threshold_is_the_documented_one_and_decides_a_pair_either_side() -> None:
    """docs/semantic.md: a candidate needs a cosine of at least the threshold, "by default
    ``cachekit.semantic.matcher.DEFAULT_THRESHOLD`` (0.80 with all-MiniLM-L6-v2)". Two paraphrases
    that pass every guard, one just above and one just below it with the real model: the first is
    served, the second is not, and a lower threshold in the request serves it (only the threshold
    stopped it)."""
    from cachekit.semantic.matcher import DEFAULT_THRESHOLD

    page = (Path(__file__).resolve().parents[2] / "docs" / "semantic.md").read_text()
    documented = re.search(r"by default `cachekit\.semantic\.matcher\.DEFAULT_THRESHOLD` \((\d\.\d+)", page)
    assert documented is not None
    assert float(documented.group(1)) == DEFAULT_THRESHOLD
    assert f"| `threshold` | `None` ({documented.group(1)};" in page  # the configuration table
    assert SemanticConfig().threshold is None
    stored = "How do I reset my account password?"
    above, below = "How is the password for an account reset?", "How is an account's password reset?"
    vectors = np.asarray(default_embedder().embed([stored, above, below]))
    assert DEFAULT_THRESHOLD < float(vectors[0] @ vectors[1]) < DEFAULT_THRESHOLD + 0.03
    assert DEFAULT_THRESHOLD - 0.02 < float(vectors[0] @ vectors[2]) < DEFAULT_THRESHOLD
    for question, headers, expected in (
        (above, {}, "semantic"),
        (below, {}, "miss"),
        (below, {"x-cachekit-semantic": f"{DEFAULT_THRESHOLD - 0.02:.2f}"}, "semantic"),
    ):
        world = World()
        try:
            world.ask(chat(stored))
            assert outcome(world.ask(chat(question), **headers)) == expected, (question, headers)
            assert world.cache.pipeline.semantic is not None
            assert world.cache.pipeline.semantic.matcher.threshold == DEFAULT_THRESHOLD
        finally:
            world.close()


class HangingEmbedder:
    """The bundled model, except that once :attr:`armed` each embedding waits for :attr:`release` (a
    model or embedding service that hangs); counts the embeddings asked for and those still waiting."""

    def __init__(self) -> None:
        self._model = default_embedder()
        self.model_id, self.dimension = self._model.model_id, self._model.dimension
        self.armed = False
        self.release = threading.Event()
        self.calls = 0
        self.waiting = 0
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Any:
        if self.armed:
            with self._lock:
                self.calls += 1
                self.waiting += 1
            try:
                self.release.wait(60)  # a guard against a hang: only the test's release is expected
            finally:
                with self._lock:
                    self.waiting -= 1
        return self._model.embed(texts)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_lookup_past_its_deadline_is_a_miss_and_the_breaker_then_skips_the_layer() -> None:
    """docs/semantic.md, Failures: a lookup past its deadline is a counted miss, behind the layer's own
    circuit breaker; docs/operations.md: "The semantic layer: 2 s per lookup"."""
    assert SemanticConfig().timeout == 2.0
    embedder = HangingEmbedder()
    world = World(SemanticConfig(embedder=embedder, timeout=0.2))  # a shorter deadline: a quicker test
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=3, cooldown=10, clock=clock)
    world.cache.pipeline.semantic_breaker = breaker
    try:
        assert outcome(world.ask(chat(QUESTION))) == "miss"  # the model loaded and warmed up
        embedder.armed = True
        for i in range(3):
            assert outcome(world.ask(chat(f"Where is office number {i}?"))) == "miss"
            # Answered while the embedding still hangs: the request did not wait for it.
            assert embedder.waiting == i + 1
        assert world.cache.stats.semantic_errors == 3
        assert state(breaker) == "open"
        # Open: the layer is skipped without asking the embedder (nor waiting for its deadline).
        assert outcome(world.ask(chat(PARAPHRASE))) == "miss"
        assert embedder.calls == 3
        assert world.cache.stats.semantic_skips == 1
        # The embedder is back; after the cooldown one probe closes the breaker, and hits return.
        embedder.armed = False
        embedder.release.set()
        clock.now += 10
        assert outcome(world.ask(chat("How could I reset my account's password?"))) == "semantic"
        assert state(breaker) == "closed"
    finally:
        embedder.release.set()
        world.close()


def test_a_redis_index_outage_is_a_miss() -> None:
    world = World(SemanticConfig(index=f"redis://127.0.0.1:{free_port()}/0"))
    try:
        for question in (QUESTION, PARAPHRASE, QUESTION):
            assert world.ask(chat(question)).status_code == 200
        assert outcome(world.ask(chat(QUESTION))) == "hit"
        assert world.cache.stats.semantic_errors >= 1
    finally:
        world.close()


def test_async_clients_get_semantic_hits() -> None:
    async def main() -> list[str]:
        cache = cachekit.Cache(cachekit.CacheConfig(store=MemoryStore(), ledger=False, semantic=True))
        transport = cachekit.AsyncCachingTransport(FakeUpstream(), cache=cache)
        async with httpx2.AsyncClient(transport=transport) as client:
            out = []
            for question in (QUESTION, PARAPHRASE):
                r = await client.post(CHAT, json=chat(question), headers={"authorization": "Bearer a"})
                out.append(r.headers["x-cachekit-cache"])
            return out

    assert asyncio.run(main()) == ["miss", "semantic"]


# -- Redis 8 indexes ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis8_cluster() -> Iterator[RedisCluster3]:
    cluster = RedisCluster3(redis8_binary()).start()
    yield cluster
    cluster.cleanup()


@pytest.mark.parametrize("kind", ["standalone", "cluster"])
def test_redis8_index_hits_misses_and_expires(kind: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis8_server" if kind == "standalone" else "redis8_cluster")
    prefix = f"sem-{uuid.uuid4().hex[:8]}:"
    now = [1_700_000_000.0]
    index = RedisVectorIndex(server.url, prefix=prefix, clock=lambda: now[0])
    world = World(SemanticConfig(index=index), clock=lambda: now[0])
    try:
        assert outcome(world.ask(chat(QUESTION), **{"x-cachekit-ttl": "1"})) == "miss"
        assert outcome(world.ask(chat(PARAPHRASE))) == "semantic"
        assert outcome(world.ask(chat("Is the API not rate limited?"))) == "miss"
        # 1.3 s pass: the entry and its index entry expire (in Redis too, where the keys are aged).
        now[0] += 1.3
        age_keys(server, prefix, 1.3)
        assert outcome(world.ask(chat("How could I reset my account's password?"))) == "miss"
        layer = world.cache.pipeline.semantic
        assert layer is not None
        assert layer.stats.stale == 0  # the index itself dropped it (no candidate pointing at nothing)
    finally:
        world.close()
        index.clear()
        index.close()


@pytest.mark.parametrize(
    "headers",
    [{"openai-organization": "org-other"}, {"openai-project": "proj-other"}],
    ids=["organization", "project"],
)
def test_answer_changing_headers_and_the_query_bound_the_partition(
    world: World, headers: dict[str, str]
) -> None:
    world.ask(chat(QUESTION))
    # The identical question (similarity 1.0) under another answer-changing header or query: a miss.
    assert outcome(world.ask(chat(QUESTION), **headers)) == "miss"
    response = world.client.post(
        CHAT + "?api-version=2", json=chat(QUESTION), headers={"authorization": "Bearer sk-1"}
    )
    assert outcome(response) == "miss"
    assert outcome(world.ask(chat(PARAPHRASE))) == "semantic"


class SignallingIndex(MemoryVectorIndex):
    """A memory index that says when an entry was added (streamed answers are indexed in the background)."""

    def __init__(self) -> None:
        super().__init__()
        self.added = threading.Event()

    def add(
        self, partition: str, entry_key: str, vector: Any, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        super().add(partition, entry_key, vector, text, ttl=ttl, mac=mac)
        self.added.set()


def test_a_streamed_miss_is_indexed() -> None:
    index = SignallingIndex()
    world = World(SemanticConfig(index=index))
    try:
        streamed = world.client.post(
            CHAT, json=chat(QUESTION, stream=True), headers={"authorization": "Bearer sk-1"}
        )
        assert outcome(streamed) == "miss"
        assert b"[DONE]" in streamed.content
        assert index.added.wait(60), "the streamed answer was never indexed"  # in the background
        assert outcome(world.ask(chat(PARAPHRASE))) == "semantic"
    finally:
        world.close()


def test_a_refreshed_answer_is_indexed(world: World) -> None:
    assert outcome(world.ask(chat(QUESTION), **{"x-cachekit": "refresh"})) == "miss"
    assert outcome(world.ask(chat(PARAPHRASE))) == "semantic"


def test_numbers_in_the_header_are_thresholds(world: World) -> None:
    world.ask(chat(QUESTION))
    assert outcome(world.ask(chat(PARAPHRASE), **{"x-cachekit-semantic": "1"})) == "miss"  # strictest
    assert (
        outcome(world.ask(chat("How could I reset my account's password?"), **{"x-cachekit-semantic": "0"}))
        == "semantic"
    )
    layer = world.cache.pipeline.semantic
    assert layer is not None
    assert layer.matcher is layer.matcher  # one matcher, whatever the per-request thresholds


def test_an_opt_in_the_client_cannot_honour_is_ignored_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[Flight] = []

    def refused_wait(flight: Flight, timeout: float) -> WaitResult:
        waits.append(flight)  # recorded, and refused at once: a leaked flight never costs a pause
        return "own"

    monkeypatch.setattr(Flight, "wait", refused_wait)
    world = World(semantic=False, store_prompts=False)
    try:
        for _ in range(2):  # the second would wait for a leaked flight if the first had failed
            assert outcome(world.ask(chat(QUESTION), **{"x-cachekit-semantic": "on"})) in ("miss", "hit")
        assert waits == []  # it found none to wait for
        assert world.cache.stats.semantic_errors >= 1
    finally:
        world.close()

"""Each stage of the sans-I/O pipeline on its own (:mod:`cachekit.pipeline`), driven by hand: no
transport, no SDK. The request view is parsed once, its prompt blocks are built once per body and
reused across a growing conversation, and the body that goes upstream is serialized once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import orjson
import pytest

from cachekit._types import Dialect
from cachekit.config import CacheConfig
from cachekit.context import CallPolicy
from cachekit.cost.ledger import Ledger, MemorySink
from cachekit.pipeline import Effect, Load, Offload, Pipeline, Read, Save, Send, Wait
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.pipeline.controls import _BadControl, bypass_reason, read_control
from cachekit.pipeline.entries import lacks, lookup
from cachekit.pipeline.key import Keyer
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.view import Form, RequestView
from cachekit.providers import route_request, sse
from cachekit.shape import blocks as blocks_module
from cachekit.shape import canonical
from cachekit.shape.blocks import BlockMemo, ChainMemo, cache_context, chain_hashes, prompt_blocks
from cachekit.stores import record
from tests.requests import anthropic_messages, openai_chat

ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
CHAT_URL = "https://api.openai.com/v1/chat/completions"
HEADERS = {"content-type": "application/json", "x-api-key": "sk-one", "authorization": "Bearer sk-one"}
ANTHROPIC_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 1},
}
CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4.1-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}
LONG_TEXT = "Follow the house style guide in every answer. " * 400  # well past any minimum length


def request(url: str, body: Any, **headers: str) -> Any:
    return httpx2.Request("POST", url, headers={**HEADERS, **headers}, content=orjson.dumps(body))


def view_of(req: Any) -> RequestView:
    url = req.url
    route = route_request(req.method, url.scheme, url.host, url.port, url.path)
    assert route is not None
    return RequestView.of(req, dict(req.headers.items()), route)


def answering(body: dict[str, Any]) -> Callable[[Any], Any]:
    def upstream(_: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=orjson.dumps(body))

    return upstream


def drive(
    pipeline: Pipeline, req: Any, upstream: Callable[[Any], Any], store: dict[str, bytes]
) -> tuple[Any, list[Effect]]:
    """Run one exchange, performing its effects against ``store`` and ``upstream``."""
    exchange = pipeline.exchange(req)
    effects: list[Effect] = []
    value: Any = None
    while True:
        try:
            effect = exchange.send(value)
        except StopIteration as stop:
            return stop.value, effects
        effects.append(effect)
        if isinstance(effect, Send):
            value = upstream(effect.request)
        elif isinstance(effect, Load):
            value = store.get(effect.key)
        elif isinstance(effect, Save):
            store[effect.key], value = effect.value, None
        elif isinstance(effect, Read):
            effect.response.read()
            value = None
        elif isinstance(effect, Offload):
            value = effect.fn()
        else:  # pragma: no cover - these tests never coalesce while driving one exchange
            raise AssertionError(effect)


def pipeline(**config: Any) -> Pipeline:
    return Pipeline(CacheConfig(store="memory://", ledger=False, **config), secret=b"s" * 32)


# -- stage 1: read controls ----------------------------------------------------------------------


def test_controls_take_headers_over_the_call_site_over_the_config() -> None:
    config = CacheConfig(store="memory://", ledger=False, ttl=300.0, namespace="app")
    site = CallPolicy(ttl=120.0, tenant="site-tenant", namespace="site")
    control = read_control({"x-cachekit-ttl": "60", "x-cachekit-tenant": "acme"}, config, site)
    assert (control.ttl, control.tenant, control.request_tenant, control.namespace) == (
        60.0,
        "acme",
        "acme",
        "site",
    )
    assert read_control({}, config, CallPolicy()).ttl == 300.0
    with pytest.raises(_BadControl, match="x-cachekit-ttl"):
        read_control({"x-cachekit-ttl": "-1"}, config, site)
    with pytest.raises(_BadControl, match="x-cachekit-semantic"):
        read_control({"x-cachekit-semantic": "1.5"}, config, site)


def test_controls_say_why_a_request_skips_the_cache() -> None:
    config = CacheConfig(store="memory://", ledger=False)
    control = read_control({}, config, CallPolicy())
    bypass = read_control({"x-cachekit": "bypass"}, config, CallPolicy())
    off = CacheConfig(store="memory://", ledger=False, enabled=False)
    assert bypass_reason(off, "anthropic_messages", control, None, {}) == "cache-off"
    assert bypass_reason(config, "anthropic_messages", bypass, None, {}) == "caller"
    assert bypass_reason(config, "anthropic_messages", control, None, None) == "not-keyable"
    assert bypass_reason(config, "anthropic_messages", control, None, anthropic_messages()) is None


# -- the request view ----------------------------------------------------------------------------


def test_the_view_parses_once_and_sends_canonical_bytes() -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    view = view_of(
        httpx2.Request(
            "POST",
            ANTHROPIC_URL,
            headers=HEADERS,
            content=b'{"max_tokens": 10, ' + orjson.dumps(body)[1:].replace(b'"max_tokens":10,', b""),
        )
    )
    assert view.parsed() is view.parsed()
    canonical_body = view.canonicalize(canonical.CanonicalOptions())
    assert canonical_body == body
    sent = view.outgoing()
    assert sent is not view.request  # the caller's spacing and order are not what goes upstream
    assert sent.content == view.canonical_bytes == canonical.dumps(body, "anthropic_messages")
    already = view_of(request(ANTHROPIC_URL, orjson.loads(view.canonical_bytes or b"")))
    already.canonicalize(canonical.CanonicalOptions())
    assert already.outgoing() is already.request  # canonical already: the request goes as it is


def test_the_view_builds_blocks_once_per_body() -> None:
    view = view_of(request(ANTHROPIC_URL, anthropic_messages()))
    view.canonicalize(canonical.CanonicalOptions())
    first = view.blocks()
    assert view.blocks() is first
    assert first == prompt_blocks("anthropic_messages", anthropic_messages())
    view.shaped = {**anthropic_messages(), "messages": anthropic_messages()["messages"][:1]}
    assert len(view.blocks()) < len(first)  # a shaped body has its own blocks


def test_the_block_memo_reuses_a_growing_conversations_unchanged_prefix() -> None:
    memo = BlockMemo()
    turn = anthropic_messages()
    longer = {**turn, "messages": [*turn["messages"], {"role": "assistant", "content": "Yes."}]}
    first = prompt_blocks("anthropic_messages", turn, memo=memo, scope=b"tenant-a")
    second = prompt_blocks("anthropic_messages", longer, memo=memo, scope=b"tenant-a")
    assert second == prompt_blocks("anthropic_messages", longer)  # the same blocks as without a memo
    assert all(a is b for a, b in zip(first, second, strict=False))  # the prefix was not built again
    other = prompt_blocks("anthropic_messages", turn, memo=memo, scope=b"tenant-b")
    assert other == first
    assert not any(a is b for a, b in zip(first, other, strict=True))  # tenants never share entries
    moved = {**turn, "messages": turn["messages"][1:]}
    shifted = prompt_blocks("anthropic_messages", moved, memo=memo, scope=b"tenant-a")
    assert shifted == prompt_blocks("anthropic_messages", moved)  # positions are part of the key


def test_the_block_memo_is_bounded() -> None:
    memo = BlockMemo(max_entries=3)
    prompt_blocks("anthropic_messages", anthropic_messages(), memo=memo)
    assert len(memo) == 3
    small, unbounded = BlockMemo(max_bytes=400), BlockMemo()
    prompt_blocks("anthropic_messages", anthropic_messages(), memo=small)
    prompt_blocks("anthropic_messages", anthropic_messages(), memo=unbounded)
    assert 0 < len(small) < len(unbounded) == 6  # tools, system and four messages


def test_the_chain_memo_hashes_only_a_growing_conversations_new_blocks() -> None:
    memo = ChainMemo(capacity=2)
    turn = anthropic_messages()
    longer = {**turn, "messages": [*turn["messages"], {"role": "assistant", "content": "Yes."}]}
    edited = {
        **turn,
        "messages": [{"role": "user", "content": "Another first question"}, *turn["messages"][1:]],
    }
    context = cache_context(turn)
    for body in (turn, longer, turn, edited, longer):
        blocks = prompt_blocks("anthropic_messages", body)
        assert chain_hashes(blocks, b"root", context, memo=memo) == chain_hashes(blocks, b"root", context)
    blocks = prompt_blocks("anthropic_messages", longer)
    other_root = chain_hashes(blocks, b"another root", context, memo=memo)
    assert other_root == chain_hashes(blocks, b"another root", context)
    assert other_root != chain_hashes(blocks, b"root", context)
    assert len(memo) == 2


def test_one_request_builds_its_prompt_blocks_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lint, the planner and OpenAI's prompt_cache_key share one set of blocks."""
    walks: list[object] = []
    walk_class = blocks_module._Walk

    class CountingWalk(walk_class):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any) -> None:
            walks.append(self)
            super().__init__(*args)

    monkeypatch.setattr(blocks_module, "_Walk", CountingWalk)
    body = {
        **openai_chat(),
        "messages": [{"role": "system", "content": LONG_TEXT}, *openai_chat()["messages"]],
    }
    sent: list[Any] = []

    def upstream(req: Any) -> Any:
        sent.append(orjson.loads(req.content))
        return answering(CHAT_ANSWER)(req)

    response, _ = drive(pipeline(), request(CHAT_URL, body), upstream, {})
    assert response.headers["x-cachekit-cache"] == "miss"
    assert sent[0]["prompt_cache_key"].startswith("ck-")  # planned
    assert len(walks) == 1


def test_one_request_classifies_its_body_once_with_the_semantic_cache_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a body depends on outside itself is asked of the table once per request: admission
    classifies it, and the semantic stage reads that verdict instead of classifying the body again."""
    np = pytest.importorskip("numpy")
    from cachekit.pipeline import controls as controls_module
    from cachekit.providers import state
    from cachekit.semantic import SemanticConfig
    from cachekit.semantic import partition as partition_module

    class UnitEmbedder:  # two-dimensional unit vectors: this counts classifications, not meaning
        model_id = "test:unit"
        dimension = 2

        def embed(self, texts: Any) -> Any:
            return np.full((len(texts), 2), 0.5**0.5, dtype=np.float32)

    calls: list[object] = []

    def counting(dialect: Any, body: Any) -> Any:
        calls.append(body)
        return state.classify(dialect, body)

    monkeypatch.setattr(controls_module, "classify", counting)
    monkeypatch.setattr(partition_module, "classify", counting)
    semantic = pipeline(semantic=SemanticConfig(embedder=UnitEmbedder()))
    req = request(CHAT_URL, openai_chat(), **{"x-cachekit-semantic": "on"})
    response, effects = drive(semantic, req, answering(CHAT_ANSWER), {})
    assert response.headers["x-cachekit-cache"] == "miss"
    assert any(isinstance(e, Offload) for e in effects)  # the semantic stage ran (its lookup)
    assert len(calls) == 1


def test_shaping_serializes_the_body_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Canonical form, stable-first and breakpoints change the body; it is written once after them
    (and once before, as the canonical bytes the key is made of)."""
    dumps = canonical.dumps
    calls: list[object] = []

    def counting(body: Any, dialect: Dialect) -> bytes:
        calls.append(body)
        return dumps(body, dialect)

    monkeypatch.setattr(canonical, "dumps", counting)
    body = {
        **anthropic_messages(),
        "system": [
            {"type": "text", "text": "Today is 2026-12-03T17:00:00Z."},
            {"type": "text", "text": LONG_TEXT},
        ],
    }
    sent: list[Any] = []

    def upstream(req: Any) -> Any:
        sent.append(orjson.loads(req.content))
        return answering(ANTHROPIC_ANSWER)(req)

    cache = pipeline(stable_first=True, lint="off")
    response, _ = drive(cache, request(ANTHROPIC_URL, body), upstream, {})
    assert response.headers["x-cachekit-cache"] == "miss"
    assert (cache.stats.reordered, cache.stats.planned) == (1, 1)
    assert sent[0]["system"][0]["text"] == LONG_TEXT  # the stable block first, then marked
    assert "cache_control" in sent[0]["system"][0]
    assert len(calls) == 2


# -- stage 3: key --------------------------------------------------------------------------------


def test_the_key_stage_partitions_by_credential_and_fails_soft_without_a_secret() -> None:
    config = CacheConfig(store="memory://", ledger=False)
    runtime = Runtime(config, lambda: 0.0, CircuitBreaker(failure_threshold=5, cooldown=30.0))
    keyer = Keyer(runtime, b"s" * 32)
    control = read_control({}, config, CallPolicy())
    one = view_of(request(ANTHROPIC_URL, anthropic_messages()))
    again = view_of(request(ANTHROPIC_URL, anthropic_messages()))
    other = view_of(request(ANTHROPIC_URL, anthropic_messages(), **{"x-api-key": "sk-two"}))
    assert keyer.key(one, control, b"d" * 32) == keyer.key(again, control, b"d" * 32)
    key_one, partition_one = keyer.key(one, control, b"d" * 32) or ("", "")
    key_other, partition_other = keyer.key(other, control, b"d" * 32) or ("", "")
    assert partition_one != partition_other
    assert key_one != key_other

    def down() -> bytes:
        raise ConnectionError("store down")

    unavailable = Keyer(runtime, down)
    assert unavailable.key(one, control, b"d" * 32) is None
    assert runtime.stats.store_errors == 1


def test_a_call_without_a_key_is_planned_under_a_per_process_salt() -> None:
    """A bypassed call has no key, but lint and the planner still keep tenants apart: its partition
    follows the cache's rules under a random salt of this process, not the store's secret."""
    config = CacheConfig(store="memory://", ledger=False)
    runtime = Runtime(config, lambda: 0.0, CircuitBreaker(failure_threshold=5, cooldown=30.0))
    keyer, other_process = Keyer(runtime, b"s" * 32), Keyer(runtime, b"s" * 32)
    control = read_control({}, config, CallPolicy())
    one = view_of(request(ANTHROPIC_URL, anthropic_messages()))
    again = view_of(request(ANTHROPIC_URL, anthropic_messages()))
    other = view_of(request(ANTHROPIC_URL, anthropic_messages(), **{"x-api-key": "sk-two"}))
    planned = keyer.plan_partition(one, control)
    assert planned == keyer.plan_partition(again, control)
    assert planned != keyer.plan_partition(other, control)
    assert planned != (keyer.key(one, control, b"d" * 32) or ("", ""))[1]
    assert planned != other_process.plan_partition(one, control)


# -- stage 4: exact lookup -----------------------------------------------------------------------


def test_the_exact_lookup_yields_one_load_and_serves_the_wanted_form() -> None:
    runtime = Runtime(
        CacheConfig(store="memory://", ledger=False),
        lambda: 0.0,
        CircuitBreaker(failure_threshold=5, cooldown=30.0),
    )
    stored = record.encode(
        record.CachedResponse(
            200, (("content-type", "application/json"),), orjson.dumps(ANTHROPIC_ANSWER), 0.0
        )
    )

    def run(reply: Any, *, throw: bool = False) -> tuple[Any, ...]:
        step = lookup(runtime, "k", "anthropic_messages", Form(streaming=True, include_usage=False))
        assert next(step) == Load("k")
        try:
            step.throw(reply) if throw else step.send(reply)
        except StopIteration as stop:
            return tuple(stop.value)
        raise AssertionError("one Load only")

    served, failed, source = run(stored)
    assert served is not None
    assert source is not None
    assert (served.form, source.form, failed) == ("sse", "json", False)
    assert run(b"not an entry") == (None, False, None)
    assert runtime.stats.corrupt_entries == 1
    assert run(ConnectionError("down"), throw=True) == (None, True, None)
    assert runtime.stats.store_errors == 1


CHAT_STREAM = sse.synthesize("openai_chat", CHAT_ANSWER, include_usage=True)
CHAT_STREAM_BARE = sse.synthesize("openai_chat", {k: v for k, v in CHAT_ANSWER.items() if k != "usage"})
DOCUMENT, STREAM, STREAM_WITH_USAGE = Form(False, False), Form(True, False), Form(True, True)


@pytest.mark.parametrize(
    ("body", "form", "usage", "servable"),
    [
        # What the record says it holds decides; the body is not read then.
        (orjson.dumps(CHAT_ANSWER), "json", True, {DOCUMENT, STREAM, STREAM_WITH_USAGE}),
        (b"not read", "json", False, {STREAM}),
        (CHAT_STREAM, "sse", True, {DOCUMENT, STREAM, STREAM_WITH_USAGE}),
        (b"not read", "sse", False, {STREAM}),
        # A record written before the fact was kept: its body says.
        (orjson.dumps(CHAT_ANSWER), "json", None, {DOCUMENT, STREAM, STREAM_WITH_USAGE}),
        (orjson.dumps({**CHAT_ANSWER, "usage": None}), "json", None, {STREAM}),
        (CHAT_STREAM, "sse", None, {DOCUMENT, STREAM, STREAM_WITH_USAGE}),
        (CHAT_STREAM_BARE, "sse", None, {STREAM}),
    ],
)
def test_an_entry_is_served_only_in_the_forms_whose_usage_it_holds(
    body: bytes, form: record.BodyForm, usage: bool | None, servable: set[Form]
) -> None:
    entry = record.CachedResponse(200, (), body, 0.0, form, usage)
    for wanted in (DOCUMENT, STREAM, STREAM_WITH_USAGE):
        assert (lacks(entry, "openai_chat", wanted) is None) == (wanted in servable), wanted


def test_every_form_of_messages_and_responses_carries_usage() -> None:
    entry = record.CachedResponse(200, (), b"{}", 0.0, "json", usage=False)
    for dialect in ("anthropic_messages", "openai_responses"):
        for wanted in (DOCUMENT, STREAM):
            assert lacks(entry, dialect, wanted) == "usage"
    assert lacks(entry, "anthropic_count_tokens", DOCUMENT) is None  # counting tokens has no usage


def test_an_entry_without_usage_is_one_counted_miss_and_an_unreadable_old_one_is_corrupt() -> None:
    runtime = Runtime(
        CacheConfig(store="memory://", ledger=False),
        lambda: 0.0,
        CircuitBreaker(failure_threshold=5, cooldown=30.0),
    )

    def run(entry: record.CachedResponse, form: Form, *, again: bool = False) -> tuple[Any, ...]:
        step = lookup(runtime, "k", "openai_chat", form, again=again)
        assert next(step) == Load("k")
        try:
            step.send(record.encode(entry))
        except StopIteration as stop:
            return tuple(stop.value)
        raise AssertionError("one Load only")

    bare = record.CachedResponse(200, (), CHAT_STREAM_BARE, 0.0, "sse", usage=False)
    assert run(bare, STREAM)[0] is not None
    assert run(bare, DOCUMENT) == (None, False, None)
    assert runtime.stats.incomplete_entries == 1
    assert run(bare, STREAM_WITH_USAGE, again=True) == (None, False, None)  # a leader's second look
    assert runtime.stats.incomplete_entries == 1
    garbled = record.CachedResponse(200, (), b"{not json", 0.0, "json", usage=None)
    assert run(garbled, DOCUMENT) == (None, False, None)
    assert runtime.stats.corrupt_entries == 1


# -- stages 6 to 8: upstream, store, record cost; and the driver ---------------------------------


def test_a_miss_goes_upstream_once_is_stored_and_the_repeat_is_one_load() -> None:
    sink = MemorySink()
    cache = Pipeline(CacheConfig(store="memory://", ledger=False), secret=b"s" * 32, ledger=Ledger([sink]))
    store: dict[str, bytes] = {}
    miss, effects = drive(
        cache, request(ANTHROPIC_URL, anthropic_messages()), answering(ANTHROPIC_ANSWER), store
    )
    assert miss.headers["x-cachekit-cache"] == "miss"
    # The exact lookup, single-flight's second look, the tenant's timing statistics (read once per
    # process for a provider with lifetimes to choose), the call, the answer, its entry.
    assert [type(e).__name__ for e in effects] == ["Load", "Load", "Load", "Send", "Read", "Save"]
    hit, effects = drive(cache, request(ANTHROPIC_URL, anthropic_messages()), answering({}), store)
    assert hit.headers["x-cachekit-cache"] == "hit"
    assert [type(e).__name__ for e in effects] == ["Load"]
    assert orjson.loads(hit.content) == ANTHROPIC_ANSWER
    assert [r.outcome for r in sink.read()] == ["miss", "exact_hit"]


def test_a_bypassed_request_takes_the_miss_path_without_the_cache_stages() -> None:
    """No lookup, flight, timing statistics or store: shaped, sent and, when there is something to
    record, read and recorded; with nothing to record the answer passes untouched, its body unread."""
    bypassed = request(ANTHROPIC_URL, anthropic_messages(), **{"x-cachekit": "bypass"})
    store: dict[str, bytes] = {}
    quiet = pipeline(breakpoints="off")  # no ledger, nothing planned: nothing to record or learn
    response, effects = drive(quiet, bypassed, answering(ANTHROPIC_ANSWER), store)
    assert (response.headers["x-cachekit-cache"], response.headers["x-cachekit-bypass-reason"]) == (
        "bypass",
        "caller",
    )
    assert [type(e).__name__ for e in effects] == ["Send"]
    planned = pipeline()  # breakpoints planned: the planner learns from the answer's usage
    long_system = {**anthropic_messages(), "system": [{"type": "text", "text": LONG_TEXT}]}
    bypassed = request(ANTHROPIC_URL, long_system, **{"x-cachekit": "bypass"})
    response, effects = drive(planned, bypassed, answering(ANTHROPIC_ANSWER), store)
    assert response.headers["x-cachekit-cache"] == "bypass"
    assert [type(e).__name__ for e in effects] == ["Send", "Read"]
    assert planned.stats.planned == 1  # shaped like a miss
    sink = MemorySink()
    config = CacheConfig(store="memory://", ledger=False, breakpoints="off")
    counted = Pipeline(config, secret=b"s" * 32, ledger=Ledger([sink]))
    bypassed = request(ANTHROPIC_URL, anthropic_messages(), **{"x-cachekit": "bypass"})
    response, effects = drive(counted, bypassed, answering(ANTHROPIC_ANSWER), store)
    assert response.headers["x-cachekit-cache"] == "bypass"
    assert [type(e).__name__ for e in effects] == ["Send", "Read"]
    assert [r.outcome for r in sink.read()] == ["bypass"]
    assert store == {}
    assert (quiet.stats.bypasses, planned.stats.bypasses, counted.stats.misses) == (1, 1, 0)


def test_an_identical_request_in_flight_waits_for_the_leader() -> None:
    cache = pipeline()
    leader = cache.exchange(request(ANTHROPIC_URL, anthropic_messages()))
    effect = next(leader)
    while not isinstance(effect, Send):
        effect = leader.send(None)
    follower = cache.exchange(request(ANTHROPIC_URL, anthropic_messages()))
    effect = next(follower)
    while isinstance(effect, Load):
        effect = follower.send(None)
    assert isinstance(effect, Wait)
    leader.close()
    follower.close()


def test_only_if_cached_and_a_failed_lookup_never_join_a_flight() -> None:
    """While an identical request leads the key's flight, a request that may not go upstream answers
    at once, and one whose lookup failed goes upstream alone: neither waits."""
    cache = pipeline()
    leader = cache.exchange(request(ANTHROPIC_URL, anthropic_messages()))
    effect = next(leader)
    while not isinstance(effect, Send):
        effect = leader.send(None)
    only = cache.exchange(request(ANTHROPIC_URL, anthropic_messages(), **{"x-cachekit": "only-if-cached"}))
    assert isinstance(next(only), Load)
    with pytest.raises(StopIteration) as stop:
        only.send(None)
    assert stop.value.value.status_code == 504
    failed = cache.exchange(request(ANTHROPIC_URL, anthropic_messages()))
    assert isinstance(next(failed), Load)
    effects = [failed.throw(ConnectionError("store down"))]
    while isinstance(effects[-1], Load):  # the timing statistics may be read first
        effects.append(failed.send(None))
    assert isinstance(effects[-1], Send)
    assert not any(isinstance(e, Wait) for e in effects)
    leader.close()
    failed.close()


def test_the_store_stage_keeps_only_complete_answers() -> None:
    cache = pipeline()
    store: dict[str, bytes] = {}
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    response, effects = drive(cache, request(ANTHROPIC_URL, anthropic_messages()), answering(error), store)
    assert response.headers["x-cachekit-cache"] == "miss"
    assert not any(isinstance(e, Save) for e in effects)
    assert store == {}
    assert cache.stats.incomplete_answers == 1

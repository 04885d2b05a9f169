"""A repeated call through a drop-in client skips the SDK's argument transformation, and nothing else.

The first call with given arguments records what the SDK method handed to the client's ``post()``;
a repeat replays that ``post()`` call. These tests hold it to the normal path: a client wrapped with
:func:`cachekit.wrap` (no memo) over the same cache answers the same typed, raw and streamed
responses, and every rule of the cache (purge, TTL, bypass, partitions) still decides. Real SDKs,
sync and async, over the in-process upstream.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai.resources.chat.completions.completions as chat_module
import openai.resources.responses.responses as responses_module
import pytest

import cachekit
from cachekit.cost import Ledger, MemorySink
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import SDK, Harness, sdk_client
from tests.requests import anthropic_messages, openai_chat, openai_responses

CHAT = "chat.completions.create"


@pytest.fixture
def transforms(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times each memoized SDK method transformed its arguments (its own work)."""
    counts = {"chat": 0, "responses": 0}

    def counting(name: str, module: Any) -> None:
        original, async_original = module.maybe_transform, module.async_maybe_transform

        def transform(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(*args, **kwargs)

        async def async_transform(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return await async_original(*args, **kwargs)

        monkeypatch.setattr(module, "maybe_transform", transform)
        monkeypatch.setattr(module, "async_maybe_transform", async_transform)

    counting("chat", chat_module)
    counting("responses", responses_module)
    return counts


def shared_cache(sink: MemorySink | None = None) -> cachekit.Cache:
    ledger = Ledger([sink]) if sink is not None else False
    return cachekit.Cache(cachekit.CacheConfig(store=MemoryStore(), ledger=ledger))


def wrapped(harness: Harness, cache: cachekit.Cache) -> SDK:
    """A plain SDK client with cachekit.wrap(): the normal path, which never uses the memo."""
    client = sdk_client(
        "openai", harness.mode, transport=harness.upstream, plain=True, _strict_response_validation=True
    )
    sdk = SDK(cachekit.wrap(client, cache), harness._loop)
    harness._clients.append(sdk)
    return sdk


def without_age(headers: Any) -> dict[str, str]:
    # The entry's age is whole seconds on the clock at each hit: not what either path decides.
    return {k: v for k, v in headers.items() if k != "age"}


def test_a_repeat_skips_the_sdk_transformation(harness: Harness, transforms: dict[str, int]) -> None:
    sdk = harness.sdk("openai")
    for _ in range(3):
        sdk.call(CHAT, **openai_chat())
    assert transforms["chat"] == 1
    assert harness.upstream.calls == 1
    assert cachekit.cache_of(sdk.client).stats.hits == 2


def test_the_responses_api_repeat_skips_it_too(harness: Harness, transforms: dict[str, int]) -> None:
    sdk = harness.sdk("openai")
    first = sdk.call("responses.create", **openai_responses())
    second = sdk.call("responses.create", **openai_responses())
    assert transforms["responses"] == 1
    assert second.model_dump() == first.model_dump()
    assert harness.upstream.calls == 1


def test_a_memo_hit_is_the_normal_hit(harness: Harness, transforms: dict[str, int]) -> None:
    sink = MemorySink()
    cache = shared_cache(sink)
    dropin, plain = harness.sdk("openai", cache=cache), wrapped(harness, cache)
    dropin.call(CHAT, **openai_chat())  # miss: learns
    typed, normal = dropin.call(CHAT, **openai_chat()), plain.call(CHAT, **openai_chat())
    assert type(typed) is type(normal)
    assert typed.model_dump() == normal.model_dump()
    assert typed._request_id == normal._request_id is not None
    raw_kwargs = {**openai_chat(), "extra_headers": {"x-trace": "1"}}
    dropin.call("chat.completions.with_raw_response.create", **raw_kwargs)  # learns the raw call
    raw, normal_raw = (
        sdk.call("chat.completions.with_raw_response.create", **raw_kwargs) for sdk in (dropin, plain)
    )
    assert transforms["chat"] == 1 + 1 + 1 + 1  # the drop-in's two first calls, the plain client's two
    assert raw.status_code == normal_raw.status_code == 200
    assert raw.headers["x-cachekit-cache"] == "hit"
    assert without_age(raw.headers) == without_age(normal_raw.headers)
    assert raw.text == normal_raw.text
    assert raw.http_request.url == normal_raw.http_request.url
    assert raw.http_request.content == normal_raw.http_request.content
    assert raw.parse().model_dump() == normal_raw.parse().model_dump()
    assert harness.upstream.calls == 1
    assert cache.stats.hits == 5  # two typed hits, three raw ones
    records = [dataclasses.replace(r, time=0.0) for r in sink.read()]
    assert [r.outcome for r in records] == ["miss"] + ["exact_hit"] * 5
    assert all(r == records[1] for r in records[1:])  # the memo's hits cost what the others do


def test_streams_and_streaming_responses_replay_like_the_normal_path(
    harness: Harness, transforms: dict[str, int]
) -> None:
    cache = shared_cache()
    dropin, plain = harness.sdk("openai", cache=cache), wrapped(harness, cache)
    body = {**openai_chat(), "stream": True}

    def chunks(sdk: SDK) -> list[dict[str, Any]]:
        stream = sdk.call(CHAT, **body)
        if sdk.is_async:
            return sdk.run(_collect_async(stream))
        return [chunk.model_dump() for chunk in stream]

    first = chunks(dropin)
    repeat, normal = chunks(dropin), chunks(plain)
    assert first == repeat == normal
    assert transforms["chat"] == 2  # the drop-in's first call and the plain client's

    def streamed(sdk: SDK) -> tuple[str, str]:
        manager = sdk.client.chat.completions.with_streaming_response.create(**body)
        return sdk.run(_read_streaming(manager, sdk.is_async))

    streamed(dropin)  # learns the streaming-response call (its marker header keys it apart)
    assert streamed(dropin) == streamed(plain)
    assert streamed(dropin)[0] == "hit"
    assert harness.upstream.calls == 1


async def _collect_async(stream: Any) -> list[dict[str, Any]]:
    return [chunk.model_dump() async for chunk in stream]


def _read_streaming(manager: Any, is_async: bool) -> Any:
    if is_async:

        async def read() -> tuple[str, str]:
            async with manager as response:
                return response.headers["x-cachekit-cache"], await response.text()

        return read()
    with manager as response:
        return response.headers["x-cachekit-cache"], response.text()


def test_purge_ttl_and_bypass_still_decide(harness: Harness, transforms: dict[str, int]) -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    sdk = harness.sdk("openai", cache=store)
    sdk.call(CHAT, **openai_chat())
    sdk.call(CHAT, **openai_chat())
    assert harness.upstream.calls == 1
    store.clear()  # purged: the memo holds arguments, never answers
    assert (
        sdk.call("chat.completions.with_raw_response.create", **openai_chat()).headers["x-cachekit-cache"]
        == "miss"
    )
    assert harness.upstream.calls == 2
    ttl = {**openai_chat(), "extra_headers": {"x-cachekit-ttl": "10"}}
    store.clear()
    sdk.call(CHAT, **ttl)
    sdk.call(CHAT, **ttl)
    assert harness.upstream.calls == 3
    now[0] += 11  # expired
    sdk.call(CHAT, **ttl)
    assert harness.upstream.calls == 4

    @cachekit.cached(bypass=True)
    def bypassed() -> Any:
        return sdk.call(CHAT, **openai_chat())

    bypassed()
    assert harness.upstream.calls == 5
    assert transforms["chat"] == 3  # one per distinct argument set; the bypass reused the first


def test_copies_share_the_memo_but_never_an_answer_across_credentials(
    harness: Harness, transforms: dict[str, int]
) -> None:
    sdk = harness.sdk("openai")
    sdk.call(CHAT, **openai_chat())
    other = sdk.with_options(api_key="sk-test-2")
    other.call(CHAT, **openai_chat())
    assert transforms["chat"] == 1  # the copy replayed the recorded call ...
    assert harness.upstream.calls == 2  # ... under its own credential, so its own partition
    auth = [r.headers["authorization"] for r in harness.upstream.requests]
    assert auth == ["Bearer sk-test-1", "Bearer sk-test-2"]


def test_a_changed_timeout_learns_again(harness: Harness, transforms: dict[str, int]) -> None:
    sdk = harness.sdk("openai")
    sdk.call(CHAT, **openai_chat())
    sdk.with_options(timeout=7.0).call(CHAT, **openai_chat())
    assert transforms["chat"] == 2
    assert harness.upstream.calls == 1


class Role(str, enum.Enum):
    USER = "user"


def _messages_generator() -> Iterator[dict[str, Any]]:
    yield {"role": "user", "content": "hello"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: {"messages": _messages_generator()},  # consumed by the SDK: no bytes to key
        lambda: {"messages": [{"role": Role.USER, "content": "hello"}]},  # an enum, not a string
        lambda: {"messages": [{"role": "user", "content": "hello"}], "timeout": httpx2.Timeout(5.0)},
    ],
    ids=["generator", "enum", "timeout-object"],
)
def test_arguments_that_are_not_plain_data_always_go_through_the_sdk(
    harness: Harness, transforms: dict[str, int], make: Callable[[], dict[str, Any]]
) -> None:
    sdk = harness.sdk("openai")
    for _ in range(2):
        sdk.call(CHAT, model="gpt-4.1-mini", **make())
    assert transforms["chat"] == 2
    assert harness.upstream.calls == 1  # still cached: only the memo stands aside


def test_a_tuple_and_a_list_are_different_arguments(harness: Harness, transforms: dict[str, int]) -> None:
    sdk = harness.sdk("openai")
    message = {"role": "user", "content": "hello"}
    sdk.call(CHAT, model="gpt-4.1-mini", messages=[message])
    sdk.call(CHAT, model="gpt-4.1-mini", messages=(message,))
    assert transforms["chat"] == 2


def test_arguments_mutated_after_a_call_are_never_replayed(
    harness: Harness, transforms: dict[str, int]
) -> None:
    sdk = harness.sdk("openai")
    body = openai_chat()
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    original = copy.deepcopy(body)
    sdk.call(CHAT, **body)
    schema["properties"]["b"] = {"type": "integer"}  # the caller changes its own objects in place
    body["messages"].append({"role": "user", "content": "And tomorrow?"})
    sdk.call(CHAT, **body)
    sdk.call(CHAT, **original)  # the first arguments again: replayed as they were then
    sent = [r.json() for r in harness.upstream.requests]
    assert len(sent) == 2
    assert "b" in sent[1]["response_format"]["json_schema"]["schema"]["properties"]
    assert len(sent[1]["messages"]) == len(original["messages"]) + 1
    assert cachekit.cache_of(sdk.client).stats.hits == 1
    assert transforms["chat"] == 2


def test_anthropic_messages_create_still_runs_each_call(harness: Harness) -> None:
    """Anthropic's create transforms nothing and warns about deprecated models on every call: it is
    not memoized, so the warning is not lost on a hit."""
    sdk = harness.sdk("anthropic")
    deprecated = next(iter(vars(anthropic.resources.messages.messages)["DEPRECATED_MODELS"]))
    body = {**anthropic_messages(), "model": deprecated}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            sdk.call("messages.create", **body)
    assert sum(issubclass(w.category, DeprecationWarning) for w in caught) == 2
    assert harness.upstream.calls == 1


def test_the_memo_is_bounded() -> None:
    from cachekit.clients.memo import RequestMemo, record_post

    sdk = sdk_client("openai", transport=httpx2.MockTransport(_ok), plain=True, api_key="sk")
    memo = RequestMemo(max_entries=2, max_bytes=1 << 20)
    fingerprint = memo.fingerprint(sdk)
    keys = []
    for i in range(3):
        key = memo.key("m", (), {"n": i})
        assert key is not None
        keys.append(key)
    for key in keys:
        with memo.learning(key, fingerprint):
            record_post(sdk, "/p", (), {"body": {"n": 1}, "cast_to": object})
    assert len(memo) == 2
    assert memo.get(keys[0], fingerprint) is None  # the oldest went first
    assert memo.get(keys[2], fingerprint) is not None
    small = RequestMemo(max_entries=10, max_bytes=64)
    with small.learning(keys[0], fingerprint):
        record_post(sdk, "/p", (), {"body": {"text": "x" * 100}, "cast_to": object})
    assert len(small) == 0  # larger than the whole budget: not kept
    sdk.close()


def _ok(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, json={})


def test_threads_learn_and_replay_one_memo(transforms: dict[str, int]) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    upstream = FakeUpstream()
    client = sdk_client("openai", transport=upstream, api_key="sk", cache=MemoryStore())
    start = threading.Barrier(8)

    def work(_: int) -> list[dict[str, Any]]:
        start.wait()
        return [client.chat.completions.create(**openai_chat()).model_dump() for _ in range(5)]

    with ThreadPoolExecutor(8) as pool:
        answers = [answer for batch in pool.map(work, range(8)) for answer in batch]
    assert len(answers) == 40
    assert all(answer == answers[0] for answer in answers)
    assert upstream.calls == 1  # single-flight: one upstream call
    assert transforms["chat"] <= 8  # at most each thread's first call transformed; the rest replayed
    client.close()

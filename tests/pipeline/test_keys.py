"""What goes into an exact-cache key: every answer-changing field in, volatile headers and key order out.

These drive the sans-I/O pipeline by hand (no transport) and read the key of its first ``Load``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachekit.config import CacheConfig
from cachekit.pipeline import Load, Pipeline, Send
from tests.requests import anthropic_messages, openai_chat, openai_responses

PIPELINE = Pipeline(CacheConfig(store="memory://"), secret=b"s" * 32)

ENDPOINTS = {
    "anthropic": ("https://api.anthropic.com/v1/messages", anthropic_messages),
    "chat": ("https://api.openai.com/v1/chat/completions", openai_chat),
    "responses": ("https://api.openai.com/v1/responses", openai_responses),
}
BASE_HEADERS = {
    "content-type": "application/json",
    "x-api-key": "sk-test",
    "authorization": "Bearer sk-test",
    "anthropic-version": "2023-06-01",
}


def request(url: str, body: Any, headers: dict[str, str] | None = None, library: Any = httpx2) -> Any:
    return library.Request(
        "POST", url, headers={**BASE_HEADERS, **(headers or {})}, content=orjson.dumps(body)
    )


def key_of(req: Any, pipeline: Pipeline = PIPELINE) -> str:
    exchange = pipeline.exchange(req)
    effect = next(exchange)
    exchange.close()
    assert isinstance(effect, Load), effect
    return effect.key


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    else:
        yield path, value


def mutated(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + " (changed)"
    return "was null"


def set_path(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    changed = copy.deepcopy(body)
    target = changed
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return changed


def all_leaf_cases() -> list[tuple[str, tuple[Any, ...]]]:
    return [(name, path) for name, (_, make) in ENDPOINTS.items() for path, _ in leaves(make())]


@pytest.mark.parametrize(
    ("dialect", "path"), all_leaf_cases(), ids=lambda v: "/".join(map(str, v)) if isinstance(v, tuple) else v
)
def test_every_field_changes_the_key(dialect: str, path: tuple[Any, ...]) -> None:
    url, make = ENDPOINTS[dialect]
    body = make()
    original = dict(leaves(body))[path]
    before = key_of(request(url, body))
    after = key_of(request(url, set_path(body, path, mutated(original))))
    assert before != after, f"changing {path} did not change the key"


@pytest.mark.parametrize("dialect", list(ENDPOINTS))
def test_adding_or_removing_a_top_level_field_changes_the_key(dialect: str) -> None:
    url, make = ENDPOINTS[dialect]
    body = make()
    keys = [key_of(request(url, body))]
    for field in list(body):
        reduced = {k: v for k, v in body.items() if k != field}
        keys.append(key_of(request(url, reduced)))
    keys.append(key_of(request(url, {**body, "service_tier": "priority"})))
    keys.append(key_of(request(url, {**body, "reasoning_effort": "high"})))
    assert len(set(keys)) == len(keys)


def _shuffled(value: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    items = data.draw(st.permutations(list(value.items())))
    return {k: (_shuffled(v, data) if isinstance(v, dict) else v) for k, v in items}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_key_order_around_schemas_and_in_tool_inputs_never_changes_the_key(data: st.DataObject) -> None:
    """Tool definitions around their schemas, tool inputs and arguments: order the API ignores. (The
    schemas themselves keep their order, in the key too: tests/shape/test_order_is_meaning.py.)"""
    body = anthropic_messages()
    url = ENDPOINTS["anthropic"][0]
    expected = key_of(request(url, body))
    shuffled = copy.deepcopy(body)
    shuffled["tools"] = [
        {k: tool[k] for k in data.draw(st.permutations(list(tool)))} for tool in shuffled["tools"]
    ]
    block = shuffled["messages"][1]["content"][1]
    block["input"] = _shuffled(block["input"], data)
    shuffled["messages"][1] = _shuffled(shuffled["messages"][1], data)
    assert key_of(request(url, shuffled)) == expected

    chat = openai_chat()
    chat_url = ENDPOINTS["chat"][0]
    chat_expected = key_of(request(chat_url, chat))
    args = orjson.loads(chat["messages"][2]["tool_calls"][0]["function"]["arguments"])
    chat["messages"][2]["tool_calls"][0]["function"]["arguments"] = orjson.dumps(
        _shuffled(args, data)
    ).decode()
    for tool in chat["tools"]:
        tool["function"] = {
            k: tool["function"][k] for k in data.draw(st.permutations(list(tool["function"])))
        }
    assert key_of(request(chat_url, chat)) == chat_expected


VOLATILE = st.fixed_dictionaries(
    {},
    optional={
        "x-stainless-retry-count": st.integers(0, 5).map(str),
        "x-stainless-read-timeout": st.integers(1, 600).map(str),
        "x-stainless-raw-response": st.sampled_from(["true", "stream"]),
        "x-stainless-helper-method": st.sampled_from(["stream", "parse"]),
        "x-stainless-os": st.sampled_from(["Linux", "MacOS"]),
        "x-stainless-runtime-version": st.sampled_from(["3.11.7", "3.13.1"]),
        "x-stainless-timeout": st.integers(1, 600).map(str),
        "idempotency-key": st.uuids().map(str),
        "user-agent": st.sampled_from(["Anthropic/Python 2.16.0", "OpenAI/Python 3.57.0", "curl/8"]),
        "x-request-id": st.uuids().map(str),
        "traceparent": st.uuids().map(str),
    },
)


@settings(max_examples=60, deadline=None)
@given(headers=VOLATILE)
def test_volatile_sdk_headers_never_change_the_key(headers: dict[str, str]) -> None:
    for url, make in ENDPOINTS.values():
        assert key_of(request(url, make(), headers)) == key_of(request(url, make()))


def test_answer_changing_headers_url_and_credentials_do_change_the_key() -> None:
    url, make = ENDPOINTS["anthropic"]
    base = key_of(request(url, make()))
    variants = [
        request(url, make(), {"anthropic-version": "2024-01-01"}),
        request(url, make(), {"anthropic-beta": "prompt-caching-2024-07-31"}),
        request(url, make(), {"x-api-key": "sk-other", "authorization": "Bearer sk-other"}),
        request("https://api.anthropic.com/v1/messages?beta=true", make()),
        request("https://proxy.example.com/v1/messages", make()),
        request("https://api.deepseek.com/anthropic/v1/messages", make()),
    ]
    keys = [key_of(v) for v in variants]
    assert base not in keys
    assert len(set(keys)) == len(keys)


def test_the_same_request_from_httpx_and_httpx2_has_the_same_key() -> None:
    url, make = ENDPOINTS["chat"]
    assert key_of(request(url, make(), library=httpx)) == key_of(request(url, make(), library=httpx2))


def test_partitions_namespaces_and_stream_flag() -> None:
    url, make = ENDPOINTS["chat"]
    base = key_of(request(url, make()))
    assert key_of(request(url, make(), {"x-cachekit-tenant": "acme"})) != base
    assert key_of(request(url, make(), {"x-cachekit-namespace": "eval"})) != base
    other_secret = Pipeline(CacheConfig(store="memory://"), secret=b"t" * 32)
    assert key_of(request(url, make()), other_secret) != base  # a credential's partition needs the secret
    shared = Pipeline(CacheConfig(store="memory://", share_across_credentials=True), secret=b"s" * 32)
    assert key_of(request(url, make(), {"authorization": "Bearer a"}), shared) == key_of(
        request(url, make(), {"authorization": "Bearer b"}), shared
    )


def test_ignore_fields_opt_out_of_the_key_but_still_go_upstream() -> None:
    pipeline = Pipeline(
        CacheConfig(store="memory://", ignore_fields=frozenset({"metadata"})), secret=b"s" * 32
    )
    url, make = ENDPOINTS["anthropic"]
    body = make()
    other = {**body, "metadata": {"user_id": "someone-else"}}
    assert key_of(request(url, body), pipeline) == key_of(request(url, other), pipeline)
    exchange = pipeline.exchange(request(url, other))
    sent = next(exchange)
    while isinstance(sent, Load):  # the lookups (before and after joining the flight) miss
        sent = exchange.send(None)
    assert isinstance(sent, Send)
    assert orjson.loads(sent.request.content)["metadata"] == {"user_id": "someone-else"}

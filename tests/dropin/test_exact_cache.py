"""The exact response cache through the real anthropic and openai SDKs, sync and async."""

from __future__ import annotations

import copy
import logging
from typing import Any

import anthropic
import orjson
import pytest

import cachekit
from cachekit.stores import MemoryStore
from tests.conftest import Harness
from tests.requests import DIALECTS, anthropic_messages, openai_chat

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _raw(method: str) -> str:
    head, _, tail = method.rpartition(".")
    return f"{head}.with_raw_response.{tail}"


@pytest.mark.parametrize(("provider", "method", "make"), DIALECTS)
def test_repeat_is_answered_from_cache(harness: Harness, provider: str, method: str, make: Any) -> None:
    sdk = harness.sdk(provider)
    first = sdk.call(_raw(method), **make())
    second = sdk.call(_raw(method), **make())

    assert harness.upstream.calls == 1
    assert first.headers["x-cachekit-cache"] == "miss"
    assert second.headers["x-cachekit-cache"] == "hit"
    parsed_first, parsed_second = sdk.run(first.parse()), sdk.run(second.parse())
    assert parsed_second == parsed_first  # same id: a replay, not a fresh answer
    # with_raw_response shows the original status and provider headers.
    assert second.status_code == first.status_code == 200
    request_id = "request-id" if provider == "anthropic" else "x-request-id"
    assert second.headers[request_id] == first.headers[request_id]
    assert second.headers["content-type"].startswith("application/json")
    assert int(second.headers["age"]) >= 0


def test_count_tokens_is_cached(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    body = anthropic_messages()
    for field in ("max_tokens", "service_tier", "stop_sequences", "metadata"):
        body.pop(field)
    first = sdk.call("messages.count_tokens", **body)
    second = sdk.call("messages.count_tokens", **body)
    assert harness.upstream.calls == 1
    assert second == first


@pytest.mark.parametrize(("provider", "method", "make"), DIALECTS)
def test_changed_request_goes_upstream(harness: Harness, provider: str, method: str, make: Any) -> None:
    sdk = harness.sdk(provider)
    body = make()
    sdk.call(method, **body)
    body["model"] += "-2"
    changed = sdk.call(_raw(method), **body)
    assert harness.upstream.calls == 2
    assert changed.headers["x-cachekit-cache"] == "miss"


def test_tool_key_order_does_not_change_the_key(harness: Harness) -> None:
    """Around its schema (whose order is meaning: tests/shape/test_order_is_meaning.py)."""
    sdk = harness.sdk("anthropic")
    body = anthropic_messages()
    sdk.call("messages.create", **body)
    reordered = copy.deepcopy(body)
    reordered["tools"][0] = dict(reversed(list(reordered["tools"][0].items())))
    tool_use = reordered["messages"][1]["content"][1]
    tool_use["input"] = dict(reversed(list(tool_use["input"].items())))
    hit = sdk.call("messages.with_raw_response.create", **reordered)
    assert hit.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 1


def test_canonical_body_is_what_goes_upstream(harness: Harness) -> None:
    sdk = harness.sdk("openai")
    body = openai_chat()
    body["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{ "days": 3,  "city": "Paris" }'
    sdk.call("chat.completions.create", **body)
    sent = orjson.loads(harness.upstream.requests[-1].body)
    assert sent["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris","days":3}'
    assert list(sent["tools"][0]["function"]) == sorted(body["tools"][0]["function"])
    # A schema keeps the caller's order: the model generates in it.
    assert list(sent["tools"][0]["function"]["parameters"]) == list(
        body["tools"][0]["function"]["parameters"]
    )
    # Messages and prose are untouched.
    assert [m["content"] for m in sent["messages"]] == [m["content"] for m in body["messages"]]


def test_two_api_keys_never_share_an_entry(harness: Harness) -> None:
    one = harness.sdk("anthropic", api_key="sk-one")
    two = harness.sdk("anthropic", api_key="sk-two")
    one.call("messages.create", **anthropic_messages())
    answer = two.call("messages.with_raw_response.create", **anthropic_messages())
    assert answer.headers["x-cachekit-cache"] == "miss"
    assert harness.upstream.calls == 2


def test_credentials_are_not_in_stored_entries(harness: Harness) -> None:
    sdk = harness.sdk("anthropic", api_key="sk-secret-credential-123")
    sdk.call("messages.create", **anthropic_messages())
    [(key, stored)] = harness.store.written.items()
    assert b"sk-secret-credential-123" not in stored
    assert "sk-secret-credential-123" not in key


def test_explicit_tenant_shares_across_keys(harness: Harness) -> None:
    one = harness.sdk(
        "anthropic", api_key="sk-one", cache=cachekit.CacheConfig(store=harness.store, tenant="acme")
    )
    two = harness.sdk(
        "anthropic", api_key="sk-two", cache=cachekit.CacheConfig(store=harness.store, tenant="acme")
    )
    one.call("messages.create", **anthropic_messages())
    answer = two.call("messages.with_raw_response.create", **anthropic_messages())
    assert answer.headers["x-cachekit-cache"] == "hit"


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 529])
def test_errors_are_never_stored(harness: Harness, status: int) -> None:
    sdk = harness.sdk("anthropic")
    harness.upstream.fail_next(status)
    with pytest.raises(anthropic.APIStatusError) as raised:
        sdk.call("messages.create", **anthropic_messages())
    assert raised.value.status_code == status
    answer = sdk.call("messages.with_raw_response.create", **anthropic_messages())
    assert answer.headers["x-cachekit-cache"] == "miss"
    assert harness.upstream.calls == 2


def test_sdk_retries_still_run(harness: Harness) -> None:
    sdk = harness.sdk("openai", max_retries=2)
    harness.upstream.fail_next(429, times=2, headers={"retry-after-ms": "1"})
    answer = sdk.call("chat.completions.with_raw_response.create", **openai_chat())
    assert answer.status_code == 200
    assert harness.upstream.calls == 3
    again = sdk.call("chat.completions.with_raw_response.create", **openai_chat())
    assert again.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 3


def test_corrupt_entry_is_a_logged_miss_and_is_overwritten(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sdk = harness.sdk("anthropic")
    first = sdk.call("messages.create", **anthropic_messages())
    [key] = list(harness.store.written)
    value = harness.store.get(key)
    assert value is not None
    harness.store.set(key, value[:-10])  # truncated
    with caplog.at_level(logging.WARNING, logger="cachekit"):
        second = sdk.call("messages.with_raw_response.create", **anthropic_messages())
    assert second.headers["x-cachekit-cache"] == "miss"
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    assert sdk.run(second.parse()).id != first.id
    third = sdk.call("messages.with_raw_response.create", **anthropic_messages())
    assert third.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 2


def test_non_json_success_passes_through_unstored(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    harness.upstream.respond_next(200, b"<html>gateway page</html>", "text/html")
    raw = sdk.call("messages.with_raw_response.create", **anthropic_messages())
    assert raw.http_response.content == b"<html>gateway page</html>"
    assert len(harness.store) == 0


def test_unknown_paths_pass_through(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    for _ in range(2):
        with pytest.raises(anthropic.NotFoundError):
            sdk.run(sdk.client.get("/v1/unknown-endpoint", cast_to=object))
    assert harness.upstream.calls == 2
    assert harness.store.written == {}
    assert cachekit.cache_of(sdk.client).stats.passthroughs == 2


def test_control_headers(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    body = anthropic_messages()
    bypass = sdk.call("messages.with_raw_response.create", **body, extra_headers={"x-cachekit": "bypass"})
    assert bypass.headers["x-cachekit-cache"] == "bypass"
    assert len(harness.store) == 0
    assert not any(k.startswith("x-cachekit") for k in harness.upstream.requests[-1].headers)

    with pytest.raises(anthropic.APIStatusError) as raised:
        sdk.call("messages.create", **body, extra_headers={"x-cachekit": "only-if-cached"})
    assert raised.value.status_code == 504
    assert harness.upstream.calls == 1  # the SDK did not retry the 504

    first = sdk.call("messages.create", **body)
    refreshed = sdk.call("messages.with_raw_response.create", **body, extra_headers={"x-cachekit": "refresh"})
    assert refreshed.headers["x-cachekit-cache"] == "miss"
    assert sdk.run(refreshed.parse()).id != first.id
    cached = sdk.call("messages.create", **body, extra_headers={"x-cachekit": "only-if-cached"})
    assert cached.id == sdk.run(refreshed.parse()).id
    assert harness.upstream.calls == 3

    with pytest.raises(anthropic.BadRequestError, match="x-cachekit-ttl"):
        sdk.call("messages.create", **body, extra_headers={"x-cachekit-ttl": "soon"})
    with pytest.raises(anthropic.BadRequestError, match="x-cachekit must be"):
        sdk.call("messages.create", **body, extra_headers={"x-cachekit": "sometimes"})


def test_ttl_header_expires_entries(harness: Harness) -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    sdk = harness.sdk("openai", cache=store)
    sdk.call("chat.completions.create", **openai_chat(), extra_headers={"x-cachekit-ttl": "30"})
    now[0] += 29
    assert sdk.call(_raw("chat.completions.create"), **openai_chat()).headers["x-cachekit-cache"] == "hit"
    now[0] += 2
    assert sdk.call(_raw("chat.completions.create"), **openai_chat()).headers["x-cachekit-cache"] == "miss"


def test_known_bytes_with_an_expired_entry_still_go_upstream_canonical(harness: Harness) -> None:
    """The pipeline remembers request bytes it has seen (to skip parsing on hits); when such a
    request misses, it is still canonicalized before it leaves."""
    now = [1000.0]
    sdk = harness.sdk("openai", cache=MemoryStore(clock=lambda: now[0]))
    body = openai_chat()
    body["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{ "days": 3, "city": "Paris" }'
    sdk.call("chat.completions.create", **body, extra_headers={"x-cachekit-ttl": "10"})
    now[0] += 60
    again = sdk.call(_raw("chat.completions.create"), **body)
    assert again.headers["x-cachekit-cache"] == "miss"
    first_sent, second_sent = (orjson.loads(r.body) for r in harness.upstream.requests)
    assert first_sent == second_sent
    assert second_sent["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris","days":3}'

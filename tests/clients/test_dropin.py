"""The drop-in clients and ``cachekit.wrap()``: SDK clients still, whose copies keep caching."""

from __future__ import annotations

import anthropic
import httpx2
import openai
import pytest

import cachekit
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import Harness, sdk_client
from tests.requests import anthropic_messages, openai_chat


def test_dropin_clients_are_sdk_clients_and_copies_keep_caching(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    expected = anthropic.AsyncAnthropic if sdk.is_async else anthropic.Anthropic
    assert isinstance(sdk.client, expected)
    sdk.call("messages.create", **anthropic_messages())
    for copied in (sdk.with_options(timeout=5.0), sdk.copy(max_retries=1)):
        hit = copied.call("messages.with_raw_response.create", **anthropic_messages())
        assert hit.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 1
    assert cachekit.cache_of(sdk.client).stats.hits == 2


def test_wrap_adds_caching_to_a_client_built_elsewhere() -> None:
    upstream = FakeUpstream()
    client = sdk_client("openai", transport=upstream, plain=True, api_key="sk-x")
    wrapped = cachekit.wrap(client, cache="memory://")
    assert wrapped is client
    assert cachekit.wrap(client) is client  # wrapping twice keeps one cache
    for _ in range(3):
        client.chat.completions.create(**openai_chat())
    assert upstream.calls == 1
    assert cachekit.cache_of(client).stats.hits == 2
    client.close()


def test_wrap_rejects_things_that_are_not_clients() -> None:
    with pytest.raises(TypeError, match="cannot add caching"):
        cachekit.wrap(object())
    with pytest.raises(TypeError, match="no cachekit cache"):
        cachekit.cache_of(openai.OpenAI(api_key="x"))


def test_a_copy_with_a_new_http_client_keeps_the_cache() -> None:
    """A copy given a new ``http_client`` (``with_options``, ``copy``) keeps the client's cache (found in
    review: it failed before its fix)."""
    upstream = FakeUpstream()
    config = cachekit.CacheConfig(store=MemoryStore(), tenant="acme", ttl=60, ledger=False)
    client = sdk_client("anthropic", transport=upstream, api_key="k", cache=config)
    for copied in (
        client.with_options(http_client=httpx2.Client(transport=upstream)),
        client.copy(max_retries=1),
    ):
        assert cachekit.cache_of(copied) is cachekit.cache_of(client)
    client.messages.create(**anthropic_messages())
    copied = client.with_options(http_client=httpx2.Client(transport=upstream))
    assert (
        copied.messages.with_raw_response.create(**anthropic_messages()).headers["x-cachekit-cache"] == "hit"
    )

"""Switches that used to turn off silently now say so (issue: a new user's first hour)."""

from __future__ import annotations

import httpx2
import openai
import pytest

import cachekit
from cachekit.testing import FakeUpstream
from tests.requests import openai_chat


def test_a_second_wrap_with_another_cache_is_an_error_not_ignored() -> None:
    upstream = FakeUpstream()
    client = openai.OpenAI(api_key="sk-x", http_client=httpx2.Client(transport=upstream))
    first = cachekit.Cache(cachekit.CacheConfig(store="memory://"))
    cachekit.wrap(client, cache=first)
    assert cachekit.wrap(client) is client  # no cache named: keeps the one it has
    assert cachekit.wrap(client, cache=first) is client  # the same cache: a no-op
    with pytest.raises(cachekit.ConfigError, match="already caches"):
        cachekit.wrap(client, cache="memory://")
    with pytest.raises(cachekit.ConfigError, match="already caches"):
        cachekit.wrap(client, cache=cachekit.Cache(cachekit.CacheConfig(store="memory://")))
    # The refused wrap changed nothing: the first cache still answers.
    for _ in range(2):
        client.chat.completions.create(**openai_chat())
    assert upstream.calls == 1
    assert cachekit.cache_of(client) is first
    assert first.stats.hits == 1
    client.close()

"""Switches that used to turn off silently now say so (issue: a new user's first hour)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import cachekit
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client
from tests.requests import openai_chat


def test_a_second_wrap_with_another_cache_is_an_error_not_ignored() -> None:
    upstream = FakeUpstream()
    client = sdk_client("openai", transport=upstream, plain=True, api_key="sk-x")
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


# -- the local backend answers bad input as the providers do ---------------------------------------


def body_of(caught: pytest.ExceptionInfo[Any]) -> Any:
    """The JSON body of the error a call raised."""
    return caught.value.body


@pytest.fixture
def local() -> Iterator[Any]:
    from cachekit.testing import LocalAPI

    with LocalAPI() as api:
        yield api


def test_messages_given_as_a_string_get_each_providers_error(local: Any) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        local.anthropic(cache=False).messages.create(model="claude-sonnet-4-5", max_tokens=8, messages="hi")
    assert body_of(refused)["error"] == {
        "type": "invalid_request_error",
        "message": "messages: Input should be a valid list",
    }
    with pytest.raises(openai.BadRequestError) as rejected:
        local.openai(cache=False).chat.completions.create(model="gpt-4.1-mini", messages="hi")
    assert body_of(rejected) == {
        "message": "Invalid type for 'messages': expected an array of objects, but got a string instead.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "invalid_type",
    }


def test_a_non_numeric_temperature_gets_each_providers_error(local: Any) -> None:
    question = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        local.anthropic(cache=False).messages.create(
            model="claude-sonnet-4-5", max_tokens=8, messages=question, extra_body={"temperature": "warm"}
        )
    assert body_of(refused)["error"]["message"] == (
        "temperature: Input should be a valid number, unable to parse string as a number"
    )
    client = local.openai(cache=False)
    with pytest.raises(openai.BadRequestError) as rejected:
        client.chat.completions.create(model="gpt-4.1-mini", messages=question, temperature="warm")
    assert body_of(rejected)["message"] == (
        "Invalid type for 'temperature': expected a decimal, but got a string instead."
    )
    assert rejected.value.code == "invalid_type"
    with pytest.raises(openai.BadRequestError) as responses:
        client.responses.create(model="gpt-4.1-mini", input="hi", top_p=[1])
    assert body_of(responses)["message"] == (
        "Invalid type for 'top_p': expected a decimal, but got an array instead."
    )


def test_get_root_gets_each_providers_not_found(local: Any) -> None:
    client = httpx2.Client(transport=local.transport, base_url=local.base_url)
    openai_root = client.get("/")
    assert openai_root.status_code == 404
    assert openai_root.json() == {
        "error": {
            "message": "Invalid URL (GET /)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    anthropic_root = client.get("/", headers={"anthropic-version": "2023-06-01"})
    assert anthropic_root.status_code == 404
    assert anthropic_root.json()["error"] == {"type": "not_found_error", "message": "Not Found"}
    client.close()

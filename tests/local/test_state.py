"""State where the API keeps it (issue 29 item 3): ``store`` keeps Responses answers, bounded, so
``GET /v1/responses/{id}`` and ``previous_response_id`` work; ``store: false`` keeps nothing."""

from __future__ import annotations

import openai
import pytest

from cachekit.local import LocalBackend, LocalServer
from tests.local.conftest import GPT, gpt_client, typed

RULES = " ".join(f"Rule {i}: answer in full sentences and cite rule {i}." for i in range(160))


def test_stored_responses_are_retrieved_and_chained(gpt: openai.OpenAI) -> None:
    first = gpt.responses.create(model=GPT, instructions=RULES, input="What's the weather in Paris?")
    again = gpt.responses.retrieve(first.id)
    typed(first, again)
    assert again.model_dump() == first.model_dump()
    second = gpt.responses.create(
        model=GPT, instructions=RULES, previous_response_id=first.id, input="And Rome?"
    )
    typed(second)
    assert second.previous_response_id == first.id
    # The chained conversation is the prompt: the first turn's prefix is read from the prompt cache.
    assert second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens >= 1024
    assert second.usage.input_tokens > first.usage.input_tokens  # type: ignore[union-attr]
    # The earlier instructions are not carried over: a continuation without them is that much shorter.
    bare = gpt.responses.create(model=GPT, previous_response_id=first.id, input="And Rome?")
    assert bare.usage is not None
    assert bare.usage.input_tokens < second.usage.input_tokens - 1000
    gpt.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        gpt.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError, match="Previous response with id"):
        gpt.responses.create(model=GPT, previous_response_id=first.id, input="gone")


def test_store_false_keeps_nothing_and_the_echo_says_so(server: LocalServer, gpt: openai.OpenAI) -> None:
    response = gpt.responses.create(model=GPT, input="Hi", store=False)
    assert response.model_extra == {"store": False}
    with pytest.raises(openai.NotFoundError):
        gpt.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        gpt.responses.create(model=GPT, previous_response_id=response.id, input="more")


def test_stored_responses_are_bounded_and_per_api_key() -> None:
    with (
        LocalServer(LocalBackend(stored_responses=2)) as server,
        gpt_client(server) as mine,
        gpt_client(server, key="k2") as theirs,
    ):
        first, second, third = (mine.responses.create(model=GPT, input=f"Hi {n}") for n in range(3))
        with pytest.raises(openai.NotFoundError):  # the least recently used went first
            mine.responses.retrieve(first.id)
        assert mine.responses.retrieve(second.id).id == second.id
        assert mine.responses.retrieve(third.id).id == third.id
        with pytest.raises(openai.NotFoundError):  # another API key never reads them
            theirs.responses.retrieve(third.id)
        with pytest.raises(openai.NotFoundError):
            theirs.responses.create(model=GPT, previous_response_id=third.id, input="x")

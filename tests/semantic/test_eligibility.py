"""Which requests the semantic cache may answer, through the real ``anthropic`` 2.16 and ``openai`` SDKs
(sync and async), the real MiniLM model and an in-process upstream.

Opting in to the semantic layer is the user's statement that interchangeable questions may share an
answer, so a request sampling at the provider's default is served (``anthropic`` 2.16's
``messages.create`` has no ``temperature`` at all); only a request that asks for variety (``n`` > 1,
a ``temperature`` above 1) is not, and every request the layer cannot serve says why in
``x-cachekit-semantic-ineligible``.
"""

from __future__ import annotations

from typing import Any

import pytest

import cachekit
from cachekit._types import Dialect
from cachekit.clients import cache_of
from cachekit.semantic.partition import split_request
from cachekit.shape import canonical
from tests.conftest import SDK, Harness

pytestmark = pytest.mark.slow

QUESTION = "How do I reset my account password?"
PARAPHRASE = "How can I reset the password of my account?"
INELIGIBLE = "x-cachekit-semantic-ineligible"
MODEL = "claude-sonnet-4-5"


def semantic_sdk(harness: Harness, provider: str) -> SDK:
    return harness.sdk(provider, cache=cachekit.CacheConfig(store=harness.store, ledger=False, semantic=True))


def ask_anthropic(sdk: SDK, question: str, **fields: Any) -> Any:
    """``messages.create`` as a user of anthropic 2.16 writes it (no sampling parameters), raw."""
    return sdk.run(
        sdk.client.messages.with_raw_response.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": question}], **fields
        )
    )


def ask_openai(sdk: SDK, question: str, **fields: Any) -> Any:
    return sdk.run(
        sdk.client.chat.completions.with_raw_response.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": question}], **fields
        )
    )


def test_anthropic_2_16_requests_are_served_without_allow_sampling(harness: Harness) -> None:
    sdk = semantic_sdk(harness, "anthropic")
    first = ask_anthropic(sdk, QUESTION)
    assert first.headers["x-cachekit-cache"] == "miss"
    assert INELIGIBLE not in first.headers
    again = ask_anthropic(sdk, PARAPHRASE)
    assert again.headers["x-cachekit-cache"] == "semantic"
    assert sdk.run(again.parse()).content[0].text == sdk.run(first.parse()).content[0].text
    assert len(harness.upstream.requests) == 1


def test_openai_default_and_moderate_temperature_are_served(harness: Harness) -> None:
    sdk = semantic_sdk(harness, "openai")
    ask_openai(sdk, QUESTION, temperature=0.7)
    assert ask_openai(sdk, PARAPHRASE, temperature=0.7).headers["x-cachekit-cache"] == "semantic"
    ask_openai(sdk, "What is the capital city of Australia?")
    assert (
        ask_openai(sdk, "Which city is the capital of Australia?").headers["x-cachekit-cache"] == "semantic"
    )


@pytest.mark.parametrize(
    ("fields", "reason"), [({"temperature": 1.5}, "sampling"), ({"temperature": 2}, "sampling")]
)
def test_openai_requests_asking_for_variety_say_why_they_are_not_served(
    harness: Harness, fields: dict[str, Any], reason: str
) -> None:
    sdk = semantic_sdk(harness, "openai")
    first = ask_openai(sdk, QUESTION, **fields)
    assert first.headers[INELIGIBLE] == reason
    again = ask_openai(sdk, PARAPHRASE, **fields)
    assert again.headers["x-cachekit-cache"] == "miss"
    assert again.headers[INELIGIBLE] == reason
    layer = cache_of(sdk.client).pipeline.semantic
    assert layer is not None
    assert layer.stats.ineligible[reason] == 2


def test_anthropic_ineligible_requests_say_why(harness: Harness) -> None:
    sdk = semantic_sdk(harness, "anthropic")
    ask_anthropic(sdk, QUESTION)
    # The last turn is an assistant prefill: not a question to compare.
    prefill = sdk.run(
        sdk.client.messages.with_raw_response.create(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": PARAPHRASE}, {"role": "assistant", "content": "Sure"}],
        )
    )
    assert prefill.headers[INELIGIBLE] == "no_user_turn"


@pytest.mark.parametrize(
    ("dialect", "fields", "reason"),
    [
        ("openai_chat", {"n": 2}, "sampling"),
        ("openai_chat", {"n": 1, "temperature": 1}, None),
        ("openai_chat", {"temperature": True}, None),
        ("anthropic_messages", {"container": "container_0123"}, "server_state"),
        ("anthropic_messages", {"temperature": 1}, None),
    ],
)
def test_what_asks_for_variety_or_needs_server_state(
    dialect: Dialect, fields: dict[str, Any], reason: str | None
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], **fields}
    found = split_request(dialect, body, scope=("test",), options=canonical.CanonicalOptions())
    assert (found if isinstance(found, str) else None) == reason
    assert split_request(
        dialect, body, scope=("t",), options=canonical.CanonicalOptions(), allow_sampling=True
    ) != ("sampling")


#: anthropic 2.16's newer top-level fields, two values each: each changes or scopes the answer, so a
#: question asked with one value is never answered from a question asked with the other.
NEW_FIELDS: dict[str, tuple[Any, Any]] = {
    "output_config": ({"effort": "low"}, {"effort": "high"}),
    "speed": ("standard", "fast"),
    "inference_geo": ("us", "eu"),
    "user_profile_id": ("prof_a", "prof_b"),
    "workspace_id": ("wrkspc_a", "wrkspc_b"),
    "service_tier": ("auto", "standard_only"),
}


@pytest.mark.parametrize("field", sorted(NEW_FIELDS))
def test_anthropic_2_16_top_level_fields_bound_the_partition(harness: Harness, field: str) -> None:
    sdk = semantic_sdk(harness, "anthropic")
    one, other = NEW_FIELDS[field]
    ask_anthropic(sdk, QUESTION, **{field: one})
    elsewhere = ask_anthropic(sdk, PARAPHRASE, **{field: other})
    assert elsewhere.headers["x-cachekit-cache"] == "miss"
    assert INELIGIBLE not in elsewhere.headers
    # ... and the same value still hits: the miss above was the partition's doing.
    assert ask_anthropic(sdk, PARAPHRASE, **{field: one}).headers["x-cachekit-cache"] == "semantic"

"""Tables (issue 29 item 9): every model the price database knows is served, and cache rules apply
by model family with no silent fall-back to an older family's rules."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from genai_prices import data_snapshot

from cachekit.cost import genai
from cachekit.cost.prices import default_prices
from cachekit.local import LocalBackend
from cachekit.providers.cache_rules import _version as version_of
from cachekit.providers.cache_rules import default_cache_rules

BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": ("/v1/messages", {"max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}),
    "openai": ("/v1/responses", {"input": "Hi"}),
}


def _price_db_models(provider: str) -> list[str]:
    """The model ids genai-prices and the bundled table know for ``provider`` (each resolving to itself)."""
    snapshot = data_snapshot.get_snapshot()
    names = [model.id for model in snapshot.find_provider(None, provider, None).models]
    # An id the database does not resolve as a name is a rule of its own ("ft:gpt-4o" matches
    # "ft:gpt-4o:org::id"): the names are those it resolves.
    names = [name for name in names if genai.knows(provider, name)]
    names += [row.model for row in default_prices() if row.provider == provider]
    return sorted(set(names))


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_every_model_of_the_price_database_is_served(provider: str) -> None:
    backend = LocalBackend()
    path, body = BODIES[provider]
    refused = []
    for model in _price_db_models(provider):
        reply = backend.handle(
            "POST", path, {"authorization": "Bearer k"}, orjson.dumps({**body, "model": model})
        )
        if reply.status == 404:
            refused.append(model)
    assert not refused
    assert len(_price_db_models(provider)) > 20
    unknown = backend.handle(
        "POST", path, {"authorization": "Bearer k"}, orjson.dumps({**body, "model": "no-such-model"})
    )
    assert unknown.status == 404


def test_a_later_dotted_gpt_is_never_billed_by_the_older_families_rules() -> None:
    """GPT-5.6 and later take explicit breakpoints (writes billed); a version no row names yet takes
    the latest such row, never the default row's automatic caching of the models before GPT-5.6."""
    table = default_cache_rules()
    for model in ("gpt-5.7", "gpt-6.2-astra", "gpt-6.2-sol-healthcare", "gpt-7-mini", "gpt-5.10"):
        rules, how = table.resolve("openai", model)
        assert (rules.mode, how) == ("explicit", "later"), model
    assert table.resolve("openai", "gpt-6.2-astra")[0].prefix == "gpt-6.1"
    assert table.resolve("openai", "gpt-5.5")[1] == "default"  # before GPT-5.6: automatic
    assert table.resolve("openai", "gpt-5.5")[0].mode == "automatic"
    for model in _price_db_models("openai"):
        parsed = version_of(model.lower())
        if parsed is not None and parsed[0] == "gpt-" and parsed[1] >= (5, 6):
            assert table.resolve("openai", model)[0].mode == "explicit", model
    # Billed so: a long prompt to gpt-6.2-astra writes the cache (explicit rules), to gpt-5.5 it does not.
    backend = LocalBackend()
    long = " ".join(f"Rule {i}: be brief and cite rule {i}." for i in range(200))
    usage = {}
    for model in ("gpt-6.2-astra", "gpt-5.5"):
        body = orjson.dumps({"model": model, "instructions": long, "input": "Hi"})
        reply = backend.handle("POST", "/v1/responses", {"authorization": "Bearer k"}, body)
        assert reply.status == 200
        usage[model] = orjson.loads(reply.content)["usage"]["input_tokens_details"]
    assert usage["gpt-6.2-astra"]["cache_write_tokens"] > 1024
    assert usage["gpt-5.5"]["cache_write_tokens"] == 0


@pytest.mark.parametrize(("reading", "shared"), [("partition", False), ("routing", True)])
def test_prompt_cache_key_is_a_partition_or_a_routing_hint(reading: str, shared: bool) -> None:
    """``partition``: another key is another cache; ``routing`` (what OpenAI's guide describes: the key
    routes requests to a server holding their prefix): the one emulated cache serves every key."""
    backend = LocalBackend(prompt_cache_key=reading)  # type: ignore[arg-type]
    long = " ".join(f"Rule {i}: be brief and cite rule {i}." for i in range(200))
    cached = []
    for model in ("gpt-5.5", "gpt-6.1-sol"):  # automatic caching, and explicit breakpoints
        for key in ("team-a", "team-b"):
            body = orjson.dumps(
                {"model": model, "instructions": long, "input": "Hi", "prompt_cache_key": key}
            )
            reply = backend.handle("POST", "/v1/responses", {"authorization": "Bearer k"}, body)
            cached.append(orjson.loads(reply.content)["usage"]["input_tokens_details"]["cached_tokens"])
    assert cached[0] == cached[2] == 0
    assert (cached[1] > 1024, cached[3] > 1024) == (shared, shared)

"""``CacheConfig(store_prompts=False)``: prompts a provider echoes are kept out of the store and put
back on replay, through the real OpenAI SDK (Responses API, streamed and not)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

import cachekit
from cachekit.cost.ledger import Ledger, MemorySink
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import Harness
from tests.requests import openai_responses

SECRET_INSTRUCTIONS = "You are the internal pricing assistant of Initech; codename BLUE-HERON-7731."
TOOL_DESCRIPTION = "Look up the confidential margin table (ledger MARGIN-42)."


def _request(stream: bool = False) -> dict[str, Any]:
    body = openai_responses()
    body["instructions"] = SECRET_INSTRUCTIONS
    body["tools"][0]["description"] = TOOL_DESCRIPTION
    if stream:
        body["stream"] = True
    return body


def _config(harness: Harness, store_prompts: bool) -> cachekit.CacheConfig:
    return cachekit.CacheConfig(store=harness.store, ledger=False, store_prompts=store_prompts)


def _stored_bytes(harness: Harness) -> bytes:
    return b"".join(harness.store.written.values())


def test_echoed_prompts_are_not_stored_and_come_back_on_a_hit(harness: Harness) -> None:
    sdk = harness.sdk("openai", cache=_config(harness, store_prompts=False))
    first = sdk.call("responses.with_raw_response.create", **_request())
    assert first.headers["x-cachekit-cache"] == "miss"
    stored = _stored_bytes(harness)
    assert stored  # the answer itself is stored
    assert b"BLUE-HERON-7731" not in stored
    assert b"MARGIN-42" not in stored
    second = sdk.call("responses.with_raw_response.create", **_request())
    assert second.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 1
    original, replayed = first.parse(), second.parse()
    assert replayed.instructions == SECRET_INSTRUCTIONS
    assert replayed.tools == original.tools
    assert replayed.tools[0].description == TOOL_DESCRIPTION
    assert replayed.output_text == original.output_text


def test_a_streamed_hit_gets_its_prompts_back_too(harness: Harness) -> None:
    sdk = harness.sdk("openai", cache=_config(harness, store_prompts=False))
    first = sdk.call("responses.create", **_request(stream=True))
    events = collect(sdk, first)
    assert events[-1].type == "response.completed"
    assert b"BLUE-HERON-7731" not in _stored_bytes(harness)
    again = sdk.call("responses.create", **_request(stream=True))
    replayed = collect(sdk, again)
    assert harness.upstream.calls == 1
    created = [e for e in replayed if e.type in ("response.created", "response.completed")]
    assert created
    for event in created:
        assert event.response.instructions == SECRET_INSTRUCTIONS
        assert event.response.tools[0].description == TOOL_DESCRIPTION
    # A plain request is answered from the stored stream, with the prompts restored as well.
    plain = sdk.call("responses.create", **_request())
    assert harness.upstream.calls == 1
    assert plain.instructions == SECRET_INSTRUCTIONS


@pytest.mark.parametrize("store_prompts", [False, True], ids=["stripped", "stored"])
def test_a_hit_echoes_the_tools_the_fresh_answer_echoed(harness: Harness, store_prompts: bool) -> None:
    """A function tool's further fields (the SDK's FunctionTool: ``defer_loading``, ...) are echoed
    alike by the answer upstream and by its replay: the local backend echoes tools with the function
    that restores them (cachekit.providers.echo.echoed_tools)."""
    sdk = harness.sdk("openai", cache=_config(harness, store_prompts=store_prompts))
    body = _request()
    body["tools"][1]["defer_loading"] = True
    first = sdk.call("responses.with_raw_response.create", **body)
    second = sdk.call("responses.with_raw_response.create", **body)
    assert (first.headers["x-cachekit-cache"], second.headers["x-cachekit-cache"]) == ("miss", "hit")
    original, replayed = first.parse(), second.parse()
    assert original.tools[1].defer_loading is True
    assert replayed.tools == original.tools


def test_by_default_the_echo_is_stored_as_the_provider_sent_it(harness: Harness) -> None:
    sdk = harness.sdk("openai", cache=_config(harness, store_prompts=True))
    sdk.call("responses.create", **_request())
    assert b"BLUE-HERON-7731" in _stored_bytes(harness)


def collect(sdk: Any, stream: Any) -> list[Any]:
    """Every event of a sync or async SDK stream."""
    if not sdk.is_async:
        return list(stream)

    async def gather() -> list[Any]:
        return [event async for event in stream]

    return sdk.run(gather())


def test_a_cached_answer_whose_echo_cannot_be_restored_goes_upstream() -> None:
    """An entry whose echoed prompt cannot be put back (a schema nested deeper than the restore goes)
    never fails the call (found in review: it failed before its fix)."""
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(120):
        deep = {"type": "object", "properties": {"x": deep}}
    body = {
        "model": "gpt-4.1-mini",
        "input": "hello",
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "f", "parameters": deep}],
    }
    config = cachekit.CacheConfig(store=MemoryStore(), ledger=False, store_prompts=False)
    upstream = FakeUpstream()
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=config)) as client:
        outcomes = []
        for stream in (False, True, True):
            response = client.post("https://api.openai.com/v1/responses", json={**body, "stream": stream})
            assert response.status_code == 200
            response.read()
            outcomes.append(response.headers["x-cachekit-cache"])
    assert outcomes[0] == "miss"


def test_an_answer_served_upstream_because_its_echo_cannot_be_restored_is_no_hit() -> None:
    """A hit is counted, and recorded in the ledger, only when it is served: a stored answer whose
    echoed prompt cannot be put back is answered upstream, and that is one miss, not a hit and a miss."""
    # As deep as a request's tools can be written (orjson writes 255 levels): the stored document holds
    # them, but a stream's events, which carry them one level deeper, cannot.
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(125):
        deep = {"type": "object", "properties": {"x": deep}}
    body = {
        "model": "gpt-4.1-mini",
        "input": "hello",
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "f", "parameters": deep}],
    }
    sink = MemorySink()
    cache = cachekit.Cache(
        cachekit.CacheConfig(store=MemoryStore(), ledger=Ledger([sink]), store_prompts=False)
    )
    upstream = FakeUpstream()
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=cache)) as client:
        outcomes = []
        for stream in (False, True):  # a stream of the stored document cannot be given its echo back
            response = client.post("https://api.openai.com/v1/responses", json={**body, "stream": stream})
            response.read()
            outcomes.append(response.headers["x-cachekit-cache"])
    assert outcomes == ["miss", "miss"]
    assert upstream.calls == 2
    assert cache.stats.stores >= 1  # the first answer was stored: the second call found it
    assert (cache.stats.hits, cache.stats.misses) == (0, 2)
    recorded = [r.outcome for r in sink.read()]
    assert recorded[0] == "miss"
    assert "exact_hit" not in recorded

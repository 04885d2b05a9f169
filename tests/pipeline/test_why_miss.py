""" "Why did it miss?" through the drop-in clients: when a conversation's prefix stops matching its
previous call, every answer cachekit fetched (a miss, streamed or not, and a bypass) names the first
change in ``x-cachekit-prefix-changed``, and the ledger records it. One mechanism for sync and async
(the ``harness`` fixture), over :class:`cachekit.testing.FakeUpstream`.
"""

from __future__ import annotations

from typing import Any

from cachekit import CacheConfig
from cachekit.cost import Ledger, MemorySink
from tests.conftest import SDK, Harness

HEADER = "x-cachekit-prefix-changed"
SYSTEM = "You are a meticulous coding agent. Follow the repository's conventions."
FIRST = [{"role": "user", "content": "Read the file and summarise it."}]
LATER = [
    *FIRST,
    {"role": "assistant", "content": "It parses the config."},
    {"role": "user", "content": "Next?"},
]


def _body(system: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    # metadata.user_id names the conversation (what Claude Code sets per session), so a changed
    # system prompt is compared with the same conversation's previous call.
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "system": system,
        "messages": messages,
        "metadata": {"user_id": "session-7"},
    }


def _sdk(harness: Harness) -> tuple[SDK, MemorySink]:
    sink = MemorySink()
    return harness.sdk("anthropic", cache=CacheConfig(store=harness.store, ledger=Ledger([sink]))), sink


def _streamed_headers(sdk: SDK, body: dict[str, Any]) -> Any:
    """The headers of a streamed answer, read to its end (so the ledger has recorded it)."""
    opened = sdk.client.messages.with_streaming_response.create(**body, stream=True)
    if sdk.is_async:

        async def read() -> Any:
            async with opened as response:
                [_ async for _ in response.iter_bytes()]
                return response.headers

        return sdk.run(read())
    with opened as response:
        for _ in response.iter_bytes():
            pass
        return response.headers


def test_a_changed_system_prompt_is_named_on_the_miss_and_in_the_ledger(harness: Harness) -> None:
    sdk, sink = _sdk(harness)
    first = sdk.call("messages.with_raw_response.create", **_body(SYSTEM, FIRST))
    grown = sdk.call("messages.with_raw_response.create", **_body(SYSTEM, LATER))
    changed = sdk.call("messages.with_raw_response.create", **_body("Today is Friday. " + SYSTEM, LATER))
    assert [r.headers["x-cachekit-cache"] for r in (first, grown, changed)] == ["miss"] * 3
    assert HEADER not in first.headers
    assert HEADER not in grown.headers  # the same prefix, grown: nothing changed
    why = changed.headers[HEADER]
    assert why == "system_changed; at=system"
    assert [r.prefix_change for r in sink.read()] == [None, None, why]
    # A hit of the changed call names nothing: nothing was fetched.
    hit = sdk.call("messages.with_raw_response.create", **_body("Today is Friday. " + SYSTEM, LATER))
    assert hit.headers["x-cachekit-cache"] == "hit"
    assert HEADER not in hit.headers
    assert sink.read()[-1].prefix_change is None


def test_a_streamed_miss_names_the_change_in_its_header_and_the_ledger(harness: Harness) -> None:
    sdk, sink = _sdk(harness)
    _streamed_headers(sdk, _body(SYSTEM, LATER))
    edited = [{"role": "user", "content": "Read the other file."}, *LATER[1:]]
    headers = _streamed_headers(sdk, _body(SYSTEM, edited))
    assert headers["x-cachekit-cache"] == "miss"
    assert headers[HEADER] == "messages_changed; at=messages.0.content"
    assert [r.prefix_change for r in sink.read()] == [None, "messages_changed; at=messages.0.content"]


def test_a_bypassed_call_names_the_change_too(harness: Harness) -> None:
    sdk, sink = _sdk(harness)
    bypass = {"extra_headers": {"x-cachekit": "bypass"}}
    sdk.call("messages.with_raw_response.create", **_body(SYSTEM, FIRST), **bypass)
    changed = sdk.call("messages.with_raw_response.create", **_body("Be brief. " + SYSTEM, FIRST), **bypass)
    assert changed.headers["x-cachekit-cache"] == "bypass"
    assert changed.headers[HEADER] == "system_changed; at=system"
    assert [(r.outcome, r.prefix_change) for r in sink.read()] == [
        ("bypass", None),
        ("bypass", "system_changed; at=system"),
    ]

"""``memoize=True`` never loses a paid-for result.

The decorated function makes a real SDK call (through cachekit, to an in-process upstream), so by the
time its result is to be memoized the call has been paid for. Whatever stops the memo from keeping it
(a result that is not JSON, a store that is down, a value too big for the store), the caller gets the
result, with a warning, and the upstream was called once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anthropic.types
import openai.types.chat
import pytest

import cachekit
from cachekit.stores import MemoryStore
from tests.conftest import SDK, Harness
from tests.redis_servers import free_port
from tests.sdk_events import first_text

QUESTION = "Which planet is the largest?"


def _paid_call(sdk: SDK, provider: str, question: str) -> Any:
    """The SDK call inside the function, un-awaited: a response object (sync) or a coroutine."""
    messages = [{"role": "user", "content": question}]
    if provider == "anthropic":
        return sdk.client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=messages)
    return sdk.client.chat.completions.create(model="gpt-4.1-mini", messages=messages)


def _text(provider: str, response: Any) -> str:
    if provider == "anthropic":
        assert isinstance(response, anthropic.types.Message)
        return first_text(response)
    assert isinstance(response, openai.types.chat.ChatCompletion)
    return str(response.choices[0].message.content)


def _memoized(
    harness: Harness, provider: str, memo_cache: Any, shape: Callable[[Any], Any]
) -> Callable[[str], Any]:
    """A memoized function (sync or async, as the harness) that pays for one SDK call and returns
    ``shape(response)``; calling the returned callable runs it to completion."""
    sdk = harness.sdk(provider)
    if sdk.is_async:

        @cachekit.cached(memoize=True, cache=memo_cache, name=f"ask-async-{provider}")
        async def ask_async(question: str) -> Any:
            return shape(await _paid_call(sdk, provider, question))

        async def caller(question: str) -> Any:
            return await ask_async(question)  # awaited by application code, as in real use

        return lambda question: sdk.run(caller(question))

    @cachekit.cached(memoize=True, cache=memo_cache, name=f"ask-{provider}")
    def ask(question: str) -> Any:
        return shape(_paid_call(sdk, provider, question))

    return ask


def _close(harness: Harness, memo_cache: Any) -> None:
    if harness.mode == "async":
        harness.sdk("openai").run(memo_cache.aclose())
    else:
        memo_cache.close()


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_result_that_is_not_json_is_returned_with_a_warning(harness: Harness, provider: str) -> None:
    memo = MemoryStore()
    ask = _memoized(harness, provider, memo, lambda response: response)  # the SDK's own object
    with pytest.warns(cachekit.MemoizeWarning, match="result is not JSON") as caught:
        response = ask(QUESTION)
    assert _text(provider, response).endswith("to: " + QUESTION)
    assert harness.upstream.calls == 1
    assert list(memo.entries()) == []  # nothing half-stored
    # The warning points at the caller's line, not into cachekit.
    assert caught[0].filename == __file__


@pytest.mark.parametrize(
    "make",
    [
        lambda answer_id: {"answer": answer_id, "tags": {"planets"}},  # a set
        lambda answer_id: {"answer": answer_id, "tokens": 2**64},  # beyond a 64-bit integer
        lambda answer_id: {1: answer_id},  # a key that is not a string
    ],
    ids=["set", "big-int", "int-key"],
)
def test_every_kind_of_non_json_result_is_returned(harness: Harness, make: Callable[[str], Any]) -> None:
    answer_ids: list[str] = []

    def shape(response: Any) -> Any:
        answer_ids.append(response.id)
        return make(response.id)

    ask = _memoized(harness, "openai", MemoryStore(), shape)
    with pytest.warns(cachekit.MemoizeWarning, match="result is not JSON"):
        result = ask(QUESTION)
    assert result == make(answer_ids[0])
    assert harness.upstream.calls == 1


def test_a_store_that_is_down_costs_the_memo_not_the_result(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    memo = cachekit.Cache(
        cachekit.CacheConfig(store=f"redis://127.0.0.1:{free_port()}/0?timeout=0.05", ledger=False)
    )
    try:
        ask = _memoized(harness, "openai", memo, lambda response: response.choices[0].message.content)
        with caplog.at_level(logging.WARNING, logger="cachekit.decorator"):
            answer = ask(QUESTION)
        assert answer.endswith("to: " + QUESTION)
        assert harness.upstream.calls == 1
        assert any("memo store failed" in r.getMessage() for r in caplog.records)
    finally:
        _close(harness, memo)


def test_a_result_too_big_for_the_store_is_returned(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    memo = MemoryStore(max_bytes=64)
    ask = _memoized(harness, "anthropic", memo, lambda response: response.content[0].text * 10)
    with caplog.at_level(logging.WARNING):
        answer = ask(QUESTION)
    assert answer.endswith("to: " + QUESTION)
    assert len(answer) > 64
    assert harness.upstream.calls == 1
    assert list(memo.entries()) == []
    assert any("not caching an entry" in r.getMessage() for r in caplog.records)

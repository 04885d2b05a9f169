"""Only a complete answer of its dialect is stored (issue 15, item 2), with the real SDKs.

OpenAI-compatible gateways answer ``200`` with ``{"error": ...}``; a Responses answer cut by
``max_output_tokens`` says ``"status": "incomplete"``; a proxy may close a Chat stream with
``[DONE]`` after the model stopped mid-answer. Each passes to the caller untouched and is never
stored, so the next identical request goes upstream again, while a complete answer is still cached.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import cachekit
from tests.conftest import Harness
from tests.requests import DIALECTS, openai_chat, openai_responses

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GATEWAY_ERROR = orjson.dumps(
    {"error": {"message": "upstream overloaded", "type": "server_error", "param": None, "code": "overloaded"}}
)
ANTHROPIC_ERROR = orjson.dumps(
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id": "req_1"}
)


def _raw(method: str) -> str:
    head, _, tail = method.rpartition(".")
    return f"{head}.with_raw_response.{tail}"


@pytest.mark.parametrize(("provider", "method", "make"), DIALECTS)
@pytest.mark.parametrize("error", [GATEWAY_ERROR, ANTHROPIC_ERROR], ids=["openai-shape", "anthropic-shape"])
def test_a_200_error_body_is_passed_on_and_never_replayed(
    harness: Harness, provider: str, method: str, make: Any, error: bytes
) -> None:
    sdk = harness.sdk(provider)
    harness.upstream.respond_next(200, error)
    first = sdk.call(_raw(method), **make())
    second = sdk.call(_raw(method), **make())
    third = sdk.call(_raw(method), **make())

    assert first.http_response.content == error  # untouched
    assert first.headers["x-cachekit-cache"] == "miss"
    assert second.headers["x-cachekit-cache"] == "miss"  # the error was not replayed
    assert third.headers["x-cachekit-cache"] == "hit"  # the complete answer was stored
    assert harness.upstream.calls == 2
    assert len(harness.store) == 1
    pipeline = cachekit.cache_of(sdk.client).pipeline
    assert pipeline.stats.incomplete_answers == 1
    assert len(pipeline._flights) == 0  # the error's flight landed


def test_a_200_error_body_to_count_tokens_is_not_stored(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    harness.upstream.respond_next(200, ANTHROPIC_ERROR)
    first = sdk.call("messages.with_raw_response.count_tokens", **body)
    second = sdk.call("messages.with_raw_response.count_tokens", **body)
    third = sdk.call("messages.with_raw_response.count_tokens", **body)
    assert first.http_response.content == ANTHROPIC_ERROR
    assert [r.headers["x-cachekit-cache"] for r in (first, second, third)] == ["miss", "miss", "hit"]
    assert harness.upstream.calls == 2


LONG_QUESTION = "Summarize the history of Paris in detail, from the Parisii to the present day, please."


def test_an_incomplete_response_is_not_stored(harness: Harness) -> None:
    """``max_output_tokens`` cut the answer: the Responses API says ``status: incomplete``."""
    sdk = harness.sdk("openai")
    body = {**openai_responses(), "input": LONG_QUESTION, "tools": [], "max_output_tokens": 16}
    first = sdk.call("responses.with_raw_response.create", **body)
    second = sdk.call("responses.with_raw_response.create", **body)

    assert sdk.run(first.parse()).status == "incomplete"
    assert [r.headers["x-cachekit-cache"] for r in (first, second)] == ["miss", "miss"]
    assert harness.upstream.calls == 2
    assert len(harness.store) == 0

    complete = {**body, "max_output_tokens": 300}
    answers = [sdk.call("responses.with_raw_response.create", **complete) for _ in range(2)]
    assert sdk.run(answers[0].parse()).status == "completed"
    assert [r.headers["x-cachekit-cache"] for r in answers] == ["miss", "hit"]
    assert harness.upstream.calls == 3


def _real_answer(harness: Harness, provider: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the fake provider answers to ``body``, asked without the cache."""
    plain = harness.sdk(provider, cache=cachekit.CacheConfig(enabled=False, ledger=False))
    answer: dict[str, Any] = plain.call(_raw(method), **body).http_response.json()
    harness.upstream.reset()
    return answer


def _without_stop(answer: dict[str, Any]) -> dict[str, Any]:
    if "choices" in answer:
        return {**answer, "choices": [{**choice, "finish_reason": None} for choice in answer["choices"]]}
    if "stop_reason" in answer:
        return {**answer, "stop_reason": None}
    return {**answer, "status": "in_progress"}


@pytest.mark.parametrize(("provider", "method", "make"), DIALECTS)
def test_a_document_without_its_stop_reason_is_not_stored(
    harness: Harness, provider: str, method: str, make: Any
) -> None:
    cut = orjson.dumps(_without_stop(_real_answer(harness, provider, method, make())))
    sdk = harness.sdk(provider)
    harness.upstream.respond_next(200, cut)
    first = sdk.call(_raw(method), **make())
    second = sdk.call(_raw(method), **make())

    assert first.http_response.content == cut
    assert [r.headers["x-cachekit-cache"] for r in (first, second)] == ["miss", "miss"]
    assert harness.upstream.calls == 2
    assert len(harness.store) == 1  # only the second, complete, answer


def test_a_chat_stream_closed_before_its_finish_reason_is_not_stored(harness: Harness) -> None:
    """A proxy that loses the model mid-answer may still end the stream with ``[DONE]``."""
    sdk = harness.sdk("openai")
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4.1-mini",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "Take an umb"}, "finish_reason": None}
        ],
    }
    cut = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    harness.upstream.respond_next(200, cut, "text/event-stream")

    def read_stream() -> str:
        stream = sdk.call("chat.completions.create", **openai_chat(), stream=True)
        if harness.mode == "async":

            async def texts() -> str:
                return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

            return str(sdk.run(texts()))
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    assert read_stream() == "Take an umb"
    again = sdk.call("chat.completions.with_raw_response.create", **openai_chat())
    assert again.headers["x-cachekit-cache"] == "miss"
    assert harness.upstream.calls == 2
    stats = cachekit.cache_of(sdk.client).stats
    assert stats.incomplete_streams == 1


def test_a_complete_answer_of_every_dialect_is_still_stored(harness: Harness) -> None:
    for provider, method, make in DIALECTS:
        sdk = harness.sdk(provider)
        answers = [sdk.call(_raw(method), **make()) for _ in range(2)]
        assert [r.headers["x-cachekit-cache"] for r in answers] == ["miss", "hit"], method
    assert harness.upstream.calls == len(DIALECTS)


# -- the per-dialect data ---------------------------------------------------------------------------

INCOMPLETE = [
    ("anthropic_messages", {"type": "error", "error": {"type": "overloaded_error"}}),
    ("anthropic_messages", {"type": "message", "content": [], "stop_reason": None}),
    ("anthropic_messages", {"type": "message", "stop_reason": "end_turn"}),  # no content list
    ("anthropic_messages", {"error": {"message": "x"}}),
    ("anthropic_count_tokens", {"error": {"message": "x"}}),
    ("openai_chat", {"error": {"message": "x"}}),
    ("openai_chat", {"choices": []}),
    ("openai_chat", {"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": None}]}),
    ("openai_chat", {"choices": [{"index": 0, "finish_reason": "stop"}]}),  # no message
    ("openai_chat", {"choices": [{"message": {}, "finish_reason": "stop"}], "error": {"message": "x"}}),
    ("openai_responses", {"status": "incomplete", "output": [], "error": None}),
    ("openai_responses", {"status": "completed", "error": {"code": "server_error"}, "output": []}),
    ("openai_responses", {"status": "completed"}),  # no output list
    ("openai_responses", {"status": "queued", "output": []}),  # a background response
    ("openai_responses", ["not", "an", "object"]),
]

COMPLETE = [
    ("anthropic_messages", {"type": "message", "content": [], "stop_reason": "end_turn"}),
    (
        "anthropic_messages",
        {"type": "message", "content": [{"type": "text", "text": "a"}], "stop_reason": "max_tokens"},
    ),
    ("anthropic_count_tokens", {"input_tokens": 12}),
    ("openai_chat", {"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "length"}]}),
    ("openai_responses", {"status": "completed", "output": [], "error": None}),
]


@pytest.mark.parametrize(("dialect", "body"), INCOMPLETE)
def test_what_is_not_a_complete_answer(dialect: Any, body: Any) -> None:
    from cachekit.providers import incomplete_answer

    assert incomplete_answer(dialect, body) is not None


@pytest.mark.parametrize(("dialect", "body"), COMPLETE)
def test_what_is(dialect: Any, body: Any) -> None:
    from cachekit.providers import incomplete_answer

    assert incomplete_answer(dialect, body) is None
